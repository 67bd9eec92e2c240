"""Quiet following: a Backup reads its steady master's unchanged adverts in batches.

What it is: the driver's side of ``vrrp.transport``'s follow filters (IPv4). A Backup does
nothing with its master's steady adverts but restart its down timer (RFC 9568 §6.4.2), and
they are byte for byte the same every interval: once one restarted the timer, its copies are
kept off the polled socket (``Transport.follow``) and queued on a quiet one, which is read
(``catch_up``) when the down timer is due, before anything else that arrives, before a
priority, configuration or link change, for /status and for a scrape. Each copy goes to the
machine at its kernel receive time (``Machine.on_advert``, one call per copy), so the down
timer runs exactly as if every advert had woken us.

What it must not do: decide anything, or follow an advert that would do more than restart the
down timer (``follows_quietly``: a lower-priority master we will preempt, a priority 0, a
release contest): those are read as they come.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from vipd import log as vlog
from vipd import metrics
from vipd.vrrp import packet, state
from vipd.vrrp.actions import Action
from vipd.vrrp.params import IPAddress
from vipd.vrrp.transport import Datagram

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection


# The Backup sub-states an accepted advert leaves as they were, but for the down timer (and
# the start-up hold's count). BACKUP_CONTEST takes a better router's advert as the contest's end.
_FOLLOWING = frozenset({state.Phase.BACKUP_STARTING, state.Phase.BACKUP})


def follows_quietly(m: state.Machine, src: IPAddress, priority: int) -> bool:
    """``m`` is a Backup that accepts ``src``'s advert at ``priority`` as its master's (RFC
    9568 §6.4.2: it may not preempt it) outside a release contest: the advert only restarts
    its down timer and asks for no action."""
    return (
        m.phase in _FOLLOWING
        and priority > 0
        and src != m.params.primary_ip
        and state.backup_accepts(m.params, m.priority, priority)
    )


def advert_copies(
    m: state.Machine, times: list[float], src: IPAddress, priority: int, interval_cs: int
) -> list[Action]:
    """One advert received at each of ``times`` (oldest first): the machine's state and
    actions as after ``m.on_advert`` for each, in that order."""
    if times and m.phase is state.Phase.BACKUP and follows_quietly(m, src, priority):
        # Each copy only restarts the down timer from its arrival (RFC 9568 §6.4.2) and
        # nothing else counts them (the start-up hold, which does, is over): the last one
        # leaves the machine as all of them would.
        return m.on_advert(times[-1], src, priority, interval_cs)
    actions: list[Action] = []
    for at in times:
        actions += m.on_advert(at, src, priority, interval_cs)
    return actions


class Follower:
    """The followed advert of one virtual router, if any (see the module docstring)."""

    def __init__(self, owner: VrrpElection) -> None:
        self.owner = owner
        self.log = owner.log
        # The steady master's advert that the wire keeps off the polled socket, decoded with
        # its checksum form, and the receive time of the last advert handled (a copy both
        # sockets took while the filters changed is older, and dropped).
        self.followed: Datagram | None = None
        self._followed_as: tuple[packet.Advert, str] | None = None
        self.last_rx_at = float("-inf")
        # False once following failed on this host (logged), and with auth_hmac: every signed
        # advert differs (its sequence), and a replayed copy of the followed one would match
        # the filter and restart the down timer unverified.
        self._quiet = owner.vrrp.auth_hmac is None
        self._logged = False  # the first following was logged

    def reset(self) -> None:
        """A new socket: nothing is followed on it."""
        self.followed = None

    def after_advert(self, dgram: Datagram, advert: packet.Advert, form: str, now: float) -> None:
        """The machine handled ``dgram`` at ``now``: follow it if it was the master's advert
        that restarted our down timer and nothing else."""
        m = self.owner.machine
        if (
            self._quiet
            and m.state is state.State.BACKUP
            and m.master_ip == dgram.src
            and m.last_advert_at == now
            and follows_quietly(m, dgram.src, advert.priority)
            and dgram != self.followed
        ):
            self._follow(dgram, advert, form)

    def after_actions(self) -> None:
        """After the machine's actions: left Backup, or the copies would now do more than
        restart the down timer (our priority rose above the master's, a release contest):
        every advert is read. (Before the timer is re-armed: where it goes depends on it.)"""
        followed = self._followed_as
        if self.followed is not None and (
            followed is None
            or not follows_quietly(self.owner.machine, self.followed.src, followed[0].priority)
        ):
            self.unfollow()

    def _follow(self, dgram: Datagram, advert: packet.Advert, form: str) -> None:
        t = self.owner.transport
        if t is None or not t.can_follow:
            return
        try:
            t.follow(dgram)
            self.followed = dgram
            self._followed_as = (advert, form)
            if not self._logged:
                self._logged = True
                vlog.event(self.log, logging.INFO, "following the master quietly", filter="classic")
        except OSError as exc:
            # Not fatal: every advert then wakes us, as without following.
            self._quiet = False
            self.followed = None
            vlog.event(
                self.log,
                logging.WARNING,
                "quiet following unavailable: every advert is read as it comes",
                error=exc,
            )
            with contextlib.suppress(OSError):
                t.follow(None)

    def unfollow(self) -> None:
        t = self.owner.transport
        if self.followed is None or t is None:
            return
        self.followed = None
        try:
            t.follow(None)
        except OSError as exc:
            self._quiet = False
            vlog.event(self.log, logging.ERROR, "could not stop quiet following", error=exc)

    def catch_up(self) -> int:
        """Handle the followed master's adverts queued on the quiet socket, oldest first, each
        at its kernel receive time; how many there were.

        Copies of the followed datagram were checked when it was followed, so they go to the
        machine without being decoded again, and since a Backup's machine answers an advert
        with no action, the driver's bookkeeping runs once per run of them. A datagram there
        that is not a copy (one followed before, queued just before the filters changed) takes
        the ordinary path."""
        o = self.owner
        t = o.transport
        if self.followed is None or t is None:
            return 0
        now = o.clock()
        run: list[float] = []
        handled = 0
        for age, dgram in t.receive_quiet():
            at = now - age
            if at <= self.last_rx_at:
                # Taken by both sockets while the filters changed: handled from the polled one.
                continue
            handled += 1
            if dgram is self.followed or dgram == self.followed:
                run.append(at)
                continue
            self._copies(run)
            run = []
            o.adverts.on_datagram(dgram, at)
        self._copies(run)
        return handled

    def _copies(self, arrivals: list[float]) -> None:
        """Copies of the followed datagram, received at ``arrivals`` (oldest first)."""
        if not arrivals or self.followed is None or self._followed_as is None:
            return
        o = self.owner
        (advert, form), src = self._followed_as, self.followed.src
        actions = advert_copies(o.machine, arrivals, src, advert.priority, advert.interval_cs)
        count, last = len(arrivals), arrivals[-1]
        self.last_rx_at = last
        o.stats.adverts_received += count
        o.stats.checksum_forms[form] += count
        metrics.VRRP_ADVERTS_RECEIVED.inc(count)
        o.observe.saw_peer(src, last, advert.priority)
        o.apply(actions, last)
        o.adverts.after_advert(src, last, advert.priority)
