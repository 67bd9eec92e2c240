"""The VRRP state machine of one virtual router, as pure data in and data out.

What it is: RFC 9568 §6 (VRRPv3; "Active" is the RFC's new word for "Master") and RFC 3768
§6 (VRRPv2) for a router that never owns the virtual address (priority 1..254), with the
behaviour choices of keepalived 2.2.7 where the RFCs leave room. A :class:`Machine` is fed
three kinds of input: a received advert (:meth:`Machine.on_advert`), the expiry of its single
timer (:meth:`Machine.on_timer`) and commands and events from the shell (:meth:`Machine.start`,
:meth:`Machine.set_priority`, :meth:`Machine.shutdown`, :meth:`Machine.link_down`,
:meth:`Machine.link_up`). Each call returns a list of actions
(:class:`SendAdvert`, :class:`BecomeActive`, :class:`BecomeBackup`, :class:`Announce`,
:class:`ContestLost`) that the
shell performs in order, and leaves :attr:`Machine.deadline` set to the time at which the shell
must call :meth:`Machine.on_timer` next.

What it must not do: any I/O. No sockets, no netlink, no clock, no asyncio, no logging. Time is
always passed in as ``now``: float seconds of a monotonic clock. The shell validates adverts
(``vrrp.packet.check``) before they get here; this module only sees the three fields the state
machine needs: sender address, priority and advertisement interval.

The rules, with where they come from:

- Timers (RFC 3768 §6.1, RFC 9568 §6.1). v2: ``Skew_Time = (256 - Priority) / 256`` seconds,
  independent of the interval; ``Master_Down_Interval = 3 * Advertisement_Interval + Skew``.
  v3: ``Skew_Time = ((256 - Priority) * Master_Adver_Interval) / 256`` and
  ``Master_Down_Interval = 3 * Master_Adver_Interval + Skew``. ``Priority`` is always OUR
  (effective) priority. Computed in integer microseconds exactly as keepalived's ``vrrp.h``
  does, so both implementations put a backup's timer at the same place (truncation < 1 µs).
- Startup (RFC 9568 §6.4.1, keepalived ``vrrp_init_state``). We are never the address owner,
  so INITIALIZE always goes to BACKUP and waits a full Master_Down_Interval: a node that boots
  must not grab the VIP from a running master.
- BACKUP (RFC 9568 §6.4.2, keepalived ``vrrp_state_backup``). Priority 0 = the master resigned:
  take over after Skew_Time. Otherwise accept the advert (reset the down timer; v3 also adopts
  the sender's interval, clamped to ``MAX_LEARNED_INTERVAL_FACTOR`` (4) x our own configured
  interval so that one forged advert cannot stretch the down timer without bound: a shorter
  interval is adopted as sent, a longer one up to 4x; see docs/design/vrrp.md "Forged
  adverts") if preemption is off or the sender's priority is >= ours; else
  discard it, so our down timer runs out and we preempt. ``preempt_delay`` (keepalived) keeps
  accepting lower-priority adverts for that long after the first one. Start-up hold: a router
  that has just started (or whose link came up) does not preempt a live master before
  ``Params.startup_hold`` seconds since the start and ``Params.startup_adverts`` adverts heard,
  so the move happens on a warm process (imports done, the collector settled, sockets and
  netlink used once). Bounded: the takeover comes at most ``max(startup_hold,
  startup_adverts x interval)`` after the start, or at Master_Down_Interval if that is later
  (at 1 s adverts it always is: no delay); a lone node or a dead master is not held.
- Down timer expiry, three orders. After a priority-0 advert the old master waits (quiet,
  VIP still bound) for our advert and announcement: the advert first, and the VIP bound and
  announced ``Params.release_contest`` later and a second advert right after (the old master
  lets go on the announcement or on that advert), unless a better router's advert (a higher
  priority, or an equal one from a greater address, RFC 9568 §6.4.3's ranking) arrives in
  between, in which case we never bind it (:class:`ContestLost`). Backups of one priority
  share one Skew_Time, so their timers fire together; binding first put the VIP on each of
  them until their adverts crossed. The old master presumed dead (no advert of it in the last
  two intervals): send one advert FIRST, then become active (RFC 9568 §6.4.2, keepalived
  ``vrrp_state_goto_master``): the advert stops any other backup's takeover at once, and
  there is nobody to move clients away from. Preemption of a live lower-priority master
  (make-before-break): become active first (the shell binds the VIP and sends the first
  gratuitous ARP), and send the advert ``Params.preempt_lead`` later, so the clients are on
  our MAC before the old master steps down on that advert and stops answering.
- ACTIVE (RFC 9568 §6.4.3, keepalived ``vrrp_state_master_rx``). Priority 0: advertise at once.
  Higher priority, or equal priority from a numerically greater address: step down. Lower (or
  equal from a smaller address): re-announce first, then advertise ``preempt_lead`` later
  (RFC 9568 §6.4.3 says at once; the lead moves the clients before the other router steps
  down, as for preemption); the
  first advert tick without another such advert (the other router stepped down) re-announces
  once more, because its gratuitous ARP and ours crossed on the wire.
- Shutdown (RFC 9568 §6.4.3 "Shutdown event"): an active router sends priority 0 so the
  backups take over after their skew instead of a full down interval.
- Link down is a Shutdown event without the priority-0 advert (it cannot leave a down link);
  link up is a Startup event (RFC 9568 §6.4: the interface is the router's "hardware").

Reasons. Every transition carries a reason string ``"<label>: <details>"``. The label is one of
:data:`REASON_LABELS` (stable: use it as a metric label, see :func:`reason_label`); the details
carry the numbers behind the decision (priorities, intervals, who was seen, how long ago) for
the log line.
"""

