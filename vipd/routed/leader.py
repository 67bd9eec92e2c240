"""``announce.pool: leader``: routing-table or bgp mode where only the elected holder announces.

What it is
    The actuators the controller drives in this mode (`vipd.instance.MakeActuators`'s
    shape): `leader_actuators(cfg)` makes, per VIP, a `RouteAddress` (the controller's
    "address" step) and an inert announcer (no gratuitous ARP: the router learns the VIP
    from BGP). The election is the configured one, VRRP or a Lease (`vipd.agent`), as in
    ``announce.mode: arp``; where ARP mode binds the VIP on the interface, this mode writes
    the VIP's two routes (`vipd.routed.plan`: the AnyIP binding, then the announcement: in
    ``announce.table`` for the node's routing daemon to export, or, in bgp mode, told to
    vipd's own speaker, `vipd.routed.bgp.BgpRoutes`). So the router has one path, to the
    holder, and it moves with the election:

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

    Every VIP's `RouteAddress` goes through one `SharedRoutes`: one set of routes (in bgp
    mode one speaker, whose sessions are up on every node, holder or not, so a new holder
    announces over an established session), and each VIP's converge keeps the other VIPs'
    phases (a VIP of each family, each with its own VRRP instance, may be held apart). The
    routes open on the first job and close with the last `RouteAddress` (bgp mode: the
    speaker stops gracefully, its sessions closed with a Cease after the withdrawals).

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
from vipd.preflight import Preflight
from vipd.routed.plan import Observed, Op, Phase, host_network

__all__ = ["RouteAddress", "SharedRoutes", "leader_actuators"]

IPAddress = IPv4Address | IPv6Address


class _Routes(Protocol):
    def converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]: ...
    def observe(self) -> Observed: ...
    def close(self) -> None: ...


def _open(cfg: Config, pre: Preflight) -> _Routes:
    # The ECMP pool's opener: the kernel's routes, and in bgp mode the speaker started.
    from vipd.routed.backend import open_routes

    return open_routes(cfg, pre)


class SharedRoutes:
    """One set of routes for every VIP's `RouteAddress`; `view(vip)` is one VIP's share."""

    def __init__(self, open_routes: Callable[[], _Routes]) -> None:
        self._open_routes = open_routes
        self._routes: _Routes | None = None
        self._wanted: dict[IPAddress, Phase] = {}
        self._users = 0
        self._lock = threading.Lock()

    def view(self, vip: IPAddress) -> _VipRoutes:
        with self._lock:
            self._users += 1
        return _VipRoutes(self, vip)

    def _get(self) -> _Routes:
        if self._routes is None:
            self._routes = self._open_routes()
        return self._routes

    def observe(self) -> Observed:
        with self._lock:
            return self._get().observe()

    def converge(self, vip: IPAddress, phase: Phase) -> list[Op]:
        with self._lock:
            self._wanted[vip] = phase
            wanted = {v: p for v, p in self._wanted.items() if p is not Phase.WITHDRAWN}
            return self._get().converge(wanted)

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._routes is None:
                return
            routes, self._routes = self._routes, None
        routes.close()


class _VipRoutes:
    """`SharedRoutes` as one VIP's `_Routes`: its converge sets that VIP's phase alone."""

    def __init__(self, shared: SharedRoutes, vip: IPAddress) -> None:
        self._shared = shared
        self._vip = vip
        self._closed = False

    def observe(self) -> Observed:
        return self._shared.observe()

    def converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]:
        return self._shared.converge(self._vip, desired.get(self._vip, Phase.WITHDRAWN))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._shared.release()


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
    """No gratuitous ARP in the routed modes: the router has no L2 neighbour to tell."""

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
    pre: Preflight,
    open_routes: Callable[[Config, Preflight], _Routes] = _open,
) -> Callable[[VipLink, IPAddress, Callable[[int], None]], tuple[RouteAddress, _NoAnnouncer]]:
    """The agent's actuator factory for ``announce.pool: leader``: every VIP it makes
    shares one `SharedRoutes` (``pre`` gives bgp mode's default router id)."""
    shared = SharedRoutes(lambda: open_routes(cfg, pre))

    def make(
        link: VipLink, vip: IPAddress, on_sent: Callable[[int], None]
    ) -> tuple[RouteAddress, _NoAnnouncer]:
        view = shared.view(vip)
        return RouteAddress(vip, cfg.announce.drain, lambda: view), _NoAnnouncer()

    return make
