"""Tests of the VRRP transition table (vipd.vrrp.transitions) and of the machine against it.

The table is checked three ways: it is complete (every sub-state takes or drops every event,
never both), it states the RFC 9568 §6.4 rules (each test names one), and it is exact: long
random runs of the machine make every move it allows and no other (the machine raises on a
move the table lacks), so a row too narrow or too wide fails here.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address, IPv6Address

import pytest

from vipd.vrrp import variables
from vipd.vrrp.actions import SendAdvert
from vipd.vrrp.driver.timers import ADVERT_ONLY
from vipd.vrrp.params import Params
from vipd.vrrp.state import Machine
from vipd.vrrp.transitions import (
    ACTIVE_PHASES,
    BACKUP_PHASES,
    IGNORED,
    TRANSITIONS,
    Event,
    Phase,
    State,
    rank,
)

ADVERTS = (Event.ADVERT_RESIGN, Event.ADVERT_HIGHER, Event.ADVERT_LOWER)


def v4(last: int) -> IPv4Address:
    return IPv4Address(f"10.0.0.{last}")


def moves() -> Iterator[tuple[Phase, Event, Phase]]:
    for phase, rows in TRANSITIONS.items():
        for event, targets in rows.items():
            for target in targets:
                yield phase, event, target


# ------------------------------------------------------------------ the table's shape


def test_every_sub_state_takes_or_drops_every_event_never_both() -> None:
    assert set(TRANSITIONS) == set(Phase) == set(IGNORED)
    for phase in Phase:
        taken, dropped = set(TRANSITIONS[phase]), IGNORED[phase]
        assert taken & dropped == set(), phase
        assert taken | dropped == set(Event), phase
        assert all(TRANSITIONS[phase][event] for event in taken), phase  # no empty row


def test_each_sub_state_belongs_to_one_rfc_state() -> None:
    assert {p.state for p in Phase} == set(State)
    assert {Phase.BACKUP_STARTING, Phase.BACKUP, Phase.BACKUP_CONTEST} == BACKUP_PHASES
    assert {
        Phase.ACTIVE,
        Phase.ACTIVE_LEAD,
        Phase.ACTIVE_CONTESTED_LEAD,
        Phase.ACTIVE_CONTESTED,
    } == ACTIVE_PHASES
    assert Phase.INITIALIZE.state is State.INITIALIZE
    for phase in Phase:
        assert phase.value.split("/")[0] == phase.state.value


# ------------------------------------------------------------------ the RFC's rules


def test_startup_takes_initialize_to_backup_only() -> None:
    # RFC 9568 §6.4.1: a router that does not own the address goes to Backup.
    assert TRANSITIONS[Phase.INITIALIZE][Event.STARTUP] == {Phase.BACKUP_STARTING}
    for phase in set(Phase) - {Phase.INITIALIZE}:
        assert Event.STARTUP in IGNORED[phase]


def test_shutdown_takes_every_sub_state_to_initialize() -> None:
    # RFC 9568 §6.4.2 / §6.4.3 "If a Shutdown event is received".
    for phase in Phase:
        assert TRANSITIONS[phase][Event.SHUTDOWN] == {Phase.INITIALIZE}


def test_initialize_drops_adverts_and_has_no_timer() -> None:
    assert IGNORED[Phase.INITIALIZE] == {*ADVERTS, Event.MASTER_DOWN_TIMER, Event.ADVER_TIMER}


def test_no_advert_makes_a_backup_active() -> None:
    # RFC 9568 §6.4.2: only the Master_Down_Timer does.
    for phase in BACKUP_PHASES:
        for event in ADVERTS:
            targets = TRANSITIONS[phase].get(event, frozenset())
            assert all(t.state is State.BACKUP for t in targets), (phase, event)


def test_a_backup_outside_the_contest_stays_where_it_is_on_any_advert() -> None:
    # §6.4.2: priority 0 arms the skew timer; otherwise the advert is accepted or discarded.
    for phase in (Phase.BACKUP_STARTING, Phase.BACKUP):
        for event in ADVERTS:
            assert TRANSITIONS[phase][event] == {phase}


def test_the_master_down_timer_makes_a_backup_active_or_holds_it() -> None:
    # §6.4.2 "If the Master_Down_Timer fires": Active (possibly after the contest window);
    # only the start-up hold keeps a Backup where it is.
    assert TRANSITIONS[Phase.BACKUP][Event.MASTER_DOWN_TIMER] == {
        Phase.ACTIVE,
        Phase.ACTIVE_LEAD,
        Phase.BACKUP_CONTEST,
    }
    assert TRANSITIONS[Phase.BACKUP_STARTING][Event.MASTER_DOWN_TIMER] == {
        Phase.BACKUP_STARTING,
        Phase.ACTIVE,
        Phase.ACTIVE_LEAD,
        Phase.BACKUP_CONTEST,
    }
    assert TRANSITIONS[Phase.BACKUP_CONTEST][Event.MASTER_DOWN_TIMER] == {Phase.ACTIVE}


def test_the_release_contest_is_lost_only_to_a_better_router() -> None:
    assert TRANSITIONS[Phase.BACKUP_CONTEST][Event.ADVERT_HIGHER] == {Phase.BACKUP}
    assert {Event.ADVERT_LOWER, Event.ADVERT_RESIGN} <= IGNORED[Phase.BACKUP_CONTEST]


def test_an_active_router_steps_down_only_for_one_that_ranks_above_it() -> None:
    # §6.4.3: higher priority, or equal priority and a greater primary address.
    for phase in ACTIVE_PHASES:
        assert TRANSITIONS[phase][Event.ADVERT_HIGHER] == {Phase.BACKUP}
        for event in (Event.ADVERT_RESIGN, Event.ADVERT_LOWER, Event.ADVER_TIMER, Event.PRIORITY):
            assert all(t.state is State.ACTIVE for t in TRANSITIONS[phase][event]), (phase, event)


def test_a_lower_ranked_advert_opens_the_contest() -> None:
    for phase in ACTIVE_PHASES:
        targets = TRANSITIONS[phase][Event.ADVERT_LOWER]
        assert targets <= {Phase.ACTIVE_CONTESTED_LEAD, Phase.ACTIVE_CONTESTED}, phase


def test_each_timer_only_where_it_runs() -> None:
    for phase in BACKUP_PHASES:
        assert Event.ADVER_TIMER in IGNORED[phase]
    for phase in ACTIVE_PHASES:
        assert Event.MASTER_DOWN_TIMER in IGNORED[phase]


def test_a_priority_change_never_changes_the_state() -> None:
    for phase in Phase:
        assert {t.state for t in TRANSITIONS[phase][Event.PRIORITY]} == {phase.state}


def test_an_advert_sent_ends_the_lead() -> None:
    # The lead's advert (timer), one at once on a priority 0 or a priority change: none is due.
    for event in (Event.ADVER_TIMER, Event.ADVERT_RESIGN, Event.PRIORITY):
        for phase in (Phase.ACTIVE_LEAD, Phase.ACTIVE_CONTESTED_LEAD):
            assert not TRANSITIONS[phase][event] & {
                Phase.ACTIVE_LEAD,
                Phase.ACTIVE_CONTESTED_LEAD,
            }


def test_rank_is_the_rfc_ranking() -> None:
    own = v4(5)
    assert rank(0, v4(9), 100, own) is Event.ADVERT_RESIGN
    assert rank(101, v4(1), 100, own) is Event.ADVERT_HIGHER
    assert rank(100, v4(6), 100, own) is Event.ADVERT_HIGHER
    assert rank(100, v4(4), 100, own) is Event.ADVERT_LOWER
    assert rank(99, v4(200), 100, own) is Event.ADVERT_LOWER
    assert rank(255, v4(1), 254, own) is Event.ADVERT_HIGHER
    with pytest.raises(ValueError, match="different families"):
        rank(100, IPv6Address("fe80::1"), 100, own)


# ------------------------------------------------------------------ the machine against it


class Recorder(Machine):
    """A machine that records every move it makes (before, event, after)."""

    def __init__(self, params: Params, seen: set[tuple[Phase, Event, Phase]]) -> None:
        super().__init__(params)
        self.seen = seen

    def _go(self, event: Event, phase: Phase) -> None:
        before = self.phase
        super()._go(event, phase)
        self.seen.add((before, event, phase))


def _walk(
    seed: int,
    seen: set[tuple[Phase, Event, Phase]],
    check: Callable[[Machine], None] | None = None,
) -> None:
    rnd = random.Random(seed)
    p = Params(
        3,
        100,
        100,
        v4(5),
        preempt=rnd.random() < 0.8,
        preempt_lead=rnd.choice([0.0, 0.002]),
        release_contest=rnd.choice([0.0, 0.004]),
        startup_hold=rnd.choice([0.0, 0.5, 3.0]),
        startup_adverts=rnd.choice([0, 3]),
    )
    m = Recorder(p, seen)
    now = 0.0
    for _ in range(400):
        if check is not None:
            check(m)
        now += rnd.choice([0.0, 0.0, 0.001, 0.01, 0.3, 1.0])
        roll = rnd.random()
        if roll < 0.03:
            m.shutdown(now)
        elif roll < 0.05:
            m.link_down(now)
        elif roll < 0.12:
            m.link_up(now)
            if m.phase is Phase.INITIALIZE:
                m.start(now)
        elif roll < 0.17:
            m.set_priority(now, rnd.choice([50, 100, 150]))
        elif roll < 0.55 and m.deadline is not None:
            if m.state is State.BACKUP and rnd.random() < 0.5:
                # A live lower-priority master, heard just before our down timer fires.
                now = max(now, m.deadline - 0.5)
                m.on_advert(now, v4(rnd.choice([4, 6])), 50, 100)
            if m.deadline is not None:
                now = max(now, m.deadline)
                m.on_timer(now)
        else:
            prio = rnd.choice([0, 50, m.priority, 200])
            m.on_advert(now, v4(rnd.choice([4, 6])), prio, 100)


def test_random_runs_make_every_move_in_the_table_and_no_other() -> None:
    seen: set[tuple[Phase, Event, Phase]] = set()
    for seed in range(300):
        _walk(seed, seen)
    # No other: the machine raised otherwise (see Machine._go); all of them: every row and
    # every target in it is a move the machine makes.
    assert set(moves()) - seen == set()
    assert seen <= set(moves())


def test_a_move_missing_from_the_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = {phase: dict(events) for phase, events in TRANSITIONS.items()}
    rows[Phase.INITIALIZE][Event.STARTUP] = frozenset({Phase.BACKUP})  # a wrong row
    monkeypatch.setattr(variables, "TRANSITIONS", rows)
    m = Machine(Params(3, 100, 100, v4(5)))
    with pytest.raises(RuntimeError, match="initialize --startup--> backup/start-up-hold"):
        m.start(0.0)
    assert m.phase is Phase.INITIALIZE


def test_the_driver_s_steady_tick_is_exactly_the_sub_states_whose_timer_only_advertises() -> None:
    # vrrp.driver.timers sends the advert of an ADVERT_ONLY sub-state's tick without the rest
    # of its bookkeeping: right only if that tick never does anything else, and every other
    # Active sub-state's tick does more.
    found: dict[Phase, set[bool]] = {}

    def check(m: Machine) -> None:
        if m.phase in ACTIVE_PHASES and m.deadline is not None:
            twin = copy.deepcopy(m)
            only = twin.on_timer(m.deadline) == [SendAdvert(m.priority)]
            found.setdefault(m.phase, set()).add(only)

    for seed in range(100):
        _walk(seed, set(), check)
    assert found == {phase: {phase in ADVERT_ONLY} for phase in ACTIVE_PHASES}
