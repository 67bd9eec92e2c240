"""The VRRP state machine's states, sub-states, events and transitions, as data.

What it is: the table :class:`vrrp.state.Machine` runs on. RFC 9568 §6.4 has three states
(Initialize, Backup, Active; RFC 3768 §6.4 says Master for Active); the behaviour choices of
``vrrp.state`` split two of them into explicit sub-states (:class:`Phase`), and every input is
one of the RFC's events (:class:`Event`). :data:`TRANSITIONS` says, for each sub-state and
event, which sub-states may follow; :data:`IGNORED` lists the events a sub-state drops. Every
(sub-state, event) pair is in exactly one of the two, and the machine refuses (raises) a move
that is not in the table, so the table is what the machine does, not a description of it.

What it must not do: decide between the rows (the guards: priorities, preemption, the hold,
the timers' arithmetic are ``vrrp.state``'s), hold a router's state, or do any I/O.

The rules, first (RFC 9568 §6.4.1-§6.4.3; each is a row or a set of rows below):

- Startup (§6.4.1). We never own the address (priority 255), so Initialize always goes to
  Backup, in its start-up hold: no Startup event ever makes us Active. Startup is ignored by
  a router that is already in the election.
- Shutdown (§6.4.2, §6.4.3) takes every sub-state to Initialize (an Active one sends a
  priority-0 advert first; a down link is a Shutdown without it).
- Backup, an advert (§6.4.2). Priority 0: the Skew_Time timer is armed; anything else is
  accepted (the down timer restarts) or discarded (we will preempt): the router stays a
  Backup either way. No advert ever makes a Backup Active: only its Master_Down_Timer does.
- Backup, Master_Down_Timer fired (§6.4.2): become Active, advert first (the master is dead)
  or announcement first (make-before-break: ``Phase.ACTIVE_LEAD``), or, after a priority-0
  advert, advertise and wait for the release contest (``Phase.BACKUP_CONTEST``). A Backup in
  its start-up hold whose master is alive stays held (bounded, see ``vrrp.state``).
- Release contest: a better router's advert (§6.4.3 ranking) ends it in plain Backup, our
  VIP never bound; a worse one or a priority 0 changes nothing; the timer binds (Active).
- Active, an advert (§6.4.3). Priority 0: advertise at once. A router that ranks above us
  (higher priority, or equal priority and a greater primary address): step down to Backup.
  One that ranks below us: stay Active, re-announce and advertise (the contest,
  ``Phase.ACTIVE_CONTESTED*``), until an advert interval passes without its adverts.
- Active, Adver_Timer fired (§6.4.3): advertise; the lead's advert ends the make-before-break
  lead; a quiet interval ends the contest (re-announcing once more).
- A priority change (§6.1 Priority; the health gate's) never changes the state: a Backup's
  down timer moves by the change of skew; an Active router advertises the new priority at
  once, which sends any due lead's advert with it.
- The timers only exist where they run: Initialize has none, a Backup has no Adver_Timer and
  an Active router no Master_Down_Timer (§6.4.2, §6.4.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from ipaddress import IPv4Address, IPv6Address
from typing import Final

__all__ = [
    "ACTIVE_PHASES",
    "BACKUP_PHASES",
    "IGNORED",
    "TRANSITIONS",
    "Event",
    "Phase",
    "State",
    "address_greater",
    "rank",
]


class State(Enum):
    """RFC 9568 §6.4 states. ACTIVE is RFC 3768's MASTER; the value is usable as a label."""

    INITIALIZE = "initialize"
    BACKUP = "backup"
    ACTIVE = "active"


