"""The variables of one VRRP virtual router, and the moves its rules make.

What it is: :class:`RouterVariables`, the base of ``vrrp.state.Machine``: RFC 9568 §6.1's
per-router variables (Priority, Master_Adver_Interval; the §6.1 Skew_Time and
Master_Down_Interval derived from them), the bookkeeping the reasons are written from, and
the moves every rule makes: into Backup, into Active, and accepting a master's advert
(§6.4.2). Every change of sub-state goes through ``_go``, which refuses one the table
(``vrrp.transitions``) lacks.

What it must not do: decide. The rules are ``vrrp.state`` (Startup, Shutdown, priority
changes), ``vrrp.backup`` (§6.4.2) and ``vrrp.active`` (§6.4.3). No I/O.
"""

from __future__ import annotations

from vipd.vrrp.actions import fmt_s as _fmt_s
from vipd.vrrp.params import IPAddress, Params
from vipd.vrrp.timing import (
    DOWN_TIMER_ADVERTS,
    MAX_LEARNED_INTERVAL_FACTOR,
    master_down_interval,
    skew_time,
)
from vipd.vrrp.transitions import TRANSITIONS, Event, Phase, State

__all__ = ["LEAD_PHASES", "NO_LEAD", "RouterVariables"]

# The Active sub-states whose advert waits for the make-before-break lead, and where each
# goes once that advert is sent (with the lead's or on any earlier one).
LEAD_PHASES = frozenset({Phase.ACTIVE_LEAD, Phase.ACTIVE_CONTESTED_LEAD})
NO_LEAD = {
    Phase.ACTIVE: Phase.ACTIVE,
    Phase.ACTIVE_LEAD: Phase.ACTIVE,
    Phase.ACTIVE_CONTESTED_LEAD: Phase.ACTIVE_CONTESTED,
    Phase.ACTIVE_CONTESTED: Phase.ACTIVE_CONTESTED,
}


class RouterVariables:
    """One virtual router's variables (see ``vrrp.state.Machine`` for the public ones)."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.phase = Phase.INITIALIZE
        self.priority = params.priority
        self.deadline: float | None = None
        self.master_ip: IPAddress | None = None
        self.master_priority: int | None = None
        self.master_adver_interval_cs = params.advert_interval_cs
        self.last_advert_at: float | None = None
        self.state_since: float | None = None
        self.last_reason = ""
        self.own_ip_adverts = 0
        # BACKUP bookkeeping, kept so the takeover reason can say what happened.
        self._backup_since = 0.0
        # A priority-0 advert armed the short (skew) timer: (sender, arrival time).
        self._released: tuple[IPAddress, float] | None = None
        # Last lower-priority advert we discarded: (sender, priority, arrival time).
        self._discarded: tuple[IPAddress, int, float] | None = None
        # preempt_delay window: started by the first lower-priority advert in this BACKUP
        # period, cleared by an advert of priority >= ours (keepalived "stop preempt delay").
        self._preempt_window_start: float | None = None
        # ACTIVE_CONTESTED*: the router whose lower-ranked advert we answered.
        self._contested: tuple[IPAddress, int] | None = None
        # BACKUP_CONTEST: the takeover's reason, for when the window ends.
        self._contest_reason = ""
        # BACKUP_STARTING: adverts heard since the start, and the hold's end.
        self._heard = 0
        self._hold_until = 0.0

    def __repr__(self) -> str:
        return (
            f"Machine(v{self.params.version} {self.params.primary_ip} prio {self.priority} "
            f"{self.phase.value} deadline={self.deadline} master={self.master_ip})"
        )

    # ------------------------------------------------------------------ derived values

    @property
    def state(self) -> State:
        """The RFC 9568 §6.4 state (the phase without its sub-state)."""
        return self.phase.state

    @property
    def contest_pending(self) -> bool:
        """Advertised after a priority-0 advert; the bind waits for the contest window."""
        return self.phase is Phase.BACKUP_CONTEST

    @property
    def lead_pending(self) -> bool:
        """Announced; the advert that makes another router step down is due at the deadline."""
        return self.phase in LEAD_PHASES

    @property
    def skew(self) -> float:
        """Our current Skew_Time in seconds (own priority, current Master_Adver_Interval)."""
        return skew_time(self.params.version, self.priority, self.master_adver_interval_cs)

    @property
    def mdi(self) -> float:
        """Our current Master_Down_Interval in seconds."""
        return master_down_interval(
            self.params.version, self.priority, self.master_adver_interval_cs
        )

    @property
    def advert_interval(self) -> float:
        """Our own advertisement interval in seconds."""
        return self.params.advert_interval_cs / 100

    def _mdi_text(self) -> str:
        return (
            f"MDI {_fmt_s(self.mdi)} s = {DOWN_TIMER_ADVERTS} x "
            f"{_fmt_s(self.master_adver_interval_cs / 100)} s + skew {_fmt_s(self.skew)} s "
            f"at our prio {self.priority}"
        )

    def _go(self, event: Event, phase: Phase) -> None:
        """Move to ``phase`` on ``event``, if the table has that row (else a bug: raise)."""
        if phase not in TRANSITIONS[self.phase].get(event, ()):
            raise RuntimeError(
                f"VRRP transition {self.phase.value} --{event.value}--> {phase.value} "
                "is not in vrrp.transitions.TRANSITIONS"
            )
        self.phase = phase

    # ------------------------------------------------------------------ moves

    def _enter_backup(self, now: float, event: Event, phase: Phase) -> None:
        self._go(event, phase)
        self._contest_reason = ""
        self._contested = None
        self._heard = 0
        self.state_since = now
        self._backup_since = now
        self.last_advert_at = None
        self._released = None
        self._discarded = None
        self._preempt_window_start = None

    def _become_active(self, now: float, reason: str, phase: Phase) -> None:
        self._go(Event.MASTER_DOWN_TIMER, phase)
        self.state_since = now
        self.last_reason = reason
        self.master_ip = self.params.primary_ip
        self.master_priority = self.priority
        self.master_adver_interval_cs = self.params.advert_interval_cs
        self.last_advert_at = None
        self._released = None
        self._discarded = None
        self._preempt_window_start = None

    def _learn(self, now: float, src: IPAddress, priority: int, interval_cs: int) -> None:
        # RFC 9568 §6.4.2: v3 sets Master_Adver_Interval from the advert; v2 has no such
        # variable (the interval must match ours, enforced by the packet checks). Clamped:
        # a forged advert must not stretch our down timer without bound.
        if self.params.version == 3:
            bound = MAX_LEARNED_INTERVAL_FACTOR * self.params.advert_interval_cs
            self.master_adver_interval_cs = min(interval_cs, bound)
        self.master_ip = src
        self.master_priority = priority
        self.last_advert_at = now
        self._released = None
        self.deadline = now + self.mdi
