"""The one place where a role becomes desired state on the host.

What it is: the controller that the agent tells "leader" or "follower" (from the election
backend's transitions) and that keeps the host converged on that: the VIP bound (and
announced) on the leader, absent everywhere else, and the IPVS leader flag (`follow`). A
role change is applied at once, in the same turn of the event loop as the decision (binding
costs one ~15 µs netlink round trip, so there is nothing to gain from deferring it). The host
is re-observed whenever the kernel reports a change of the VIP's address (``kick``: the
agent follows RTM_NEWADDR / RTM_DELADDR through ``vipd.host.linkwatch``), so a VIP deleted by
hand on the leader comes back at once and a VIP left behind on a follower goes away; a change
that failed is retried after a short pause, and a slow periodic resync (``RESYNC_INTERVAL``)
covers anything no notification told. When the VIP's link is deleted (``unlink``) nothing is
converged until the agent hands over the actuators of the link that replaces it
(``relink``): the leader then binds and announces the VIP there.

What it must not do: elect (that is the backend's job), or wait on anything slow: it runs on
the loop that sends adverts (https://github.com/acassen/keepalived/issues/1653 and /2066
show what happens when VIP work delays adverts), so every call it makes is a bounded,
non-blocking kernel request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vipd import log as vlog
from vipd import metrics
from vipd.host.address import Op, plan

if TYPE_CHECKING:
    from vipd.config import Garp

# The periodic resync: a safety net only. The kernel reports every address change to the
# agent's link watch (and flags lost notifications with ENOBUFS, which also kicks a resync).
RESYNC_INTERVAL = 30.0


class Address(Protocol):
    @property
    def vip(self) -> object: ...

    def observe(self) -> bool: ...
    def add(self) -> None: ...
    def remove(self) -> bool: ...


class LeaderFlag(Protocol):
    """Something else that follows the role (the IPVS runtime: on the leader only)."""

    def set_leader(self, leader: bool) -> None: ...


class Announce(Protocol):
    def burst(self, loop: asyncio.AbstractEventLoop, repeat: int, interval: float) -> bool: ...
    def send_one(self) -> bool: ...
    def cancel(self) -> None: ...


@dataclass
class GarpPolicy:
    repeat: int = 5
    interval: float = 0.01
    delay: float = 5.0
    refresh: float = 0.0

    @classmethod
    def from_config(cls, garp: Garp) -> GarpPolicy:
        """The ``garp`` section as the controller's policy (both election backends)."""
        return cls(
            repeat=garp.repeat, interval=garp.interval, delay=garp.delay, refresh=garp.refresh
        )


@dataclass
class Takeover:
    """Timestamps (time.monotonic(), seconds) of one takeover, for actuation latency."""

    decided: float
    bound: float | None = None
    announced: float | None = None


@dataclass
class ControllerStats:
    reconcile_errors: int = 0
    vip_added: int = 0
    vip_removed: int = 0
    resync_repairs: int = 0
    takeovers: int = 0
    last_takeover: Takeover | None = None


