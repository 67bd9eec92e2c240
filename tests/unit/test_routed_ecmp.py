"""vipd.routed.ecmp: the announce-or-not pool rule, one node's view."""

from __future__ import annotations

import itertools
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from vipd.health.tracker import BackendHealth, Outcome, Tracker
from vipd.routed.ecmp import REASONS, Decision, decide, serving

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
        assert decide(NOW, False, up(), peers) == Decision(True, "healthy")


def test_a_node_joins_only_once_healthy_when_a_peer_serves() -> None:
    assert decide(NOW, False, down(), {LOW: up()}) == Decision(False, "waiting")
    assert decide(NOW, False, None, {HIGH: up()}) == Decision(False, "waiting")


def test_unhealthy_node_withdraws_while_a_peer_is_healthy() -> None:
    assert decide(NOW, True, down(), {LOW: down(), HIGH: up()}) == Decision(False, "unhealthy")


def test_never_withdraws_when_every_api_server_is_unhealthy() -> None:
    peers: Peers = {LOW: down(), HIGH: None}
    assert decide(NOW, True, down(), peers) == Decision(True, "last-resort")


def test_a_stale_healthy_peer_does_not_make_this_node_withdraw() -> None:
    stale: Peers = {LOW: up(checked=NOW - 30.0)}
    assert decide(NOW, True, down(), stale, stale_after=10.0) == Decision(True, "last-resort")
    assert decide(NOW, True, down(), stale, stale_after=60.0) == Decision(False, "unhealthy")
    assert not serving(BackendHealth(healthy=True, since=0.0), NOW, 10.0)  # never checked


def test_lone_bootstrap_node_announces_before_its_api_server_is_up() -> None:
    assert decide(NOW, False, None, {}) == Decision(True, "bootstrap")
    assert decide(NOW, False, down(), {}) == Decision(True, "bootstrap")


def test_simultaneous_failure_everyone_keeps_announcing() -> None:
    """An etcd outage: every API server fails at once. This node's own failure began at 95;
    a peer still marked healthy but already failing checks (inside its fall count), or whose
    last good check predates this node's failure, does not make it withdraw."""
    local = BackendHealth(healthy=False, since=95.0, checked_at=99.0, failures=3)
    failing = BackendHealth(healthy=True, since=0.0, checked_at=99.0, failures=1)
    old_news = BackendHealth(healthy=True, since=0.0, checked_at=94.0)
    peers: Peers = {LOW: failing, HIGH: old_news}
    assert decide(NOW, True, local, peers) == Decision(True, "last-resort")
    seen_after = BackendHealth(healthy=True, since=0.0, checked_at=96.0)
    assert decide(NOW, True, local, {LOW: seen_after}) == Decision(False, "unhealthy")


def test_with_peers_but_no_one_healthy_a_withdrawn_node_does_not_join() -> None:
    # It would only add an unhealthy path; whoever still announces keeps doing so.
    peers: Peers = {LOW: None, HIGH: down()}
    assert decide(NOW, False, None, peers) == Decision(False, "waiting")
    assert decide(NOW, False, down(), peers) == Decision(False, "waiting")


def test_the_endpoint_never_disappears_once_it_appeared() -> None:
    """Walk three nodes through every joint health state in several orders: once a node has
    announced, some node announces after every step, and every healthy node does."""
    nodes = [LOW, ME, HIGH]
    states = list(itertools.product([True, False, None], repeat=3))
    by_state = {True: up(), False: down(), None: None}
    for walk in [states, list(reversed(states)), states[::2] + states[1::2], states[::-3]]:
        announcing = dict.fromkeys(nodes, False)
        appeared = False
        for state in walk:
            health = {n: by_state[s] for n, s in zip(nodes, state, strict=True)}
            for n in nodes:
                peers = {p: health[p] for p in nodes if p != n}
                announcing[n] = decide(NOW, announcing[n], health[n], peers).announce
            appeared = appeared or any(announcing.values())
            assert any(announcing.values()) or not appeared, state
            for n, s in zip(nodes, state, strict=True):
                assert announcing[n] == bool(s) or not any(state), (n, state)


def test_reasons_are_closed() -> None:
    assert set(REASONS) == {"healthy", "unhealthy", "waiting", "last-resort", "bootstrap"}
    with pytest.raises(ValueError, match="reason"):
        Decision(True, "because")
    with pytest.raises(ValueError, match="stale_after"):
        decide(NOW, False, None, {}, stale_after=0.0)


@pytest.mark.parametrize(
    ("phases", "outage"),
    [((0.0, 0.0, 0.0), 19.95), ((0.0, 0.3, 0.7), 20.2), ((0.9, 0.1, 0.5), 20.05)],
)
def test_an_etcd_outage_with_checkers_out_of_phase_keeps_the_endpoint(
    phases: tuple[float, float, float], outage: float
) -> None:
    """Three nodes, each checking each API server once a second (rise 2, fall 3) on its own
    schedule (its own phase; itself, then each peer 0.3 s later); every API server fails at
    ``outage`` and LOW's comes back 20 s later. A node decides after each check it makes.
    The endpoint never disappears, and at the end only LOW, the healthy one, announces. In
    the first case every node learns of its own failure before its peers' (a rule that
    trusted a peer's "healthy" alone withdrew all three there)."""
    nodes = [LOW, ME, HIGH]
    # trackers[viewer][target]: what node ``viewer``'s checker knows of ``target``.
    trackers = {v: {t: Tracker(rise=2, fall=3, now=0.0) for t in nodes} for v in nodes}
    announcing = dict.fromkeys(nodes, False)
    events = sorted(
        (round(k + phases[i] + 0.3 * ((j - i) % 3), 3), i, j)
        for k in range(60)
        for i in range(3)
        for j in range(3)
    )
    appeared = False
    for now, i, j in events:
        viewer, target = nodes[i], nodes[j]
        up_now = now < outage or (now >= outage + 20 and target == LOW)
        trackers[viewer][target].record(now, Outcome(ok=up_now))
        view = {t: trackers[viewer][t].state for t in nodes}
        peers: Peers = {t: view[t] for t in nodes if t != viewer}
        announcing[viewer] = decide(now, announcing[viewer], view[viewer], peers).announce
        appeared = appeared or any(announcing.values())
        assert any(announcing.values()) or not appeared, (now, announcing)
    assert announcing == {LOW: True, ME: False, HIGH: False}
