"""Tracking on real kernels: a tracked script and a tracked file move the VIP by their
weights, and a lone node whose checks are down still takes the VIP.

What it tests: two vipd nodes (n1 priority 200, n2 150, preempt on). n1 tracks a script
(``/usr/bin/test -e FLAG``, weight 100): with the flag it leads; without it its priority is
100 and n2 preempts. n2 tracks a file: ``-80`` in it makes n2 advertise 70 and n1 (100) takes
the VIP back. Then n1 alone, its script down from the start, becomes leader after its down
interval: tracking never strands a lone node.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.netns.waiting import wait_for
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.topology import VIP4, Lab

SPEC = VrrpSpec(vip=VIP4, advert_interval=0.1)


class TrackedVipd(VipdDaemon):
    def __init__(self, lab: Lab, name: str, items: list[dict[str, Any]]) -> None:
        super().__init__(lab, lab.node(name), SPEC, lab.nodes)
        self.items = items

    def config(self) -> dict[str, Any]:
        out = super().config()
        out["track"] = self.items
        return out


def test_script_and_file_move_the_vip_and_a_lone_node_keeps_it(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(2)
    flag: Path = lab.workdir / "n1-haproxy-running"
    bias: Path = lab.workdir / "n2-bias"
    flag.touch()
    bias.write_text("up\n")
    n1 = TrackedVipd(
        lab,
        "n1",
        [{"name": "haproxy", "script": f"/usr/bin/test -e {flag}", "interval": 0.2, "weight": 100}],
    )
    n2 = TrackedVipd(lab, "n2", [{"name": "bias", "file": str(bias), "interval": 0.2}])
    n1.start()
    n2.start()

    def on(name: str, timeout: float = 10.0) -> None:
        took = wait_for(lambda: lab.holders(VIP4) == [name], timeout)
        assert took is not None, f"VIP on {lab.holders(VIP4)}\n{n1.log_tail()}\n{n2.log_tail()}"

    on("n1", 15.0)
    # The script goes down: n1 advertises 200 - 100 = 100 < 150, n2 preempts.
    flag.unlink()
    on("n2")
    assert 'msg="track down" track=haproxy' in n1.log_text(), n1.log_tail()
    # n2's file says -80: n2 advertises 70 < 100, n1 preempts it back.
    bias.write_text("-80\n")
    on("n1")
    for d in (n1, n2):
        assert d.stop(signal.SIGTERM) == 0, d.log_tail()
    # n1 alone, its check down from the start (priority 100, the floor never 0): leader.
    n1.start()
    on("n1", 15.0)
    assert n1.stop(signal.SIGTERM) == 0
