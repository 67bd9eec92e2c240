"""The Backup state's rules of one VRRP virtual router (RFC 9568 §6.4.2).

What it is: :class:`BackupRules`, the part of ``vrrp.state.Machine`` that runs while it is a
Backup: an advert accepted (the down timer restarts) or discarded (we will preempt), a
priority-0 advert (the Skew_Time timer), the Master_Down_Timer firing (the start-up hold,
make-before-break, the release contest) and the contest's end; and the reason a takeover
gives, with its numbers. The rules are stated in ``vrrp.state``'s docstring and the moves
in ``vrrp.transitions``.

What it must not do: be used alone (``vrrp.state.Machine`` dispatches to it by sub-state),
or do any I/O.
"""

from __future__ import annotations

from vipd.vrrp.actions import Action, BecomeActive, ContestLost, SendAdvert
from vipd.vrrp.actions import fmt_s as _fmt_s
from vipd.vrrp.params import IPAddress, Params
from vipd.vrrp.transitions import Event, Phase
from vipd.vrrp.variables import RouterVariables

__all__ = ["BackupRules", "backup_accepts"]


def backup_accepts(params: Params, ours: int, priority: int) -> bool:
    """RFC 9568 §6.4.2: a Backup accepts a (non-zero priority) advert as its master's, and
    restarts its down timer from it, if Preempt_Mode is off or the advert's priority is at
    least ours (``ours``: our effective priority); otherwise it discards it (and preempts when
    the timer fires, after keepalived's ``preempt_delay`` if one is set)."""
    return not params.preempt or priority >= ours


class BackupRules(RouterVariables):
    """The Backup sub-states' events (a base of ``vrrp.state.Machine``)."""

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
