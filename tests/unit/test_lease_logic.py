"""vipd.lease.logic: every decision case, on a fake clock, without a server.

The single-elector tests feed outcomes by hand; the timeline tests run 3 electors against an
in-memory store (tests/unit/lease_sim.py) and check the invariant on the whole timeline: never
two leaders at the same instant.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from tests.unit.lease_sim import Sim
from vipd.lease.logic import Elector
from vipd.lease.model import (
    REASON_LABELS,
    BecomeFollower,
    BecomeLeader,
    Conflict,
    Hold,
    NotFound,
    Ok,
    Outcome,
    Params,
    PeerState,
    Purpose,
    Record,
    Rejected,
    Role,
    Send,
    Unavailable,
    Unreachable,
    Verb,
    validate_timing,
)

FAST = dict(duration=5.0, renew_deadline=3.0, retry_period=1.0)


def elector(name: str = "n1", **kw: object) -> Elector:
    args: dict[str, object] = {**FAST, **kw}
    return Elector(Params(identity=name, **args))  # type: ignore[arg-type]


def sent(actions: Sequence[object]) -> Send:
    sends = [a for a in actions if isinstance(a, Send)]
    assert len(sends) == 1, actions
    return sends[0]


def rec(rv: str, holder: str | None, transitions: int = 0, duration: int | None = 5) -> Record:
    return Record(rv, holder, duration, transitions, "acq", "ren")


def lead(e: Elector, now: float = 0.0) -> None:
    """Make ``e`` the leader through a create."""
    s = sent(e.poll(now, True))
    assert s.request.verb is Verb.GET
    s = sent(e.on_result(now, s.request.id, NotFound(), True))
    assert s.request.verb is Verb.CREATE and s.request.holder == e.params.identity
    acts = e.on_result(now, s.request.id, Ok(rec("1", e.params.identity)), True)
    assert any(isinstance(a, BecomeLeader) for a in acts)
    assert e.role is Role.LEADER


# -- timing validation -------------------------------------------------------------------------


def test_timing_rule_is_client_gos() -> None:
    assert validate_timing(15, 10, 2) is None
    assert validate_timing(5, 3, 1) is None
    assert "1.2" in str(validate_timing(1, 1, 1))  # kube-vip #924: "1/1/1" fails
    assert "renew_deadline" in str(validate_timing(10, 10, 2))
    assert validate_timing(5, 3, 2.5) is not None  # 3 > 1.2 × 2.5 is false
    with pytest.raises(ValueError):
        Params(identity="n1", duration=3, renew_deadline=3, retry_period=1)


# -- single elector: acquire, renew, conflict, steal, release ----------------------------------


def test_create_when_missing_then_renew_every_retry_period() -> None:
    e = elector()
    lead(e, 0.0)
    assert e.wake_at == pytest.approx(1.0)
    s = sent(e.poll(1.0, True))
    assert (s.request.verb, s.request.purpose) == (Verb.UPDATE, Purpose.RENEW)
    assert s.request.resource_version == "1"  # optimistic: the version we know, no read first
    assert s.request.timeout <= 3.0  # answered before the renew deadline or abandoned
    e.on_result(1.01, s.request.id, Ok(rec("2", "n1")), True)
    assert e.wake_at == pytest.approx(2.0)  # from when the renewal was sent
    assert e.renew_deadline_at == pytest.approx(4.0)


def test_follower_waits_for_expiry_by_its_own_observation_then_steals() -> None:
    e = elector("n2")
    s = sent(e.poll(100.0, True))
    acts = e.on_result(100.0, s.request.id, Ok(rec("7", "n1", transitions=3)), True)
    assert not acts and e.role is Role.FOLLOWER
    assert e.wake_at == pytest.approx(100.0 + 1.0 * (1 - 0.0))
    # The same record again and again: validity counts from the first sighting (t=100).
    for t in (101.0, 102.0, 103.0, 104.0):
        s = sent(e.poll(t, True))
        assert s.request.verb is Verb.GET
        assert not e.on_result(t, s.request.id, Ok(rec("7", "n1", transitions=3)), True)
    assert e.expires_at() == pytest.approx(105.0)
    assert e.wake_at == pytest.approx(105.0)  # wakes exactly at expiry, not a period later
    s = sent(e.poll(105.0, True))
    s = sent(e.on_result(105.0, s.request.id, Ok(rec("7", "n1", transitions=3)), True))
    r = s.request
    assert (r.verb, r.purpose, r.holder, r.resource_version) == (
        Verb.UPDATE,
        Purpose.ACQUIRE,
        "n2",
        "7",
    )
    assert r.transitions == 4 and r.stamp_acquire
    acts = e.on_result(105.01, r.id, Ok(rec("8", "n2", transitions=4)), True)
    assert isinstance(acts[-1], BecomeLeader) and e.leader


def test_a_renewed_record_restarts_the_followers_clock() -> None:
    e = elector("n2")
    s = sent(e.poll(0.0, True))
    e.on_result(0.0, s.request.id, Ok(rec("7", "n1")), True)
    s = sent(e.poll(1.0, True))
    e.on_result(1.0, s.request.id, Ok(rec("8", "n1")), True)  # n1 renewed
    assert e.expires_at() == pytest.approx(6.0)


def test_remote_timestamps_never_matter() -> None:
    """A record whose renewTime is a year old (skewed writer) is still valid when fresh here."""
    e = elector("n2")
    old = Record("9", "n1", 5, 0, "2025-01-01T00:00:00.000000Z", "2025-01-01T00:00:00.000000Z")
    s = sent(e.poll(50.0, True))
    assert not e.on_result(50.0, s.request.id, Ok(old), True)
    assert e.holder_visible(54.9) == "n1" and e.holder_visible(55.0) is None


def test_released_lease_is_taken_at_once_and_counts_a_transition() -> None:
    e = elector("n2")
    s = sent(e.poll(0.0, True))
    s = sent(e.on_result(0.0, s.request.id, Ok(rec("3", None, transitions=2, duration=1)), True))
    assert s.request.purpose is Purpose.ACQUIRE and s.request.transitions == 3


def test_own_record_after_restart_is_renewed_keeping_acquire_time_and_transitions() -> None:
    e = elector("n1")
    s = sent(e.poll(0.0, True))
    s = sent(e.on_result(0.0, s.request.id, Ok(rec("4", "n1", transitions=6)), True))
    r = s.request
    assert r.purpose is Purpose.ACQUIRE and r.transitions == 6
    assert not r.stamp_acquire and r.acquire_time == "acq"


def test_conflict_reads_once_then_follows_the_new_holder() -> None:
    e = elector()
    lead(e)
    s = sent(e.poll(1.0, True))
    s2 = sent(e.on_result(1.0, s.request.id, Conflict(), True))
    assert s2.request.verb is Verb.GET  # read at once: conflicts are normal
    acts = e.on_result(1.0, s2.request.id, Ok(rec("5", "n3")), True)
    assert isinstance(acts[0], BecomeFollower) and "n3" in acts[0].reason
    assert e.role is Role.FOLLOWER


def test_conflict_on_our_own_record_renews_on_the_fresh_version() -> None:
    e = elector()
    lead(e)
    s = sent(e.poll(1.0, True))
    s2 = sent(e.on_result(1.0, s.request.id, Conflict(), True))
    s3 = sent(e.on_result(1.0, s2.request.id, Ok(rec("5", "n1")), True))  # someone edited a label
    assert s3.request.purpose is Purpose.RENEW and s3.request.resource_version == "5"
    assert e.leader


def test_create_race_lost_reads_and_follows() -> None:
    e = elector("n2")
    s = sent(e.poll(0.0, True))
    s = sent(e.on_result(0.0, s.request.id, NotFound(), True))
    s = sent(e.on_result(0.0, s.request.id, Conflict(), True))  # AlreadyExists
    assert s.request.verb is Verb.GET
    assert not e.on_result(0.0, s.request.id, Ok(rec("1", "n1")), True)
    assert e.role is Role.FOLLOWER


def test_stale_answer_to_an_abandoned_request_is_ignored() -> None:
    e = elector()
    lead(e)
    s = sent(e.poll(1.0, True))
    late = s.request.id
    acts = e.poll(1.0 + s.request.timeout, True)  # abandoned
    assert not any(isinstance(a, BecomeFollower) for a in acts)
    assert e.on_result(5.0, late, Ok(rec("9", "n1")), True) == []


# -- the renew deadline --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure", [Unreachable("timed out"), Rejected(403, "forbidden"), Unreachable("refused")]
)
def test_leader_steps_down_at_the_renew_deadline(failure: Outcome) -> None:
    e = elector()
    lead(e)  # renewal sent at t=0: deadline t=3
    t = 1.0
    while e.role is Role.LEADER:
        acts = e.poll(t, True)
        for a in acts:
            if isinstance(a, Send):
                acts += e.on_result(t + 0.01, a.request.id, failure, True)
        if e.role is not Role.LEADER:
            assert any(isinstance(a, BecomeFollower) for a in acts)
            break
        t = max(e.wake_at, t + 0.001)
    assert t == pytest.approx(3.0, abs=0.02)


def test_stalled_renewal_is_abandoned_at_the_deadline_not_after() -> None:
    e = elector()
    lead(e)
    s = sent(e.poll(2.5, True))  # a renewal sent 0.5 s before the deadline
    assert s.request.timeout == pytest.approx(0.5)
    assert e.wake_at == pytest.approx(3.0)
    acts = e.poll(3.0, True)
    assert any(isinstance(a, BecomeFollower) for a in acts)


# -- the unreachable-store rule (both sides) ----------------------------------------------------


NOT_READY = {"n2": PeerState.NOT_READY, "n3": PeerState.NOT_READY}


def _fail_until_deadline(e: Elector, outcome: Outcome, healthy: bool = True) -> list[object]:
    seen: list[object] = []
    t = 1.0
    while t < 3.5:
        acts = e.poll(t, healthy)
        for a in list(acts):
            if isinstance(a, Send):
                acts += e.on_result(t, a.request.id, outcome, healthy)
        seen += acts
        t += 0.25
    return seen


def test_store_down_everywhere_the_leader_keeps_the_vip() -> None:
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)  # every peer's etcd check fails: nobody can write
    seen = _fail_until_deadline(e, Unavailable(503, "etcdserver: request timed out"))
    assert any(isinstance(a, Hold) for a in seen)
    assert not any(isinstance(a, BecomeFollower) for a in seen)
    assert e.role is Role.HOLDING and e.leader
    # While holding it reads first, every retry period, to see another holder at once.
    s = sent(e.poll(e.wake_at, True))
    assert s.request.verb is Verb.GET
    acts = e.on_result(e.wake_at, s.request.id, Ok(rec("1", "n1")), True)
    s = sent(acts)
    assert s.request.purpose is Purpose.RENEW
    acts = e.on_result(e.wake_at, s.request.id, Ok(rec("2", "n1")), True)
    assert isinstance(acts[-1], BecomeLeader)
    assert e.role.value == "leader"  # an ordinary leader again (mypy narrowed it to HOLDING)


def test_holding_leader_gives_up_at_once_when_another_holder_appears() -> None:
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    _fail_until_deadline(e, Unavailable(500))
    assert e.role is Role.HOLDING
    t = e.wake_at
    s = sent(e.poll(t, True))
    acts = e.on_result(t, s.request.id, Ok(rec("9", "n2")), True)
    assert isinstance(acts[0], BecomeFollower) and "n2" in acts[0].reason
    assert not e.leader


def test_holding_leader_keeps_the_vip_with_its_own_api_server_unhealthy_too() -> None:
    """The peers' API servers fail their etcd check, so does ours: the VIP here is as good
    as anywhere, and nobody can take the Lease."""
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    _fail_until_deadline(e, Unavailable(503), healthy=False)
    assert e.role is Role.HOLDING
    assert not any(isinstance(a, BecomeFollower) for a in e.poll(e.wake_at - 0.5, False))


def test_holding_leader_keeps_the_vip_when_its_own_calls_time_out() -> None:
    """In a whole-store outage the local API server often answers nothing before the
    request timeout: the evidence is the peers', not the kind of our own failures."""
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    _fail_until_deadline(e, Unreachable("timed out"))
    assert e.role is Role.HOLDING
    s = sent(e.poll(e.wake_at, True))
    acts = e.on_result(e.wake_at, s.request.id, Unreachable("connection refused"), True)
    assert not any(isinstance(a, BecomeFollower) for a in acts) and e.leader


