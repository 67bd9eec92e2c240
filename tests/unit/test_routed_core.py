"""vipd.routed.core: the ECMP decision driving the VIPs' phases, and when to wake."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

from vipd.health.tracker import BackendHealth
from vipd.routed.core import Inputs, State, advance
from vipd.routed.ecmp import Decision
from vipd.routed.plan import Phase

VIP = ip_address("10.79.0.100")
PEER = ip_address("10.78.1.1")
Peers = dict[IPv4Address | IPv6Address, BackendHealth | None]


def health(ok: bool, checked: float) -> BackendHealth:
    return BackendHealth(healthy=ok, since=0.0, checked_at=checked)


def inputs(local: BackendHealth | None, peers: Peers) -> Inputs:
    return Inputs(vips=(VIP,), local=local, peers=peers, drain=2.0, stale_after=10.0)


def test_unhealthy_at_start_with_a_healthy_peer_announces_nothing() -> None:
    out = advance(0.0, State(), inputs(None, {PEER: health(True, 0.0)}))
    assert out.desired == {VIP: Phase.WITHDRAWN}
    assert out.state.decision == Decision(False, "waiting")
    assert out.changed
    assert out.wake == 10.0  # the peer's good news expires then


def test_join_then_fall_sick_drains_then_withdraws() -> None:
    peers: Peers = {PEER: health(True, 0.0)}
    s = advance(1.0, State(), inputs(health(True, 1.0), peers))
    assert s.desired == {VIP: Phase.ANNOUNCED} and s.wake is None
    again = advance(1.5, s.state, inputs(health(True, 1.5), peers))
    assert not again.changed and again.desired == s.desired
    peers = {PEER: health(True, 5.0)}
    sick = advance(5.0, again.state, inputs(health(False, 5.0), peers))
    assert sick.desired == {VIP: Phase.DRAINING}
    assert sick.state.decision == Decision(False, "unhealthy")
    assert sick.wake == 7.0  # the drain's end comes before the peer's news expires (15.0)
    done = advance(7.0, sick.state, inputs(health(False, 5.0), peers))
    assert done.desired == {VIP: Phase.WITHDRAWN}
    assert done.state.decision == Decision(False, "waiting")  # out of the pool: waits to rejoin
    assert done.wake == 15.0


def test_a_peer_going_quiet_is_a_wake_and_the_withdrawn_node_still_waits() -> None:
    peers: Peers = {PEER: health(True, 0.0)}
    s = advance(0.0, State(), inputs(health(True, 0.0), peers))
    s = advance(1.0, s.state, inputs(health(False, 1.0), peers))
    assert s.desired == {VIP: Phase.DRAINING}
    # Nothing new arrives; at the wake times the drain ends and then the peer's news expires.
    s = advance(3.0, s.state, inputs(health(False, 1.0), peers))
    assert s.desired == {VIP: Phase.WITHDRAWN}
    assert s.wake == 10.0
    s = advance(s.wake, s.state, inputs(health(False, 1.0), peers))
    assert s.state.decision == Decision(False, "waiting")  # never joins while unhealthy
    assert s.wake is None


def test_a_draining_node_is_not_the_last_resort() -> None:
    peers: Peers = {PEER: health(True, 0.0)}
    s = advance(0.0, State(), inputs(health(True, 0.0), peers))
    s = advance(1.0, s.state, inputs(health(False, 1.0), peers))
    assert s.desired == {VIP: Phase.DRAINING}
    s = advance(1.5, s.state, inputs(health(False, 1.5), {PEER: health(False, 1.5)}))
    # Not announcing any more (draining), so it is not the last resort: it waits, and the
    # peer, still announcing, is the last resort (tested in test_routed_ecmp).
    assert s.state.decision == Decision(False, "waiting")


def test_every_vip_follows_the_one_decision() -> None:
    v6 = ip_address("fd00:79::100")
    both = Inputs(vips=(VIP, v6), local=health(True, 0.0))
    s = advance(0.0, State(), both)
    assert s.desired == {VIP: Phase.ANNOUNCED, v6: Phase.ANNOUNCED}
