"""The capabilities `vipd manifest` grants the routed modes' ECMP pool, checked on a real run:
``vipd run`` in bgp mode (ExaBGP as the speaker, the FRR 8.4 router of `vipd.lab.routed`)
with CAP_NET_ADMIN alone (``setpriv``: every other capability out of the bounding set, so
out of the process after its exec, as in a pod that adds NET_ADMIN only) announces its path,
and a SIGTERM withdraws it and leaves no binding behind.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netns.test_bgp import BgpFabric
from tests.netns.test_routed import wait_for
from tests.prereq import missing
from vipd.lab.routed import RoutedBed, frr_problem
from vipd.lab.topology import python_env
from vipd.routed.exabgp import exabgp_problem

SETPRIV = "/usr/bin/setpriv"
CAP_NET_ADMIN = 12


class NetAdminFabric(BgpFabric):
    def start(self, name: str) -> None:
        node = self.bed.node(name)
        log = (self.dir / f"{name}.log").open("ab")
        self.vipd[name] = subprocess.Popen(
            ["ip", "netns", "exec", node.ns, SETPRIV, "--bounding-set=-all,+net_admin",
             "--inh-caps=-all", sys.executable, "-m", "vipd", "run",
             "--config", str(self.config(node))],
            env=python_env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


@pytest.fixture
def fabric(netns_ok: None) -> Iterator[NetAdminFabric]:
    for problem in (frr_problem(), exabgp_problem()):
        if problem is not None:
            missing(problem)
    if not Path(SETPRIV).exists():
        missing(f"{SETPRIV} (util-linux) is not installed")
    with RoutedBed(nodes=1, node_frr=False) as bed:
        fab = NetAdminFabric(bed)
        try:
            yield fab
        finally:
            fab.close()


def effective_caps(pid: int) -> int:
    """CapEff of the process running vipd (``ip netns exec`` execs into it)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no CapEff for {pid}")


def test_the_ecmp_pool_in_bgp_mode_runs_with_net_admin_alone(fabric: NetAdminFabric) -> None:
    fabric.start("n1")
    try:
        took = wait_for("n1's path", lambda: fabric.paths() == {"n1"}, 30)
    except BaseException:
        print(fabric.log("n1")[-3000:])
        raise
    print(f"\nn1's path with CAP_NET_ADMIN alone after {took:.2f} s")
    proc = fabric.vipd["n1"]
    assert effective_caps(proc.pid) == 1 << CAP_NET_ADMIN
    assert "10.79.0.100" in fabric.vip_routes("n1")  # the AnyIP binding: netlink, NET_ADMIN
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    gone = wait_for("n1's path leaves", lambda: fabric.paths() == set(), 10)
    assert proc.wait(timeout=15) == 0, fabric.log("n1")[-3000:]
    print(f"SIGTERM -> path out in {gone:.2f} s, exited {time.monotonic() - sent:.2f} s")
    assert fabric.vip_routes("n1") == ""
    assert "Operation not permitted" not in fabric.log("n1"), fabric.log("n1")[-3000:]