def test_holding_leader_gets_one_last_round_when_a_peer_turns_ready() -> None:
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    _fail_until_deadline(e, Unavailable(503))
    assert e.role is Role.HOLDING
    t = e.wake_at - 0.5
    assert e.observe_peers(t, {**NOT_READY, "n3": PeerState.READY}) == []
    s = sent(e.poll(t, True))  # at once, not a retry period later
    assert s.request.verb is Verb.GET
    acts = e.on_result(t, s.request.id, Unavailable(503), True)
    assert [a.label for a in acts if isinstance(a, BecomeFollower)] == ["store-down-ended"]


def test_holding_leader_renews_in_its_last_round_and_leads_on() -> None:
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    _fail_until_deadline(e, Unavailable(503))
    t = e.wake_at - 0.5
    e.observe_peers(t, {"n2": PeerState.READY, "n3": PeerState.READY})
    s = sent(e.poll(t, True))
    s = sent(e.on_result(t, s.request.id, Ok(rec("1", "n1")), True))
    acts = e.on_result(t, s.request.id, Ok(rec("2", "n1")), True)
    assert [a.label for a in acts if isinstance(a, BecomeLeader)] == ["store-back"]


def test_holding_leader_steps_down_when_its_last_round_runs_out() -> None:
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    _fail_until_deadline(e, Unavailable(503))
    t = e.wake_at - 0.5
    e.observe_peers(t, {"n2": PeerState.READY, "n3": PeerState.READY})
    sent(e.poll(t, True))  # never answered
    acts = e.poll(t + (5.0 - 3.0), True)
    assert any(isinstance(a, BecomeFollower) for a in acts)


