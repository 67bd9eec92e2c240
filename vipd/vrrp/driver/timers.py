"""The VRRP machine's single timer: on the loop, and below 0.1 s the Active's steady adverts
from the advert pacer's thread (``vrrp.pacer``).

What it is: the shell around ``Machine.deadline`` (RFC 9568 §6.4.2's Master_Down_Timer,
§6.4.3's Adver_Timer). A Backup's down timer is the takeover itself: it is armed
``TIMER_SLACK`` early on the loop and finished precisely in ``on_timer``, waiting on the VRRP
socket so that a better backup's advert still stops it. An Active woken more than an interval
late (SIGSTOP, a frozen VM) reads what arrived first, so it announces before it advertises to
a router that took over meanwhile. Every loop callback of the driver runs through ``guarded``:
a bug ends the run instead of vanishing.

The pacer seam: with advert intervals below ``PACE_BELOW`` the Active's steady tick (one
advert, nothing else due) runs in a thread of its own (``vrrp.pacer``), under this virtual
router's own lock (``lock``), which the loop side takes only while that thread exists. At
the default intervals there is no thread and no lock: the loop does it all.

What it must not do: decide the election (``vrrp.state`` does), or block the loop longer than
the last ``TIMER_SLACK`` before a takeover.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vipd import log as vlog
from vipd.host import sched
from vipd.vrrp import state
from vipd.vrrp.actions import SendAdvert
from vipd.vrrp.driver.wire import CallLater, Timer
from vipd.vrrp.pacer import DUE_SLACK, AdvertPacer

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection

# How early a Backup's down timer is armed on the loop (see rearm).
TIMER_SLACK = 0.002
# Advert intervals below this have the Active's steady adverts sent from the pacer's thread.
PACE_BELOW = 0.1


# The Active sub-states whose Adver_Timer sends one advert and nothing else (the steady tick;
# a lead's advert is one too). ACTIVE_CONTESTED's also ends the contest and re-announces:
# that one goes through the loop's whole path (``on_timer`` and ``apply``).
ADVERT_ONLY = frozenset(
    {state.Phase.ACTIVE, state.Phase.ACTIVE_LEAD, state.Phase.ACTIVE_CONTESTED_LEAD}
)


def steady_advert(m: state.Machine, now: float) -> int | None:
    """The Active's Adver_Timer (RFC 9568 §6.4.3) when it is due and only sends an advert:
    the machine takes the event, and the priority to advertise is returned, so the caller
    sends it without the driver's bookkeeping. Anything else (not due, not one of
    ``ADVERT_ONLY``) changes nothing and returns None: ``Machine.on_timer`` through the loop
    decides that."""
    if m.phase not in ADVERT_ONLY or m.deadline is None or now < m.deadline:
        return None
    (action,) = m.on_timer(now)
    assert isinstance(action, SendAdvert), action
    return action.priority


def _reraise(exc: Exception) -> None:
    """On the loop: a bug in the pacer's tick ends the run like one in a loop callback."""
    raise exc


