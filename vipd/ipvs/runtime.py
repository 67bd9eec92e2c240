"""IPVS inside the daemon: one object both election backends (VRRP and Lease) attach to the
health checker and drive with their role.

What it is: `IpvsRuntime.start(health, leader)` adds the backends to the health checker's
targets, chains onto its transition callback, and starts the reconciler (and, with
``ipvs.discovery``, the EndpointSlice poller); `set_leader` follows the role, called by the
controller (``Controller.follow``) right after the VIP's own change;
`stop()` removes the service and the NAT rule (stop and crash paths).

What it must not do: elect, decide membership (``vipd.ipvs.plan``), or block the loop (the
reconciler and the poller work on threads).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from vipd import log as vlog
from vipd.config import Config
from vipd.ipvs.discovery import EndpointSliceSource, merge
from vipd.ipvs.plan import Service, ServiceKey
from vipd.ipvs.reconciler import IpvsReconciler, IpvsSpec

IPAddress = IPv4Address | IPv6Address


class IpvsRuntime:
    def __init__(self, cfg: Config, source: IPAddress, log: logging.Logger) -> None:
        c = cfg.ipvs
        self.cfg = cfg
        self.log = log
        self.source = source
        self.spec = IpvsSpec(
            service=Service(ServiceKey(cfg.vip, c.port), c.scheduler),
            forwarding=c.forwarding,
            backends=c.backends,
            local=source if source in c.backends else None,
        )
        self.reconciler: IpvsReconciler | None = None
        self.health: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, health: Any, leader: bool) -> None:
        """``health`` is a `vipd.health.checker.HealthChecker` (targets, on_change, healthy)."""
        self.health = health
        health.set_targets(self.spec.backends)
        previous = health.on_change

        def changed(addr: Any, state: Any) -> None:
            if previous is not None:
                previous(addr, state)
            if self.reconciler is not None:
                self.reconciler.on_health_change(addr, state)

        health.on_change = changed
        self.reconciler = IpvsReconciler(self.spec, health, self.log)
        self.reconciler.set_leader(leader)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.reconciler.run(), name="ipvs"))
        c = self.cfg.ipvs
        if c.discovery.enabled:
            self._tasks.append(loop.create_task(self._discover(), name="ipvs-discovery"))
        vlog.event(
            self.log,
            logging.INFO,
            "ipvs on",
            service=self.spec.service.key,
            scheduler=c.scheduler,
            forwarding=c.forwarding,
            backends=",".join(map(str, c.backends)),
            discovery=c.discovery.enabled,
        )

    def reconfigure(self, cfg: Config) -> None:
        """A reload's live IPVS keys (``vipd.reload.LIVE``): the scheduler and the static
        backends. Discovery, if on, merges its list into the new one at its next poll."""
        c = cfg.ipvs
        self.cfg = cfg
        self.spec = dataclasses.replace(
            self.spec,
            service=Service(ServiceKey(cfg.vip, c.port), c.scheduler),
            backends=c.backends,
            local=self.source if self.source in c.backends else None,
        )
        if self.reconciler is None:
            return
        backends_changed = self.reconciler.spec.backends != c.backends
        self.reconciler.set_spec(self.spec)
        if backends_changed and self.health is not None:
            self.health.set_targets(c.backends)

    def set_leader(self, leader: bool) -> None:
        if self.reconciler is not None:
            self.reconciler.set_leader(leader)

    async def _discover(self) -> None:
        """Poll the default/kubernetes EndpointSlices; backends = static + discovered. A
        failed or empty answer keeps the last list (vipd.ipvs.discovery)."""
        c = self.cfg.ipvs
        assert self.reconciler is not None
        loop = asyncio.get_running_loop()
        source: EndpointSliceSource | None = None
        failures = 0
        while True:
            try:
                if source is None:
                    source = EndpointSliceSource(c.discovery, self.cfg.vip.version)
                found = await loop.run_in_executor(None, source.fetch)
                failures = 0
                backends = merge(c.backends, found) if found else self.reconciler.spec.backends
                if self.reconciler.set_backends(backends):
                    self.health.set_targets(backends)
                    vlog.event(
                        self.log,
                        logging.INFO,
                        "ipvs backends discovered",
                        backends=",".join(map(str, backends)),
                    )
            except Exception as exc:
                failures += 1
                if vlog.sparse(failures, 100):
                    vlog.event(
                        self.log,
                        logging.WARNING,
                        "ipvs discovery failed: keeping the backends",
                        error=exc,
                        failures=failures,
                    )
            await asyncio.sleep(c.discovery.interval)

    async def stop(self) -> None:
        """Stop the reconciler and the poller, then remove the service and the NAT rule.

        A task that had failed is logged; a failed removal is raised after that (the agent
        logs and counts it, then goes on releasing)."""
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:
                vlog.event(
                    self.log, logging.ERROR, "ipvs task had failed", task=task.get_name(), error=exc
                )
        if self.reconciler is not None:
            await self.reconciler.release()