def test_store_down_without_evidence_steps_down_at_the_deadline() -> None:
    """5xx answers alone are no evidence: this node's etcd member may be the only one cut
    off from the quorum, and the peers may be writing the Lease."""
    e = elector()
    lead(e)
    e.observe_peers(0.5, {"n2": PeerState.READY, "n3": PeerState.NOT_READY})
    seen = _fail_until_deadline(e, Unavailable(503))
    assert any(isinstance(a, BecomeFollower) for a in seen)
    assert not any(isinstance(a, Hold) for a in seen)


def test_rule_off_steps_down_like_client_go() -> None:
    e = elector(keep_on_unreachable=False)
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    seen = _fail_until_deadline(e, Unavailable(503))
    assert any(isinstance(a, BecomeFollower) for a in seen) and not e.leader


def test_unreachable_peers_are_no_evidence() -> None:
    e = elector()
    lead(e)
    e.observe_peers(0.5, {"n2": PeerState.UNREACHABLE, "n3": PeerState.NOT_READY})
    seq: Iterator[Outcome] = iter([Unavailable(503), Unreachable("timed out")] * 10)
    seen: list[object] = []
    t = 1.0
    while t < 3.5:
        acts = e.poll(t, True)
        for a in list(acts):
            if isinstance(a, Send):
                acts += e.on_result(t, a.request.id, next(seq), True)
        seen += acts
        t += 0.25
    assert any(isinstance(a, BecomeFollower) for a in seen) and not e.leader


