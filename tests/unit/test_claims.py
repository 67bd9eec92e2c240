"""Tests of the pure claim defence policy (vipd.vrrp.claims) on a fake clock.

What it tests: the policy alone, fed ``now`` and the facts of the moment, returning actions:
a foreign claim is defended CLAIM_SETTLE after its last frame (never later than
CLAIM_DEFER_MAX after its first) and at most once per DEFEND_INTERVAL; a claim while taking
over from a live master is expected, not defended; a split-brain peer's claim is answered at
once (once per interval) and its MAC remembered, and a defence charged to a claim that an
advert then shows to be a peer's is refunded; a claimant is followed with unicast probes and,
when it stops answering, announced over (the leader-follows-claimant fix); a check ends when
we no longer lead; the duplicate-claim gauge. The driver's side of the same rules is pinned
in tests/unit/test_vrrp_driver.py.
"""

from __future__ import annotations

import pytest

from vipd.vrrp.claims import (
    CLAIM_DEFER_MAX,
    CLAIM_SETTLE,
    CLAIMANT_PROBE_MAX_GAP,
    CLAIMANT_PROBE_WAIT,
    CLAIMANT_PROBES_AT_ADVERT,
    DEFENCE,
    DEFEND_INTERVAL,
    PEER_CLAIM_WINDOW,
    SPLIT_BRAIN_ADVERTS,
    Action,
    Announce,
    Cancel,
    ClaimPolicy,
    Counted,
    Lead,
    Probe,
    Schedule,
    Warn,
    claimant_key,
)

LEAD = Lead(leading=True, interval=1.0, active_since=0.0)
GONE = Lead(leading=False, interval=1.0)
FOREIGN = "02:00:00:00:00:99"
PEER = "02:00:00:00:00:12"


def announces(actions: list[Action]) -> list[Announce]:
    return [a for a in actions if isinstance(a, Announce)]


def test_a_foreign_claim_is_defended_after_the_settle_time_if_we_still_lead() -> None:
    p = ClaimPolicy()
    assert p.on_claim(100.0, FOREIGN, LEAD) == [Schedule(DEFENCE, CLAIM_SETTLE)]
    assert p.claims == 0  # counted when judged
    got = p.on_timer(100.0 + CLAIM_SETTLE, DEFENCE, LEAD)
    assert got == [Counted("arp"), Warn(FOREIGN, 1, True), Announce(None, FOREIGN)]
    assert p.claims == 1
    # A second claim inside DEFEND_INTERVAL: counted, not defended, its claimant followed.
    p.on_claim(105.0, FOREIGN, LEAD)
    got = p.on_timer(105.0 + CLAIM_SETTLE, DEFENCE, LEAD)
    assert got == [Counted("arp"), Warn(FOREIGN, 2, False), Schedule(claimant_key(FOREIGN), 1.02)]
    # DEFEND_INTERVAL after the first defence: defended again (its check cancelled).
    p.on_claim(110.0 + CLAIM_SETTLE, FOREIGN, LEAD)
    got = p.on_timer(110.0 + 2 * CLAIM_SETTLE, DEFENCE, LEAD)
    assert Cancel(claimant_key(FOREIGN)) in got and announces(got) == [Announce(None, FOREIGN)]


def test_a_claim_before_a_preempting_advert_is_not_defended_once_we_stepped_down() -> None:
    p = ClaimPolicy()
    p.on_claim(100.0, FOREIGN, LEAD)
    assert p.on_timer(100.0 + CLAIM_SETTLE, DEFENCE, GONE) == []
    assert p.claims == 0


def test_the_live_masters_replies_while_we_take_over_are_not_a_claim() -> None:
    p = ClaimPolicy()
    taking = Lead(leading=True, interval=1.0, lead_pending=True, active_since=100.0)
    assert p.on_claim(100.01, FOREIGN, taking) == []
    fresh = Lead(leading=True, interval=1.0, active_since=100.0)
    assert p.on_claim(100.0 + CLAIM_SETTLE / 2, FOREIGN, fresh) == []
    assert p.on_claim(100.05, FOREIGN, fresh) == [Schedule(DEFENCE, CLAIM_SETTLE)]


