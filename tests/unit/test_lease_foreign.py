"""vipd.lease.logic when someone else writes the Lease: never a second holder.

The rules (docs/design/lease.md, "Writes by someone else"): a node becomes leader only on a
write of its own that names it; a record that names it but that it did not write starts a
term of its own, and like a deleted Lease or one emptied other than by a release, when it
overwrote another holder's valid record, the VIP is bound only when that holder has let go;
a leader that sees a write it did not make (the watch) steps down at once; a write of ours
overtaken by someone else's makes no leader. Single electors fed by hand, then 3 electors on
tests/unit/lease_sim.py without the wire (``arp=False``), with and without the watch.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.lease_sim import Sim
from vipd.lease.logic import Elector
from vipd.lease.model import (
    BecomeFollower,
    BecomeLeader,
    Conflict,
    NotFound,
    Ok,
    Params,
    Purpose,
    Record,
    Role,
    Send,
    Unreachable,
    Verb,
)

D, RD, RP = 5.0, 3.0, 1.0


def elector(name: str) -> Elector:
    return Elector(Params(identity=name, duration=D, renew_deadline=RD, retry_period=RP))


def sent(actions: Sequence[object]) -> Send:
    sends = [a for a in actions if isinstance(a, Send)]
    assert len(sends) == 1, actions
    return sends[0]


def leads(actions: Sequence[object]) -> bool:
    return any(isinstance(a, BecomeLeader) for a in actions)


def rec(
    rv: str, holder: str | None, transitions: int = 0, duration: int = 5, acq: str = "a0"
) -> Record:
    return Record(rv, holder, duration, transitions, acq, "ren")


def follower_seeing(e: Elector, now: float, first: Record) -> None:
    """``e`` reads ``first`` (another node's valid record) and waits."""
    s = sent(e.poll(now, True))
    assert e.on_result(now, s.request.id, Ok(first), True) == []
    assert e.role is Role.FOLLOWER


def take(e: Elector, now: float, seen: Record) -> tuple[Send, float]:
    """Poll at ``now``; the read answers ``seen``; returns the take-over write and its send."""
    s = sent(e.poll(now, True))
    assert s.request.verb is Verb.GET
    w = sent(e.on_result(now, s.request.id, Ok(seen), True))
    return w, now


# -- the node a foreign write names --------------------------------------------------------


def test_a_record_naming_us_that_we_did_not_write_is_bound_only_after_the_old_holder_let_go() -> (
    None
):
    e = elector("n2")
    follower_seeing(e, 0.0, rec("10", "n1", transitions=3, acq="a3"))
    w, at = take(e, 1.0, rec("11", "n2", transitions=3, acq="a3"))  # kubectl patch
    r = w.request
    # A term of our own: client-go's new-holder write, not a restart's renewal.
    assert r.purpose is Purpose.ACQUIRE and r.stamp_acquire and r.transitions == 4
    acts = e.on_result(1.01, r.id, Ok(rec("12", "n2", transitions=4, acq="b4")), True)
    assert not leads(acts) and not e.leader and e.role is Role.LEADER
    # n1's record was seen at 0.0: valid until 5.0 by our view; its renew deadline (its last
    # good renewal was sent before the patch) passes by our write's send + RD = 4.0.
    assert e.bind_at == pytest.approx(at + RD)
    rv = 12
    for t in (2.0, 3.0):  # it renews meanwhile, like any leader
        w = sent(e.poll(t, True))
        assert w.request.purpose is Purpose.RENEW
        rv += 1
        assert not leads(e.on_result(t, w.request.id, Ok(rec(str(rv), "n2", 4, acq="b4")), True))
    assert not leads(e.poll(3.9, True))
    assert leads(e.poll(at + RD, True)) and e.leader


def test_the_wait_is_the_old_records_expiry_when_that_comes_first() -> None:
    e = elector("n2")
    follower_seeing(e, 0.0, rec("10", "n1"))
    # Taken while n1's record is valid by every node's view (ours less a retry period and a
    # read: others may have seen it that much sooner), so no one took the Lease unseen.
    w, _ = take(e, 2.5, rec("11", "n2"))
    e.on_result(2.51, w.request.id, Ok(rec("12", "n2", transitions=1, acq="b")), True)
    assert e.bind_at == pytest.approx(D)  # seen at 0.0, expires at 5.0 < 2.5 + RD


def test_near_the_old_records_expiry_the_wait_is_the_renew_deadline() -> None:
    """Within a retry period and a read of the old record's expiry by our view, another node
    may already have seen it expire and taken the Lease unseen: bind at send + RD."""
    e = elector("n2")
    follower_seeing(e, 0.0, rec("10", "n1"))
    w, _ = take(e, 3.0, rec("11", "n2"))
    e.on_result(3.01, w.request.id, Ok(rec("12", "n2", transitions=1, acq="b")), True)
    assert e.bind_at == pytest.approx(3.0 + RD)


def test_own_record_after_a_restart_is_still_taken_at_once() -> None:
    e = elector("n1")  # a restarted vipd: its first read shows its own record
    w, _ = take(e, 0.0, rec("4", "n1", transitions=6, acq="a6"))
    r = w.request
    assert not r.stamp_acquire and r.transitions == 6 and r.acquire_time == "a6"
    assert leads(e.on_result(0.01, r.id, Ok(rec("5", "n1", transitions=6, acq="a6")), True))


def test_our_renewal_that_landed_after_we_gave_up_is_our_own_record() -> None:
    """The stalled API server served the renewal after the step-down: the record is ours
    (our term), not a foreign write: taken back at once, keeping the term."""
    e = elector("n1")
    s = sent(e.poll(0.0, True))
    w = sent(e.on_result(0.0, s.request.id, NotFound(), True))
    assert leads(e.on_result(0.01, w.request.id, Ok(rec("1", "n1", acq="a1")), True))
    renew = sent(e.poll(1.0, True))
    assert renew.request.purpose is Purpose.RENEW
    # Never answered: abandoned, and the deadline passes.
    acts: list[object] = []
    for t in (2.5, 3.0, 3.5):
        acts += e.poll(t, True)
        p = e.pending
        if p is not None and t >= p.abandon_at:
            acts += e.on_result(t, p.request.id, Unreachable("abandoned"), True)
    assert any(isinstance(a, BecomeFollower) for a in acts) and e.role is Role.FOLLOWER
    while e.pending is not None:
        e.on_result(e.pending.abandon_at, e.pending.request.id, Unreachable(), True)
    w, _ = take(e, max(e.wake_at, 4.0), rec("2", "n1", acq="a1"))
    assert not w.request.stamp_acquire and w.request.acquire_time == "a1"
    assert leads(e.on_result(e._now, w.request.id, Ok(rec("3", "n1", acq="a1")), True))


# -- deleted, or emptied by hand -------------------------------------------------------------


def test_a_lease_deleted_under_another_holder_is_created_and_bound_after_the_wait() -> None:
    e = elector("n2")
    follower_seeing(e, 0.0, rec("10", "n1"))
    s = sent(e.poll(1.0, True))
    w = sent(e.on_result(1.0, s.request.id, NotFound(), True))
    assert w.request.verb is Verb.CREATE
    assert not leads(e.on_result(1.01, w.request.id, Ok(rec("11", "n2", acq="b")), True))
    assert e.bind_at == pytest.approx(1.0 + RD)


def test_a_missing_lease_at_the_first_start_is_bound_at_once() -> None:
    e = elector("n2")
    s = sent(e.poll(0.0, True))
    w = sent(e.on_result(0.0, s.request.id, NotFound(), True))
    assert leads(e.on_result(0.01, w.request.id, Ok(rec("1", "n2")), True))


def test_a_release_is_taken_at_once_a_holder_emptied_by_hand_after_the_wait() -> None:
    released = elector("n2")
    follower_seeing(released, 0.0, rec("10", "n1"))
    w, _ = take(released, 1.0, rec("11", None, duration=1))  # client-go's and vipd's release
    assert leads(released.on_result(1.01, w.request.id, Ok(rec("12", "n2", 1, acq="b")), True))
    emptied = elector("n2")
    follower_seeing(emptied, 0.0, rec("10", "n1"))
    w, _ = take(emptied, 1.0, rec("11", None, duration=5))  # kubectl edit: holder removed
    assert not leads(emptied.on_result(1.01, w.request.id, Ok(rec("12", "n2", 1)), True))
    assert emptied.bind_at == pytest.approx(1.0 + RD)


def test_an_expired_record_is_stolen_and_bound_at_once_as_before() -> None:
    e = elector("n2")
    follower_seeing(e, 0.0, rec("10", "n1"))
    w, _ = take(e, D, rec("10", "n1"))
    assert w.request.stamp_acquire
    assert leads(e.on_result(D + 0.01, w.request.id, Ok(rec("11", "n2", 1, acq="b")), True))


# -- the holder a foreign write displaces ------------------------------------------------------


def leader(name: str = "n1") -> Elector:
    e = elector(name)
    s = sent(e.poll(0.0, True))
    w = sent(e.on_result(0.0, s.request.id, NotFound(), True))
    assert leads(e.on_result(0.01, w.request.id, Ok(rec("5", name, acq="a1")), True))
    return e


@pytest.mark.parametrize(
    "event",
    [rec("6", "n2", acq="a1"), rec("6", None), None],
    ids=["names-a-peer", "names-nobody", "deleted"],
)
def test_a_leader_that_sees_a_write_it_did_not_make_steps_down_at_once(
    event: Record | None,
) -> None:
    e = leader()
    acts = e.watched(0.3, event)
    assert any(isinstance(a, BecomeFollower) for a in acts)
    assert e.role is Role.FOLLOWER and not e.leader
    assert e.wake_at <= 0.3 + RP


def test_the_watch_ignores_our_own_echo_and_old_news() -> None:
    e = leader()
    assert e.watched(0.3, rec("5", "n1", acq="a1")) == []  # our create's echo
    assert e.watched(0.3, rec("7", "n1", acq="a1")) == []  # a change that keeps us
    assert e.watched(0.3, rec("4", "n3")) == []  # older than what we saw: a lagging watch
    assert e.role is Role.LEADER and e.leader


def test_the_echo_of_our_own_give_way_is_not_a_foreign_write() -> None:
    e = leader()
    y = sent(e.poll(0.5, False, peer_healthy=True))
    assert y.request.purpose is Purpose.YIELD
    assert e.watched(0.51, rec("6", None, duration=1)) == []


def test_a_renewal_overtaken_by_a_foreign_write_makes_no_leader() -> None:
    e = leader()
    r = sent(e.poll(1.0, True))
    assert r.request.purpose is Purpose.RENEW
    # The renewal landed (rv 6), then kubectl wrote (rv 7); the watch reports rv 7 before
    # the renewal's answer arrives.
    assert any(isinstance(a, BecomeFollower) for a in e.watched(1.002, rec("7", "n2")))
    assert e.on_result(1.003, r.request.id, Ok(rec("6", "n1", acq="a1")), True) == []
    assert e.role is Role.FOLLOWER and not e.leader


def test_the_answer_to_our_give_way_after_another_announcement_makes_no_leader() -> None:
    """The node yields to another's gratuitous ARP while its give-way write is in flight:
    that write's answer (the Lease with no holder) is not an acquisition."""
    e = leader()
    y = sent(e.poll(0.5, False, peer_healthy=True))
    assert y.request.purpose is Purpose.YIELD
    assert any(isinstance(a, BecomeFollower) for a in e.foreign_claim(0.501))
    acts = e.on_result(0.502, y.request.id, Ok(rec("6", None, duration=1)), False, True)
    assert not leads(acts) and e.role is Role.FOLLOWER and not e.leader
    # And the next rounds leave the free Lease to the healthy peer for a duration.
    for t in (1.5, 2.5, 3.5):
        s = e.poll(t, False, peer_healthy=True)
        for a in s:
            if isinstance(a, Send):
                assert a.request.verb is Verb.GET
                e.on_result(t, a.request.id, Ok(rec("6", None, duration=1)), False, True)
    assert e.role is Role.FOLLOWER


def test_a_conflict_on_an_overtaken_write_reads_again() -> None:
    e = leader()
    r = sent(e.poll(1.0, True))
    e.watched(1.002, None)
    assert e.on_result(1.003, r.request.id, Conflict(), True) == []
    assert e.pending is None and e.wake_at <= 1.003 + RP


# -- three nodes, no wire ---------------------------------------------------------------------


def sim(watch: bool) -> Sim:
    s = Sim(["n1", "n2", "n3"], arp=False, watch=watch, watch_delay=0.005)
    s.run_until(8.0)
    assert len(s.leaders()) == 1
    return s


def holder_of(s: Sim) -> str:
    (h,) = s.leaders()
    return h


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "no-watch"])
@pytest.mark.parametrize("when", [0.0, 0.3, 0.6, 0.95])
def test_lease_patched_to_name_a_peer_never_two_holders(watch: bool, when: float) -> None:
    s = sim(watch)
    old = holder_of(s)
    peer = next(n for n in s.nodes if n != old)
    t = s.now + when
    s.run_until(t)
    s.foreign_write(holder=peer)
    s.run_until(t + 3 * D)
    assert s.overlap_time() == 0.0, s.timeline
    assert s.leaders() and len(s.leaders()) == 1
    # The old holder lets go at once with the watch, at its next renewal without it.
    let_go = next(tt for tt, n, lead in s.timeline if n == old and not lead and tt >= t)
    assert let_go - t <= (0.01 if watch else RP + 0.01)
    # The next holder: a read, the wait (RD from its write), or the old record's expiry.
    got = s.first_leader_after(t)
    assert got is not None and got[0] - t <= RP + RD + 0.05


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "no-watch"])
@pytest.mark.parametrize("when", [0.0, 0.5, 0.9])
def test_lease_deleted_while_held_never_two_holders(watch: bool, when: float) -> None:
    s = sim(watch)
    t = s.now + when
    s.run_until(t)
    s.foreign_delete()
    s.run_until(t + 3 * D)
    assert s.overlap_time() == 0.0, s.timeline
    assert len(s.leaders()) == 1
    gaps = s.gaps(after=t)
    # With the watch the old holder hears of it, reads at once and re-creates the Lease
    # before anyone else: it binds at once (the holder written over was itself).
    limit = 0.05 if watch else RP + RD + 0.05
    assert all(b - a <= limit for a, b in gaps), gaps


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "no-watch"])
def test_holder_emptied_by_hand_never_two_holders(watch: bool) -> None:
    s = sim(watch)
    t = s.now + 0.4
    s.run_until(t)
    s.foreign_write(holder=None)
    s.run_until(t + 3 * D)
    assert s.overlap_time() == 0.0, s.timeline
    assert len(s.leaders()) == 1
    limit = 0.05 if watch else RP + RD + 0.05
    assert all(b - a <= limit for a, b in s.gaps(after=t)), s.gaps(after=t)