from __future__ import annotations

from vipd.vrrp.actions import (
    REASON_LABELS,
    Action,
    Announce,
    BecomeActive,
    BecomeBackup,
    ContestLost,
    SendAdvert,
    reason_label,
)
from vipd.vrrp.actions import fmt_s as _fmt_s
from vipd.vrrp.params import IPAddress, Params
from vipd.vrrp.timing import (
    DOWN_TIMER_ADVERTS,
    MAX_LEARNED_INTERVAL_FACTOR,
    master_down_interval,
    master_down_interval_us,
    skew_time,
    skew_time_us,
)
from vipd.vrrp.timing import check_priority as _check_priority
from vipd.vrrp.transitions import (
    ACTIVE_PHASES,
    IGNORED,
    TRANSITIONS,
    Event,
    Phase,
    State,
    rank,
)

# The names other modules have always imported from here (the machine's vocabulary).
__all__ = [
    "MAX_LEARNED_INTERVAL_FACTOR",
    "REASON_LABELS",
    "Action",
    "Announce",
    "BecomeActive",
    "BecomeBackup",
    "ContestLost",
    "IPAddress",
    "Machine",
    "Params",
    "Phase",
    "SendAdvert",
    "State",
    "backup_accepts",
    "master_down_interval",
    "master_down_interval_us",
    "reason_label",
    "skew_time",
    "skew_time_us",
]


# The Active sub-states whose advert waits for the make-before-break lead, and where each
# goes once that advert is sent (with the lead's or on any earlier one).
_LEAD_PHASES = frozenset({Phase.ACTIVE_LEAD, Phase.ACTIVE_CONTESTED_LEAD})
_NO_LEAD = {
    Phase.ACTIVE: Phase.ACTIVE,
    Phase.ACTIVE_LEAD: Phase.ACTIVE,
    Phase.ACTIVE_CONTESTED_LEAD: Phase.ACTIVE_CONTESTED,
    Phase.ACTIVE_CONTESTED: Phase.ACTIVE_CONTESTED,
}