def test_a_lone_node_has_evidence_until_it_sees_another_holder() -> None:
    e = elector()
    lead(e)
    e.observe_peers(0.5, {})
    assert e.evidence(0.5) == "no peers: a lone node"
    s = sent(e.poll(1.0, True))
    s2 = sent(e.on_result(1.0, s.request.id, Conflict(), True))
    e.on_result(1.0, s2.request.id, Ok(rec("5", "n3")), True)  # another node exists after all
    assert e.evidence(1.0) is None


def test_follower_blind_for_a_renew_deadline_counts_the_record_as_new() -> None:
    e = elector("n2")
    s = sent(e.poll(0.0, True))
    e.on_result(0.0, s.request.id, Ok(rec("7", "n1")), True)
    for t in (1.0, 2.0, 3.0):
        s = sent(e.poll(t, True))
        e.on_result(t, s.request.id, Unavailable(503), True)
    s = sent(e.poll(4.0, True))
    e.on_result(4.0, s.request.id, Ok(rec("7", "n1")), True)
    assert e.expires_at() == pytest.approx(9.0)  # not 5.0: the holder may have been holding


def test_any_failed_request_restarts_the_followers_clock() -> None:
    """Even a short blind spell: a leader may have held on evidence that included this very
    node answering not ready, so the record counts from the next good read."""
    e = elector("n2")
    s = sent(e.poll(0.0, True))
    e.on_result(0.0, s.request.id, Ok(rec("7", "n1")), True)
    s = sent(e.poll(1.0, True))
    e.on_result(1.0, s.request.id, Unavailable(503), True)
    s = sent(e.poll(2.0, True))
    e.on_result(2.0, s.request.id, Ok(rec("7", "n1")), True)
    assert e.expires_at() == pytest.approx(7.0)


