"""The VRRP state machine of one virtual router, as pure data in and data out.

What it is: RFC 9568 §6 (VRRPv3; "Active" is the RFC's new word for "Master") and RFC 3768
§6 (VRRPv2) for a router that never owns the virtual address (priority 1..254), with the
behaviour choices of keepalived 2.2.7 where the RFCs leave room. A :class:`Machine` is fed
RFC 9568 §6.4's events and nothing else: Startup (:meth:`Machine.start`,
:meth:`Machine.link_up`), Shutdown (:meth:`Machine.shutdown`, :meth:`Machine.link_down`), an
advert received (:meth:`Machine.on_advert`), its one timer firing (:meth:`Machine.on_timer`:
the Master_Down_Timer in Backup, the Adver_Timer in Active) and a priority change
(:meth:`Machine.set_priority`; a configuration change is a new :attr:`Machine.params`, read
at the next event). Each call returns a list of actions (:class:`SendAdvert`,
:class:`BecomeActive`, :class:`BecomeBackup`, :class:`Announce`, :class:`ContestLost`) that
the shell performs in order, and leaves :attr:`Machine.deadline` set to the time at which the
shell must call :meth:`Machine.on_timer` next.

Where the parts are: the sub-states, events and every allowed move are data in
``vrrp.transitions`` (the machine refuses a move the table lacks); the Backup's rules are
``vrrp.backup``, the Active's ``vrrp.active``, the variables and moves ``vrrp.variables``, the
timers' arithmetic ``vrrp.timing``, the configuration ``vrrp.params`` and the actions and
reason labels ``vrrp.actions``. This module dispatches each event by sub-state and handles
Startup, Shutdown and priority changes itself.

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
from vipd.vrrp.active import ActiveRules
from vipd.vrrp.backup import BackupRules, backup_accepts
from vipd.vrrp.params import IPAddress, Params
from vipd.vrrp.timing import (
    MAX_LEARNED_INTERVAL_FACTOR,
    master_down_interval,
    master_down_interval_us,
    skew_time,
    skew_time_us,
)
from vipd.vrrp.timing import check_priority as _check_priority
from vipd.vrrp.transitions import ACTIVE_PHASES, IGNORED, Event, Phase, State, rank
from vipd.vrrp.variables import NO_LEAD

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


class Machine(BackupRules, ActiveRules):
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
        self._go(Event.PRIORITY, NO_LEAD[phase])  # this advert is the lead's too
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
