"""The one place where a role becomes desired state on the host.

What it is: the controller that the agent tells "leader" or "follower" (from the election
backend's transitions) and that keeps the host converged on that: its VIPs bound (and
announced) on the leader, absent everywhere else, and the IPVS leader flag (`follow`). One
controller per election instance: one VRRP virtual router (its family's VIPs, RFC 9568 §7)
or the Lease (every VIP). Each VIP has its own actuators (`VipActuators`: the address and
its announcer) and is observed, repaired, bound and released on its own, so one VIP's
failure or manual deletion never holds up another's. A
role change is applied at once, in the same turn of the event loop as the decision (binding
costs one ~15 µs netlink round trip, so there is nothing to gain from deferring it). The host
is re-observed whenever the kernel reports a change of a VIP's address (``kick``: the
agent follows RTM_NEWADDR / RTM_DELADDR through ``vipd.host.linkwatch``), so a VIP deleted by
hand on the leader comes back at once and a VIP left behind on a follower goes away; a change
that failed is retried after a pause that doubles while it keeps failing (0.1 s up to 5 s),
and a slow periodic resync (``RESYNC_INTERVAL``) covers anything no notification told.
When the VIPs' link is deleted (``unlink``) nothing is converged until the agent hands over
the actuators of the link that replaces it (``relink``): the leader then binds and
announces the VIPs there.

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
from collections.abc import Sequence
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

# A refused change is retried after RETRY_FIRST, doubling on each failure in a row up to
# RETRY_MAX: a takeover that hit a transient refusal is retried at once, and a host that
# keeps refusing (EPERM from a policy, say) is neither hammered nor flooding the log.
RETRY_FIRST = 0.1
RETRY_MAX = 5.0


def retry_delay(failures: int, resync_interval: float = RESYNC_INTERVAL) -> float:
    """Seconds before the next pass after ``failures`` failed passes in a row (≥ 1)."""
    delay = RETRY_FIRST * 2.0 ** min(max(failures, 1) - 1, 16)
    return min(delay, RETRY_MAX, resync_interval)


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


@dataclass(frozen=True, slots=True)
class VipActuators:
    """One VIP's actuators: its address on the link and its announcer (GARP or NA)."""

    address: Address
    announcer: Announce


@dataclass
class _Slot:
    """One VIP as the controller sees it: its actuators and whether it is bound now."""

    address: Address
    announcer: Announce
    bound: bool = False
    # The takeover whose bind of this VIP is still to come (its first announcement timed).
    pending: Takeover | None = None


