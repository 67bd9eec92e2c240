"""bgp mode with BFD (``announce.bgp.bfd.enabled``): real ``vipd run`` processes, each with
its ExaBGP child and its BFD sessions in its own process, peering with a real FRR 8.4 router
whose BGP neighbours toward the nodes are tied to BFD (``neighbor … bfd profile fast``,
100 ms × 3, the lab's profile), on `vipd.lab.routed.RoutedBed` with ``node_frr=False``.

What it shows (docs/design/bfd.md, "shares fate"):

- the BGP sessions and the BFD sessions come Up, and vipd exports its BFD metrics;
- a node cut off in silence (nftables drops everything on its uplink, vipd still running):
  the router's BFD goes Down within its detection time and the path leaves, not at the
  9 s hold time;
- vipd SIGKILLed: its BFD packets stop with it and the path leaves within the same bound;
- vipd no longer hears the router's BFD (its BFD input dropped): vipd declares the session
  Down and withdraws toward that router, closing the BGP session itself;
- the router sets the BFD session AdminDown (``shutdown`` in vtysh): vipd keeps the BGP
  session and the path (RFC 5882 §3.2: an administrative action is not a path failure).

Times are printed (run with ``-s``): measurements. The assertions are the protocol bound
(the detection time, 3 × 100 ms, plus one interval for the last packet's age) plus
``MARGIN`` for this shared machine, as tests/netns/test_bfd.py does.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.netns.test_bgp import HOLD, BgpFabric
from tests.netns.test_routed import VIP, wait_for
from tests.netns.test_routed_agent import DRAIN, FALL, HEALTH_PORT, INTERVAL
from tests.prereq import missing
from vipd.lab.routed import BFD_MS, BFD_MULT, ROUTER_AS, RoutedBed, RoutedNode, frr_problem
from vipd.lab.topology import IP, _run
from vipd.routed.exabgp import exabgp_problem

MARGIN = 0.5  # s on top of every protocol bound: a shared, noisy 2-core machine
BOUND = (BFD_MULT + 1) * BFD_MS / 1000 + MARGIN  # detection time + the last packet's age


class BfdFabric(BgpFabric):
    """test_bgp's fabric with ``announce.bgp.bfd`` on every node and BFD on the router."""

    def __init__(self, bed: RoutedBed) -> None:
        super().__init__(bed)
        peers = ", ".join(n.addr for n in bed.nodes)
        for node in bed.nodes:
            self.config(node).write_text(
                f"node: {node.name}\n"
                f"vip: {VIP}\n"
                "interface: eth0\n"
                + bed.bgp_yaml(node, HOLD)
                + f"    bfd: {{enabled: true, min_tx_ms: {BFD_MS}, min_rx_ms: {BFD_MS}, "
                f"multiplier: {BFD_MULT}}}\n"
                f"  drain: {DRAIN}\n"
                f"health: {{port: {HEALTH_PORT}, interval: {INTERVAL}, timeout: 0.15, rise: 2, "
                f"fall: {FALL}, peers: [{peers}]}}\n"
            )
            bed._configure(bed.router, "bfd", self._peer_line(node), "profile fast")
            bed._configure(
                bed.router, f"router bgp {ROUTER_AS}", f"neighbor {node.addr} bfd profile fast"
            )

    @staticmethod
    def _peer_line(node: RoutedNode) -> str:
        return f"peer {node.addr} local-address {node.router_addr} interface {node.name}"

    def router_bfd(self) -> dict[str, str]:
        """The router's BFD sessions: node address → status (``up``, ``down``, …)."""
        peers: list[dict[str, Any]] = self.bed.show(self.bed.router, "show bfd peers json") or []
        return {str(p.get("peer")): str(p.get("status")) for p in peers}

    def bgp_bfd_up(self) -> set[str]:
        """The node addresses whose BGP session is Established with its BFD Up."""
        neighbors = self.bed.show(self.bed.router, "show bgp neighbors json")
        return {
            addr
            for addr, peer in neighbors.items()
            if peer.get("bgpState") == "Established"
            and peer.get("peerBfdInfo", {}).get("status") == "Up"
        }

    def last_reset(self, node: RoutedNode) -> str:
        """Why the router last reset the session with ``node`` (FRR's words)."""
        neighbors = self.bed.show(self.bed.router, f"show bgp neighbors {node.addr} json")
        peer = neighbors.get(node.addr, {})
        return f"{peer.get('lastResetDueTo', '?')} / {peer.get('lastNotificationReason', '-')}"

    def metric(self, node_name: str, line: str) -> float:
        """One sample of ``node_name``'s vipd scrape, by its exact ``name{labels}`` text."""
        for text in self.get(node_name, "/metrics").splitlines():
            if text.startswith(line + " "):
                return float(text.split()[-1])
        return 0.0

    def vipd_bfd_up(self, node: RoutedNode) -> bool:
        """vipd's own view: its session with the router is Up."""
        return self.metric(node.name, f'vipd_bfd_session_up{{peer="{node.router_addr}"}}') == 1.0

    def router_shut(self, node: RoutedNode, shut: bool) -> None:
        self.bed._configure(
            self.bed.router, "bfd", self._peer_line(node), "shutdown" if shut else "no shutdown"
        )

    def nft(self, node: RoutedNode, rules: str | None) -> None:
        """nftables table ``bgpbfd`` in the node: ``rules`` (chain bodies), or none."""
        if rules is None:
            _run([IP, "netns", "exec", node.ns, "nft", "delete", "table", "inet", "bgpbfd"])
        else:
            _run([IP, "netns", "exec", node.ns, "nft", "-f", "-"], input_text=rules)