def test_a_burst_moves_the_defence_to_its_last_frame_but_not_past_the_deferral_bound() -> None:
    p = ClaimPolicy()
    t = 100.0
    while t - 100.0 < CLAIM_DEFER_MAX:
        assert p.on_claim(t, FOREIGN, LEAD) == [Schedule(DEFENCE, CLAIM_SETTLE)]
        t += 0.04
    assert p.on_claim(t, FOREIGN, LEAD) == []  # the storm cannot defer it forever
    assert p.on_timer(t - 0.04 + CLAIM_SETTLE, DEFENCE, LEAD)[-1] == Announce(None, FOREIGN)


def test_a_split_brain_peers_claim_is_answered_at_once_and_its_mac_remembered() -> None:
    p = ClaimPolicy()
    assert p.on_advert(100.0, 1.0) == [Counted("vrrp")]
    got = p.on_claim(100.0 + PEER_CLAIM_WINDOW / 2, PEER, LEAD)
    reason = "a lower-priority peer of our VRID announced the VIP"
    assert got == [Counted("arp"), Announce(reason, PEER), Schedule(claimant_key(PEER), 1.02)]
    # Bounded: once per advert interval.
    assert announces(p.on_claim(100.5, PEER, LEAD)) == []
    # Long after the split-brain window, without an advert: still the peer's MAC.
    later = 100.0 + 2 * SPLIT_BRAIN_ADVERTS
    assert announces(p.on_claim(later, PEER, LEAD)) == [Announce(reason, PEER)]
    assert p.claims == 4


def test_a_claim_only_inside_the_split_brain_window_is_answered_but_not_remembered() -> None:
    p = ClaimPolicy()
    p.on_advert(100.0, 1.0)
    assert announces(p.on_claim(101.0, FOREIGN, LEAD)) != []  # inside 3 intervals
    later = 100.0 + SPLIT_BRAIN_ADVERTS + 5.0
    assert p.on_claim(later, FOREIGN, LEAD) == [Schedule(DEFENCE, CLAIM_SETTLE)]  # foreign now


def test_a_defence_charged_to_a_claim_its_advert_then_follows_is_refunded() -> None:
    p = ClaimPolicy()
    p.on_claim(100.0, PEER, LEAD)
    assert announces(p.on_timer(100.0 + CLAIM_SETTLE, DEFENCE, LEAD)) == [Announce(None, PEER)]
    p.on_advert(100.5, 1.0)  # its advert: it was a vipd peer's claim
    # The budget is back: a foreign host's claim now (past the split-brain window) is
    # defended.
    p.on_claim(104.0, FOREIGN, LEAD)
    got = p.on_timer(104.0 + CLAIM_SETTLE, DEFENCE, LEAD)
    assert Warn(FOREIGN, 3, True) in got and announces(got) == [Announce(None, FOREIGN)]


