"""``vipd lab --kubeadm --replace``: the control plane replaced machine by machine, as Cluster
API's KubeadmControlPlane upgrades it, on the kubelet bed's real kubelets.

What it is: after ``vipd lab --kubeadm``'s bootstrap and adopt (the VIP on vipd's DaemonSet),
for each old machine n1, n2, n3 in turn, make before break:

1. a new machine (n4, n5, n6: spare machines of the bed, on the bridge, powered off until
   now) is booted, ``kubeadm join --control-plane`` through the VIP (no static pod: the cluster
   is on the DaemonSet), waited on until its Node is Ready and its own API server ready (its
   etcd member is in), then labelled for the DaemonSet (the adopt label,
   ``vipd.lab.kubelet_bed.bed.ADOPT_LABEL``) and waited on until its vipd pod is ready;
2. the oldest is removed: ``kubectl drain --ignore-daemonsets``, its DaemonSet vipd sent away
   by taking the label off (a graceful stop: a VRRP priority-0 advert or a released Lease, so
   a holder hands the VIP over before its API server goes), its etcd leadership moved to the
   new machine's member if it led (as KubeadmControlPlane does: without it the first Lease
   runs saw the new holder miss its renew deadline in the election and drop the VIP for
   0.25 s), ``kubeadm reset -f`` on it (its
   static pods stop; its etcd member is removed by reset's ``remove-etcd-member`` phase,
   checked with ``etcdctl member list`` on the new machine, and removed there if reset could
   not), ``kubectl delete node``, then powered off for good.

Then the control plane shrinks back to one machine (the single-node start grown to three by
``kubeadm init`` and two joins, and back down): n4 and n5 removed as above, oldest first as
KubeadmControlPlane scales down, n6 the one left (`scale_down`).

Each join and each removal is measured as the adopt steps are (``kubeadm_flow.measure``:
holders before and after, VIP moves, the 2 ms prober's longest gap and failed connects,
kubectl's ``/readyz`` through the VIP); on top: ``/readyz`` through the VIP answered at least
once in every step, and at the end the three new machines are the Nodes, the etcd members and
the VIP's holder, the old ones gone from all three.

VRRP unicast (``KubeletBed(unicast=True)``, ``vipd lab --kubeadm --replace --unicast``): n1..n3
are every vipd's static start set and the new machines come from the cluster
(``election.vrrp.unicast_peers_from``), so nothing is re-rendered; ``on_members`` (called with
the members after each join and removal) is for a run that sets the peers itself. Multicast
and Lease need nothing there.

What it must not do: judge otherwise than the adopt steps are judged (``Step.problems``), or
remove an old machine before its successor's vipd pod is ready.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from vipd.lab.addrwatch import AddressWatch
from vipd.lab.kubeadm_flow import Step, measure, step_doc
from vipd.lab.kubelet_bed.bed import ADOPT_LABEL, KubeletBed
from vipd.lab.kubelet_bed.node import CONTAINERD_SOCKET, MachineError
from vipd.lab.topology import LabError

# (old, new): the oldest first, as KubeadmControlPlane's rollout picks them.
PAIRS = (("n1", "n4"), ("n2", "n5"), ("n3", "n6"))
# The scale-down after it: (removed, the one left), the oldest first.
SCALE_DOWN = (("n4", "n6"), ("n5", "n6"))
# vipd's metrics endpoint (``metrics.listen``'s default; the pod shares the node's network).
METRICS_URL = "http://127.0.0.1:2112/metrics"
STATUS_URL = "http://127.0.0.1:2112/status"
# The API server's etcd client certificate: on every kubeadm control-plane node.
ETCDCTL_TLS = (
    "--endpoints=https://127.0.0.1:2379",
    "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
    "--cert=/etc/kubernetes/pki/apiserver-etcd-client.crt",
    "--key=/etc/kubernetes/pki/apiserver-etcd-client.key",
)


@dataclass
class Removal:
    """What became of an old machine's etcd member and Node."""

    old: str
    new: str
    etcd_before: list[str]
    etcd_after_reset: list[str]
    removed_by_reset: bool  # False: removed here with ``etcdctl member remove``
    led_etcd: bool  # its member was the etcd leader (moved to the new one's first)
    problems: list[str] = field(default_factory=list)