CUT_OFF = """table inet bgpbfd {
 chain in { type filter hook input priority 0; iifname "eth0" drop; }
 chain out { type filter hook output priority 0; oifname "eth0" drop; }
}
"""
BFD_DEAF = """table inet bgpbfd {
 chain in { type filter hook input priority 0; iifname "eth0" udp dport 3784 drop; }
}
"""


@pytest.fixture(scope="module")
def fabric(netns_ok: None) -> Iterator[BfdFabric]:
    for problem in (frr_problem(), exabgp_problem()):
        if problem is not None:
            missing(problem)
    with RoutedBed(nodes=3, node_frr=False) as bed:
        fab = BfdFabric(bed)
        try:
            yield fab
        finally:
            fab.close()


@pytest.fixture
def healthy(fabric: BfdFabric) -> BfdFabric:
    """Every vipd running, three paths, every BGP session Established with its BFD Up."""
    for node in fabric.bed.nodes:
        fabric.set_health(node.name, "ok")
        if not fabric.running(node.name):
            fabric.start(node.name)
    want = {n.addr for n in fabric.bed.nodes}
    try:
        took = wait_for(
            "three paths, BGP and BFD up",
            lambda: (
                fabric.paths() == {"n1", "n2", "n3"}
                and fabric.bgp_bfd_up() == want
                and all(fabric.vipd_bfd_up(n) for n in fabric.bed.nodes)
            ),
            40,
        )
    except BaseException:
        print(f"paths {fabric.paths()}, bgp+bfd {fabric.bgp_bfd_up()} {fabric.router_bfd()}")
        for node in fabric.bed.nodes:
            print(f"--- {node.name}\n{fabric.log(node.name)[-2000:]}")
        raise
    print(f"\nthree paths, BGP and BFD up after {took:.2f} s")
    return fabric


def test_bgp_and_bfd_come_up_and_bfd_is_exported(healthy: BfdFabric) -> None:
    want = {n.addr for n in healthy.bed.nodes}
    assert {a for a, s in healthy.router_bfd().items() if s == "up"} == want
    assert healthy.metric("n1", 'vipd_bfd_session_up{peer="10.78.1.0"}') == 1.0
    assert healthy.metric("n1", 'vipd_bfd_state_changes_total{peer="10.78.1.0",state="up"}') >= 1
    assert "bfd: up" in healthy.log("n1")


def test_a_silent_node_loses_its_path_within_the_detection_time(healthy: BfdFabric) -> None:
    node = healthy.bed.node("n1")
    cut = time.monotonic()
    healthy.nft(node, CUT_OFF)
    try:
        wait_for("n1's path leaves", lambda: "n1" not in healthy.paths(), HOLD + 1)
        gone = time.monotonic() - cut  # from before the nft command
        print(
            f"n1 cut off (vipd running) -> its path out of the router's FIB in {gone:.3f} s "
            f"(bound {BOUND:.1f} s; hold time {HOLD} s); router: {healthy.last_reset(node)}"
        )
        assert gone <= BOUND, f"{gone:.3f} s: not BFD's detection time"
        assert healthy.running("n1")
    finally:
        healthy.nft(node, None)
    back = wait_for("n1's path is back", lambda: "n1" in healthy.paths(), 30)
    print(f"uplink back -> BFD, BGP and n1's path back in {back:.2f} s")
    assert healthy.metric("n1", 'vipd_bgp_withdrawals_total{reason="bfd-down"}') >= 1


