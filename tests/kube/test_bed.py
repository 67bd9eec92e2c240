"""The real control plane with vipd on it: it comes up, the rendered manifests are accepted,
one node holds the VIP, and the two everyday failovers (leader node death, leader SIGTERM).

What it tests, against kube-apiserver and a 3-member etcd built from their official modules
(``scripts/setup-kube``): ``kubectl get --raw /readyz`` answers through the VIP with vipd in
Lease mode on all three nodes; ``default/kubernetes`` lists the three live API servers (the
lease endpoint reconciler); ``vipd manifest pod|daemonset|rbac`` for the bed's Lease config
pass ``kubectl apply --dry-run=server``; exactly one holder, the one the Lease names; and the
invariant (never two holders beyond 0.1 s, never none beyond duration + retry period) across
node death and a graceful stop; ``vipd check`` asks this API server (SelfSubjectAccessReview)
whether its credentials may do what Lease mode and IPVS discovery need, and names each verb
a ServiceAccount lacks (exit 2).
"""

from __future__ import annotations

import json
import re
import signal
import time
from typing import Any

import pytest
import yaml

from tests.kube.conftest import GAP_LIMIT, MARGIN, SHORT, TIMING, Window, survivors_read_again
from vipd.lab.kubebed.bed import KubeBed
from vipd.lab.topology import python_argv

pytestmark = pytest.mark.kube


def test_readyz_through_the_vip_with_vipd_in_lease_mode_everywhere(
    bed: KubeBed, window: Window
) -> None:
    out = bed.kubectl("get", "--raw", "/readyz", via="vip")
    assert out.stdout.strip() == "ok", out
    version = json.loads(bed.kubectl("version", "-o", "json", via="vip").stdout)
    assert version["serverVersion"]["gitVersion"] == bed.apiserver_version.split()[-1]
    assert bed.beliefs is not None
    for node in bed.nodes:
        text = bed.procs[node.name].vipd.log_text()
        assert "lease election started" in text, text[-2000:]
    roles = {b.node: b.role for b in bed.beliefs.since(0)}
    assert set(roles) == {n.name for n in bed.nodes}
    # The lease reconciler adds each API server on its next pass (every 10 s).
    want = sorted(n.ipv4 for n in bed.nodes)
    deadline = time.monotonic() + 30
    while (addrs := _kubernetes_endpoints(bed)) != want and time.monotonic() < deadline:
        time.sleep(1)
    assert addrs == want, addrs


def _kubernetes_endpoints(bed: KubeBed) -> list[str]:
    slices = json.loads(
        bed.kubectl(
            "get", "endpointslices", "-n", "default", "-l",
            "kubernetes.io/service-name=kubernetes", "-o", "json",
        ).stdout
    )  # fmt: skip
    return sorted(
        a for s in slices["items"] for ep in s.get("endpoints") or [] for a in ep["addresses"]
    )


@pytest.mark.parametrize("what", ["rbac", "pod", "daemonset"])
def test_rendered_manifests_pass_server_side_dry_run(bed: KubeBed, what: str) -> None:
    manifest = bed.render(what)
    proc = bed.kubectl("apply", "--dry-run=server", "-f", "-", input_text=manifest, check=False)
    assert proc.returncode == 0, f"{proc.stderr}\n{manifest}"
    assert "(server dry run)" in proc.stdout, proc.stdout


def test_exactly_one_holder_the_one_the_lease_names(bed: KubeBed, window: Window) -> None:
    holder = bed.wait_one_holder(10)
    time.sleep(2 * TIMING.duration)
    assert bed.holders() == [holder]
    assert bed.lease()["holderIdentity"] == holder
    assert bed.beliefs is not None
    assert bed.beliefs.leaders_at(time.monotonic() - 0.5) == [holder]
    v = window.check()
    assert v.worst_unowned == 0.0 and not v.shared


