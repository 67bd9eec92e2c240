"""Notify hooks on real kernels: a 3-node lab whose hooks write one shared timeline.

What it tests: the hooks' order and arguments through a node death (SIGKILL: no last words)
and a graceful stop (SIGTERM: the stop hook, after the VIP is released), and that a leader
hook that hangs past its timeout does not delay the takeover: the VIP is bound and its first
gratuitous ARP sent within milliseconds of the decision (the controller's
``decision_to_garp_ms``), long before the hook is killed.
"""

from __future__ import annotations

import itertools
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.netns.waiting import wait_for
from vipd.lab import faults
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.topology import VIP4, Lab
from vipd.vrrp import state

SPEC = VrrpSpec(vip=VIP4, advert_interval=0.1)
HANG_TIMEOUT = 1.0


class HookedVipd(VipdDaemon):
    """vipd with ``notify``: every change to the shared timeline, a leader hook that hangs."""

    def __init__(self, lab: Lab, name: str, record: str, hang: str) -> None:
        super().__init__(lab, lab.node(name), SPEC, lab.nodes)
        self.record, self.hang = record, hang

    def config(self) -> dict[str, Any]:
        out = super().config()
        out["notify"] = {"leader": self.hang, "all": self.record, "timeout": HANG_TIMEOUT}
        return out


def script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def timeline(path: Path) -> list[tuple[float, str, str, str, str]]:
    """(time, node, vip, state, reason) per line, in the order written."""
    out = []
    for line in path.read_text().splitlines():
        at, node, vip, st, reason = line.split()
        out.append((float(at), node, vip, st, reason))
    return out


LABELS = state.REASON_LABELS | {"stopped"}


def seen(path: Path) -> list[tuple[str, str]]:
    return [(node, st) for _, node, _, st, _ in timeline(path)]


def test_hooks_order_and_arguments_through_a_kill_and_a_sigterm(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(3)
    rec = lab.workdir / "timeline"
    record = script(lab.workdir / "record", f'echo "$(date +%s.%N) $VIPD_NODE $1 $2 $3" >> {rec}')
    hang = script(lab.workdir / "hang", "exec sleep 60")
    d = {n.name: HookedVipd(lab, n.name, record, hang) for n in lab.nodes}
    for x in d.values():
        x.start()
    assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 15.0) is not None, d["n1"].log_tail()
    # n1's "all" hook runs after its leader hook, which hangs until its timeout.
    led = wait_for(lambda: rec.exists() and ("n1", "leader") in seen(rec), HANG_TIMEOUT + 5.0)
    assert led is not None, d["n1"].log_tail()

    # n1 dies: n2 (priority 150) takes over after its down interval; n1 runs nothing more.
    faults.kill(lab, faults.NodeRig(lab.node("n1"), d["n1"], None))
    assert wait_for(lambda: "n2" in lab.holders(VIP4), 10.0) is not None, d["n2"].log_tail()
    # n2 resigns: n3 takes over after Skew_Time; n2's stop hook runs once the VIP is gone.
    t_term = time.time()
    assert d["n2"].stop(signal.SIGTERM, timeout=15.0) == 0, d["n2"].log_tail()
    # n1's copy of the VIP stays on its dead link if it died before seeing the link go down.
    assert wait_for(lambda: lab.wire_holders(VIP4) == ["n3"], 10.0) is not None, (
        lab.holders(VIP4),
        d["n1"].log_tail(),
        d["n2"].log_tail(),
        d["n3"].log_tail(),
    )
    # n3's own "all" line for this takeover, written after its leader hook timed out (a
    # start-up race may have left an earlier n3 "leader" line in the timeline).
    assert wait_for(
        lambda: any(e[1] == "n3" and e[3] == "leader" and e[0] > t_term for e in timeline(rec)),
        HANG_TIMEOUT + 5.0,
    )

    events = timeline(rec)
    per_node = {n: [(st, reason) for _, node, _, st, reason in events if node == n] for n in d}
    # Every node starts as a backup; whichever of them the start-up race made leader for a
    # moment, n1 ends leading (it has the highest priority) and is then killed. Node death
    # downs the link before the SIGKILL, so n1 may record the fault that link-down is before it
    # dies; nothing else may follow its leading.
    for name, seq in per_node.items():
        assert seq[0] == ("backup", "start"), (name, events)
        assert all(a[0] != b[0] for a, b in itertools.pairwise(seq)), (name, events)  # changes only
        assert all(reason in LABELS for _, reason in seq), (name, events)
    n1_tail = per_node["n1"][-1]
    if n1_tail == ("fault", "interface-down"):
        n1_tail = per_node["n1"][-2]
    assert n1_tail[0] == "leader", events
    assert per_node["n2"][-3:] == [
        ("backup", per_node["n2"][-3][1]),
        ("leader", "master-down"),
        ("stop", "stopped"),
    ], events
    assert [st for st, _ in per_node["n3"][-2:]] == ["backup", "leader"], events
    assert all(vip == VIP4 for _, _, vip, _, _ in events)
    # The recorded order: n1 leads, then n2, and n2's stop comes after n2 led.
    order = [(node, st) for _, node, _, st, _ in events if st in ("leader", "stop")]
    last = {key: i for i, key in enumerate(order)}
    assert last[("n1", "leader")] < last[("n2", "leader")] < last[("n2", "stop")], events

    # The hanging leader hook: killed after its timeout, logged and counted, and the
    # takeover it followed was not delayed by it.
    for name in ("n1", "n2"):
        text = d[name].log_text()
        assert "notify hook timed out: killed" in text, d[name].log_tail()
        bound = re.search(r'msg="VIP bound and announced".*decision_to_garp_ms=([0-9.]+)', text)
        assert bound is not None, d[name].log_tail()
        assert float(bound.group(1)) < HANG_TIMEOUT * 1e3 / 10, bound.group(0)
        assert text.index("VIP bound and announced") < text.index("notify hook timed out")
    d["n3"].stop(signal.SIGTERM)
