"""``announce.pool: leader``: routing-table mode where only the elected holder announces.

What it is
    The actuators the controller drives in this mode (`vipd.instance.MakeActuators`'s
    shape): `leader_actuators(cfg)` makes, per VIP, a `RouteAddress` (the controller's
    "address" step) and an inert announcer (no gratuitous ARP: the router learns the VIP
    from BGP). The election is the configured one, VRRP or a Lease (`vipd.agent`), as in
    ``announce.mode: arp``; where ARP mode binds the VIP on the interface, this mode writes
    the VIP's two routes (`vipd.routed.plan`: the AnyIP binding, then the announcement in
    ``announce.table`` that the node's routing daemon exports). So the router has one path,
    to the holder, and it moves with the election:

    - ``add()`` (this node became the holder): ANNOUNCED (binding, then announcement);
    - ``remove()`` (it lost the election, or stops): DRAINING at once (the announcement
      off), WITHDRAWN ``announce.drain`` seconds later (the binding off), unless it became
      the holder again meanwhile;
    - ``observe()``: whether the announcement was in the table at the last look (the
      controller's resync repairs a route someone deleted by calling ``add()`` again);
    - ``close()``: waits for the pending work, the drain included: a stopping vipd leaves no
      route behind.

    The route calls run on one worker thread per VIP, in order: pyroute2's IPRoute runs an
    event loop of its own and must not be called on the agent's. The first job converges
    to what is wanted then, so a restart removes the routes a killed predecessor left
    unless this node holds the VIP again by then.

What it must not do: decide who announces (the election does), or touch routes that are not
vipd's protocol (`vipd.routed.actuator`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address, IPv6Address
from typing import Protocol

from vipd import log as vlog
from vipd import metrics
from vipd.config import Config
from vipd.election import VipLink
from vipd.routed.plan import Observed, Op, Phase, host_network

__all__ = ["RouteAddress", "leader_actuators"]

IPAddress = IPv4Address | IPv6Address


class _Routes(Protocol):
    def converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]: ...
    def observe(self) -> Observed: ...
    def close(self) -> None: ...


def _open(cfg: Config) -> _Routes:
    from vipd.routed.actuator import RouteActuator

    return RouteActuator(cfg.announce.table, cfg.announce.protocol)


class RouteAddress:
    """One VIP's routes, following the election (the controller's address step)."""

    def __init__(
        self,
        vip: IPAddress,
        drain: float,
        open_routes: Callable[[], _Routes],
    ) -> None:
        self.vip = vip
        self.drain = drain
        self._open_routes = open_routes
        self._routes: _Routes | None = None
        self._want = False
        self._seen = False  # the announcement was in the table at the last look
        self._changed = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"routes-{vip}")
        self.log = vlog.get()
        self.errors = 0
        self._submit()  # the start: converge to "not wanted" unless elected by then

    def observe(self) -> bool:
        """The announcement at the last look; a new look is queued (the resync's next call
        sees a route someone deleted)."""
        self._submit(self._look)
        return self._seen

    def add(self) -> None:
        self._set(True)

    def remove(self) -> bool:
        was = self._want or self._seen
        self._set(False)
        return was

    def close(self) -> None:
        """Once the queued work is done (a drain included: at a stop, the caller's thread
        waits for it), the routes' socket is closed on the worker."""
        self._submit(self._close)
        self._pool.shutdown(wait=True)

    def _set(self, want: bool) -> None:
        self._want = want
        self._changed.set()  # a drain in progress ends early and re-reads the wish
        self._submit()

    def _submit(self, job: Callable[[], None] | None = None) -> None:
        with contextlib.suppress(RuntimeError):  # closed: nothing more is done
            self._pool.submit(job or self._apply)

    def _look(self) -> None:
        if self._routes is not None:
            try:
                seen = self._routes.observe()
            except OSError:
                return
            self._seen = host_network(self.vip) in seen.announced

    def _close(self) -> None:
        if self._routes is not None:
            self._routes.close()
            self._routes = None

    def _apply(self) -> None:
        """Worker thread: converge to the wish at the time this job runs."""
        self._changed.clear()
        try:
            if self._routes is None:
                self._routes = self._open_routes()
            if not self._want:
                if host_network(self.vip) in self._routes.observe().announced:
                    self._routes.converge({self.vip: Phase.DRAINING})
                    # The announcement just went: answer what the router still sends here.
                    metrics.ROUTED_WITHDRAWALS.labels(vip=str(self.vip), reason="leader").inc()
                    self._announced(False)
                    self._changed.wait(self.drain)
                self._announced(False)
            if self._want:
                self._routes.converge({self.vip: Phase.ANNOUNCED})
                self._announced(True)
            else:
                self._routes.converge({})
        except Exception as exc:  # a refused request: counted, logged, retried at resync
            self.errors += 1
            self._seen = False
            vlog.event(self.log, logging.WARNING, "routed: route change failed", vip=self.vip,
                       error=str(exc))  # fmt: skip

    def _announced(self, on: bool) -> None:
        self._seen = on
        metrics.ROUTED_ANNOUNCED.labels(vip=str(self.vip)).set(1 if on else 0)


class _NoAnnouncer:
    """No gratuitous ARP in routing-table mode: the router has no L2 neighbour to tell."""

    def burst(self, loop: asyncio.AbstractEventLoop, repeat: int, interval: float) -> bool:
        return True

    def send_one(self) -> bool:
        return True

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


def leader_actuators(
    cfg: Config,
    open_routes: Callable[[Config], _Routes] = _open,
) -> Callable[[VipLink, IPAddress, Callable[[int], None]], tuple[RouteAddress, _NoAnnouncer]]:
    """The agent's actuator factory for ``announce.pool: leader``."""

    def make(
        link: VipLink, vip: IPAddress, on_sent: Callable[[int], None]
    ) -> tuple[RouteAddress, _NoAnnouncer]:
        return RouteAddress(vip, cfg.announce.drain, lambda: open_routes(cfg)), _NoAnnouncer()

    return make