def test_sigkill_takes_the_path_away_within_the_detection_time(healthy: BfdFabric) -> None:
    node = healthy.bed.node("n3")
    proc = healthy.vipd["n3"]
    killed = time.monotonic()
    proc.kill()
    wait_for("n3's path leaves", lambda: "n3" not in healthy.paths(), HOLD + 1)
    gone = time.monotonic() - killed
    wait_for("the router's BFD for n3 down", lambda: healthy.router_bfd()[node.addr] != "up", 5)
    bfd = time.monotonic() - killed
    print(
        f"SIGKILL -> n3's path out of the router's FIB in {gone:.3f} s, the router's BFD "
        f"down by {bfd:.3f} s (bound {BOUND:.1f} s); router: {healthy.last_reset(node)}"
    )
    proc.wait(timeout=5)
    assert gone <= BOUND
    assert bfd <= BOUND + 1.0  # polled after the path: later by a few vtysh calls
    wait_for("ExaBGP gone with vipd", lambda: not healthy.exabgp_running("n3"), 5)
    print(f"({time.monotonic() - killed:.2f} s in all)")


def test_vipd_withdraws_when_it_stops_hearing_the_routers_bfd(healthy: BfdFabric) -> None:
    """Only BFD into n2 dropped (BGP's TCP untouched): vipd's session times out, and vipd
    withdraws toward the router and closes the BGP session (a Cease, Administrative
    Shutdown) on its own, before the router's BFD notices anything."""
    node = healthy.bed.node("n2")
    before = healthy.metric("n2", 'vipd_bgp_withdrawals_total{reason="bfd-down"}')
    logged = len(healthy.log("n2"))
    deaf = time.monotonic()
    healthy.nft(node, BFD_DEAF)
    try:
        wait_for("n2's path leaves", lambda: "n2" not in healthy.paths(), HOLD + 1)
        gone = time.monotonic() - deaf
        print(
            f"n2's BFD input dropped -> its path out in {gone:.3f} s; router: "
            f"{healthy.last_reset(node)}"
        )
        assert gone <= BOUND + 0.5  # vipd's detection, then a withdraw over BGP
        # vipd's own detection, then its speaker closes the session: a Cease, Administrative
        # Shutdown (6, 2), after withdrawing toward the router
        closed = re.compile(
            r"bfd: down.*control_detection_time_expired.*"
            r"peer 10\.78\.2\.0 down notification sent \(6,2\)",
            re.DOTALL,
        )
        wait_for(
            "vipd closes the session", lambda: bool(closed.search(healthy.log("n2")[logged:])), 5
        )
        assert healthy.metric("n2", 'vipd_bfd_session_up{peer="10.78.2.0"}') == 0.0
        after = healthy.metric("n2", 'vipd_bgp_withdrawals_total{reason="bfd-down"}')
        assert after >= before + 1
    finally:
        healthy.nft(node, None)
    back = wait_for("n2's path is back", lambda: "n2" in healthy.paths(), 30)
    print(f"BFD input back -> n2's path back in {back:.2f} s ({time.monotonic() - deaf:.1f} s)")


def test_an_admin_down_from_the_router_keeps_the_path(healthy: BfdFabric) -> None:
    """RFC 5882 §3.2: the router's BFD ``shutdown`` is not a path failure; vipd's session
    goes Down with diag AdministrativelyDown and nothing is withdrawn."""
    node = healthy.bed.node("n1")
    healthy.router_shut(node, True)
    try:
        took = wait_for(
            "vipd sees AdminDown",
            lambda: healthy.metric("n1", 'vipd_bfd_session_up{peer="10.78.1.0"}') == 0.0,
            5,
        )
        print(f"router's BFD shutdown -> vipd's session down after {took:.2f} s")
        time.sleep(1.0)  # several detection times: a withdrawal would be visible by now
        assert "n1" in healthy.paths()
        assert node.addr in healthy.bed.sessions_up()
        assert "AdminDown; announcements kept" in healthy.log("n1")
    finally:
        healthy.router_shut(node, False)
    back = wait_for(
        "BFD up again",
        lambda: healthy.metric("n1", 'vipd_bfd_session_up{peer="10.78.1.0"}') == 1.0,
        10,
    )
    print(f"no shutdown -> vipd's session up again after {back:.2f} s")
    assert "n1" in healthy.paths()


def test_sigterm_stops_the_speaker_and_bfd_together(healthy: BfdFabric) -> None:
    """A stop: withdraw, the drain, ExaBGP's Cease, then BFD's AdminDown; vipd exits 0 and
    the router has neither the session nor the BFD session Up."""
    node = healthy.bed.node("n2")
    proc = healthy.vipd["n2"]
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)
    print(f"SIGTERM -> vipd gone in {time.monotonic() - sent:.2f} s (drain {DRAIN} s)")
    assert proc.returncode == 0, healthy.log("n2")[-2000:]
    assert "n2" not in healthy.paths()
    assert node.addr not in healthy.bed.sessions_up()
    assert not healthy.exabgp_running("n2")
    wait_for("the router's BFD for n2 down", lambda: healthy.router_bfd()[node.addr] != "up", 5)