def test_leader_node_death_a_peer_takes_over(bed: KubeBed, window: Window) -> None:
    old = bed.wait_one_holder(10)
    transitions = bed.lease().get("leaseTransitions", 0)
    since = {n.name: len(bed.procs[n.name].vipd.log_text()) for n in bed.nodes}
    survivors = [n.name for n in bed.nodes if n.name != old]
    # Which member leads etcd decides the bound: when the dead node's did, the survivors' API
    # servers answer nothing until their members elect a new leader (E), their followers'
    # reads fail, and each counts the unchanged record from its first good read and binds a
    # retry period and two requests after its write (docs/design/lease-unreachable.md, "The
    # follower side"): E + D + 2 RP + 4 r instead of D + RP.
    led_etcd = bed.etcd_leads(old)
    t_kill = window.mark(
        f"node {old} dies (link down, SIGKILL all; {'its' if led_etcd else 'not its'} etcd leads)"
    )
    bed.kill_node(old)
    window.exclude(old, t_kill)
    bound = TIMING.takeover_bound()
    if led_etcd:
        e = survivors_read_again(bed, survivors, 2 * TIMING.takeover_bound())
        print(f"\nthe survivors' API servers read the Lease again {e:.2f} s after the death")
        bound = e + TIMING.duration + 2 * TIMING.retry_period + 4 * SHORT
    new = bed.wait_one_holder(bound + 10, among=survivors)
    took = time.monotonic() - t_kill
    window.mark(f"{new} holds the VIP")
    print(f"\nnode death: {new} holds the VIP {took:.2f} s after {old} died (bound {bound:.2f} s)")
    assert took <= bound + MARGIN, took
    # The Lease names the new holder as a new term, and the VIP was bound and its first
    # gratuitous ARP sent in the call that decided.
    lease = bed.lease()
    assert lease["holderIdentity"] == new and lease["leaseTransitions"] > transitions, lease
    log = bed.procs[new].vipd.log_text()[since[new] :]
    assert re.search(r'msg="VIP bound and announced".*decision_to_garp_ms=', log), log[-2000:]
    window.check(gap_limit=max(GAP_LIMIT, bound + MARGIN))
    bed.revive_node(old)
    window.excluded[old] = [(t_kill, time.monotonic())]


def test_leader_sigterm_hands_over_make_before_break(bed: KubeBed, window: Window) -> None:
    old = bed.wait_one_holder(10)
    since = len(bed.procs[old].vipd.log_text())
    t_term = window.mark(f"SIGTERM vipd on {old}")
    bed.procs[old].vipd.stop(signal.SIGTERM, timeout=None)
    new = bed.wait_one_holder(TIMING.retry_period + 10, among=[n.name for n in bed.nodes
                                                              if n.name != old])  # fmt: skip
    took = time.monotonic() - t_term
    window.mark(f"{new} holds the VIP")
    assert bed.procs[old].vipd.wait(15) == 0, bed.vipd_report()
    print(f"\nSIGTERM: {new} holds the VIP {took:.2f} s after the signal")
    assert took <= TIMING.retry_period + MARGIN, took
    # It released the Lease, and let the VIP go only once the successor's record was read or
    # its gratuitous ARP heard (whichever came first): make-before-break.
    text = bed.procs[old].vipd.log_text()[since:]
    assert "released the Lease" in text, text[-2000:]
    assert re.search(r"(new holder seen|announcement heard): releasing the VIP", text), text[-2000:]
    window.check(gap_limit=TIMING.retry_period + MARGIN)


VERBS = {
    "get": "leases", "update": "leases", "create": "leases",
    "list": "endpointslices", "watch": "endpointslices",
}  # fmt: skip


def _rules(bed: KubeBed, without: str | None) -> dict[str, list[dict[str, Any]]]:
    """What ``vipd manifest rbac`` grants for the Lease and discovery, less one verb."""
    lease = bed.vipd_config(bed.nodes[0])["election"]["lease"]
    name = lease.get("name", "vipd-cp-lock")

    def verbs(*vs: str) -> list[str]:
        return [v for v in vs if v != without]

    lease_rules = [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [name], "verbs": verbs("get", "update")},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": verbs("create")},
    ]  # fmt: skip
    slices = [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
               "verbs": verbs("list", "watch")}]  # fmt: skip
    return {
        "kube-system": [r for r in lease_rules if r["verbs"]],
        "default": [r for r in slices if r["verbs"]],
    }


@pytest.mark.parametrize("without", [None, *VERBS])
def test_vipd_check_asks_the_api_server_what_it_may_do(bed: KubeBed, without: str | None) -> None:
    account = f"probe-{without or 'all'}"
    kubeconfig = bed.account_kubeconfig(account, _rules(bed, without))
    node = bed.nodes[0]
    cfg = bed.vipd_config(node)
    cfg["election"]["lease"]["kubeconfig"] = str(kubeconfig)
    cfg["ipvs"] = {
        "enabled": True,
        "backends": [n.ipv4 for n in bed.nodes],
        "discovery": {"enabled": True, "kubeconfig": str(kubeconfig)},
    }
    path = bed.lab.workdir / f"{account}-check.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = bed.lab.exec(
        node.ns, python_argv("vipd", "check", "--config", str(path)), check=False, timeout=60
    )
    out = proc.stdout + proc.stderr
    if without is None:
        assert proc.returncode == 0, out
        assert f"access: {kubeconfig} may get leases.coordination.k8s.io" in out, out
        assert "may list endpointslices.discovery.k8s.io in default" in out, out
        return
    assert proc.returncode == 2, out
    (line,) = [x for x in proc.stderr.splitlines() if "may not" in x]
    assert f"may not {without} {VERBS[without]}." in line, line
    assert ", " not in line.split("may not", 1)[1], line  # that one and nothing else
