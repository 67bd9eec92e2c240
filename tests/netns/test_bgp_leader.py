"""``announce.pool: leader`` in bgp mode end to end: three real ``vipd run`` with vipd's own
BGP speaker (ExaBGP) and a VRRP election, peering with a real FRR 8.4 router
(`vipd.lab.routed.RoutedBed` with ``node_frr=False``), judged by the router's kernel FIB and
a client behind it.

As in tests/netns/test_routed_leader.py the nodes also share ``lan0`` for VRRP (its adverts
carry TTL 255); the BGP sessions go over the routed /31s. Priorities 200, 150, 100: n1 is
the master. Every node keeps its session up; only the master's speaker announces.

- Only the master announces: the router has one path, n1's, and every session is up.
- The master's node dies (vipd SIGKILLed, both its links down): its session and path leave
  with the link, n2 becomes master and its path is the only one.
- n1 comes back and preempts; then SIGTERM on n1: n2's path alone, no connect fails during
  the handover (a client connecting without pause), n1 leaves no binding, no session and no
  ExaBGP behind.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.netns.test_routed import ClientLoop, black_holed, connect, wait_for
from tests.netns.test_routed_leader import PRIORITY, Nodes, master_dies_and_returns, only
from tests.prereq import missing
from vipd.lab.routed import RoutedBed, frr_problem
from vipd.routed.exabgp import exabgp_problem

DRAIN = 0.5
HOLD = 9


class BgpNodes(Nodes):
    def __init__(self, bed: RoutedBed) -> None:
        super().__init__(bed)
        for node in bed.nodes:
            self.config(node.name).write_text(
                f"node: {node.name}\n"
                f"vip: {bed.vip}\n"
                "interface: lan0\n"
                + bed.bgp_yaml(node, HOLD)
                + f"  pool: leader\n  drain: {DRAIN}\n"
                f"election: {{vrrp: {{vrid: 51, priority: {PRIORITY[node.name]}, "
                "advert_interval: 0.1}}\n"
            )

    def bound(self, name: str) -> str:
        """vipd's AnyIP binding on a node (protocol 248 in the local table)."""
        ns = self.bed.node(name).ns
        return self.bed.exec(ns, ["ip", "route", "show", "table", "local", "proto", "248"]).stdout

    def exabgp_running(self, name: str) -> bool:
        ns = self.bed.node(name).ns
        for pid in self.bed.exec(ns, ["ip", "netns", "pids", ns], check=False).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"exabgp\0server" in f.read():
                        return True
            except OSError:
                continue
        return False


@pytest.fixture
def nodes(netns_ok: None) -> Iterator[BgpNodes]:
    for problem in (frr_problem(), exabgp_problem()):
        if problem is not None:
            missing(problem)
    with RoutedBed(nodes=3, node_frr=False, lan=True) as bed:
        n = BgpNodes(bed)
        try:
            yield n
        finally:
            n.stop()


def test_only_the_vrrp_masters_speaker_announces_and_the_path_follows_it(
    nodes: BgpNodes,
) -> None:
    for name in ("n1", "n2", "n3"):
        nodes.start(name)
    addrs = {n.addr for n in nodes.bed.nodes}
    try:
        took = wait_for("n1's path alone, every session up", lambda: nodes.paths() == {"n1"}, 30)
        wait_for("every session up", lambda: nodes.bed.sessions_up() == addrs, 30)
    except BaseException:
        for name in ("n1", "n2", "n3"):
            print(f"--- {name}\n{nodes.log(name)}")
        raise
    print(f"\nthe master's path alone after {took:.2f} s")
    only(nodes, "n1", 1.5)
    assert connect(nodes.bed).strip() == "n1"
    assert "10.79.0.100" in nodes.bound("n1")
    assert nodes.bound("n2") == "" and nodes.bound("n3") == ""  # followers bind nothing

    master_dies_and_returns(nodes)
    wait_for("n2's binding gone after its drain", lambda: nodes.bound("n2") == "", 5)

    # A graceful stop: priority 0, n2 takes over, n1 withdraws and leaves nothing behind.
    client = ClientLoop(nodes.bed, duration=DRAIN + 3.0)
    time.sleep(0.7)
    proc = nodes.vipd["n1"]
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    handed = wait_for("n2's path alone after SIGTERM", lambda: nodes.paths() == {"n2"}, 10)
    print(f"n1 SIGTERM -> n2's path alone after {handed:.2f} s")
    try:
        assert proc.wait(timeout=15) == 0, nodes.log("n1")
    except subprocess.TimeoutExpired:
        pytest.fail("vipd did not stop within 15 s:\n" + nodes.log("n1"))
    results = [(t, r.strip()) for t, r in client.results()]
    assert any(r == "n1" for t, r in results if t < sent), "n1 took no connection before"
    assert any(r == "n2" for t, r in results if t > sent), "n2 took no connection after"
    assert black_holed(results) == [], black_holed(results)[:5]
    resets = sum(r.startswith("error:") for _, r in results)
    print(f"{len(results)} connects around the handover, none black-holed, {resets} reset")
    assert nodes.bound("n1") == "", "vipd left its binding behind"
    n1_addr = nodes.bed.node("n1").addr
    wait_for("n1's session closed", lambda: n1_addr not in nodes.bed.sessions_up(), 5)
    assert not nodes.exabgp_running("n1"), "ExaBGP outlived vipd"