class Controller:
    """Converges the host on the role it is given."""

    def __init__(
        self,
        *,
        address: Address,
        announcer: Announce,
        garp: GarpPolicy,
        log: logging.Logger,
        resync_interval: float = RESYNC_INTERVAL,
    ) -> None:
        self.address = address
        self.announcer = announcer
        self.garp = garp
        self.log = log
        self.resync_interval = resync_interval
        self.stats = ControllerStats()
        self.leader = False
        self.bound = False
        self._pending_takeover: Takeover | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._wake = asyncio.Event()
        self._failed = False
        self._linked = True  # the VIP's link exists (see unlink / relink)
        self._followers: list[LeaderFlag] = []

    # -- what the agent calls ------------------------------------------------------------

    def follow(self, flag: LeaderFlag) -> None:
        """``flag`` follows every role change from now on (after the VIP's own change)."""
        self._followers.append(flag)

    def set_leader(self, leader: bool, decided_at: float) -> None:
        if leader == self.leader:
            return
        self.leader = leader
        if leader:
            self._pending_takeover = Takeover(decided=decided_at)
        else:
            self._pending_takeover = None
            self._cancel_timers()
            self.announcer.cancel()
        self.reconcile(resync=False)
        # The VIP first (its first gratuitous ARP is already out), then the rest.
        for flag in self._followers:
            flag.set_leader(leader)

    def kick(self) -> None:
        """The VIP's address changed on the host (or notifications were lost): resync now."""
        self._wake.set()

    def unlink(self) -> None:
        """The VIP's link was deleted, and the VIP with it: stop announcing, and converge
        nothing on the old link (its index is gone) until `relink`."""
        self._linked = False
        self._cancel_timers()
        self.announcer.cancel()
        self.bound = False
        self._export_bound()

    def relink(self, address: Address, announcer: Announce) -> None:
        """The actuators of the link that replaces a deleted one: a leader binds and
        announces the VIP on it now (a new link, a new MAC: the clients must hear of it)."""
        self.address, self.announcer = address, announcer
        self._linked = True
        self.bound = False
        self.reconcile(resync=True)

    def announce(self) -> None:
        """Re-announce the VIP (a lower-priority node claimed it)."""
        if self.leader and self.bound:
            self.announcer.burst(asyncio.get_running_loop(), self.garp.repeat, self.garp.interval)

    # -- convergence ---------------------------------------------------------------------

    def reconcile(self, resync: bool) -> bool:
        """Converge now; on failure count it, log it, and leave it to the next pass."""
        try:
            self._converge(resync)
        except Exception as exc:
            self.stats.reconcile_errors += 1
            metrics.RECONCILE_ERRORS.labels(actuator="address").inc()
            vlog.event(self.log, logging.ERROR, "reconcile failed", actuator="address", error=exc)
            self._failed = True
            self._wake.set()
            return False
        finally:
            self._export_bound()
        self._failed = False
        return True

    def _export_bound(self) -> None:
        metrics.VIP_BOUND.labels(vip=str(self.address.vip)).set(1 if self.bound else 0)

    async def run(self) -> None:
        """Resync on every `kick`, after a failure, and every ``resync_interval``; runs until
        cancelled."""
        # The first pass observes the host: a stale VIP from a crashed run goes away here.
        self.reconcile(resync=True)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.resync_interval)
            if self._failed:
                # A failed change is retried after a short pause, not in a tight loop.
                await asyncio.sleep(min(0.1, self.resync_interval))
            self._wake.clear()
            self.reconcile(resync=True)

    def _converge(self, resync: bool) -> None:
        if not self._linked:
            return  # the link is gone: nothing to observe or change until relink
        want = self.leader
        if resync:
            present = self.address.observe()
            op = plan(present, want)
            if op is not None:
                if present != self.bound:
                    self.stats.resync_repairs += 1
                    metrics.VIP_REPAIRS.inc()
                what = "missing while leader: re-adding" if op is Op.ADD else "present: removing"
                vlog.event(self.log, logging.WARNING, f"VIP {what}", vip=self.address.vip)
            self.bound = present
        if want:
            if self._pending_takeover is not None or not self.bound:
                self._bind()
        elif self.bound or not resync:
            # On a step-down the VIP goes whatever we believe: removal of an absent VIP is
            # a no-op, and a stale belief must not leave the VIP on a follower.
            removed = self.address.remove()
            if removed or self.bound:
                self.stats.vip_removed += 1
                metrics.VIP_CHANGES.labels(op="remove").inc()
                vlog.event(self.log, logging.INFO, "VIP removed", vip=self.address.vip)
            self.bound = False

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        takeover = self._pending_takeover
        self.address.add()
        bound = time.monotonic()
        self.bound = True
        self.stats.vip_added += 1
        # The first frame goes out right after the netlink ack, in this same call.
        self.announcer.burst(loop, self.garp.repeat, self.garp.interval)
        announced = time.monotonic()
        self._schedule_followups(loop)
        fields: dict[str, object] = {"vip": self.address.vip}
        if takeover is not None:
            takeover.bound, takeover.announced = bound, announced
            self.stats.takeovers += 1
            self.stats.last_takeover = takeover
            self._pending_takeover = None
            fields["decision_to_bound_ms"] = round((bound - takeover.decided) * 1e3, 3)
            fields["decision_to_garp_ms"] = round((announced - takeover.decided) * 1e3, 3)
            metrics.TAKEOVER_DURATION.labels(stage="bound").observe(bound - takeover.decided)
            metrics.TAKEOVER_DURATION.labels(stage="announced").observe(
                announced - takeover.decided
            )
        metrics.VIP_CHANGES.labels(op="add").inc()
        # Logged on the loop's next turn: the caller may still have an advert to send in
        # this one (the takeover after a priority-0 advert announces, then advertises).
        loop.call_soon(
            functools.partial(
                vlog.event, self.log, logging.INFO, "VIP bound and announced", **fields
            )
        )

    def _schedule_followups(self, loop: asyncio.AbstractEventLoop) -> None:
        self._cancel_timers()
        if self.garp.delay > 0:
            self._timers.append(loop.call_later(self.garp.delay, self._second_burst, loop))
        if self.garp.refresh > 0:
            self._timers.append(loop.call_later(self.garp.refresh, self._refresh, loop))

    def _second_burst(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.leader and self.bound:
            self.announcer.burst(loop, self.garp.repeat, self.garp.interval)

    def _refresh(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.leader and self.bound:
            self.announcer.send_one()
            self._timers.append(loop.call_later(self.garp.refresh, self._refresh, loop))

    def _cancel_timers(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()

    def quiesce(self) -> None:
        """Stop announcing and repairing, but leave the VIP where it is (graceful handover)."""
        self._pending_takeover = None
        self._cancel_timers()
        self.announcer.cancel()

    def release(self) -> None:
        """Remove the VIP now (shutdown and crash path); raises if the kernel refuses."""
        self.leader = False
        self._pending_takeover = None
        self._cancel_timers()
        self.announcer.cancel()
        if self.address.remove() or self.bound:
            self.stats.vip_removed += 1
            metrics.VIP_CHANGES.labels(op="remove").inc()
            vlog.event(
                self.log, logging.INFO, "VIP removed", vip=self.address.vip, reason="stopping"
            )
        self.bound = False
        self._export_bound()