def test_reads_that_never_fail_keep_the_original_clock() -> None:
    e = elector("n2")
    for t in (0.0, 1.0, 2.0):
        s = sent(e.poll(t, True))
        e.on_result(t, s.request.id, Ok(rec("7", "n1")), True)
    assert e.expires_at() == pytest.approx(5.0)


# -- release -------------------------------------------------------------------------------------


def test_release_clears_the_holder_and_steps_down_when_answered() -> None:
    e = elector()
    lead(e)
    acts = e.release(0.5, timeout=1.0)
    r = sent(acts).request
    assert (r.purpose, r.holder, r.duration_seconds, r.resource_version) == (
        Purpose.RELEASE,
        None,
        1,
        "1",
    )
    assert e.leader  # the VIP stays until the release is answered (make-before-break)
    acts = e.on_result(0.51, r.id, Ok(rec("2", None, duration=1)), True)
    assert isinstance(acts[0], BecomeFollower) and not e.leader
    assert e.poll(10.0, True) == []  # done for good


def test_release_as_follower_sends_nothing() -> None:
    e = elector("n2")
    assert e.release(0.0, 1.0) == [] and e.released


def test_release_as_follower_with_a_read_in_flight_is_done_at_once() -> None:
    """Nothing pending may keep a stopped elector asking to be polled (the driver would
    spin on a wake-up time in the past)."""
    e = elector("n2")
    r = sent(e.poll(0.0, True)).request
    assert e.release(0.5, 1.0) == [] and e.released and e.pending is None
    assert e.on_result(0.6, r.id, Ok(rec("1", "n1")), True) == []
    assert e.poll(5.0, True) == []


# -- three electors on a timeline ----------------------------------------------------------------


def test_three_nodes_elect_one_and_renewals_keep_it() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(30.0)
    assert len(sim.leaders()) == 1
    assert not sim.overlaps()
    leader = sim.leaders()[0]
    writes = [w for w in sim.store.writes if w[1] == leader and w[0] > 10.0]
    assert 19 <= len(writes) <= 21  # one renewal per retry period (1 s) over 20 s


def test_node_death_takeover_within_duration_plus_retry() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(10.3)
    old = sim.leaders()[0]
    last_renewal = max(w[0] for w in sim.store.writes if w[1] == old)
    sim.kill(old)
    sim.run_until(30.0)
    took = sim.first_leader_after(10.3)
    assert took is not None
    t, new = took
    assert new != old
    # Not before the Lease expired by the new leader's observation, and at most one retry
    # period (plus round trips) after that.
    assert last_renewal + 5.0 <= t <= last_renewal + 5.0 + 1.0 + 0.02
    assert sim.store.record is not None and sim.store.record.transitions == 1
    assert not sim.overlaps()


def test_graceful_stop_takeover_within_one_retry_period() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(10.3)
    old = sim.leaders()[0]
    sim.stop(old)
    sim.run_until(20.0)
    t_released = next(w[0] for w in sim.store.writes if w[1] is None)
    took = sim.first_leader_after(10.3)
    assert took is not None and took[1] != old
    assert took[0] - t_released <= 1.0 + 0.01
    assert not sim.overlaps()


def test_clock_skew_changes_nothing() -> None:
    def run(skews: dict[str, float]) -> list[tuple[float, bool]]:
        sim = Sim(["n1", "n2", "n3"], skews=skews)
        sim.run_until(10.3)
        sim.kill(sim.leaders()[0])
        sim.run_until(30.0)
        assert not sim.overlaps()
        # Which of two followers that wake at the same instant wins may differ (float
        # rounding of the offsets orders them); when things happen may not.
        return [(round(t, 6), lead) for t, _, lead in sim.timeline]

    plain = run({})
    assert run({"n1": 3600.0, "n2": -86400.0, "n3": 0.5}) == plain


