"""bgp mode end to end: real ``vipd run`` processes (``announce.mode: bgp``, ExaBGP as the
speaker) on three nodes without any routing daemon, peering with a real FRR 8.4 router
(`vipd.lab.routed.RoutedBed` with ``node_frr=False``), judged by the router's RIB and FIB and
by a client behind the router.

The API servers, listeners and health settings are those of tests/netns/test_routed_agent.py
(its `Fabric`); only the ``announce`` section differs. No BFD toward the nodes: a killed
node's path leaves on the session's end (TCP closed, or the hold time, 9 s, for a silent
node). Times are printed (run with ``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.netns.test_routed import VIP, ClientLoop, black_holed, connect, wait_for
from tests.netns.test_routed_agent import DRAIN, FALL, HEALTH_PORT, INTERVAL, LEAVE_BOUND, Fabric
from tests.prereq import missing
from vipd.lab.routed import ROUTER_AS, RoutedBed, frr_problem
from vipd.routed.exabgp import exabgp_problem

HOLD = 9


class BgpFabric(Fabric):
    def __init__(self, bed: RoutedBed) -> None:
        super().__init__(bed)
        peers = ", ".join(n.addr for n in bed.nodes)
        for node in bed.nodes:
            self.config(node).write_text(
                f"node: {node.name}\n"
                f"vip: {VIP}\n"
                "interface: eth0\n" + bed.bgp_yaml(node, HOLD) + f"  drain: {DRAIN}\n"
                f"health: {{port: {HEALTH_PORT}, interval: {INTERVAL}, timeout: 0.15, rise: 2, "
                f"fall: {FALL}, peers: [{peers}]}}\n"
            )

    def vip_routes(self, name: str) -> str:
        """vipd's routes (protocol 248) on a node: the local table's (no table 198 here)."""
        ns = self.bed.node(name).ns
        return self.bed.exec(ns, ["ip", "route", "show", "table", "local", "proto", "248"]).stdout

    def get(self, name: str, path: str) -> str:
        """GET ``path`` from the node's vipd endpoint (:2112)."""
        ns = self.bed.node(name).ns
        return self.bed.exec(ns, ["curl", "-sf", f"http://127.0.0.1:2112{path}"]).stdout

    def rib_paths(self) -> set[str]:
        """The router's selected BGP next hops for the VIP (``show ip route json``)."""
        by_addr = {n.addr: n.name for n in self.bed.nodes}
        return {by_addr.get(h, h) for h in self.bed.router_nexthops()}

    def exabgp_pid(self, name: str) -> int | None:
        """The node's ExaBGP process, if one runs."""
        ns = self.bed.node(name).ns
        out = self.bed.exec(ns, ["ip", "netns", "pids", ns], check=False).stdout.split()
        for pid in out:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"exabgp\0server" in f.read():
                        return int(pid)
            except OSError:
                continue
        return None

    def exabgp_running(self, name: str) -> bool:
        return self.exabgp_pid(name) is not None


@pytest.fixture(scope="module")
def fabric(netns_ok: None) -> Iterator[BgpFabric]:
    for problem in (frr_problem(), exabgp_problem()):
        if problem is not None:
            missing(problem)
    with RoutedBed(nodes=3, node_frr=False) as bed:
        fab = BgpFabric(bed)
        try:
            yield fab
        finally:
            fab.close()


@pytest.fixture
def healthy(fabric: BgpFabric) -> BgpFabric:
    """Every API server healthy and every vipd running: three paths."""
    for node in fabric.bed.nodes:
        fabric.set_health(node.name, "ok")
        if not fabric.running(node.name):
            fabric.start(node.name)
    try:
        took = wait_for("three paths", lambda: fabric.paths() == {"n1", "n2", "n3"}, 30)
    except BaseException:
        print(f"paths {fabric.paths()}, sessions {fabric.bed.sessions_up()}")
        for node in fabric.bed.nodes:
            print(f"--- {node.name}\n{fabric.log(node.name)[-1500:]}")
        raise
    print(f"\nthree paths after {took:.2f} s")
    return fabric


