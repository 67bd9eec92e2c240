"""Routing-table mode end to end: real ``vipd run`` processes (``announce.mode:
routing-table``) on the three nodes of a real FRR 8.4 fabric, judged by the router's kernel
FIB and by a client behind the router.

The bed is `vipd.lab.routed.RoutedBed` (one router, three nodes, one client, FRR everywhere).
Each node's API server is `vipd.lab.fakes.apiserver`, a stand-in for kube-apiserver's
``/readyz`` (HTTPS, steered by a mode file): the API server is not what is tested here, its
health is, and the stand-in can be made unhealthy on demand. It listens on 6444; a
`tests.netns.test_routed.Listener` on 6443 answers the client with the node's name, on the
VIP exactly while the node's AnyIP binding is in place. Each vipd checks its own API server
and the two others' (``health.peers``) every 0.2 s (rise 2, fall 3).

Bounds come from the config: a path leaves within (fall + 1) × interval + 0.5 s of its API
server failing (fall checks, up to one interval before the first, and the measured BGP/BFD
withdrawal: docs/design/routed.md, "Measured"). Times are printed (run with ``-s``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netns.test_routed import (
    FLAPPED,
    VIP,
    ClientLoop,
    Listener,
    black_holed,
    connect,
    wait_for,
)
from tests.prereq import missing
from vipd.lab.pki import make_cert
from vipd.lab.routed import RoutedBed, RoutedNode, frr_problem
from vipd.lab.topology import python_env

HEALTH_PORT = 6444
INTERVAL = 0.2
FALL = 3
DRAIN = 1.0
LEAVE_BOUND = (FALL + 1) * INTERVAL + 0.5


class Fabric:
    """The bed with a stand-in API server, a listener and (when running) a vipd per node."""

    def __init__(self, bed: RoutedBed) -> None:
        self.bed = bed
        self.dir = bed.workdir / "agents"
        self.dir.mkdir()
        self.cert, self.key = make_cert(self.dir)
        self.apis: list[subprocess.Popen[str]] = []
        self.vipd: dict[str, subprocess.Popen[bytes]] = {}
        self.listeners = [Listener(n) for n in bed.nodes]
        peers = ", ".join(n.addr for n in bed.nodes)
        for node in bed.nodes:
            self.set_health(node.name, "ok")
            proc = subprocess.Popen(
                ["ip", "netns", "exec", node.ns, sys.executable, "-m", "vipd.lab.fakes.apiserver",
                 "--port", str(HEALTH_PORT), "--cert", str(self.cert), "--key", str(self.key),
                 "--mode-file", str(self.mode_file(node.name))],
                env=python_env(), stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            self.apis.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().startswith("listening")
            self.config(node).write_text(
                f"node: {node.name}\n"
                f"vip: {VIP}\n"
                "interface: eth0\n"
                f"announce: {{mode: routing-table, drain: {DRAIN}}}\n"
                f"health: {{port: {HEALTH_PORT}, interval: {INTERVAL}, timeout: 0.15, rise: 2, "
                f"fall: {FALL}, peers: [{peers}]}}\n"
            )

    def mode_file(self, name: str) -> Path:
        return self.dir / f"{name}.mode"

    def config(self, node: RoutedNode) -> Path:
        return self.dir / f"{node.name}.yaml"

    def set_health(self, name: str, mode: str) -> None:
        self.mode_file(name).write_text(mode)

    def start(self, name: str) -> None:
        node = self.bed.node(name)
        log = (self.dir / f"{name}.log").open("ab")
        self.vipd[name] = subprocess.Popen(
            ["ip", "netns", "exec", node.ns, sys.executable, "-m", "vipd", "run",
             "--config", str(self.config(node))],
            env=python_env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def running(self, name: str) -> bool:
        proc = self.vipd.get(name)
        return proc is not None and proc.poll() is None

    def paths(self) -> set[str]:
        """The router's kernel next hops for the VIP, as node names."""
        by_addr = {n.addr: n.name for n in self.bed.nodes}
        return {by_addr.get(h, h) for h in self.bed.kernel_nexthops()}

    def vip_routes(self, name: str) -> str:
        """vipd's routes (protocol 248) on a node, and the VIP on its lo, if any."""
        ns = self.bed.node(name).ns
        out = [
            self.bed.exec(ns, ["ip", "route", "show", "table", t, "proto", "248"]).stdout
            for t in ("198", "local")
        ]
        lo = self.bed.exec(ns, ["ip", "-4", "addr", "show", "dev", "lo"]).stdout
        return "".join(out) + (lo if str(VIP) in lo else "")

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for proc in self.vipd.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.vipd.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for api in self.apis:
            api.terminate()
            api.wait(timeout=5)
        for lst in self.listeners:
            lst.close()