class Timers:
    """The machine's timer for one virtual router (see the module docstring).

    ``call_later``: fake timers on a fake clock (the unit tests); None: the loop's.
    ``pace``: the Active's steady adverts from the pacer's thread (default: below
    ``PACE_BELOW`` with the loop's timers)."""

    def __init__(
        self,
        owner: VrrpElection,
        clock: Callable[[], float],
        call_later: CallLater | None,
        pace: bool,
    ) -> None:
        self.owner = owner
        self.clock = clock
        self._call_later = call_later
        self.want_pace = pace
        # Taken by the pacer's thread and, while it exists, by every loop callback of the
        # driver; before that (and at the default intervals, always) a no-op.
        self._rlock = threading.RLock()
        self.pacer: AdvertPacer | None = None
        self.pacing_on = False
        self._timer: Timer | None = None
        self._timer_at = 0.0  # when _timer was set for (its lag is offered as a heartbeat)
        self.offer_beat: Callable[[float], None] | None = None
        self.fatal: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def lock(self) -> contextlib.AbstractContextManager[Any]:
        """This virtual router's lock while the pacer's thread may run, else nothing."""
        return self._rlock if self.want_pace else contextlib.nullcontext()

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def realtime(self, log: logging.Logger, interval: float) -> None:
        """Fast adverts: SCHED_RR so a busy host cannot stall the master (vipd.host.sched);
        before the pacer's thread starts, which inherits it."""
        policy = sched.realtime_policy(interval)
        if policy is None:
            return
        problem = sched.apply(policy)
        fields = {"policy": policy.name, "rt_priority": policy.priority, "why": policy.why}
        if problem is None:
            vlog.event(log, logging.INFO, "real-time scheduling on", **fields)
        else:
            vlog.event(
                log,
                logging.WARNING,
                "real-time scheduling refused: adverts may be late under load",
                **fields,
                error=problem,
            )

    def start_pacer(self) -> None:
        """The pacer's thread, started now (not on a takeover's path) and after the
        real-time request (it inherits it)."""
        if not self.want_pace:
            return
        pacer = AdvertPacer(self.paced_tick, self._rlock, clock=self.clock)
        pacer.start()
        with self._rlock:
            self.pacer = pacer
            self.pacing_on = True
            self.rearm()

    def stop(self) -> None:
        """The election is over for this run: no timer may fire into the stop path."""
        with self.lock:
            self.pacing_on = False
            self.cancel()

    def close(self) -> None:
        if self.pacer is not None:
            self.pacer.close()  # not with the lock held: its thread may be waiting for it

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.pacer is not None:
            self.pacer.halt()

    def rearm(self) -> None:
        m = self.owner.machine
        deadline = m.deadline
        if (
            deadline is not None
            and self.pacing_on
            and self.pacer is not None
            and m.phase in ADVERT_ONLY
        ):
            # The Active's adverts: from the pacer's thread, the loop sleeps (vrrp.pacer).
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.pacer.pace(deadline)
            return
        self.cancel()
        if deadline is None:
            return
        # The machine's clock is time.monotonic(), not loop.time(): uvloop's clock has
        # millisecond resolution and is cached per loop iteration. A Backup's down timer
        # is the takeover itself, so it is armed a little early and finished precisely
        # in on_timer; the Active's advert timer needs no such care.
        early = TIMER_SLACK if m.state is state.State.BACKUP else 0.0
        now = self.clock()
        delay = max(0.0, deadline - now - early)
        self._timer_at = now + delay
        self._timer = self.later(delay, self.on_timer)

    def later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """``fn`` on the loop ``delay`` seconds from now (the fake timers in the unit tests)."""
        if self._call_later is not None:
            return self._call_later(delay, lambda: self.guarded(fn))
        loop = self.loop or asyncio.get_running_loop()
        return loop.call_later(delay, self.guarded, fn)

    def guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Loop callbacks run through here so that a bug ends the run instead of vanishing,
        and under the lock the pacer's thread takes for its tick."""
        try:
            with self.lock:
                fn(*args)
        except Exception as exc:
            if self.fatal is not None and not self.fatal.done():
                self.fatal.set_exception(exc)
            else:
                raise

    def on_timer(self) -> None:
        self._timer = None
        lag = self.clock() - self._timer_at
        try:
            self._due()
        finally:
            # After the advert or the takeover, not before: the heartbeat can wait.
            if self.offer_beat is not None:
                self.offer_beat(lag)

    def _due(self) -> None:
        o = self.owner
        m = o.machine
        if m.state is state.State.BACKUP and o.follower.catch_up():
            # The followed master's adverts since the last look, each at its receive time:
            # the down timer runs from the last of them, as if each had woken us.
            deadline, now = m.deadline, self.clock()
            if deadline is None or deadline - now > TIMER_SLACK:
                return  # they re-armed the timer
            self.cancel()  # this callback finishes the takeover
        deadline = m.deadline
        now = self.clock()
        if deadline is not None and m.state is state.State.ACTIVE:
            if 0 < deadline - now <= TIMER_SLACK:
                # The loop's timers have millisecond grain and fire up to that early; an
                # advert a fraction of a millisecond early is due (waiting for the exact
                # instant would cost a second wake-up per tick, and gains the backups
                # nothing: their down timer is three intervals and a skew).
                now = deadline
            if now - deadline <= m.advert_interval:
                priority = steady_advert(m, now)
                if priority is not None:
                    # The steady tick: one advert, the timer again; nothing else changed,
                    # so none of the driver's bookkeeping is due.
                    o.adverts.send(priority)
                    self.rearm()
                    return
        late = deadline is not None and (
            now - deadline > m.advert_interval
            if m.state is state.State.ACTIVE
            else m.state is state.State.BACKUP and now >= deadline
        )
        if late and self._advert_pending(0.0):
            # Woken more than an interval late (SIGSTOP, a frozen VM): what arrived while we
            # slept comes first. Another router that took over meanwhile is heard as a
            # lower-priority advert, which we answer by announcing before we advertise; the
            # overdue advert sent first would make it step down while the clients still
            # point at its MAC (break-before-make). Read once: a tick still due after it
            # goes on below, so a flood of datagrams cannot keep the advert back. A Backup
            # whose down timer fired late (past the slack below) reads first for the same
            # reason: a better backup's advert that arrived in time is waiting there, and
            # taking over without it would put the VIP on a second node.
            o.adverts.on_readable()
            deadline, now = m.deadline, self.clock()
            if deadline is None or deadline > now:
                return  # the datagrams moved the deadline: the timer they armed decides
        if deadline is not None and 0 < deadline - now <= TIMER_SLACK:
            # At most TIMER_SLACK, once per takeover: waiting here beats a millisecond-grained
            # loop timer that would fire up to a millisecond late. Wait on the VRRP socket,
            # not a plain sleep: at 0.01 s adverts two backups' Skew_Times differ by less
            # than the slack (2 ms between priorities 150 and 100), so the better backup's
            # first advert arrives inside this wait and must stop our takeover.
            if self._advert_pending(deadline - now):
                o.adverts.on_readable()
                if self._timer is None:  # only garbage arrived: nothing re-armed us
                    self.rearm()
                return
            now = self.clock()
        o.apply(m.on_timer(now), now)

    def paced_tick(self, due: float) -> float | None:
        """The pacer's tick (its thread, the lock held): the Active's steady advert, as the
        loop's ``on_timer`` sends it; the next due time, or None when the loop takes over.

        Anything but a steady advert goes to the loop's ``on_timer``, which decides as it
        always does: a tick woken more than an interval late (SIGSTOP, a frozen VM) reads the
        socket before it advertises, a contest's end announces, and without a socket (a
        relink in progress) nothing can be sent from here."""
        try:
            o = self.owner
            m = o.machine
            deadline = m.deadline
            if not self.pacing_on or deadline is None or m.state is not state.State.ACTIVE:
                return None
            now = self.clock()
            if deadline - now > DUE_SLACK:
                return deadline  # the loop moved it later meanwhile
            if now - deadline <= m.advert_interval and o.transport is not None:
                priority = steady_advert(m, max(now, deadline))
                if priority is not None:
                    o.adverts.send(priority)
                    return m.deadline
            self._timer_at = now  # the loop's lag is then the hand-over's
            self.to_loop(self.on_timer)
            return None
        except Exception as exc:
            self.to_loop(functools.partial(_reraise, exc))
            return None

    def to_loop(self, fn: Callable[[], None]) -> None:
        """``fn`` on the loop's thread, soon, through ``guarded``."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.guarded, fn)

    def _advert_pending(self, timeout: float) -> bool:
        """Block up to ``timeout`` (≤ TIMER_SLACK) for the VRRP socket; True if readable."""
        transport = self.owner.transport
        if transport is None:
            time.sleep(timeout)
            return False
        return transport.wait_readable(timeout)
