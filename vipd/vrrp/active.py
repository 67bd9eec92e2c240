"""The Active state's rules of one VRRP virtual router (RFC 9568 §6.4.3).

What it is: :class:`ActiveRules`, the part of ``vrrp.state.Machine`` that runs while it is
Active: the Adver_Timer (the steady advert, the make-before-break lead's advert, the
contest's end) and a received advert (priority 0: advertise at once; a router that ranks
above us: step down; one below: re-announce and advertise, the contest).

What it must not do: be used alone (``vrrp.state.Machine`` dispatches to it by sub-state),
or do any I/O.
"""

from __future__ import annotations

from vipd.vrrp.actions import Action, Announce, BecomeBackup, SendAdvert
from vipd.vrrp.actions import fmt_s as _fmt_s
from vipd.vrrp.params import IPAddress
from vipd.vrrp.transitions import Event, Phase
from vipd.vrrp.variables import NO_LEAD, RouterVariables

__all__ = ["ActiveRules"]


class ActiveRules(RouterVariables):
    """The Active sub-states' events (a base of ``vrrp.state.Machine``)."""

    def _adver_timer(self, now: float) -> list[Action]:
        # RFC 9568 §6.4.3: send an advert, restart the timer. When the shell is late we
        # restart from now rather than catching up in a burst.
        self.deadline = now + self.advert_interval
        if self.phase is not Phase.ACTIVE_CONTESTED:
            # A lead's advert is this one; a contest still open ends on a later tick.
            self._go(Event.ADVER_TIMER, NO_LEAD[self.phase])
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

    def _active_rx(
        self, now: float, event: Event, src: IPAddress, priority: int, interval_cs: int
    ) -> list[Action]:
        own = self.params.primary_ip
        if event is Event.ADVERT_RESIGN:
            # Someone else resigned while we are active (e.g. after a split brain): advertise
            # at once so the backups, whose skew timers just started, see we are here.
            self._go(event, NO_LEAD[self.phase])
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