class Phase(Enum):
    """A :class:`State` and, where ``vrrp.state`` has one, its sub-state (one value each,
    never a combination of flags). The value is ``"<state>"`` or ``"<state>/<sub-state>"``."""

    INITIALIZE = "initialize"
    # Backup after a Startup event: no preemption of a live master before the hold ends.
    BACKUP_STARTING = "backup/start-up-hold"
    BACKUP = "backup"
    # Backup whose down timer fired after a priority-0 advert: our advert is out, the VIP is
    # bound at the end of the contest window unless a better router advertises first.
    BACKUP_CONTEST = "backup/release-contest"
    ACTIVE = "active"
    # Active after preempting a live master: announced, our advert due after the lead.
    ACTIVE_LEAD = "active/make-before-break"
    # Active that answered a lower-ranked router's advert: re-announced, the advert due
    # after the lead; then ACTIVE_CONTESTED until a quiet advert interval.
    ACTIVE_CONTESTED_LEAD = "active/contested-lead"
    ACTIVE_CONTESTED = "active/contested"

    # Members are singletons: hash by identity, in C. Enum's own hash (of the name, in
    # Python) costs a function call on every table lookup, several per advert and per tick.
    __hash__ = object.__hash__

    @property
    def state(self) -> State:
        """The RFC state this sub-state belongs to."""
        return _STATE_OF[self]


_STATE_OF: Final[Mapping[Phase, State]] = {
    phase: State(phase.value.partition("/")[0]) for phase in Phase
}

BACKUP_PHASES: Final = frozenset(p for p in Phase if p.state is State.BACKUP)
ACTIVE_PHASES: Final = frozenset(p for p in Phase if p.state is State.ACTIVE)


class Event(Enum):
    """RFC 9568 §6.4's events, a received advert classified by the §6.4.3 ranking."""

    STARTUP = "startup"  # start(), link_up()
    SHUTDOWN = "shutdown"  # shutdown(), link_down()
    ADVERT_RESIGN = "advert-priority-0"
    ADVERT_HIGHER = "advert-higher"  # ranks above us: higher priority, or equal and greater IP
    ADVERT_LOWER = "advert-lower"  # ranks below us (priority 1..ours)
    MASTER_DOWN_TIMER = "master-down-timer"  # Backup's timer (and the contest window's end)
    ADVER_TIMER = "adver-timer"  # Active's timer (and the make-before-break lead's end)
    PRIORITY = "priority-change"  # set_priority()

    __hash__ = object.__hash__  # as Phase's


def address_greater(a: IPv4Address | IPv6Address, b: IPv4Address | IPv6Address) -> bool:
    """RFC 9568 §6.4.3's tie-break: ``a``'s address is numerically greater than ``b``'s."""
    # Compared as unsigned integers in network byte order, which is what int() of an
    # ipaddress object is. Mixed families cannot be ranked; the transport only ever hands us
    # one family per instance.
    if a.version != b.version:
        raise ValueError(f"cannot compare {a} with our address {b}: different families")
    return int(a) > int(b)


def rank(
    priority: int,
    src: IPv4Address | IPv6Address,
    ours: int,
    own: IPv4Address | IPv6Address,
) -> Event:
    """The event an advert of ``priority`` from ``src`` is to a router of priority ``ours``
    whose primary address is ``own`` (RFC 9568 §6.4.3)."""
    if priority == 0:
        return Event.ADVERT_RESIGN
    if priority > ours or (priority == ours and address_greater(src, own)):
        return Event.ADVERT_HIGHER
    return Event.ADVERT_LOWER


_P = Phase
_E = Event
_ADVERTS = (_E.ADVERT_RESIGN, _E.ADVERT_HIGHER, _E.ADVERT_LOWER)


def _rows(*pairs: tuple[Event, set[Phase]]) -> dict[Event, frozenset[Phase]]:
    return {event: frozenset(targets) for event, targets in pairs}


