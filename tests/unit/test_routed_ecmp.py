"""vipd.routed.ecmp: the announce-or-not pool rule, one node's view."""

from __future__ import annotations

import itertools
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from vipd.health.tracker import BackendHealth
from vipd.routed.ecmp import REASONS, Decision, decide, fresh_healthy

Peers = dict[IPv4Address | IPv6Address, BackendHealth | None]
NOW = 100.0
ME = ip_address("10.78.2.1")
LOW = ip_address("10.78.1.1")
HIGH = ip_address("10.78.3.1")


def up(checked: float = NOW - 1.0) -> BackendHealth:
    return BackendHealth(healthy=True, since=0.0, checked_at=checked)


def down(checked: float = NOW - 1.0) -> BackendHealth:
    return BackendHealth(healthy=False, since=0.0, checked_at=checked)


def test_healthy_node_announces_whatever_the_peers() -> None:
    cases: list[Peers] = [{}, {LOW: down()}, {LOW: up(), HIGH: None}]
    for peers in cases:
        assert decide(NOW, False, up(), peers, self_addr=ME) == Decision(True, "healthy")


def test_a_node_joins_only_once_healthy_when_a_peer_serves() -> None:
    assert decide(NOW, False, down(), {LOW: up()}, self_addr=ME) == Decision(False, "waiting")
    assert decide(NOW, False, None, {HIGH: up()}, self_addr=ME) == Decision(False, "waiting")


def test_unhealthy_node_withdraws_while_a_peer_is_healthy() -> None:
    assert decide(NOW, True, down(), {LOW: down(), HIGH: up()}) == Decision(False, "unhealthy")


def test_never_withdraws_when_every_api_server_is_unhealthy() -> None:
    peers: Peers = {LOW: down(), HIGH: None}
    assert decide(NOW, True, down(), peers, self_addr=ME) == Decision(True, "last-resort")


def test_a_stale_healthy_peer_does_not_make_this_node_withdraw() -> None:
    stale: Peers = {LOW: up(checked=NOW - 30.0)}
    assert decide(NOW, True, down(), stale, stale_after=10.0) == Decision(True, "last-resort")
    assert decide(NOW, True, down(), stale, stale_after=60.0) == Decision(False, "unhealthy")
    assert not fresh_healthy(BackendHealth(healthy=True, since=0.0), NOW, 10.0)  # never checked


def test_lone_bootstrap_node_announces_before_its_api_server_is_up() -> None:
    assert decide(NOW, False, None, {}) == Decision(True, "bootstrap")
    assert decide(NOW, False, down(), {}) == Decision(True, "bootstrap")


def test_with_no_one_healthy_only_the_lowest_address_bootstraps() -> None:
    peers: Peers = {ME: None, HIGH: down()}
    assert decide(NOW, False, None, peers, self_addr=LOW) == Decision(True, "bootstrap")
    peers = {LOW: None, HIGH: down()}
    assert decide(NOW, False, None, peers, self_addr=ME) == Decision(False, "waiting")
    assert decide(NOW, False, None, peers, self_addr=None) == Decision(False, "waiting")


def test_every_node_alike_picks_exactly_one_bootstrapper() -> None:
    nodes = [LOW, ME, HIGH]
    picks = [
        decide(NOW, False, None, dict.fromkeys([p for p in nodes if p != n]), self_addr=n)
        for n in nodes
    ]
    assert [d.announce for d in picks] == [True, False, False]


def test_the_endpoint_never_disappears_as_health_comes_and_goes() -> None:
    """Walk three nodes through every joint health state: whatever the order, the nodes
    that announced before still leave at least one announcing after each step."""
    nodes = [LOW, ME, HIGH]
    announcing = {n: False for n in nodes}

    states = list(itertools.product([True, False, None], repeat=3))
    for walk in [states, list(reversed(states)), states[::2] + states[1::2]]:
        for state in walk:
            by_state = {True: up(), False: down(), None: None}
            health = {n: by_state[s] for n, s in zip(nodes, state, strict=True)}
            for n in nodes:
                peers = {p: health[p] for p in nodes if p != n}
                announcing[n] = decide(NOW, announcing[n], health[n], peers, self_addr=n).announce
            assert any(announcing.values()), state
            for n, s in zip(nodes, state, strict=True):
                if s:
                    assert announcing[n], (n, state)


def test_reasons_are_closed() -> None:
    assert set(REASONS) == {"healthy", "unhealthy", "waiting", "last-resort", "bootstrap"}
    with pytest.raises(ValueError, match="reason"):
        Decision(True, "because")
    with pytest.raises(ValueError, match="stale_after"):
        decide(NOW, False, None, {}, stale_after=-1.0)