def test_three_healthy_nodes_are_three_ecmp_paths(healthy: BgpFabric) -> None:
    assert healthy.rib_paths() == {"n1", "n2", "n3"}
    assert healthy.bed.sessions_up() == {n.addr for n in healthy.bed.nodes}
    answers = {connect(healthy.bed) for _ in range(30)}
    assert answers == {"n1", "n2", "n3"}
    routes = healthy.vip_routes("n1")
    assert "local 10.79.0.100" in routes  # the AnyIP binding
    scrape = healthy.get("n1", "/metrics")
    assert 'vipd_bgp_session_up{peer="10.78.1.0"} 1.0' in scrape
    assert "vipd_bgp_announced_prefixes 1.0" in scrape
    status = json.loads(healthy.get("n1", "/status"))
    assert status["routed"]["bgp"] == {
        "sessions": {"10.78.1.0": True},
        "announced": ["10.79.0.100/32"],
    }


def test_an_unhealthy_api_server_takes_its_path_out_and_back(healthy: BgpFabric) -> None:
    healthy.set_health("n1", "fail")
    took = wait_for("n1's path leaves", lambda: "n1" not in healthy.rib_paths(), LEAVE_BOUND)
    print(f"n1 unhealthy -> its path out of the router's RIB in {took:.2f} s")
    assert healthy.paths() == {"n2", "n3"}
    assert "10.78.1.1" in healthy.bed.sessions_up()  # withdrawn, the session stays
    time.sleep(DRAIN + 0.3)
    assert healthy.vip_routes("n1") == ""  # the binding went after the drain
    healthy.set_health("n1", "ok")
    back = wait_for("n1's path is back", lambda: "n1" in healthy.paths(), 5)
    print(f"n1 healthy again -> back in {back:.2f} s")


def notifications_from(bed: RoutedBed, peer: str) -> int:
    """NOTIFICATION messages the router has received from ``peer`` (FRR's per-neighbour
    message counters, kept across that neighbour's sessions)."""
    shown = bed.show(bed.router, f"show bgp neighbors {peer} json").get(peer, {})
    return int(shown.get("messageStats", {}).get("notificationsRecv", 0))


def test_sigterm_withdraws_the_route_first_and_blackholes_nothing(healthy: BgpFabric) -> None:
    client = ClientLoop(healthy.bed, duration=DRAIN + 3.0)
    time.sleep(0.7)
    proc = healthy.vipd["n2"]
    cease_before = notifications_from(healthy.bed, "10.78.2.1")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    left = wait_for("n2's path leaves", lambda: "n2" not in healthy.paths(), 5) + sent
    assert proc.poll() is None, "vipd exited before its path left the router"
    proc.wait(timeout=15)
    exited = time.monotonic()
    print(
        f"SIGTERM -> path out in {left - sent:.2f} s, process gone {exited - sent:.2f} s "
        f"(drain {DRAIN} s)"
    )
    results = client.results()
    assert any(r == "n2" for t, r in results if t < sent), "n2 took no connection before"
    assert black_holed(results) == [], black_holed(results)[:5]
    assert healthy.vip_routes("n2") == "", "vipd left a route behind"
    assert "10.78.2.1" not in healthy.bed.sessions_up(), "the session outlived vipd"
    # The session ended with a NOTIFICATION Cease, Administrative Shutdown (6, 2), not only a
    # bare TCP close: the router counted one more NOTIFICATION received from n2. (ExaBGP may
    # reconnect within ~12 ms of the Cease, and the SIGTERM then ends that empty session with
    # a FIN, so FRR's "last reset" can name either; the counter cannot be overwritten.)
    after = notifications_from(healthy.bed, "10.78.2.1")
    assert after > cease_before, (cease_before, after, healthy.log("n2")[-2000:])
    assert not healthy.exabgp_running("n2"), "ExaBGP outlived vipd"
    assert proc.returncode == 0, healthy.log("n2")[-2000:]