def etcd_members(bed: KubeletBed, on: str) -> dict[str, str]:
    """The etcd members (name → hex ID) as node ``on``'s etcd lists them."""
    out = bed.machines[on].run(["etcdctl", *ETCDCTL_TLS, "member", "list", "-w", "json"]).stdout
    return {str(m.get("name", "")): format(int(m["ID"]), "x") for m in json.loads(out)["members"]}


def hand_over_etcd_leadership(bed: KubeletBed, old: str, new: str) -> bool:
    """If ``old``'s etcd member leads, move the leadership to ``new``'s (``etcdctl
    move-leader`` at the leader, as KubeadmControlPlane forwards it before removing a
    member): removing the leader costs an election, seconds in which no API server can
    write, and a Lease holder that cannot renew gives the VIP up. True if it moved."""
    status = json.loads(
        bed.machines[old].run(["etcdctl", *ETCDCTL_TLS, "endpoint", "status", "-w", "json"]).stdout
    )[0]["Status"]
    if int(status["leader"]) != int(status["header"]["member_id"]):
        return False
    target = etcd_members(bed, new)[new]
    bed.machines[old].run(["etcdctl", *ETCDCTL_TLS, "move-leader", target])
    bed.note(f"{old}: etcd leadership moved to {new}")
    return True


def answered(step: Step) -> bool:
    """Did kubectl's ``/readyz`` through the VIP answer ok at least once in ``step``?"""
    return step.kubectl_tries > step.kubectl_failed


def step_problems(step: Step) -> list[str]:
    out = step.problems()
    if not answered(step):
        out.append(
            f"{step.kind} {step.node}: /readyz through the VIP never answered "
            f"({step.kubectl_failed}/{step.kubectl_tries} tries failed)"
        )
    return out


