"""Drives vipd's IPVS service from leadership and backend health: the shell around
`vipd.ipvs.plan` and `vipd.ipvs.actuator`.

What it is
    `IpvsReconciler` holds two inputs, "are we the leader" (from the election) and the
    backends' health (from the health checker, read through `HealthView`), and converges the
    kernel on them: on every change of either, and every ``resync_interval`` so a real server
    or service deleted (or added) by hand is repaired. One pass = observe the table, apply the
    pool rules to (health, current members), plan, apply, then the NAT rule. On a follower
    the desired table is "no service": that is also what removes a service a crashed run left.

    The netlink and nft work runs on one worker thread, so the election loop never waits for
    it (https://github.com/acassen/keepalived/issues/1653 and /2066 show what happens when VIP
    work delays adverts) and
    passes never overlap. ``release`` (step-down is a pass; stop and crash call release)
    removes the service and the NAT rule.

What it must not do: decide membership (``select_pool``), touch another service (the
actuator's scope), or block the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import Protocol

from vipd import log as vlog
from vipd import metrics
from vipd.ipvs.actuator import IpvsActuator, Masquerade
from vipd.ipvs.plan import (
    AddServer,
    AddService,
    DelServer,
    DelService,
    EditServer,
    EditService,
    Forwarding,
    Op,
    Pool,
    Service,
    Table,
    describe,
    desired,
    plan,
    select_pool,
)

IPAddress = IPv4Address | IPv6Address
# Seconds between checks that the NAT rule is still there while leading (it is only missing
# if removed by hand): spawning nft on every pass would slow the passes that health drives.
NAT_RECHECK = 10.0


class HealthView(Protocol):
    """What the reconciler reads from the health checker (``vipd.health.checker``)."""

    def healthy(self, addr: IPAddress) -> bool: ...


class Actuator(Protocol):
    """`vipd.ipvs.actuator.IpvsActuator`, or a fake in unit tests."""

    def observe(self) -> Table | None: ...
    def apply(self, ops: Sequence[Op]) -> None: ...
    def remove(self) -> bool: ...
    def close(self) -> None: ...


class Nat(Protocol):
    """`vipd.ipvs.actuator.Masquerade`, or a fake in unit tests."""

    def ensure(self) -> bool: ...
    def remove(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class IpvsSpec:
    service: Service
    forwarding: Forwarding
    backends: tuple[IPAddress, ...]
    local: IPAddress | None = None  # this node's address, when it is one of the backends


@dataclass
class IpvsStats:
    passes: int = 0
    reconcile_errors: int = 0
    operations: int = 0
    servers_added: int = 0
    servers_removed: int = 0
    services_removed: int = 0
    pool: Pool | None = None
    servers: tuple[IPAddress, ...] = ()  # real servers after the last successful pass
    healthy: frozenset[IPAddress] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class PassResult:
    ops: tuple[Op, ...]
    pool: Pool | None
    servers: tuple[IPAddress, ...]
    present: bool = False  # the service exists after the pass


_OP_LABELS: dict[type, str] = {
    AddService: "add_service",
    EditService: "edit_service",
    DelService: "remove_service",
    AddServer: "add_server",
    EditServer: "edit_server",
    DelServer: "remove_server",
}


class IpvsReconciler:
    def __init__(
        self,
        spec: IpvsSpec,
        health: HealthView,
        log: logging.Logger,
        *,
        netns: str | None = None,
        resync_interval: float = 1.0,
        on_pass: Callable[[PassResult], None] | None = None,
        actuator: Callable[[], Actuator] | None = None,
        nat: Nat | None = None,
    ) -> None:
        self.spec = spec
        self.health = health
        self.log = log
        self.netns = netns
        self.resync_interval = resync_interval
        self.on_pass = on_pass
        self.leader = False
        self.stats = IpvsStats()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vipd-ipvs")
        # The NAT rule has its own thread: nft is a process spawn (slow on a loaded host), and
        # a pass that a health transition starts must not wait behind it.
        self._nat_executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="vipd-ipvs-nat"
        )
        self._nat_future: asyncio.Future[None] | None = None
        # Created on the worker thread at first use: pyroute2's socket stays on one thread.
        self._actuator: Actuator | None = None
        self._factory = actuator or (lambda: IpvsActuator(spec.service.key, spec.forwarding, netns))
        if nat is None and spec.forwarding == "nat":
            nat = Masquerade(spec.service.key, netns)
        self._nat = nat
        self._nat_installed: bool | None = None  # None: unknown, look at the host
        self._nat_checked = 0.0  # time.monotonic() of the last look at the NAT rule
        for state in metrics.IPVS_STATES:
            metrics.IPVS_REAL_SERVERS.labels(state=state).set(0)
        for op in metrics.IPVS_OPS:
            metrics.IPVS_CHANGES.labels(op=op)
        metrics.RECONCILE_ERRORS.labels(actuator="ipvs")
        metrics.IPVS_SERVICE.set(0)

    # -- inputs (event-loop thread, or any thread for on_health_change) ---------------------

    def set_leader(self, leader: bool) -> None:
        if leader != self.leader:
            self.leader = leader
            self._poke()

    def set_backends(self, backends: tuple[IPAddress, ...]) -> bool:
        """Replace the backend list (discovery); True if it changed."""
        if backends == self.spec.backends:
            return False
        self.spec = dataclasses.replace(self.spec, backends=backends)
        self._poke()
        return True

    def set_spec(self, spec: IpvsSpec) -> None:
        """Replace the whole spec (a reload: scheduler, backends); the next pass converges."""
        if spec != self.spec:
            self.spec = spec
            self._poke()

    def on_health_change(self, *_: object) -> None:
        """The checker's transition callback; any arguments, any thread."""
        self._poke()

    def _poke(self) -> None:
        loop = self._loop
        if loop is None:
            self._wake.set()
        else:
            loop.call_soon_threadsafe(self._wake.set)

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile on every input change and every ``resync_interval``; until cancelled."""
        self._loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            await self.reconcile()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.resync_interval)

    async def reconcile(self) -> PassResult | None:
        """One pass on the worker thread; failures are counted, logged and retried later."""
        leader = self.leader
        healthy = frozenset(b for b in self.spec.backends if self.health.healthy(b))
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._executor, self._pass, leader, healthy)
            self._schedule_nat(loop, leader)
        except Exception as exc:
            self.stats.reconcile_errors += 1
            metrics.RECONCILE_ERRORS.labels(actuator="ipvs").inc()
            vlog.event(self.log, logging.ERROR, "reconcile failed", actuator="ipvs", error=exc)
            return None
        self._record(result, healthy)
        return result

    def _record(self, result: PassResult, healthy: frozenset[IPAddress]) -> None:
        self.stats.passes += 1
        self.stats.healthy = healthy
        self.stats.servers = result.servers
        previous, self.stats.pool = self.stats.pool, result.pool
        pool = result.pool
        if (
            pool is not None
            and pool.rule in ("bootstrap", "keep-last")
            and (previous is None or previous.rule != pool.rule)
        ):
            vlog.event(
                self.log,
                logging.WARNING,
                "ipvs pool rule applied",
                rule=pool.rule,
                reason=pool.reason,
            )
        up = sum(1 for s in result.servers if s in healthy)
        metrics.IPVS_REAL_SERVERS.labels(state="healthy").set(up)
        metrics.IPVS_REAL_SERVERS.labels(state="unhealthy").set(len(result.servers) - up)
        metrics.IPVS_SERVICE.set(1 if result.present else 0)
        for op in result.ops:
            metrics.IPVS_CHANGES.labels(op=_OP_LABELS[type(op)]).inc()
            self.stats.operations += 1
            if isinstance(op, AddServer):
                self.stats.servers_added += 1
            elif isinstance(op, DelServer):
                self.stats.servers_removed += 1
            elif isinstance(op, DelService):
                self.stats.services_removed += 1
            vlog.event(self.log, logging.INFO, "ipvs changed", op=describe(op))
        if self.on_pass is not None:
            self.on_pass(result)

    # -- the worker thread -------------------------------------------------------------------

    def _act(self) -> Actuator:
        if self._actuator is None:
            self._actuator = self._factory()
        return self._actuator

    def _pass(self, leader: bool, healthy: frozenset[IPAddress]) -> PassResult:
        act = self._act()
        observed = act.observe()
        pool: Pool | None = None
        if leader:
            current = {s.addr for s in observed.servers} if observed else set()
            pool = select_pool(self.spec.backends, healthy, current, self.spec.local)
        want = desired(
            leader, self.spec.service, pool.members if pool else (), self.spec.forwarding
        )
        ops = plan(observed, want)
        act.apply(ops)
        servers = tuple(sorted(s.addr for s in want.servers)) if want else ()
        return PassResult(tuple(ops), pool, servers, want is not None)

    def _schedule_nat(self, loop: asyncio.AbstractEventLoop, leader: bool) -> None:
        """Converge the NAT rule on its thread unless a convergence is still running (the
        next pass schedules one again, with the role of that moment)."""
        if self._nat is None or (self._nat_future is not None and not self._nat_future.done()):
            return
        self._nat_future = loop.run_in_executor(self._nat_executor, self._converge_nat, leader)
        self._nat_future.add_done_callback(lambda fut: self._nat_done(fut, leader))

    def _nat_done(self, fut: asyncio.Future[None], leader: bool) -> None:
        if leader != self.leader:
            self._poke()  # the role changed while nft ran: converge again now, not at resync
        if not fut.cancelled() and (exc := fut.exception()) is not None:
            self.stats.reconcile_errors += 1
            metrics.RECONCILE_ERRORS.labels(actuator="ipvs").inc()
            self._nat_installed = None  # unknown: look again next time
            vlog.event(self.log, logging.ERROR, "reconcile failed", actuator="ipvs-nat", error=exc)

    async def settle_nat(self) -> None:
        """Wait for the NAT convergence in flight, if any (tests and shutdown)."""
        if self._nat_future is not None:
            await asyncio.gather(self._nat_future, return_exceptions=True)

    def _converge_nat(self, leader: bool) -> None:
        if self._nat is None:
            return
        if leader:
            now = time.monotonic()
            if self._nat_installed and now - self._nat_checked < NAT_RECHECK:
                return  # nft is a process spawn: not on every pass of a health change
            self._nat_checked = now
            if self._nat.ensure():
                vlog.event(
                    self.log,
                    logging.INFO,
                    "ipvs source NAT installed",
                    table="vipd_ipvs",
                    service=self.spec.service.key,
                )
            self._nat_installed = True
        elif self._nat_installed is not False:
            if self._nat.remove():
                vlog.event(self.log, logging.INFO, "ipvs source NAT removed", table="vipd_ipvs")
            self._nat_installed = False

    def _release(self) -> bool:
        return self._act().remove()

    def _release_nat(self) -> None:
        if self._nat is not None and self._nat.remove():
            vlog.event(self.log, logging.INFO, "ipvs source NAT removed", table="vipd_ipvs")
        self._nat_installed = False

    async def release(self) -> None:
        """Remove the service and the NAT rule now (stop and crash paths), then close."""
        self.leader = False
        loop = asyncio.get_running_loop()
        nat: asyncio.Future[None] | None = None
        try:
            await self.settle_nat()
            nat = loop.run_in_executor(self._nat_executor, self._release_nat)
            if await loop.run_in_executor(self._executor, self._release):
                self.stats.services_removed += 1
                metrics.IPVS_CHANGES.labels(op="remove_service").inc()
                metrics.IPVS_SERVICE.set(0)
                for state in metrics.IPVS_STATES:
                    metrics.IPVS_REAL_SERVERS.labels(state=state).set(0)
                vlog.event(
                    self.log,
                    logging.INFO,
                    "ipvs service removed",
                    service=self.spec.service.key,
                    reason="stopping",
                )
            await nat
        finally:
            if nat is not None:
                await asyncio.gather(nat, return_exceptions=True)
            await loop.run_in_executor(self._executor, self._close)
            self._executor.shutdown(wait=False)
            self._nat_executor.shutdown(wait=False)

    def _close(self) -> None:
        if self._actuator is not None:
            self._actuator.close()
            self._actuator = None