@pytest.fixture(scope="module")
def fabric(netns_ok: None) -> Iterator[Fabric]:
    problem = frr_problem()
    if problem is not None:
        missing(problem)
    with RoutedBed(nodes=3) as bed:
        fab = Fabric(bed)
        try:
            yield fab
        finally:
            fab.close()


@pytest.fixture
def healthy(fabric: Fabric) -> Iterator[Fabric]:
    """Every API server healthy and every vipd running: three paths. Flaps are load."""
    for node in fabric.bed.nodes:
        fabric.set_health(node.name, "ok")
        if not fabric.running(node.name):
            fabric.start(node.name)
    took = wait_for("three paths", lambda: fabric.paths() == {"n1", "n2", "n3"}, 20)
    print(f"\nthree paths after {took:.2f} s")
    flaps = fabric.bed.flaps()
    yield fabric
    assert fabric.bed.flaps() == flaps, FLAPPED


def test_three_healthy_nodes_are_three_ecmp_paths(healthy: Fabric) -> None:
    answers = {connect(healthy.bed) for _ in range(30)}
    assert answers == {"n1", "n2", "n3"}
    assert "inet 10.79.0.100" not in healthy.vip_routes("n1")  # never an address on lo


def test_an_unhealthy_api_server_takes_its_path_out_and_back(healthy: Fabric) -> None:
    start = time.monotonic()
    healthy.set_health("n1", "fail")
    took = wait_for("n1's path leaves", lambda: "n1" not in healthy.paths(), LEAVE_BOUND)
    print(f"n1 unhealthy -> its path out of the router's FIB in {took:.2f} s")
    assert healthy.paths() == {"n2", "n3"}
    time.sleep(DRAIN + 0.3)
    assert "table 198" not in healthy.vip_routes("n1")
    assert healthy.vip_routes("n1") == ""  # the binding went after the drain
    healthy.set_health("n1", "ok")
    back = wait_for("n1's path is back", lambda: "n1" in healthy.paths(), 5)
    print(f"n1 healthy again -> back in {back:.2f} s ({time.monotonic() - start:.1f} s in all)")


def test_sigterm_withdraws_the_route_first_and_blackholes_nothing(healthy: Fabric) -> None:
    client = ClientLoop(healthy.bed, duration=DRAIN + 3.0)
    time.sleep(0.7)
    proc = healthy.vipd["n2"]
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    left = wait_for("n2's path leaves", lambda: "n2" not in healthy.paths(), 5) + sent
    assert proc.poll() is None, "vipd exited before its path left the router"
    proc.wait(timeout=10)
    exited = time.monotonic()
    print(
        f"SIGTERM -> path out in {left - sent:.2f} s, process gone {exited - sent:.2f} s "
        f"(drain {DRAIN} s)"
    )
    results = client.results()
    assert any(r == "n2" for t, r in results if t < sent), "n2 took no connection before"
    assert black_holed(results) == [], black_holed(results)[:5]
    assert healthy.vip_routes("n2") == "", "vipd left a route or the VIP behind"
    assert proc.returncode == 0, healthy.log("n2")[-2000:]


def test_sigkill_then_restart_removes_the_stale_routes(healthy: Fabric) -> None:
    proc = healthy.vipd["n3"]
    proc.kill()
    proc.wait(timeout=5)
    stale = healthy.vip_routes("n3")
    assert "10.79.0.100" in stale, "a killed vipd should have left its routes"
    # The restarted vipd finds its API server unhealthy while its peers serve: it must
    # remove what its predecessor left and stay out.
    healthy.set_health("n3", "fail")
    restarted = time.monotonic()
    healthy.start("n3")
    wait_for("the stale path leaves", lambda: "n3" not in healthy.paths(), 10)
    wait_for("the stale routes are gone", lambda: healthy.vip_routes("n3") == "", 5)
    print(f"restart after SIGKILL -> stale routes gone in {time.monotonic() - restarted:.2f} s")
    healthy.set_health("n3", "ok")
    wait_for("n3 back", lambda: "n3" in healthy.paths(), 5)


def test_every_api_server_unhealthy_leaves_a_path(healthy: Fabric) -> None:
    for node in healthy.bed.nodes:
        healthy.set_health(node.name, "fail")
    end = time.monotonic() + (FALL + 2) * INTERVAL + DRAIN + 1.0
    fewest = 3
    while time.monotonic() < end:
        fewest = min(fewest, len(healthy.paths()))
        assert fewest > 0, "every node withdrew: the VIP has no path"
        time.sleep(0.01)
    left = healthy.paths()
    print(f"every API server failing: {len(left)} path(s) left ({sorted(left)}), fewest {fewest}")
    assert left
    assert connect(healthy.bed) in left