def test_sigkill_drops_the_session_and_a_restart_reconciles(healthy: BgpFabric) -> None:
    proc = healthy.vipd["n3"]
    killed = time.monotonic()
    proc.kill()
    proc.wait(timeout=5)
    gone = wait_for("n3's path leaves", lambda: "n3" not in healthy.rib_paths(), HOLD + 1)
    print(f"SIGKILL -> n3's path out of the router's RIB in {gone:.2f} s (hold time {HOLD} s)")
    wait_for("ExaBGP gone with vipd", lambda: not healthy.exabgp_running("n3"), 5)
    assert "10.78.3.1" not in healthy.bed.sessions_up()
    assert "10.79.0.100" in healthy.vip_routes("n3"), "a killed vipd leaves its binding"
    # Restarted with its API server unhealthy while its peers serve: the stale binding goes
    # and no path comes back.
    healthy.set_health("n3", "fail")
    restarted = time.monotonic()
    healthy.start("n3")
    try:
        wait_for("the stale binding is gone", lambda: healthy.vip_routes("n3") == "", 10)
    finally:
        print(healthy.log("n3")[-3000:])
    print(f"restart after SIGKILL -> stale binding gone in {time.monotonic() - restarted:.2f} s")
    assert "n3" not in healthy.paths()
    healthy.set_health("n3", "ok")
    back = wait_for("n3 back", lambda: "n3" in healthy.paths(), 15)
    print(f"n3 healthy -> back in {back:.2f} s ({time.monotonic() - killed:.1f} s in all)")


def test_a_frozen_speaker_loses_its_path_at_the_hold_time_and_is_replaced(
    healthy: BgpFabric,
) -> None:
    """ExaBGP stopped (SIGSTOP): no keepalive reaches the router, which drops the session at
    the hold time; vipd sees its ping unanswered, kills the child and starts a new one."""
    pid = healthy.exabgp_pid("n1")
    assert pid is not None
    frozen = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    gone = wait_for("n1's path leaves", lambda: "n1" not in healthy.rib_paths(), HOLD + 1)
    print(f"ExaBGP frozen -> n1's path out at {gone:.2f} s (hold time {HOLD} s)")
    wait_for("a new ExaBGP announces n1 again", lambda: "n1" in healthy.paths(), 40)
    print(f"-> a new speaker and the path back {time.monotonic() - frozen:.2f} s after the freeze")
    assert healthy.exabgp_pid("n1") not in (None, pid)
    assert "exabgp: a command unanswered" in healthy.log("n1")


def test_an_md5_password_from_a_file_brings_the_session_up(healthy: BgpFabric) -> None:
    """TCP MD5 (RFC 2385) with the router: the password only in a 0600 file, never in the
    log, /status or the metrics; ExaBGP, without any capability, sets it on its socket."""
    secret = "vipd-md5-" + os.urandom(4).hex()
    node = healthy.bed.node("n1")
    pw = healthy.dir / "n1.password"
    pw.write_text(secret + "\n")
    pw.chmod(0o600)
    original = healthy.config(node).read_text()
    bed = healthy.bed
    router_cmd = f"neighbor {node.addr} password {secret}"
    try:
        bed._configure(bed.router, f"router bgp {ROUTER_AS}", router_cmd)
        wait_for("n1's path leaves (no password yet)", lambda: "n1" not in healthy.paths(), 15)
        proc = healthy.vipd["n1"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        healthy.config(node).write_text(
            original.replace(f"asn: {ROUTER_AS}}}", f"asn: {ROUTER_AS}, password_file: {pw}}}", 1)
        )
        assert "password_file" in healthy.config(node).read_text()
        healthy.start("n1")
        took = wait_for("n1's path is back with MD5", lambda: "n1" in healthy.paths(), 30)
        print(f"MD5 session up and n1's path back {took:.2f} s after the start")
        for text in (
            healthy.log("n1"),
            healthy.get("n1", "/status"),
            healthy.get("n1", "/metrics"),
        ):
            assert secret not in text
    finally:
        bed._configure(bed.router, f"router bgp {ROUTER_AS}", f"no {router_cmd}")
        healthy.config(node).write_text(original)
        proc = healthy.vipd["n1"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
