"""vipd.lease.logic, giving way: an unhealthy node yields to a healthy peer, never a lone one.

Single-elector cases feed outcomes by hand (fake clock, FAST = 5/3/1 s); the timelines run 3
electors on tests/unit/lease_sim.py's in-memory store, where a node's checker sees "a healthy
peer" when another node's API server is healthy (whether or not that node's vipd runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Address

import pytest

from tests.unit.lease_sim import Sim
from vipd.config import ConfigError
from vipd.lease.logic import Elector
from vipd.lease.model import (
    BecomeFollower,
    BecomeLeader,
    NotFound,
    Ok,
    Params,
    Purpose,
    Record,
    Role,
    Send,
    Unavailable,
    Verb,
)

FAST = dict(duration=5.0, renew_deadline=3.0, retry_period=1.0)


def elector(name: str = "n1") -> Elector:
    return Elector(Params(identity=name, **FAST))  # type: ignore[arg-type]


def sends(actions: Sequence[object]) -> list[Send]:
    return [a for a in actions if isinstance(a, Send)]


def sent(actions: Sequence[object]) -> Send:
    s = sends(actions)
    assert len(s) == 1, actions
    return s[0]


def rec(rv: str, holder: str | None, transitions: int = 0, duration: int | None = 5) -> Record:
    return Record(rv, holder, duration, transitions, "acq", "ren")


def lead(e: Elector, now: float = 0.0, healthy: bool = True, peer: bool = False) -> None:
    s = sent(e.poll(now, healthy, peer_healthy=peer))
    s = sent(e.on_result(now, s.request.id, NotFound(), healthy, peer))
    assert s.request.verb is Verb.CREATE
    acts = e.on_result(now, s.request.id, Ok(rec("1", e.params.identity)), healthy, peer)
    assert any(isinstance(a, BecomeLeader) for a in acts) and e.role is Role.LEADER


# -- the leader ---------------------------------------------------------------------------------


def test_unhealthy_leader_with_a_healthy_peer_releases_at_once() -> None:
    e = elector("n1")
    lead(e, 0.0)
    # Mid-period (next renewal due at 1.0): local health turns bad, a peer is healthy.
    s = sent(e.poll(0.4, False, peer_healthy=True))
    r = s.request
    assert (r.verb, r.purpose, r.holder, r.duration_seconds) == (
        Verb.UPDATE,
        Purpose.YIELD,
        None,
        1,
    )
    assert r.resource_version == "1" and r.transitions == 0
    acts = e.on_result(0.41, r.id, Ok(rec("2", None, duration=1)), False, True)
    (down,) = acts
    assert isinstance(down, BecomeFollower) and "unhealthy" in down.reason
    assert e.role is Role.FOLLOWER and not e.leader and e.stats_yields == 1


def test_unhealthy_lone_leader_keeps_renewing() -> None:
    e = elector("n1")
    lead(e, 0.0, healthy=False, peer=False)
    for t in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
        s = sent(e.poll(t, False, peer_healthy=False))
        assert s.request.purpose is Purpose.RENEW
        acts = e.on_result(t, s.request.id, Ok(rec(str(int(t * 10)), "n1")), False, False)
        assert not acts
    assert e.role is Role.LEADER


def test_healthy_leader_ignores_peers() -> None:
    e = elector("n1")
    lead(e, 0.0)
    s = sent(e.poll(1.0, True, peer_healthy=True))
    assert s.request.purpose is Purpose.RENEW


def test_failed_release_counts_as_a_failed_renewal_and_is_retried_each_period() -> None:
    e = elector("n1")
    lead(e, 0.0)
    s = sent(e.poll(0.5, False, peer_healthy=True))
    assert s.request.purpose is Purpose.YIELD
    assert not e.on_result(0.5, s.request.id, Unavailable(503), False, True)
    assert e.role is Role.LEADER and e.failures == ["http-503"]
    # No retry storm: nothing until the next period.
    assert not sends(e.poll(0.75, False, peer_healthy=True))
    s = sent(e.poll(1.5, False, peer_healthy=True))
    assert s.request.purpose is Purpose.YIELD
    # Still failing at the renew deadline (3 s after the last good renewal): the leader steps
    # down like client-go (a healthy peer is no evidence that nobody else can lead).
    assert not e.on_result(1.5, s.request.id, Unavailable(503), False, True)
    s = sent(e.poll(2.5, False, peer_healthy=True))
    e.on_result(2.5, s.request.id, Unavailable(503), False, True)
    acts = e.poll(3.0, False, peer_healthy=True)
    assert any(isinstance(a, BecomeFollower) for a in acts)
    assert not e.leader


def test_lone_holding_leader_keeps_the_vip_when_unhealthy() -> None:
    """A lone node (no peers at all) holding through a store outage: nobody else can lead,
    so its own health changes nothing (as a lone bootstrap node keeps the VIP)."""
    e = elector("n1")
    lead(e, 0.0)
    e.observe_peers(0.0, {})
    t = 0.0
    while e.role is Role.LEADER:
        t += 0.25
        for s in sends(e.poll(t, True)):
            e.on_result(t, s.request.id, Unavailable(503), True)
    assert e.role is Role.HOLDING
    acts = e.poll(t + 0.1, False, peer_healthy=False)
    assert not any(isinstance(a, BecomeFollower) for a in acts) and e.leader


# -- the follower -------------------------------------------------------------------------------


def read(e: Elector, now: float, record: Record, healthy: bool, peer: bool) -> list[Send]:
    s = sent(e.poll(now, healthy, peer_healthy=peer))
    assert s.request.verb is Verb.GET
    return sends(e.on_result(now, s.request.id, Ok(record), healthy, peer))


def test_unhealthy_follower_with_a_healthy_peer_does_not_take_a_free_lease() -> None:
    e = elector("n2")
    free = rec("9", None, transitions=1, duration=1)
    assert not read(e, 0.0, free, False, True)
    assert not read(e, 1.0, free, False, True)
    assert not read(e, 4.0, free, False, True)
    assert e.role is Role.FOLLOWER
    # One duration after it first found it free, nobody healthy took it: take it and keep it.
    assert e.wake_at <= 5.0
    (s,) = read(e, 5.0, free, False, True)
    assert s.request.purpose is Purpose.ACQUIRE
    acts = e.on_result(5.0, s.request.id, Ok(rec("10", "n2", 2)), False, True)
    assert any(isinstance(a, BecomeLeader) for a in acts) and e.keep_unhealthy
    # Kept: renewals, no second release while still unhealthy (no flapping).
    s = sent(e.poll(6.0, False, peer_healthy=True))
    assert s.request.purpose is Purpose.RENEW


def test_unhealthy_follower_with_a_healthy_peer_does_not_create_a_missing_lease() -> None:
    e = elector("n2")
    s = sent(e.poll(0.0, False, peer_healthy=True))
    assert not sends(e.on_result(0.0, s.request.id, NotFound(), False, True))
    s = sent(e.poll(5.0, False, peer_healthy=True))
    assert sent(e.on_result(5.0, s.request.id, NotFound(), False, True)).request.verb is (
        Verb.CREATE
    )


def test_unhealthy_lone_follower_acquires_after_expiry() -> None:
    e = elector("n2")
    held = rec("7", "n1", transitions=3)
    for t in (0.0, 1.0, 2.0, 3.0, 4.0):
        assert not read(e, t, held, False, False)
    (s,) = read(e, 5.0, held, False, False)  # expired by its own observation: steal
    assert s.request.purpose is Purpose.ACQUIRE and s.request.transitions == 4


def test_unhealthy_lone_node_creates_the_lease_at_once() -> None:
    e = elector("n1")
    lead(e, 0.0, healthy=False, peer=False)  # kubeadm init: the VIP before the API server


def test_a_window_ends_when_someone_takes_the_lease() -> None:
    e = elector("n3")
    free = rec("9", None, duration=1)
    assert not read(e, 0.0, free, False, True)
    assert e.takeable_since == 0.0
    assert not read(e, 1.0, rec("10", "n2", 1), False, True)
    assert e.takeable_since is None


def test_recovered_follower_takes_a_free_lease_at_once() -> None:
    e = elector("n2")
    free = rec("9", None, duration=1)
    assert not read(e, 0.0, free, False, True)
    (s,) = read(e, 1.0, free, True, True)
    assert s.request.purpose is Purpose.ACQUIRE


def test_recovery_resets_keep_so_the_next_spell_gives_way_again() -> None:
    e = elector("n2")
    free = rec("9", None, duration=1)
    assert not read(e, 0.0, free, False, True)
    (s,) = read(e, 5.0, free, False, True)
    e.on_result(5.0, s.request.id, Ok(rec("10", "n2", 1)), False, True)
    assert e.leader and e.keep_unhealthy
    s = sent(e.poll(6.0, True, peer_healthy=True))  # recovered: an ordinary leader again
    assert s.request.purpose is Purpose.RENEW and not e.keep_unhealthy
    e.on_result(6.0, s.request.id, Ok(rec("11", "n2", 1)), True, True)
    s = sent(e.poll(6.5, False, peer_healthy=True))  # a new unhealthy spell
    assert s.request.purpose is Purpose.YIELD


# -- timelines ----------------------------------------------------------------------------------


def test_timeline_leader_api_dies_vip_moves_to_a_healthy_node_within_a_retry_period() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(10.3)
    (old,) = sim.leaders()
    sim.set_health(old, False)  # after `fall`: the checker's verdict
    t0 = sim.now
    sim.run_until(30.0)
    took = sim.first_leader_after(t0)
    assert took is not None
    t, new = took
    assert new != old and sim.nodes[new].health
    assert t - t0 <= 1.0 + 0.02  # one retry period (the peer's next read) + round trips
    assert sim.leaders() == [new]  # and it stays there: nobody moves back
    assert not sim.overlaps()
    # Recovery changes nothing (no preemption in Lease mode).
    sim.set_health(old, True)
    sim.run_until(40.0)
    assert sim.leaders() == [new] and not sim.overlaps()


def test_timeline_lone_node_keeps_the_vip_unhealthy_and_hands_it_to_a_healthy_joiner() -> None:
    sim = Sim(["n1", "n2"])
    sim.nodes["n2"].alive = False  # not started yet
    sim.nodes["n2"].health = False
    sim.nodes["n1"].health = False  # kubeadm init: no API server anywhere yet
    sim.run_until(20.0)
    assert sim.leaders() == ["n1"]  # lone and unhealthy: takes the VIP, keeps it
    assert sim.became_leader("n1", 0.0) is not None
    assert sim.became_leader("n1", 0.0) <= 0.01  # type: ignore[operator]
    # n2 joins with a healthy API server: n1 gives way to it.
    sim.nodes["n2"].alive = True
    sim.set_health("n2", True)
    sim.run_until(40.0)
    assert sim.leaders() == ["n2"]
    assert not sim.overlaps()


def test_timeline_healthy_peer_without_vipd_gets_the_lease_back_after_one_duration() -> None:
    sim = Sim(["n1", "n2"])
    sim.run_until(5.3)
    (old,) = sim.leaders()
    other = "n2" if old == "n1" else "n1"
    sim.kill(other)  # its vipd is gone, its API server still answers: "a healthy peer"
    sim.set_health(old, False)
    t0 = sim.now
    sim.run_until(30.0)
    assert sim.leaders() == [old]  # gave way once, took it back, keeps it: no flapping
    back = sim.became_leader(old, t0)
    assert back is not None and 5.0 <= back - t0 <= 5.0 + 1.0 + 0.05
    assert sum(1 for _, n, leader in sim.timeline if n == old and not leader) == 1


def test_timeline_every_api_server_down_nobody_gives_way() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(5.3)
    (old,) = sim.leaders()
    for n in ("n1", "n2", "n3"):
        sim.nodes[n].health = False
    sim.set_health(old, False)
    sim.run_until(30.0)
    assert sim.leaders() == [old]
    assert sum(1 for _, n, leader in sim.timeline if not leader) == 0


# -- configuration --------------------------------------------------------------------------------


def _cfg(health: dict[str, object], mode: str = "lease") -> dict[str, object]:
    election: dict[str, object] = {"mode": mode}
    if mode == "vrrp":
        election["vrrp"] = {"vrid": 51}
    return {"node": "n1", "vip": "10.0.0.100", "election": election, "health": health}


def test_health_path_takes_kube_apiservers_exclude_query() -> None:
    from vipd.config import parse
    from vipd.health.http import request, valid_path

    for ok in ("/readyz", "/readyz?exclude=etcd", "/livez?exclude=etcd&exclude=ping",
               "/healthz?exclude=poststarthook/rbac"):  # fmt: skip
        assert valid_path(ok), ok
        assert parse(_cfg({"path": ok})).health.path == ok  # type: ignore[union-attr]
    assert request(IPv4Address("127.0.0.1"), 6443, "/readyz?exclude=etcd", "vipd").startswith(
        b"GET /readyz?exclude=etcd HTTP/1.1\r\n"
    )
    for bad in ("/readyz?", "/readyz?verbose", "/readyz?exclude=", "/readyz?exclude=etcd&",
                "/metrics?exclude=etcd", "/readyz?exclude=a b", "/readyz#x"):  # fmt: skip
        assert not valid_path(bad), bad
        with pytest.raises(ConfigError, match=r"health\.path: must be"):
            parse(_cfg({"path": bad}))


def test_health_peers_is_a_lease_mode_list_of_node_addresses() -> None:
    from vipd.config import parse

    cfg = parse(_cfg({"peers": ["10.0.0.11", "10.0.0.12"]}))
    assert cfg.health is not None
    assert cfg.health.peers == (IPv4Address("10.0.0.11"), IPv4Address("10.0.0.12"))
    assert parse(_cfg({})).health.peers == ()  # type: ignore[union-attr]
    assert parse(_cfg({"peers": []}, mode="vrrp")).health.peers == ()  # type: ignore[union-attr]
    for peers, why in (
        (["10.0.0.11"], "only used with election.mode: lease"),
        ("10.0.0.11", "must be a list"),
        (["10.0.0.100"], "must not be the VIP"),
        (["10.0.0.11", "10.0.0.11"], "is listed twice"),
        (["fe80::1"], "must be an IPv4 address"),
    ):
        mode = "vrrp" if "lease" in why else "lease"
        with pytest.raises(ConfigError, match=r"health\.peers") as exc:
            parse(_cfg({"peers": peers}, mode=mode))
        assert why in str(exc.value)
