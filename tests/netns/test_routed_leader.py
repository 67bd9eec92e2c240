"""``announce.pool: leader`` end to end: three real ``vipd run`` in routing-table mode with a
VRRP election, on the FRR fabric of `vipd.lab.routed` (nodes on routed /31 links, each with
its own FRR exporting table 198, BFD to the router), judged by the router's kernel FIB.

VRRP needs a shared segment (its adverts carry TTL 255, which a router would decrement), so
the bed also joins the nodes on ``lan0`` (``RoutedBed(lan=True)``); the VIP's route goes
over the routed links as in the ECMP pool. Priorities 200, 150, 100: n1 is the master.

- Only the master announces: the router has one path, n1's, and keeps it.
- The master's node dies (vipd SIGKILLed, both its links down): its path leaves with the link,
  n2 becomes master and its path is the only one.
- n1 comes back (links up, vipd restarted): it preempts, n2 withdraws, n1's path alone.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netns.test_routed import FLAPPED, connect, wait_for
from tests.prereq import missing
from vipd.lab.routed import RoutedBed, frr_problem
from vipd.lab.topology import python_argv, python_env

PRIORITY = {"n1": 200, "n2": 150, "n3": 100}
DRAIN = 0.5


class Nodes:
    def __init__(self, bed: RoutedBed) -> None:
        self.bed = bed
        self.dir = bed.workdir / "leader"
        self.dir.mkdir()
        self.vipd: dict[str, subprocess.Popen[bytes]] = {}
        for node in bed.nodes:
            self.config(node.name).write_text(
                f"node: {node.name}\n"
                f"vip: {bed.vip}\n"
                "interface: lan0\n"
                f"announce: {{mode: routing-table, pool: leader, drain: {DRAIN}}}\n"
                f"election: {{vrrp: {{vrid: 51, priority: {PRIORITY[node.name]}, "
                "advert_interval: 0.1}}\n"
            )
            bed.spawn(
                node.ns,
                python_argv("vipd.lab.responder", "--name", node.name, "--port", "6443"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=python_env(),
            )  # fmt: skip

    def config(self, name: str) -> Path:
        return self.dir / f"{name}.yaml"

    def start(self, name: str) -> None:
        log = (self.dir / f"{name}.log").open("ab")
        self.vipd[name] = self.bed.spawn(
            self.bed.node(name).ns,
            python_argv("vipd", "run", "--config", str(self.config(name))),
            stdout=log, stderr=subprocess.STDOUT, env=python_env(),
        )  # fmt: skip
        log.close()

    def paths(self) -> set[str]:
        by_addr = {n.addr: n.name for n in self.bed.nodes}
        return {by_addr.get(h, h) for h in self.bed.kernel_nexthops()}

    def links(self, name: str, up: bool) -> None:
        node = self.bed.node(name)
        for dev in ("eth0", "lan0"):
            self.bed.exec(node.ns, ["ip", "link", "set", dev, "up" if up else "down"])
        if up:
            self.bed.exec(node.ns, ["ip", "route", "replace", "default", "via", node.router_addr])

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for proc in self.vipd.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.vipd.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def nodes(netns_ok: None) -> Iterator[Nodes]:
    problem = frr_problem()
    if problem is not None:
        missing(problem)
    with RoutedBed(nodes=3, lan=True) as bed:
        n = Nodes(bed)
        try:
            yield n
        finally:
            n.stop()


def only(nodes: Nodes, name: str, seconds: float) -> None:
    """The router has ``name``'s path alone for ``seconds``, polled back to back."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert nodes.paths() == {name}, nodes.paths()


def master_dies_and_returns(nodes: Nodes) -> None:
    """n1 (the master) dies whole: n2's path alone, answering; n1 back: it preempts and its
    path is alone again, answering."""
    died = time.monotonic()
    nodes.vipd["n1"].kill()
    nodes.links("n1", False)
    moved = wait_for("n2's path alone", lambda: nodes.paths() == {"n2"}, 10)
    print(f"master's node dead -> n2's path alone after {moved:.2f} s")
    assert time.monotonic() - died < 10
    only(nodes, "n2", 1.0)
    assert connect(nodes.bed).strip() == "n2", nodes.log("n2")

    nodes.links("n1", True)
    nodes.start("n1")
    back = wait_for("n1's path alone again", lambda: nodes.paths() == {"n1"}, 30)
    print(f"n1 back and preempting -> its path alone after {back:.2f} s")
    only(nodes, "n1", 1.0)
    assert connect(nodes.bed).strip() == "n1"


def test_only_the_vrrp_master_announces_and_the_route_follows_it(nodes: Nodes) -> None:
    for name in ("n1", "n2", "n3"):
        nodes.start(name)
    took = wait_for("n1's path alone", lambda: nodes.paths() == {"n1"}, 20)
    print(f"\nthe master's path alone after {took:.2f} s")
    flaps = nodes.bed.flaps()
    only(nodes, "n1", 1.5)
    assert connect(nodes.bed).strip() == "n1"

    master_dies_and_returns(nodes)
    # n1's own link flap is the test's doing; n2 and n3 kept their sessions.
    assert nodes.bed.flaps() - flaps <= 2, FLAPPED

    # A graceful stop: priority 0, n2 takes over, n1 leaves no route behind.
    proc = nodes.vipd["n1"]
    proc.send_signal(signal.SIGTERM)
    handed = wait_for("n2's path alone after SIGTERM", lambda: nodes.paths() == {"n2"}, 10)
    print(f"n1 SIGTERM -> n2's path alone after {handed:.2f} s")
    assert proc.wait(timeout=10) == 0, nodes.log("n1")
    n1 = nodes.bed.node("n1").ns
    for table in ("198", "local"):
        left = nodes.bed.exec(n1, ["ip", "route", "show", "table", table, "proto", "248"])
        assert left.stdout.strip() == "", left.stdout
