"""``vipd lab --kubeadm``: a cluster's endpoint from its first node to its DaemonSet, on real
kubelets, with what the clients saw at every step.

What it is: the flow a platform engineer runs first, on the kubelet bed
(``vipd.lab.kubelet_bed``: three kubeadm control-plane nodes with real kubelets and
containerd, each in its own network, mount and PID namespace, and a client namespace):

1. vipd's static pod on node 1, then ``kubeadm init`` with ``controlPlaneEndpoint: VIP:6443``
   (the VIP must come up before kubeadm waits on it);
2. nodes 2 and 3 joined as control-plane nodes, each with vipd's static pod;
3. the rendered DaemonSet applied, and ``vipd adopt`` on each node in turn (placed by a node
   label), the VIP's holder last;
4. all three nodes powered off at once and booted again, nothing done by hand.

Throughout, the VIP's holders are recorded from every node's address notifications
(``vipd.lab.addrwatch``) and, from the joins on, a 2 ms TCP prober in the client namespace
connects to the VIP. The report: the timeline, each adopt step's VIP moves and the longest
span between answered connects, how long after power came back ``/readyz`` answered through
the VIP, and whether the invariants held (the VIP bound before ``kubeadm init`` finished,
never on two nodes beyond a graceful handover's 0.1 s, at most one move per adopt step, none
at a follower's step, back within 60 s of a full power loss).

What it must not do: judge in any other way than the tests on the same bed do
(``tests/kubelet`` uses the helpers here), or leave the bed behind (``--keep`` keeps it
running until interrupted, then tears it down).
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vipd.lab.addrwatch import AddressWatch, AddrEvent
from vipd.lab.kubelet_bed.bed import KubeletBed, usable
from vipd.lab.prober import Prober

# A graceful handover's make-before-break overlap (docs/design): at most this.
OVERLAP_LIMIT = 0.1
POWER_LOSS_LIMIT = 60.0


def withdrawn(claim: AddrEvent, events: Sequence[AddrEvent]) -> bool:
    """Was ``claim`` undone within the overlap limit? Two equal-priority backups both claim
    at Skew_Time after the leader's priority-0 advert, and the lower address yields at once:
    that is not a move."""
    return any(
        not e.added and e.node == claim.node and 0 <= e.at - claim.at <= OVERLAP_LIMIT
        for e in events
    )


def client_gap(prober: Prober, start: float, end: float) -> tuple[float, int]:
    """Longest span between answered connects with ``start <= attempt <= end`` (monotonic),
    and the number of failed connects; ValueError when none was answered."""
    tries = [a for a in prober.attempts() if start <= a.start <= end]
    ok = [a.start for a in tries if a.ok]
    if not ok:
        raise ValueError("the prober saw no answer through the VIP")
    gap = max((b - a for a, b in itertools.pairwise(ok)), default=0.0)
    return gap, sum(1 for a in tries if not a.ok)


@dataclass
class Step:
    node: str
    took_s: float
    before: list[str]
    after: list[str]
    claims: list[tuple[str, float]]  # (node, s after the step began)
    moves: int
    gap_s: float
    failed: int

    def problems(self, leader: str) -> list[str]:
        out = []
        if len(self.after) != 1:
            out.append(f"adopt {self.node}: holders {self.after} after it")
        if self.moves > 1:
            out.append(f"adopt {self.node}: the VIP moved {self.moves} times")
        if self.node != leader and self.after != self.before:
            out.append(f"adopt {self.node} (a follower): the VIP moved {self.before}→{self.after}")
        return out


def run(*, as_json: bool, keep: bool) -> int:
    why = usable()
    if why is not None:
        print(f"vipd lab --kubeadm: cannot run here: {why}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"lab": {"mode": "kubeadm", "election": "vrrp"}}
    problems: list[str] = []
    with KubeletBed("vrrp") as bed:
        report["lab"].update({"kubernetes": bed.version, "workdir": str(bed.lab.workdir)})
        watch = AddressWatch(bed.lab, bed.vip)
        watch.start()
        wall0 = time.time()
        mono0 = time.monotonic()
        try:
            bed.init()
            init_done = time.time()
            bed.join("n2")
            bed.join("n3")
            prober = bed.start_client()
            added = [e for e in watch.events if e.added]
            first = min(added, key=lambda e: e.at) if added else None
            report["init"] = {
                "kubeadm_init_s": round(init_done - wall0, 3),
                "vip_first_bound_on": first.node if first else None,
                "vip_first_bound_after_s": round(first.at - wall0, 3) if first else None,
            }
            if first is None or first.at >= init_done:
                problems.append("the VIP was not bound before kubeadm init finished")
            time.sleep(2)  # the prober's first answers
            bed.apply_daemonset()
            (leader,) = bed.holders()
            steps: list[Step] = []
            for name in [n for n in ("n1", "n2", "n3") if n != leader] + [leader]:
                before = bed.holders()
                t_wall, t_mono = time.time(), time.monotonic()
                took = bed.adopt(name)
                time.sleep(1)  # the prober's last attempts finish (timeout 0.5 s)
                events = [e for e in watch.events if e.at >= t_wall]
                claims = [e for e in events if e.added]
                gap, failed = client_gap(prober, t_mono, time.monotonic())
                step = Step(
                    node=name,
                    took_s=round(took, 3),
                    before=before,
                    after=bed.holders(),
                    claims=[(e.node, round(e.at - t_wall, 3)) for e in claims],
                    moves=sum(1 for e in claims if not withdrawn(e, events)),
                    gap_s=round(gap, 4),
                    failed=failed,
                )
                steps.append(step)
                problems += step.problems(leader)
            report["adopt"] = [vars(s) for s in steps]
            bed.power_off_all()
            t0 = time.monotonic()
            bed.boot_all()
            try:
                bed.wait_readyz(POWER_LOSS_LIMIT - (time.monotonic() - t0))
                back: float | None = round(time.monotonic() - t0, 3)
            except Exception as exc:  # the bed's MachineError: reported, not raised
                back = None
                problems.append(f"after the power loss: {exc}")
            report["power_loss"] = {"readyz_through_vip_after_s": back}
            if keep:
                print(
                    f"vipd lab --kubeadm: the cluster runs on; kubectl --kubeconfig "
                    f"{bed.client_kubeconfig()} in namespace {bed.lab.client_ns}. "
                    "Ctrl-C tears it down.",
                    file=sys.stderr,
                )
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
        finally:
            watch.stop()
        overlaps = [o for o in watch.overlaps() if o.duration > OVERLAP_LIMIT]
        problems += [f"two holders for {o.duration:.3f} s" for o in overlaps]
        notes = [(t - mono0, what) for t, what in bed.events]
        vip = [(e.at - wall0, f"{e.node} {'+' if e.added else '-'}VIP") for e in watch.events]
        report["timeline"] = [{"t_s": round(t, 3), "what": what} for t, what in sorted(notes + vip)]
    report["summary"] = {"ok": not problems, "problems": problems}
    print(json.dumps(report, indent=2) if as_json else render(report))
    return 0 if not problems else 1


def render(report: dict[str, Any]) -> str:
    lines = [f"vipd lab --kubeadm on Kubernetes {report['lab'].get('kubernetes', '?')}", ""]
    lines += [f"{row['t_s']:9.3f} s  {row['what']}" for row in report.get("timeline", [])]
    init = report.get("init", {})
    lines += [
        "",
        f"kubeadm init {init.get('kubeadm_init_s')} s; the VIP first bound on "
        f"{init.get('vip_first_bound_on')} {init.get('vip_first_bound_after_s')} s after it "
        "started",
        "",
        "| adopt | took s | holder before → after | VIP moves | client longest gap ms "
        "| failed connects |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for s in report.get("adopt", []):
        lines.append(
            f"| {s['node']} | {s['took_s']:.1f} | {','.join(s['before'])} → "
            f"{','.join(s['after'])} | {s['moves']} | {s['gap_s'] * 1000:.0f} | {s['failed']} |"
        )
    back = report.get("power_loss", {}).get("readyz_through_vip_after_s")
    lines += ["", f"full power loss: /readyz through the VIP {back} s after power came back"]
    summary = report["summary"]
    lines.append("ok" if summary["ok"] else "PROBLEMS: " + "; ".join(summary["problems"]))
    return "\n".join(lines)