def _wait(what: str, cond: Callable[[], bool], timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if cond():
                return time.monotonic() - t0
        except (LabError, MachineError, subprocess.TimeoutExpired, json.JSONDecodeError):
            pass
        time.sleep(0.5)
    raise MachineError(f"{what}: not in {timeout:.0f} s")


def bring_in(bed: KubeletBed, new: str) -> None:
    """Boot spare machine ``new``, join it as a control-plane node, put vipd's pod on it."""
    bed.add_machine(new)
    bed.join(new, static_pod=False)  # waits for Ready and its own API server
    bed.adopt(new)  # the label; no static manifest there, so: until its pod is ready


def remove(bed: KubeletBed, old: str, new: str) -> Removal:
    """Drain ``old``, send its vipd away, ``kubeadm reset`` it, check its etcd member is
    gone (from ``new``'s etcd), delete its Node, power it off."""
    bed.note(f"{old}: kubectl drain --ignore-daemonsets")
    bed.kubectl("drain", old, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                "--timeout=120s", timeout=150)  # fmt: skip
    bed.note(f"{old}: label {ADOPT_LABEL}- (its vipd pod leaves)")
    bed.kubectl("label", "node", old, f"{ADOPT_LABEL}-")
    took = _wait(
        f"{old}'s vipd pod gone",
        lambda: old not in bed.vipd_pods() and "vipd" not in bed.running_containers(old),
        120,
    )
    bed.note(f"{old}: its vipd pod gone in {took:.1f} s; holders {bed.holders()}")
    before = sorted(etcd_members(bed, new))
    led = hand_over_etcd_leadership(bed, old, new)
    bed.note(f"{old}: kubeadm reset -f")
    bed.kubeadm(bed.machines[old], "reset", "-f", "--cri-socket", f"unix://{CONTAINERD_SOCKET}",
                timeout=300)  # fmt: skip
    after = etcd_members(bed, new)
    by_reset = old in before and old not in after
    problems: list[str] = []
    if old in after:
        bed.note(f"{old}: still an etcd member after kubeadm reset; etcdctl member remove")
        bed.machines[new].run(["etcdctl", *ETCDCTL_TLS, "member", "remove", after[old]])
    elif old not in before:
        problems.append(f"remove {old}: not an etcd member before kubeadm reset: {before}")
    bed.note(f"{old}: kubeadm reset done; etcd members {sorted(etcd_members(bed, new))}")
    bed.kubectl("delete", "node", old, timeout=60)
    bed.retire(old)
    return Removal(old, new, before, sorted(after), by_reset, led, problems)


def believed_peers(status: dict[str, Any]) -> list[str]:
    """The peers one vipd's ``/status`` says it has (pure): the members of its followed
    unicast list when it follows one, else the VRRP peers it has heard, else its Lease
    health peers' addresses."""
    for lst in status.get("membership", {}).get("lists", []):
        if lst.get("list") == "election.vrrp.unicast_peers":
            return [str(a) for a in lst.get("members", [])]
    if status.get("backend") == "vrrp":
        return sorted(str(p.get("address")) for p in status.get("peers", []))
    return sorted(
        str(b.get("address")) for b in status.get("backends", []) if b.get("name") == "peer"
    )


def peers_now(bed: KubeletBed) -> dict[str, list[str] | str]:
    """What every member's vipd believes its peers are now (``/status``), or why unread."""
    out: dict[str, list[str] | str] = {}
    for name in bed.members:
        try:
            text = bed.machines[name].run(["curl", "-sf", "--max-time", "3", STATUS_URL]).stdout
            out[name] = believed_peers(json.loads(text))
        except (MachineError, LabError, subprocess.TimeoutExpired, ValueError) as exc:
            out[name] = f"unread: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return out


def replace(
    bed: KubeletBed,
    watch: AddressWatch,
    pairs: Sequence[tuple[str, str]] = PAIRS,
    *,
    on_members: Callable[[list[str]], None] | None = None,
) -> tuple[list[Step], list[Removal]]:
    """Each old machine replaced by a new one in turn (join, then removal), measured."""
    steps: list[Step] = []
    removals: list[Removal] = []
    for old, new in pairs:
        t0 = time.monotonic()
        bring_in(bed, new)
        if on_members is not None:
            on_members(list(bed.members))
        time.sleep(1)  # the prober's last attempts finish (timeout 0.5 s)
        steps.append(measure(bed, watch, kind="join", node=new, start=t0, end=time.monotonic()))
        steps[-1].peers = peers_now(bed)
        t0 = time.monotonic()
        removals.append(remove(bed, old, new))
        if on_members is not None:
            on_members(list(bed.members))
        time.sleep(1)
        steps.append(measure(bed, watch, kind="remove", node=old, start=t0, end=time.monotonic()))
        steps[-1].peers = peers_now(bed)
    return steps, removals


def scale_down(
    bed: KubeletBed, watch: AddressWatch, pairs: Sequence[tuple[str, str]] = SCALE_DOWN
) -> tuple[list[Step], list[Removal]]:
    """Three control-plane machines down to one: each removed as a replaced machine is
    (`remove`, its etcd member checked from the one left), measured."""
    steps: list[Step] = []
    removals: list[Removal] = []
    for old, left in pairs:
        t0 = time.monotonic()
        removals.append(remove(bed, old, left))
        time.sleep(1)  # the prober's last attempts finish (timeout 0.5 s)
        steps.append(measure(bed, watch, kind="remove", node=old, start=t0, end=time.monotonic()))
        steps[-1].peers = peers_now(bed)
    return steps, removals


def alone_problems(end: dict[str, Any], left: str) -> list[str]:
    """After the scale-down: ``left`` the one Node, etcd member and holder (pure)."""
    out = []
    if end["nodes"] != {left: True}:
        out.append(f"after the scale-down: Nodes {end['nodes']}, want {left} alone and Ready")
    if end["etcd_members"] != [left]:
        out.append(f"after the scale-down: etcd members {end['etcd_members']}, want [{left}]")
    if end["holders"] != [left]:
        out.append(f"after the scale-down: VIP holders {end['holders']}, want [{left}]")
    return out


def membership_of(metrics: str) -> dict[str, float | None]:
    """``vipd_membership_peers`` of the unicast peer list and ``vipd_membership_held`` from
    one vipd's ``/metrics`` text (None: not exported), pure."""
    out: dict[str, float | None] = {"peers": None, "held": None}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "vipd_membership_peers" and sample.labels.get("list") == (
                "election.vrrp.unicast_peers"
            ):
                out["peers"] = sample.value
            elif sample.name == "vipd_membership_held":
                out["held"] = sample.value
    return out


def outcome(bed: KubeletBed, pairs: Sequence[tuple[str, str]] = PAIRS) -> dict[str, Any]:
    """Who the cluster is at the end: its Nodes (Ready), etcd members, the VIP's holders;
    in VRRP unicast, what each new machine's vipd says of its followed peers."""
    new = [n for _, n in pairs]
    end: dict[str, Any] = {
        "nodes": bed.nodes_ready(),
        "etcd_members": sorted(etcd_members(bed, new[-1])),
        "holders": bed.holders(),
        "members": list(bed.members),
    }
    if bed.unicast:
        end["membership"] = {
            n: membership_of(bed.machines[n].run(["curl", "-sf", METRICS_URL]).stdout) for n in new
        }
    return end


def outcome_problems(end: dict[str, Any], pairs: Sequence[tuple[str, str]] = PAIRS) -> list[str]:
    """The old machines gone, the new ones the control plane and the VIP's holder (pure)."""
    new = sorted(n for _, n in pairs)
    out = []
    nodes: dict[str, bool] = end["nodes"]
    if sorted(nodes) != new or not all(nodes.values()):
        out.append(f"after the replacement: Nodes {nodes}, want {new} Ready")
    if end["etcd_members"] != new:
        out.append(f"after the replacement: etcd members {end['etcd_members']}, want {new}")
    if len(end["holders"]) != 1 or end["holders"][0] not in new:
        out.append(f"after the replacement: VIP holders {end['holders']}")
    # VRRP unicast: each new vipd's peers are the static start set (the old machines, which
    # stay) and the other new ones, read from the cluster; none of them held out.
    want = len(pairs) + len(new) - 1
    for node, seen in sorted(end.get("membership", {}).items()):
        if seen != {"peers": want, "held": 0}:
            out.append(
                f"after the replacement: {node}'s vipd follows {seen['peers']} unicast peers "
                f"(want {want}: the static three and the other new machines), held {seen['held']}"
            )
    return out


def run(bed: KubeletBed, watch: AddressWatch) -> tuple[dict[str, Any], list[str], list[Step]]:
    """``kubeadm_flow.run``'s ``replace``: the replacement; its report part, its problems and
    its steps (for the post-mortem of a step with a problem)."""
    steps, removals = replace(bed, watch)
    end = outcome(bed)
    problems = [p for s in steps for p in step_problems(s)]
    problems += [p for r in removals for p in r.problems]
    problems += outcome_problems(end)
    doc = {"steps": [step_doc(s) for s in steps], "removals": [vars(r) for r in removals],
           "end": end}  # fmt: skip
    left = SCALE_DOWN[-1][1]
    shrunk, gone = scale_down(bed, watch)
    alone = {
        "nodes": bed.nodes_ready(),
        "etcd_members": sorted(etcd_members(bed, left)),
        "holders": bed.holders(),
    }
    problems += [p for s in shrunk for p in step_problems(s)]
    problems += [p for r in gone for p in r.problems]
    problems += alone_problems(alone, left)
    doc["scale_down"] = {
        "steps": [step_doc(s) for s in shrunk],
        "removals": [vars(r) for r in gone],
        "end": alone,
    }
    return doc, problems, [*steps, *shrunk]