def backup_accepts(params: Params, ours: int, priority: int) -> bool:
    """RFC 9568 §6.4.2: a Backup accepts a (non-zero priority) advert as its master's, and
    restarts its down timer from it, if Preempt_Mode is off or the advert's priority is at
    least ours (``ours``: our effective priority); otherwise it discards it (and preempts when
    the timer fires, after keepalived's ``preempt_delay`` if one is set)."""
    return not params.preempt or priority >= ours


class Machine:
    """One VRRP virtual router. Not thread-safe; the shell serialises all calls.

    Public attributes (read them, do not assign them):

    - ``phase``: :class:`Phase`, the state and its sub-state; ``state`` is its :class:`State`.
    - ``priority``: our effective priority (the configured one until :meth:`set_priority`).
    - ``deadline``: when the shell must call :meth:`on_timer` (None in INITIALIZE). In BACKUP
      it is the master-down timer, in ACTIVE the advert timer.
    - ``master_ip`` / ``master_priority``: who we believe is active (ourselves in ACTIVE;
      the sender of the last accepted advert in BACKUP; None when unknown).
    - ``master_adver_interval_cs``: the interval the down timer is based on (v3: learned from
      the last accepted advert; v2 and in ACTIVE: our own).
    - ``last_advert_at``: arrival time of the last accepted advert (BACKUP only, else None).
    - ``state_since``: when the current state was entered.
    - ``last_reason``: the reason of the last transition or announcement.
    - ``contest_pending``: ``Phase.BACKUP_CONTEST``: our advert sent after a priority-0
      advert, the VIP not bound yet; ``deadline`` is when we bind it.
    - ``lead_pending``: announced, the advert that makes another router step down is due at
      ``deadline`` (``Phase.ACTIVE_LEAD``, ``Phase.ACTIVE_CONTESTED_LEAD``).
    - ``own_ip_adverts``: adverts ignored because they carried our own source address.
    """

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
        return self.phase in _LEAD_PHASES

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

    # ------------------------------------------------------------------ Startup, Shutdown

    def start(self, now: float) -> list[Action]:
        """INITIALIZE -> BACKUP; the down timer starts (RFC 9568 §6.4.1, non-owner branch).

        Returns ``[BecomeBackup("start: ...")]`` so the shell removes any VIP left behind by
        a previous run (keepalived ``remove_residual_vips``) through the same code path as
        any other demotion. The effective priority is kept across shutdown/start: it is the
        health gate's to change, not the lifecycle's.
        """
        if self.phase is not Phase.INITIALIZE:
            raise RuntimeError(f"start() called in state {self.state.value}")
        self.master_adver_interval_cs = self.params.advert_interval_cs
        self.master_ip = None
        self.master_priority = None
        self._enter_backup(now, Event.STARTUP, Phase.BACKUP_STARTING)
        self._hold_until = now + self.params.startup_hold
        self.deadline = now + self.mdi
        reason = f"start: entering backup, waiting {self._mdi_text()}"
        self.last_reason = reason
        return [BecomeBackup(reason)]

    def shutdown(self, now: float) -> list[Action]:
        """Stop: ACTIVE sends priority 0 then drops the VIP; any state ends in INITIALIZE."""
        advertised = self.phase in ACTIVE_PHASES or self.phase is Phase.BACKUP_CONTEST
        self._go(Event.SHUTDOWN, Phase.INITIALIZE)
        self.state_since = now
        self.deadline = None
        self._contest_reason = ""
        self._contested = None
        self.master_ip = None
        self.master_priority = None
        self.last_advert_at = None
        if not advertised:
            return []
        # Priority 0 first so the backups start their (short) skew timer while we are still
        # tearing down; they take over after Skew_Time instead of a full down interval.
        reason = "shutdown: sent a priority-0 advert, backups take over after their skew time"
        self.last_reason = reason
        return [SendAdvert(0), BecomeBackup(reason)]

    def link_down(self, now: float) -> list[Action]:
        """The interface went down: a Shutdown event (RFC 9568 §6.4), without the advert.

        A priority-0 advert cannot leave a down link, so none is sent: the peers time out
        instead (Master_Down_Interval). Any state but INITIALIZE ends there with
        ``BecomeBackup("interface-down: ...")`` (a backup leaves the election too); already
        out of it, nothing happens.
        """
        was = self.state
        if was is State.INITIALIZE:
            return []
        self.shutdown(now)
        reason = f"interface-down: the link is down, leaving the election (was {was.value})"
        self.last_reason = reason
        return [BecomeBackup(reason)]

    def link_up(self, now: float) -> list[Action]:
        """The interface came up: a Startup event (RFC 9568 §6.4.1), as `start` but with its
        own reason; nothing happens unless the machine is out of the election."""
        if Event.STARTUP in IGNORED[self.phase]:
            return []
        self.start(now)
        reason = f"interface-up: the link is up, entering backup, waiting {self._mdi_text()}"
        self.last_reason = reason
        return [BecomeBackup(reason)]

    # ------------------------------------------------------------------ priority change

    def set_priority(self, now: float, priority: int) -> list[Action]:
        """Change our effective priority (health gating). 1..254.

        BACKUP: the pending down timer was armed as ``t0 + 3*interval + skew(old)`` (or
        ``t0 + skew(old)`` after a priority-0 advert); it is moved by ``skew(new) - skew(old)``
        so it reads as if it had been armed with the new priority. keepalived's
        ``vrrp_set_effective_priority`` moves it by the down-interval difference, which is
        the same thing in the normal case; after a priority-0 advert keepalived compares the
        skew it armed with a full down interval and so adds 3 x interval to a pending
        release takeover, which we consider a bug and do not copy. (A release contest's
        deadline is the bind, not a skew: it stays.)

        ACTIVE: keepalived just lets the next periodic advert carry the new priority. We send
        one at once (and restart the advert timer) so peers see the change within one
        latency: a preempting backup still waits for its down timer, but its view of the
        master and the logs stop lagging by up to one interval. One extra packet per
        priority change; the health checker's rise/fall already debounces changes.
        """
        _check_priority(priority, 1, 254)
        if priority == self.priority:
            return []
        phase = self.phase
        if phase in (Phase.BACKUP_STARTING, Phase.BACKUP) and self.deadline is not None:
            old_skew = self.skew
            self.priority = priority
            self.deadline += self.skew - old_skew
            self._go(Event.PRIORITY, phase)
            return []
        self.priority = priority
        if phase not in ACTIVE_PHASES:
            self._go(Event.PRIORITY, phase)
            return []
        self.master_priority = priority
        self._go(Event.PRIORITY, _NO_LEAD[phase])  # this advert is the lead's too
        self.deadline = now + self.advert_interval
        return [SendAdvert(priority)]

    # ------------------------------------------------------------------ timers

    def on_timer(self, now: float) -> list[Action]:
        """The deadline passed: the Adver_Timer (Active) or the Master_Down_Timer (Backup)
        fired. Early or stray calls (``now < deadline``) are ignored."""
        if self.deadline is None or now < self.deadline:
            return []
        if self.phase in ACTIVE_PHASES:
            return self._adver_timer(now)
        if self.phase is Phase.BACKUP_CONTEST:
            return self._contest_won(now)
        return self._master_down(now)

    def _adver_timer(self, now: float) -> list[Action]:
        # RFC 9568 §6.4.3: send an advert, restart the timer. When the shell is late we
        # restart from now rather than catching up in a burst.
        self.deadline = now + self.advert_interval
        if self.phase is not Phase.ACTIVE_CONTESTED:
            # A lead's advert is this one; a contest still open ends on a later tick.
            self._go(Event.ADVER_TIMER, _NO_LEAD[self.phase])
            return [SendAdvert(self.priority)]
        assert self._contested is not None
        # Every lower-priority advert restarts this timer, so a tick means a whole interval
        # without one: the other router stepped down. Announce once more, so a gratuitous
        # ARP it sent after ours (the two cross on the wire) cannot leave the clients on a
        # MAC that no longer answers for the VIP.
        src, prio = self._contested
        self._contested = None
        self._go(Event.ADVER_TIMER, Phase.ACTIVE)
        reason = (
            f"lower-priority-advert: contest over, {src} (prio {prio}) quiet for "
            f"{_fmt_s(self.advert_interval)} s; announcing once more"
        )
        self.last_reason = reason
        return [SendAdvert(self.priority), Announce(reason)]

    def _contest_won(self, now: float) -> list[Action]:
        # The contest window after our advert passed without a better router's advert (the
        # shell read the socket up to now): bind and announce, then advertise again. The
        # old master lets go on our announcement (IPv4) or this second advert (IPv6, whose
        # announcements it does not watch), so the clients never wait on a descheduled
        # process between our bind and its release.
        reason = self._contest_reason
        self._contest_reason = ""
        self._become_active(now, reason, Phase.ACTIVE)
        self.deadline = now + self.advert_interval
        return [BecomeActive(reason), SendAdvert(self.priority)]

    def _master_down(self, now: float) -> list[Action]:
        # BACKUP: Master_Down_Timer fired (RFC 9568 §6.4.2) -> become active.
        interval = self.master_adver_interval_cs / 100
        live = self._discarded is not None and now - self._discarded[2] <= 2 * interval
        starting = self.phase is Phase.BACKUP_STARTING
        if live and starting:
            # Start-up hold: a live master keeps the VIP until we are warm (bounded).
            if now < self._hold_until:
                self.deadline = self._hold_until
                self._go(Event.MASTER_DOWN_TIMER, Phase.BACKUP_STARTING)
                return []
            # Counted, but bounded from our start: a master whose first advert comes just
            # before our down timer (it started moments before us) must not hold us for
            # another ``startup_adverts`` intervals of its own.
            warm_by = self._backup_since + self.params.startup_adverts * interval
            if self._heard < self.params.startup_adverts and now < warm_by:
                self.deadline = min(now + interval, warm_by)
                self._go(Event.MASTER_DOWN_TIMER, Phase.BACKUP_STARTING)
                return []
        held = starting and now > self._backup_since + self.mdi
        lead = self.params.preempt_lead if live else 0.0
        released = self._released is not None
        details = self._down_details(now)
        if live and held:
            details += (
                f"; held after start for {_fmt_s(now - self._backup_since)} s (start-up hold "
                f"{_fmt_s(self.params.startup_hold)} s, {self.params.startup_adverts} adverts)"
            )
        if live:
            details += f"; make-before-break: announcing first, advertising {_fmt_s(lead)} s later"
        contest = self.params.release_contest
        if released and contest > 0:
            # The old master resigned and keeps the VIP (quiet) until it hears our advert
            # and sees our announcement. The advert goes first: it stops the other
            # backups' skew timers, and one of our priority fired with us (one Skew_Time
            # for all of them); its advert reaching us inside the window decides, by the
            # RFC 9568 §6.4.3 ranking, which of us binds, so the VIP is never on both.
            details += (
                f"; advertised first, binding after a {_fmt_s(contest)} s contest window "
                "without a better router's advert"
            )
            self._contest_reason = self.last_reason = f"master-down: {details}"
            self._go(Event.MASTER_DOWN_TIMER, Phase.BACKUP_CONTEST)
            self.deadline = now + contest
            return [SendAdvert(self.priority)]
        reason = f"master-down: {details}"
        if released or not live:
            # RFC order: the advert first. The old master is presumed dead, so there are no
            # clients to keep; the advert stops the other backups' timers at once. (After a
            # priority-0 advert with no contest window, the same.)
            self._become_active(now, reason, Phase.ACTIVE)
            self.deadline = now + self.advert_interval
            return [SendAdvert(self.priority), BecomeActive(reason)]
        # Make-before-break: the old master is alive and answers the clients until it hears
        # our advert, so our gratuitous ARP goes first and the advert after it.
        if lead == 0:
            self._become_active(now, reason, Phase.ACTIVE)
            self.deadline = now + self.advert_interval
            return [BecomeActive(reason), SendAdvert(self.priority)]
        self._become_active(now, reason, Phase.ACTIVE_LEAD)
        self.deadline = now + lead
        return [BecomeActive(reason)]

    # ------------------------------------------------------------------ adverts

    def on_advert(
        self, now: float, src: IPAddress, priority: int, interval_cs: int
    ) -> list[Action]:
        """A valid advert for our VRID arrived from ``src`` (already checked by the shell).

        ``interval_cs`` is the advert's interval in centiseconds; only v3 uses it (a v2 peer
        with a different interval is dropped by the packet checks before it gets here).
        """
        _check_priority(priority, 0, 255, "advert priority")
        if self.params.version == 3:
            _check_priority(interval_cs, 1, 4095, "advert interval_cs")
        if src == self.params.primary_ip:
            # Our own multicast looped back, or a misconfigured peer with our address. Either
            # way it must not take part in the election (it would tie with ourselves).
            self.own_ip_adverts += 1
            return []
        phase = self.phase
        if phase is Phase.INITIALIZE:
            return []  # not participating (IGNORED), whatever its rank
        event = rank(priority, src, self.priority, self.params.primary_ip)
        if event in IGNORED[phase]:
            return []
        if phase in ACTIVE_PHASES:
            return self._active_rx(now, event, src, priority, interval_cs)
        if phase is Phase.BACKUP_CONTEST:
            return self._contest_lost(now, src, priority, interval_cs)
        return self._backup_rx(now, event, src, priority, interval_cs)

    def _backup_rx(
        self, now: float, event: Event, src: IPAddress, priority: int, interval_cs: int
    ) -> list[Action]:
        phase = self.phase
        if event is Event.ADVERT_RESIGN:
            # The master resigned: take over after Skew_Time, so the highest-priority backup
            # (smallest skew) wins without waiting for a down interval. The interval in a
            # priority-0 advert is not adopted (RFC 9568 §6.4.2, keepalived alike).
            self._released = (src, now)
            self.deadline = now + self.skew
            self._go(event, phase)
            return []
        p = self.params
        self._go(event, phase)  # accepted or discarded, a Backup stays one
        if phase is Phase.BACKUP_STARTING:
            self._heard += 1  # whoever sent it: the process has been up for it
        if backup_accepts(p, self.priority, priority):
            if priority >= self.priority:
                self._preempt_window_start = None
            self._discarded = None
            self._learn(now, src, priority, interval_cs)
            return []
        # Lower priority and we may preempt.
        if p.preempt_delay > 0:
            if self._preempt_window_start is None:
                self._preempt_window_start = now
            if now < self._preempt_window_start + p.preempt_delay:
                # Still inside the delay: behave as if preemption were off for now.
                self._learn(now, src, priority, interval_cs)
                return []
        # Discard: the down timer keeps running from the last accepted advert and we
        # preempt when it fires (keepalived "received lower priority advert - discarding").
        self._discarded = (src, priority, now)
        return []

    def _contest_lost(
        self, now: float, src: IPAddress, priority: int, interval_cs: int
    ) -> list[Action]:
        # Inside the contest window our advert is out and the VIP not bound. A better
        # router (RFC 9568 §6.4.3: higher priority, or equal from a greater address) wins:
        # we follow it and never bind. (A worse one steps down on our advert; another
        # priority-0 advert changes nothing: IGNORED.)
        self._go(Event.ADVERT_HIGHER, Phase.BACKUP)
        self._contest_reason = ""
        self._released = None
        self._learn(now, src, priority, interval_cs)
        rank_ = "higher priority" if priority > self.priority else "equal priority, higher address"
        reason = (
            f"master-down: contest lost to {src} (prio {priority}, {rank_}; ours "
            f"{self.priority}) before binding the VIP; backup, {self._mdi_text()}"
        )
        self.last_reason = reason
        return [ContestLost(reason)]

    def _active_rx(
        self, now: float, event: Event, src: IPAddress, priority: int, interval_cs: int
    ) -> list[Action]:
        own = self.params.primary_ip
        if event is Event.ADVERT_RESIGN:
            # Someone else resigned while we are active (e.g. after a split brain): advertise
            # at once so the backups, whose skew timers just started, see we are here.
            self._go(event, _NO_LEAD[self.phase])
            self.deadline = now + self.advert_interval
            return [SendAdvert(self.priority)]
        if event is Event.ADVERT_HIGHER:
            if priority > self.priority:
                why = f"advert from {src} with higher priority {priority}, ours {self.priority}"
            else:
                why = (
                    f"advert from {src} with equal priority {priority} and a higher address "
                    f"than ours ({own})"
                )
            self._enter_backup(now, event, Phase.BACKUP)
            self._learn(now, src, priority, interval_cs)
            reason = f"preempted: {why}; now backup, {self._mdi_text()}"
            self.last_reason = reason
            return [BecomeBackup(reason)]
        if priority == self.priority:
            what = f"equal priority {priority} and a lower address than ours ({own})"
        else:
            what = f"lower priority {priority}, ours {self.priority}"
        reason = (
            f"lower-priority-advert: from {src} with {what}; "
            "advertised at once to force a new election"
        )
        self.last_reason = reason
        self._contested = (src, priority)
        # RFC 9568 §6.4.3 (new in RFC 9568 against RFC 5798): send an advert immediately so
        # the other router, which believes it is active, steps down now rather than at our
        # next periodic advert. Make-before-break: re-announce first (it may have moved the
        # traffic), and the advert preempt_lead later, so the clients are back before it
        # stops answering.
        lead = self.params.preempt_lead
        was_leading = self.lead_pending
        if lead == 0:
            contested = Phase.ACTIVE_CONTESTED_LEAD if was_leading else Phase.ACTIVE_CONTESTED
            self._go(event, contested)
            self.deadline = now + self.advert_interval
            return [Announce(reason), SendAdvert(self.priority)]
        self._go(event, Phase.ACTIVE_CONTESTED_LEAD)
        if was_leading:
            return []  # announced and the advert is due: a second one changes nothing
        self.deadline = now + lead
        return [Announce(reason)]

    # ------------------------------------------------------------------ internals

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

    def _down_details(self, now: float) -> str:
        """Why the down timer fired, with the numbers (for BecomeActive's reason)."""
        if self._released is not None:
            src, at = self._released
            return (
                f"{src} resigned (priority-0 advert {_fmt_s(now - at)} s ago), "
                f"skew {_fmt_s(self.skew)} s at our prio {self.priority}"
            )
        if self.last_advert_at is None:
            text = (
                f"no advert in {_fmt_s(now - self._backup_since)} s since entering backup, "
                f"{self._mdi_text()}"
            )
        else:
            text = (
                f"last advert from {self.master_ip} (prio {self.master_priority}, interval "
                f"{_fmt_s(self.master_adver_interval_cs / 100)} s) "
                f"{_fmt_s(now - self.last_advert_at)} s ago, {self._mdi_text()}"
            )
        if self._discarded is not None:
            src, prio, at = self._discarded
            text += (
                f"; preempting {src} (prio {prio} < ours {self.priority}, last seen "
                f"{_fmt_s(now - at)} s ago)"
            )
            if self._preempt_window_start is not None:
                text += f" after preempt_delay {_fmt_s(self.params.preempt_delay)} s"
        return text