def test_partitioned_leader_steps_down_before_anyone_takes_over() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(10.3)
    old = sim.leaders()[0]
    sim.nodes[old].fault = "blackhole"
    sim.run_until(30.0)
    down = next(t for t, n, lead in sim.timeline if n == old and not lead)
    took = sim.first_leader_after(10.3)
    assert took is not None and took[1] != old
    assert took[0] - down >= 5.0 - 3.0 - 0.01  # duration − renew deadline of margin
    assert not sim.overlaps()


def test_store_down_everywhere_keeps_the_vip_on_the_leader_and_nobody_else_takes_it() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(10.3)
    old = sim.leaders()[0]
    for n in sim.nodes.values():
        n.fault = "5xx"
    sim.run_until(40.0)  # six lease durations of outage
    assert sim.leaders() == [old]
    assert sim.nodes[old].elector.role is Role.HOLDING
    for n in sim.nodes.values():
        n.fault = ""
    sim.run_until(60.0)
    assert sim.leaders() == [old] and sim.nodes[old].elector.role is Role.LEADER
    assert [e for e in sim.timeline if e[0] > 10.3] == []  # not one role change
    assert not sim.overlaps()


def test_store_down_then_leader_dies_a_peer_takes_over_after_recovery() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(10.3)
    old = sim.leaders()[0]
    for n in sim.nodes.values():
        n.fault = "5xx"
    sim.run_until(20.0)
    sim.kill(old)
    sim.run_until(25.0)
    for n in sim.nodes.values():
        n.fault = ""
    sim.run_until(40.0)
    took = sim.first_leader_after(25.0)
    assert took is not None and took[1] != old
    assert 25.0 + 5.0 <= took[0] <= 25.0 + 5.0 + 1.0 + 0.02  # a full duration after recovery
    assert not sim.overlaps()


def test_5xx_storm_and_conflict_storm_never_make_two_leaders() -> None:
    sim = Sim(["n1", "n2", "n3"])
    sim.run_until(5.0)
    # A meddler bumps the resourceVersion every 0.3 s (someone editing annotations).

    def meddle(t: float) -> None:
        r = sim.store.record
        if r is not None:
            sim.store.write(t, r.holder, r.duration_seconds, r.transitions)
        if t < 40:
            sim.at(t + 0.3, lambda: meddle(t + 0.3))

    sim.at(5.0, lambda: meddle(5.0))
    sim.nodes["n2"].fault = "5xx-writes"
    sim.run_until(20.0)
    sim.kill(sim.leaders()[0]) if sim.leaders() else None
    sim.run_until(45.0)
    assert not sim.overlaps()
    assert len(sim.leaders()) <= 1


# -- reason labels ---------------------------------------------------------------------------


def _labels(actions: Sequence[object]) -> list[str]:
    return [a.label for a in actions if isinstance(a, BecomeLeader | BecomeFollower | Hold)]