# For each sub-state: each event it takes, and the sub-states that may follow it there.
TRANSITIONS: Final[Mapping[Phase, Mapping[Event, frozenset[Phase]]]] = {
    _P.INITIALIZE: _rows(
        (_E.STARTUP, {_P.BACKUP_STARTING}),
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        (_E.PRIORITY, {_P.INITIALIZE}),
    ),
    _P.BACKUP_STARTING: _rows(
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        *((event, {_P.BACKUP_STARTING}) for event in _ADVERTS),
        (
            _E.MASTER_DOWN_TIMER,
            {_P.BACKUP_STARTING, _P.BACKUP_CONTEST, _P.ACTIVE, _P.ACTIVE_LEAD},
        ),
        (_E.PRIORITY, {_P.BACKUP_STARTING}),
    ),
    _P.BACKUP: _rows(
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        *((event, {_P.BACKUP}) for event in _ADVERTS),
        (_E.MASTER_DOWN_TIMER, {_P.BACKUP_CONTEST, _P.ACTIVE, _P.ACTIVE_LEAD}),
        (_E.PRIORITY, {_P.BACKUP}),
    ),
    _P.BACKUP_CONTEST: _rows(
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        (_E.ADVERT_HIGHER, {_P.BACKUP}),
        (_E.MASTER_DOWN_TIMER, {_P.ACTIVE}),
        (_E.PRIORITY, {_P.BACKUP_CONTEST}),
    ),
    _P.ACTIVE: _rows(
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        (_E.ADVERT_RESIGN, {_P.ACTIVE}),
        (_E.ADVERT_HIGHER, {_P.BACKUP}),
        # With a lead the advert waits for it; without one it goes with the announcement.
        (_E.ADVERT_LOWER, {_P.ACTIVE_CONTESTED_LEAD, _P.ACTIVE_CONTESTED}),
        (_E.ADVER_TIMER, {_P.ACTIVE}),
        (_E.PRIORITY, {_P.ACTIVE}),
    ),
    _P.ACTIVE_LEAD: _rows(
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        (_E.ADVERT_RESIGN, {_P.ACTIVE}),
        (_E.ADVERT_HIGHER, {_P.BACKUP}),
        (_E.ADVERT_LOWER, {_P.ACTIVE_CONTESTED_LEAD}),
        (_E.ADVER_TIMER, {_P.ACTIVE}),
        (_E.PRIORITY, {_P.ACTIVE}),
    ),
    _P.ACTIVE_CONTESTED_LEAD: _rows(
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        (_E.ADVERT_RESIGN, {_P.ACTIVE_CONTESTED}),
        (_E.ADVERT_HIGHER, {_P.BACKUP}),
        (_E.ADVERT_LOWER, {_P.ACTIVE_CONTESTED_LEAD}),
        (_E.ADVER_TIMER, {_P.ACTIVE_CONTESTED}),
        (_E.PRIORITY, {_P.ACTIVE_CONTESTED}),
    ),
    _P.ACTIVE_CONTESTED: _rows(
        (_E.SHUTDOWN, {_P.INITIALIZE}),
        (_E.ADVERT_RESIGN, {_P.ACTIVE_CONTESTED}),
        (_E.ADVERT_HIGHER, {_P.BACKUP}),
        (_E.ADVERT_LOWER, {_P.ACTIVE_CONTESTED_LEAD, _P.ACTIVE_CONTESTED}),
        (_E.ADVER_TIMER, {_P.ACTIVE}),
        (_E.PRIORITY, {_P.ACTIVE_CONTESTED}),
    ),
}

# For each sub-state: the events it drops (nothing changes, no action).
IGNORED: Final[Mapping[Phase, frozenset[Event]]] = {
    _P.INITIALIZE: frozenset({*_ADVERTS, _E.MASTER_DOWN_TIMER, _E.ADVER_TIMER}),
    _P.BACKUP_STARTING: frozenset({_E.STARTUP, _E.ADVER_TIMER}),
    _P.BACKUP: frozenset({_E.STARTUP, _E.ADVER_TIMER}),
    # Our advert answered the resignation already; a worse router steps down on it.
    _P.BACKUP_CONTEST: frozenset({_E.STARTUP, _E.ADVER_TIMER, _E.ADVERT_RESIGN, _E.ADVERT_LOWER}),
    **{phase: frozenset({_E.STARTUP, _E.MASTER_DOWN_TIMER}) for phase in ACTIVE_PHASES},
}