class Controller:
    """Converges the host on the role it is given, for every VIP of one election instance."""

    def __init__(
        self,
        *,
        vips: Sequence[VipActuators],
        garp: GarpPolicy,
        log: logging.Logger,
        resync_interval: float = RESYNC_INTERVAL,
    ) -> None:
        if not vips:
            raise ValueError("a controller needs at least one VIP")
        self._slots = [_Slot(v.address, v.announcer) for v in vips]
        self.garp = garp
        self.log = log
        self.resync_interval = resync_interval
        self.stats = ControllerStats()
        self.leader = False
        self._timers: list[asyncio.TimerHandle] = []
        self._wake = asyncio.Event()
        self._failures = 0  # failed passes in a row (see retry_delay)
        self._linked = True  # the VIPs' link exists (see unlink / relink)
        self._followers: list[LeaderFlag] = []

    # -- what the agent and the backends read --------------------------------------------

    @property
    def vips(self) -> list[object]:
        return [slot.address.vip for slot in self._slots]

    @property
    def bound(self) -> bool:
        """Every VIP of this instance is bound here (as last observed or set)."""
        return all(slot.bound for slot in self._slots)

    @property
    def any_bound(self) -> bool:
        return any(slot.bound for slot in self._slots)

    def bound_by_vip(self) -> list[tuple[object, bool]]:
        """(VIP, bound) for each VIP, in the configured order (``/status``)."""
        return [(slot.address.vip, slot.bound) for slot in self._slots]

    # -- what the agent calls ------------------------------------------------------------

    def follow(self, flag: LeaderFlag) -> None:
        """``flag`` follows every role change from now on (after the VIPs' own change)."""
        self._followers.append(flag)

    def set_leader(self, leader: bool, decided_at: float) -> None:
        if leader == self.leader:
            return
        self.leader = leader
        for slot in self._slots:
            if leader:
                slot.pending = Takeover(decided=decided_at)
            else:
                slot.pending = None
                slot.announcer.cancel()
        if not leader:
            self._cancel_timers()
        self.reconcile(resync=False)
        # The VIPs first (their first gratuitous ARP is already out), then the rest.
        for flag in self._followers:
            flag.set_leader(leader)

    def announce(self) -> None:
        """Re-announce the VIPs that are bound (a lower-priority node claimed one)."""
        if not self.leader:
            return
        loop = asyncio.get_running_loop()
        for slot in self._slots:
            if slot.bound:
                slot.announcer.burst(loop, self.garp.repeat, self.garp.interval)

    def kick(self) -> None:
        """A VIP's address changed on the host (or notifications were lost): resync now."""
        self._wake.set()

    def unlink(self) -> None:
        """The VIPs' link was deleted, and the VIPs with it: stop announcing, and converge
        nothing on the old link (its index is gone) until `relink`."""
        self._linked = False
        self._cancel_timers()
        for slot in self._slots:
            slot.announcer.cancel()
            slot.bound = False
            self._export_bound(slot)

    def relink(self, vips: Sequence[VipActuators]) -> None:
        """The actuators of the link that replaces a deleted one, one per VIP in the order
        the controller was made with: a leader binds and announces the VIPs on it now (a new
        link, a new MAC: the clients must hear of it)."""
        if len(vips) != len(self._slots):
            raise ValueError(f"relink needs {len(self._slots)} VIPs' actuators, not {len(vips)}")
        for slot, v in zip(self._slots, vips, strict=True):
            slot.address, slot.announcer = v.address, v.announcer
            slot.bound = False
        self._linked = True
        self.reconcile(resync=True)

    # -- convergence ---------------------------------------------------------------------

    def reconcile(self, resync: bool) -> bool:
        """Converge every VIP now; a VIP whose change fails is counted, logged and left to
        the next pass, and the others go on converging."""
        if not self._linked:
            return True  # the link is gone: nothing to observe or change until relink
        ok = True
        for slot in self._slots:
            try:
                self._converge(slot, resync)
            except Exception as exc:
                ok = False
                self.stats.reconcile_errors += 1
                metrics.RECONCILE_ERRORS.labels(actuator="address").inc()
                vlog.event(
                    self.log,
                    logging.ERROR,
                    "reconcile failed",
                    actuator="address",
                    vip=slot.address.vip,
                    error=exc,
                )
                self._wake.set()
            finally:
                self._export_bound(slot)
        self._failures = 0 if ok else self._failures + 1
        return ok

    @staticmethod
    def _export_bound(slot: _Slot) -> None:
        metrics.VIP_BOUND.labels(vip=str(slot.address.vip)).set(1 if slot.bound else 0)

    async def run(self) -> None:
        """Resync on every `kick`, after a failure, and every ``resync_interval``; runs until
        cancelled."""
        # The first pass observes the host: a stale VIP from a crashed run goes away here.
        self.reconcile(resync=True)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.resync_interval)
            if self._failures:
                # A failed change is retried after a pause that grows while it keeps failing.
                await asyncio.sleep(retry_delay(self._failures, self.resync_interval))
            self._wake.clear()
            self.reconcile(resync=True)

    def _converge(self, slot: _Slot, resync: bool) -> None:
        want = self.leader
        vip = slot.address.vip
        if resync:
            present = slot.address.observe()
            op = plan(present, want)
            if op is not None:
                if present != slot.bound:
                    self.stats.resync_repairs += 1
                    metrics.VIP_REPAIRS.inc()
                what = "missing while leader: re-adding" if op is Op.ADD else "present: removing"
                vlog.event(self.log, logging.WARNING, f"VIP {what}", vip=vip)
            slot.bound = present
        if want:
            if slot.pending is not None or not slot.bound:
                self._bind(slot)
        elif slot.bound or not resync:
            # On a step-down the VIP goes whatever we believe: removal of an absent VIP is
            # a no-op, and a stale belief must not leave the VIP on a follower.
            removed = slot.address.remove()
            if removed or slot.bound:
                self.stats.vip_removed += 1
                metrics.VIP_CHANGES.labels(op="remove").inc()
                vlog.event(self.log, logging.INFO, "VIP removed", vip=vip)
            slot.bound = False

    def _bind(self, slot: _Slot) -> None:
        loop = asyncio.get_running_loop()
        takeover = slot.pending
        slot.address.add()
        bound = time.monotonic()
        slot.bound = True
        self.stats.vip_added += 1
        # The first frame goes out right after the netlink ack, in this same call.
        slot.announcer.burst(loop, self.garp.repeat, self.garp.interval)
        announced = time.monotonic()
        self._schedule_followups(loop)
        fields: dict[str, object] = {"vip": slot.address.vip}
        if takeover is not None:
            takeover.bound, takeover.announced = bound, announced
            self.stats.takeovers += 1
            self.stats.last_takeover = takeover
            slot.pending = None
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
        """The second burst and the refresh, for every bound VIP (one set of timers: the
        VIPs of one instance are bound in the same call)."""
        self._cancel_timers()
        if self.garp.delay > 0:
            self._timers.append(loop.call_later(self.garp.delay, self._second_burst, loop))
        if self.garp.refresh > 0:
            self._timers.append(loop.call_later(self.garp.refresh, self._refresh, loop))

    def _second_burst(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.leader:
            for slot in self._slots:
                if slot.bound:
                    slot.announcer.burst(loop, self.garp.repeat, self.garp.interval)

    def _refresh(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.leader and self.any_bound:
            for slot in self._slots:
                if slot.bound:
                    slot.announcer.send_one()
            self._timers.append(loop.call_later(self.garp.refresh, self._refresh, loop))

    def _cancel_timers(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()

    def quiesce(self) -> None:
        """Stop announcing and repairing, but leave the VIPs where they are (graceful
        handover)."""
        self._cancel_timers()
        for slot in self._slots:
            slot.pending = None
            slot.announcer.cancel()

    def release(self) -> None:
        """Remove every VIP now (shutdown and crash path). Each VIP is tried; the first
        refusal by the kernel is raised after the others are removed."""
        self.leader = False
        self._cancel_timers()
        failed: Exception | None = None
        for slot in self._slots:
            slot.pending = None
            slot.announcer.cancel()
            try:
                if slot.address.remove() or slot.bound:
                    self.stats.vip_removed += 1
                    metrics.VIP_CHANGES.labels(op="remove").inc()
                    vlog.event(
                        self.log,
                        logging.INFO,
                        "VIP removed",
                        vip=slot.address.vip,
                        reason="stopping",
                    )
                slot.bound = False
            except Exception as exc:
                failed = failed or exc
            self._export_bound(slot)
        if failed is not None:
            raise failed