def test_a_claimant_that_stops_answering_is_announced_over() -> None:
    """The leader follows a claimant with unicast ARP probes: once it no longer answers for
    the VIP, the clients its announcement moved are brought back."""
    p = ClaimPolicy()
    fast = Lead(leading=True, interval=0.1, active_since=0.0)
    p.on_advert(100.0, 0.1)
    key = claimant_key(PEER)
    assert p.on_claim(100.01, PEER, fast)[-1] == Schedule(key, 0.1 + CLAIM_SETTLE)
    t = 100.01 + 0.1 + CLAIM_SETTLE
    # It still answers for a while: each probe, its answer, the next probe; an interval
    # apart CLAIMANT_PROBES_AT_ADVERT times, then at doubling gaps up to the bound.
    gaps = []
    for _ in range(7):
        assert p.on_timer(t, key, fast) == [Probe(PEER)]
        assert p.on_probe(t, PEER, True, fast) == [Schedule(key, CLAIMANT_PROBE_WAIT, drain=True)]
        assert p.on_claim(t + 0.001, PEER, fast) == []  # its answer: not a new claim
        t += CLAIMANT_PROBE_WAIT
        (next_probe,) = p.on_timer(t, key, fast)
        assert isinstance(next_probe, Schedule) and next_probe.key == key
        gaps.append(next_probe.delay)
        t += next_probe.delay
    assert CLAIMANT_PROBES_AT_ADVERT == 3 and CLAIMANT_PROBE_MAX_GAP == 1.0
    assert gaps == pytest.approx([0.1, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    # Then silence: announced over (no budget charged), and the check is over.
    assert p.on_timer(t, key, fast) == [Probe(PEER)]
    p.on_probe(t, PEER, True, fast)
    got = p.on_timer(t + CLAIMANT_PROBE_WAIT, key, fast)
    assert len(got) == 1 and isinstance(got[0], Announce) and got[0].reason is not None
    assert "no longer answers" in got[0].reason
    assert p.on_timer(t + 5.0, key, fast) == []
    assert p.claims == 2  # the advert and the claim; the probes' answers are not claims


def test_a_claimant_still_answering_after_the_defend_interval_is_judged_again() -> None:
    p = ClaimPolicy()
    p.on_claim(100.0, FOREIGN, LEAD)
    p.on_timer(100.0 + CLAIM_SETTLE, DEFENCE, LEAD)  # defended: budget spent
    p.on_claim(101.0, FOREIGN, LEAD)
    p.on_timer(101.0 + CLAIM_SETTLE, DEFENCE, LEAD)  # not defended: followed
    key = claimant_key(FOREIGN)
    t = 101.0 + CLAIM_SETTLE + 1.0 + CLAIM_SETTLE
    while True:
        assert p.on_timer(t, key, LEAD) == [Probe(FOREIGN)]
        p.on_probe(t, FOREIGN, True, LEAD)
        p.on_claim(t + 0.001, FOREIGN, LEAD)
        t += CLAIMANT_PROBE_WAIT
        got = p.on_timer(t, key, LEAD)
        if any(isinstance(a, Announce) for a in got):
            break
        (nxt,) = got
        assert isinstance(nxt, Schedule)
        t += nxt.delay
    assert t >= 101.0 + CLAIM_SETTLE + DEFEND_INTERVAL
    assert got[-1] == Announce(None, FOREIGN) and Warn(FOREIGN, 3, True) in got


def test_a_probe_that_cannot_be_sent_gives_no_verdict_and_asks_again() -> None:
    p = ClaimPolicy()
    p.on_advert(100.0, 1.0)
    p.on_claim(100.01, PEER, LEAD)
    key = claimant_key(PEER)
    assert p.on_timer(101.03, key, LEAD) == [Probe(PEER)]
    assert p.on_probe(101.03, PEER, False, LEAD) == [Schedule(key, 1.0)]


def test_a_check_ends_when_we_no_longer_lead_and_end_cancels_everything() -> None:
    p = ClaimPolicy()
    p.on_advert(100.0, 1.0)
    p.on_claim(100.01, PEER, LEAD)
    key = claimant_key(PEER)
    assert p.on_timer(101.03, key, GONE) == []
    assert p.on_timer(102.03, key, LEAD) == []  # over
    p.on_claim(110.0, FOREIGN, LEAD)
    p.on_claim(110.01, "02:00:00:00:00:77", LEAD)
    assert p.end() == [Cancel(DEFENCE)]
    assert p.on_timer(110.05, DEFENCE, LEAD) == []


@pytest.mark.parametrize(
    ("age", "held", "expected"), [(0.0, True, True), (3.0, True, True), (3.01, True, False)]
)
def test_the_duplicate_claim_gauge_covers_three_intervals_while_held(
    age: float, held: bool, expected: bool
) -> None:
    p = ClaimPolicy()
    assert not p.duplicate_claim(100.0, True, 1.0)
    p.on_advert(100.0, 1.0)
    assert p.duplicate_claim(100.0 + age, held, 1.0) is expected
    assert not p.duplicate_claim(100.0, False, 1.0)