def test_graceful_stop_still_hands_over_within_a_retry_period_with_the_watch() -> None:
    s = sim(True)
    old = holder_of(s)
    t = s.now
    s.stop(old)
    s.run_until(t + 2 * D)
    got = s.first_leader_after(t)
    assert got is not None and got[1] != old and got[0] - t <= RP + 0.05
    assert s.overlap_time() == 0.0


# -- random schedules -------------------------------------------------------------------------

foreign = st.lists(
    st.tuples(
        st.floats(8.0, 40.0, allow_nan=False).map(lambda x: round(x, 3)),
        st.sampled_from(["n1", "n2", "n3", "nobody", "stranger", "delete", "copy"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=foreign,
    watch=st.booleans(),
    delay=st.floats(0.0005, 0.2, allow_nan=False),
    latency=st.floats(0.001, 0.05, allow_nan=False),
)
def test_any_foreign_writes_never_give_two_holders(
    writes: list[tuple[float, str]], watch: bool, delay: float, latency: float
) -> None:
    """Whatever someone writes into the Lease, whenever, with the watch fast, slow or
    absent: never two holders, and once the writes stop a holder again within the bound
    (a stranger named holds nothing: the Lease expires first)."""
    s = Sim(["n1", "n2", "n3"], arp=False, watch=watch, watch_delay=delay, latency=latency)
    s.run_until(7.0)
    first = s.store.record  # the first holder's record: "copy" writes it back
    assert first is not None
    for at, what in sorted(writes):
        s.run_until(at)
        if what == "copy":
            s.foreign_put(first)
        elif s.store.record is None or what == "delete":
            s.foreign_delete()
        elif what == "nobody":
            s.foreign_write(holder=None)
        else:
            s.foreign_write(holder=what)
    last = s.now
    s.run_until(last + 4 * D)
    assert s.overlap_time() == 0.0, (s.timeline, writes)
    assert len(s.leaders()) == 1
    # From the last write: a stranger's record expires (D after each node saw it, RP late at
    # most), then a read and a write; a record renamed to a node waits RD.
    limit = D + 2 * RP + 0.5
    assert all(b - a <= limit for a, b in s.gaps(after=last)), s.gaps(after=last)


# -- a write served late: the brownout -----------------------------------------------------------


@pytest.mark.parametrize("offset", [0.0, 0.2, 0.45, 0.7, 0.9])
@pytest.mark.parametrize("healthy", [True, False], ids=["healthy", "unhealthy"])
def test_brownout_no_holder_within_the_late_write_bound(offset: float, healthy: bool) -> None:
    """The leader's API server stopped STOP s, running RUN s, repeatedly: a renewal sent
    while it is stopped is served when it runs again, after the step-down, and every other
    node counts D from seeing it. docs/design/lease.md ("A write served late") bounds the
    no-holder span by STOP + RP + D + 2 round trips after the old leader let go (its last
    write is served at most STOP after it was sent, before its step-down)."""
    stop, run = 2.5, 0.5
    s = Sim(["n1", "n2", "n3"], arp=False, watch=True)
    s.run_until(8.0 + offset)
    (old,) = s.leaders()
    t = s.now
    if not healthy:
        s.set_health(old, False)
    while s.now < t + 12.0:
        s.nodes[old].fault = "stall"
        s.run_until(s.now + stop)
        s.unstall(old)
        s.run_until(s.now + run)
    s.set_health(old, True)
    s.run_until(s.now + 3 * D)
    assert s.overlap_time() == 0.0, s.timeline
    gaps = s.gaps(after=t)
    assert all(b - a <= stop + RP + D + 0.05 for a, b in gaps), gaps


def test_a_copy_of_our_old_record_written_back_over_another_holder_is_not_ours() -> None:
    """Someone writes back a copy of our record (same term) after another node took the
    Lease: our own late renewal could not have landed there (it carried the version we
    knew), so it is foreign: a new term, bound after the wait."""
    e = elector("n1")
    s = sent(e.poll(0.0, True))
    w = sent(e.on_result(0.0, s.request.id, NotFound(), True))
    assert leads(e.on_result(0.01, w.request.id, Ok(rec("1", "n1", acq="a1")), True))
    r = sent(e.poll(1.0, True))
    s = sent(e.on_result(1.0, r.request.id, Conflict(), True))  # n2 wrote meanwhile: read
    acts = e.on_result(1.01, s.request.id, Ok(rec("2", "n2", transitions=1, acq="b")), True)
    assert any(isinstance(a, BecomeFollower) for a in acts)
    w2, at = take(e, 2.5, rec("3", "n1", acq="a1"))  # the old copy, written back
    assert w2.request.stamp_acquire and w2.request.transitions == 1
    assert not leads(e.on_result(2.51, w2.request.id, Ok(rec("4", "n1", 1, acq="c")), True))
    assert e.bind_at == pytest.approx(at + RD)


def test_a_write_naming_us_over_a_holder_we_never_saw_is_bound_after_the_renew_deadline() -> None:
    """The last other holder we saw had expired (a stranger written by hand), another node
    took the Lease without our seeing it, and then someone renamed the record to us: we
    cannot know that holder was there, so we bind only at our write's send + renew deadline
    (a schedule hypothesis found: binding at once gave two holders for 0.94 s)."""
    s = Sim(["n1", "n2", "n3"], arp=False, watch=False, latency=0.03416934491725692)
    s.run_until(7.0)
    for at, what in [(9.5, "stranger"), (15.0, "n1")]:
        s.run_until(at)
        s.foreign_write(holder=what)
    s.run_until(15.0 + 4 * D)
    assert s.overlap_time() == 0.0, s.timeline


def test_a_lease_missing_at_a_later_read_is_bound_after_the_renew_deadline() -> None:
    """A Lease deleted after the other holder we saw had expired: someone we never saw may
    have held it when it was deleted."""
    e = elector("n2")
    follower_seeing(e, 0.0, rec("10", "n1"))
    s = sent(e.poll(6.0, True))  # n1's record, seen at 0.0, expired at 5.0 by our view
    w = sent(e.on_result(6.0, s.request.id, NotFound(), True))
    assert w.request.verb is Verb.CREATE
    assert not leads(e.on_result(6.01, w.request.id, Ok(rec("11", "n2", acq="b")), True))
    assert e.bind_at == pytest.approx(6.0 + RD)