def test_every_role_change_has_its_label() -> None:
    seen: dict[str, list[str]] = {}
    # created
    e = elector()
    s = sent(e.poll(0.0, True))
    s = sent(e.on_result(0.0, s.request.id, NotFound(), True))
    seen["created"] = _labels(e.on_result(0.0, s.request.id, Ok(rec("1", "n1")), True))
    # lost: a read on a conflict shows another holder
    s = sent(e.poll(1.0, True))
    s = sent(e.on_result(1.0, s.request.id, Conflict(), True))
    seen["lost"] = _labels(e.on_result(1.0, s.request.id, Ok(rec("5", "n3")), True))
    # acquired: a released Lease
    e = elector("n2")
    s = sent(e.poll(0.0, True))
    s = sent(e.on_result(0.0, s.request.id, Ok(rec("3", None, duration=1)), True))
    seen["acquired"] = _labels(e.on_result(0.0, s.request.id, Ok(rec("4", "n2")), True))
    # deleted: our renewal answers 404
    s = sent(e.poll(1.0, True))
    seen["deleted"] = _labels(e.on_result(1.0, s.request.id, NotFound(), True))
    # renew-deadline
    e = elector()
    lead(e)
    seen["renew-deadline"] = _labels(_fail_until_deadline(e, Unreachable("timed out")))
    # store-down (holding), then store-back
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    seen["store-down"] = _labels(_fail_until_deadline(e, Unavailable(503)))
    s = sent(e.poll(e.wake_at, True))
    s = sent(e.on_result(e.wake_at, s.request.id, Ok(rec("1", "n1")), True))
    seen["store-back"] = _labels(e.on_result(e.wake_at, s.request.id, Ok(rec("2", "n1")), True))
    # store-down-ended: holding, then a peer answers ready and the last round fails
    e = elector()
    lead(e)
    e.observe_peers(0.5, NOT_READY)
    _fail_until_deadline(e, Unavailable(503))
    t = e.wake_at - 0.5
    e.observe_peers(t, {"n2": PeerState.READY})
    s = sent(e.poll(t, True))
    seen["store-down-ended"] = _labels(
        e.on_result(t, s.request.id, Unreachable("connection refused"), True)
    )
    # foreign-claim: another node announced the VIP
    e = elector()
    lead(e)
    seen["foreign-claim"] = _labels(e.foreign_claim(0.5))
    # unhealthy: giving way to a healthy peer
    e = elector()
    lead(e)
    s = sent(e.poll(0.5, False, peer_healthy=True))
    assert s.request.purpose is Purpose.YIELD
    seen["unhealthy"] = _labels(
        e.on_result(0.5, s.request.id, Ok(rec("2", None, duration=1)), False)
    )
    # released
    e = elector()
    lead(e)
    r = sent(e.release(0.5, timeout=1.0)).request
    seen["released"] = _labels(e.on_result(0.51, r.id, Ok(rec("2", None, duration=1)), True))
    e = elector()
    lead(e)
    r = sent(e.release(0.5, timeout=1.0)).request
    seen["released"] += _labels(e.on_result(0.51, r.id, Unavailable(503), True))

    assert seen == {
        "created": ["created"],
        "lost": ["lost"],
        "acquired": ["acquired"],
        "deleted": ["deleted"],
        "renew-deadline": ["renew-deadline"],
        "store-down": ["store-down"],
        "store-back": ["store-back"],
        "store-down-ended": ["store-down-ended"],
        "foreign-claim": ["foreign-claim"],
        "unhealthy": ["unhealthy"],
        "released": ["released", "released"],
    }
    assert set(REASON_LABELS) >= {label for labels in seen.values() for label in labels}


def test_labels_are_the_drivers_metric_labels_and_nothing_else() -> None:
    # The labels vipd_role_transitions_total has always had (a dashboard that counts them
    # keeps working), and one for the one new reason: another node's announcement.
    assert set(REASON_LABELS) == {
        "created", "acquired", "store-back", "renewed", "released", "renew-deadline",
        "lost", "deleted", "unhealthy", "store-down-ended", "store-down", "other",
        "foreign-claim",
    }  # fmt: skip
    assert len(REASON_LABELS) == len(set(REASON_LABELS))


def test_an_unknown_label_is_refused() -> None:
    with pytest.raises(ValueError):
        BecomeLeader("why", "acquired-it")
    with pytest.raises(ValueError):
        BecomeFollower("why", "")


def test_a_holder_named_like_a_label_does_not_change_the_label() -> None:
    """The free text names the holder; the label never depends on it."""
    e = elector()
    lead(e)
    s = sent(e.poll(1.0, True))
    s = sent(e.on_result(1.0, s.request.id, Conflict(), True))
    acts = e.on_result(1.0, s.request.id, Ok(rec("5", "created-released-deleted")), True)
    assert _labels(acts) == ["lost"]


def test_a_release_refused_on_a_stale_version_is_sent_again_on_the_fresh_one() -> None:
    e = elector()
    lead(e)
    first = sent(e.release(0.5, timeout=1.0)).request
    assert first.resource_version == "1"
    # The renewal in flight at the stop landed first (rv 2): still ours, release on rv 2.
    again = sent(e.release_again(0.6, 1.0, rec("2", "n1"))).request
    assert (again.purpose, again.holder, again.resource_version) == (Purpose.RELEASE, None, "2")
    assert again.id != first.id
    acts = e.on_result(0.61, again.id, Ok(rec("3", None, duration=1)), True)
    assert isinstance(acts[0], BecomeFollower) and not e.leader


def test_a_lease_another_node_holds_meanwhile_is_not_released_again() -> None:
    e = elector()
    lead(e)
    sent(e.release(0.5, timeout=1.0))
    assert e.release_again(0.6, 1.0, rec("5", "n2")) == []
    assert e.pending is None
