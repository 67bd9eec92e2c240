"""Routing-table mode behind the election port: `RoutedElection`, the shell around
`vipd.routed.core` and `vipd.routed.actuator.RouteActuator`.

What it is
    The agent's third backend (``announce.mode: routing-table``, docs/design/routed.md). Its
    "role" is the ECMP pool rule's decision, not an election's result: ``leader`` means this
    node announces the VIP (the label is `vipd.routed.ecmp`'s reason), ``follower`` that it
    does not. Every node decides for itself; nothing is sent to the other nodes.

    - ``prepare``: in a worker thread before the first decision, a restart withdraws every
      route of vipd's protocol a killed predecessor left: the announcements at once, the
      binding of a configured VIP after the drain (the node is back once its API server has
      passed ``rise`` checks, the binding kept if that is within the drain).
    - ``run``: `core.advance` on every finished health check (``on_check``, ``on_health``)
      and at `Step.wake` (a drain ending, a peer's news expiring); the desired phases go to
      ``RouteActuator.converge`` in a worker thread (pyroute2's IPRoute runs a loop of its
      own) when they change, and every `RESYNC` seconds to repair drift; a changed decision
      is published as a `Transition`.
    - ``resign``: `RouteActuator.withdraw_all`: the announcements off, the drain, the
      bindings off (make-before-break for routes: the router drops the path while the node
      still answers), then return. Also after a crash: a route is never left behind.

    The VIP is never bound as an address in this mode: the agent gives the controller the
    inert actuators (`vipd.instance.inert_actuators`); the binding is the AnyIP route.

What it must not do: decide (`vipd.routed.core` does), or call pyroute2 on the event loop.
Route calls are serialised by a lock: a converge still running in its thread when the stop
cancels ``run`` finishes before the withdrawal starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from ipaddress import IPv4Address
from typing import TYPE_CHECKING, Any, Protocol, cast

from vipd import log as vlog
from vipd import metrics
from vipd.config import Config
from vipd.election import FOLLOWER, LEADER, Host, IPAddress, Publish, Transition, VipLink
from vipd.health.checker import HealthChecker
from vipd.health.tracker import BackendHealth, Outcome
from vipd.preflight import Preflight
from vipd.routed.core import Inputs, State, advance
from vipd.routed.plan import Observed, Op, Phase, Track, host_network
from vipd.routed.speaker import Peer, SpeakerConfig
from vipd.track import Adjustment

if TYPE_CHECKING:
    from vipd.routed.bgp_bfd import BfdRoutes, BgpBfd

__all__ = ["RESYNC", "RoutedElection", "Routes", "open_routes"]

RESYNC = 10.0  # seconds between converges with nothing changed: someone deleted a route
RETRY = 1.0  # seconds before another try after a refused route request


class Routes(Protocol):
    """What the backend needs of `RouteActuator` (a fake in the unit tests)."""

    def observe(self) -> Observed: ...

    def converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]: ...

    def withdraw_all(self, vips: Sequence[IPAddress], drain: float = ...) -> None: ...

    def close(self) -> None: ...


def open_routes(cfg: Config, pre: Preflight) -> Routes:
    """The kernel's routes (`RouteActuator`); in bgp mode with the speaker started and
    driving the announcements (`BgpRoutes`). Also the leader pool's (`vipd.routed.leader`)."""
    from vipd.routed.actuator import RouteActuator

    actuator = RouteActuator(cfg.announce.table, cfg.announce.protocol)
    if not cfg.announce.speaker:
        return actuator
    from vipd.routed.bgp import BgpRoutes
    from vipd.routed.exabgp import ExaBgpSpeaker

    try:
        speaker = ExaBgpSpeaker(speaker_config(cfg, pre), log=vlog.get())
        routes = BgpRoutes(actuator, speaker)
        speaker.on_change = routes.publish
        speaker.start()
    except BaseException:
        actuator.close()
        raise
    return routes


_open_default = open_routes  # RoutedElection's parameter of the same name hides it


def speaker_config(cfg: Config, pre: Preflight) -> SpeakerConfig:
    """``announce.bgp`` with the passwords read from their files and the router id
    defaulted to this node's IPv4 source address (ValueError when it has none)."""
    from vipd.routed.bgp_password import read_password

    b = cfg.announce.bgp
    assert b.local_asn is not None  # the config requires it in bgp mode
    router_id = b.router_id
    if router_id is None:
        v4 = [a for a in (pre.source, *pre.sources) if isinstance(a, IPv4Address)]
        v4 += [a.ip for a in pre.link.addresses if isinstance(a.ip, IPv4Address)]
        if not v4:
            raise ValueError("announce.bgp.router_id: no IPv4 address on the node; set it")
        router_id = v4[0]
    peers = tuple(
        Peer(
            p.address,
            p.asn,
            p.port,
            None if p.password_file is None else read_password(p.password_file),
        )
        for p in b.peers
    )
    return SpeakerConfig(b.local_asn, router_id, b.hold_time, peers)


class RoutedElection:
    """One node's routing-table announcement, behind the election port."""

    backend = "routed"

    def __init__(
        self,
        cfg: Config,
        pre: Preflight,
        *,
        clock: Callable[[], float] = time.monotonic,
        open_routes: Callable[[Config], Routes] | None = None,
    ) -> None:
        assert cfg.announce.routed and cfg.health is not None
        self.cfg = cfg
        self.pre = pre
        self.clock = clock
        self._open_routes = open_routes or (lambda c: _open_default(c, self.pre))
        self.log = vlog.get()
        self.routes: Routes | None = None
        self.bfd: BgpBfd | None = None
        self.health: HealthChecker | None = None
        self.state = State()
        self._lock = threading.Lock()
        self._applied: dict[IPAddress, Phase] | None = None
        self._next_resync = 0.0
        self._wake: asyncio.Event | None = None
        self._publish: Publish | None = None
        self._started = False
        self._role_since: float | None = None
        self.was_announcing = False
        self.errors = 0
        self.transitions = 0
        own = {str(a.ip) for a in pre.link.addresses} | {str(pre.source), *map(str, pre.sources)}
        self._own = own | {str(cfg.health.local)}

    # -- what the agent asks -------------------------------------------------------------

    @property
    def vips(self) -> tuple[IPAddress, ...]:
        return self.cfg.vips

    @property
    def health_peers(self) -> list[IPAddress]:
        """``health.peers`` less this node's own addresses: the pool rule's peers."""
        h = self.cfg.health
        return [] if h is None else [a for a in h.peers if str(a) not in self._own]

    @property
    def announcing(self) -> bool:
        d = self.state.decision
        return d is not None and d.announce

    def init_metrics(self) -> None:
        a = self.cfg.announce
        metrics.init_routed(
            node=self.cfg.node,
            vips=[str(v) for v in self.vips],
            interface=self.pre.link.name,
            bgp_peers=[str(p.address) for p in a.bgp.peers] if a.speaker else (),
        )

    async def prepare(self) -> VipLink:
        """Open the routes and withdraw whatever a predecessor left (no VIP is wanted yet).

        A configured VIP still bound (a SIGKILLed predecessor announced it) starts DRAINING:
        its announcement goes now and its binding only after ``announce.drain``, as at any
        withdrawal, so the connections the router still sends here until it drops the path
        are answered; announcing again before then keeps the binding. Everything else of
        vipd's protocol goes at once."""
        self.routes = await asyncio.to_thread(self._open_routes, self.cfg)
        seen = await asyncio.to_thread(self._observe)
        keep = {vip: Phase.DRAINING for vip in self.vips if host_network(vip) in seen.bound}
        removed = await asyncio.to_thread(self._converge, keep)
        now = self.clock()
        self.state = State(None, {vip: Track(Phase.DRAINING, now) for vip in keep})
        self._open_bfd()
        if removed:
            vlog.event(
                self.log,
                logging.INFO,
                "routed: removed routes left by an earlier run",
                ops=",".join(type(op).__name__ for op in removed),
            )
        link = self.pre.link
        return VipLink(link.name, link.index, link.mac)

    def _open_bfd(self) -> None:
        """bgp mode with ``announce.bgp.bfd.enabled``: a BFD session per BGP peer, in this
        process and on this loop (`vipd.routed.bgp_bfd`), so BFD dies with vipd."""
        a = self.cfg.announce
        if not (a.speaker and a.bgp.bfd.enabled) or self.bfd is not None:
            return
        from vipd.routed.bgp_bfd import BgpBfd

        self.bfd = BgpBfd(a.bgp.bfd, cast("BfdRoutes", self.routes))
        link = self.pre.link
        self.bfd.open((p.address for p in a.bgp.peers), link.addresses, link.name)

    def attach(self, host: Host) -> None:
        self.health = host.health

    async def run(self, publish: Publish, ready: Callable[[], None]) -> None:
        self._publish = publish
        self._wake = asyncio.Event()
        a = self.cfg.announce
        vlog.event(
            self.log,
            logging.INFO,
            "routed announcement started",
            node=self.cfg.node,
            vip=",".join(map(str, self.vips)),
            table=a.table,
            protocol=a.protocol,
            drain_s=a.drain,
            peers=",".join(map(str, self.health_peers)) or "-",
        )
        self._started = True
        for vip in self.vips:
            metrics.set_role(self.backend, FOLLOWER, str(vip))
        ready()
        while True:
            self._wake.clear()
            wake = await self.tick()
            delay = None if wake is None else max(0.0, wake - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def tick(self) -> float | None:
        """One decision and its routes; returns when to come back without news."""
        now = self.clock()
        step = advance(now, self.state, self.inputs())
        previous, self.state = self.state.decision, step.state
        if step.changed and step.state.decision is not None:
            self._decided(previous is not None and previous.announce, now)
        wake = step.wake
        if step.desired != self._applied or now >= self._next_resync:
            try:
                await asyncio.to_thread(self._converge, step.desired)
                self._applied = dict(step.desired)
                self._next_resync = now + RESYNC
            except OSError as exc:
                self.errors += 1
                vlog.event(self.log, logging.ERROR, "routed: route request failed", error=exc)
                self._applied = None
                self._next_resync = now + RETRY  # the next try, whatever else happens
        for vip, phase in step.desired.items():
            metrics.ROUTED_ANNOUNCED.labels(vip=str(vip)).set(phase is Phase.ANNOUNCED)
        return self._next_resync if wake is None else min(wake, self._next_resync)

    def inputs(self) -> Inputs:
        snap: Mapping[IPAddress, BackendHealth] = (
            self.health.snapshot() if self.health is not None else {}
        )
        h = self.cfg.health
        assert h is not None
        return Inputs(
            vips=self.vips,
            local=snap.get(h.local),
            peers={a: snap.get(a) for a in self.health_peers},
            drain=self.cfg.announce.drain,
        )

    def _decided(self, was: bool, now: float) -> None:
        d = self.state.decision
        assert d is not None
        self.transitions += 1
        self._role_since = now
        if was and not d.announce:
            for vip in self.vips:
                metrics.ROUTED_WITHDRAWALS.labels(vip=str(vip), reason=d.reason).inc()
                if self.cfg.announce.speaker:
                    metrics.BGP_WITHDRAWALS.labels(reason=d.reason).inc()
        detail = f"{'announcing' if d.announce else 'not announcing'}: {d.reason}"
        vlog.event(self.log, logging.INFO, "routed: " + detail)
        if self._publish is not None:
            self._publish(Transition(LEADER if d.announce else FOLLOWER, d.reason, detail, now))

    def _observe(self) -> Observed:
        assert self.routes is not None
        with self._lock:
            return self.routes.observe()

    def _converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]:
        assert self.routes is not None
        with self._lock:
            return self.routes.converge(desired)

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def on_health(self, addr: IPAddress, health: BackendHealth) -> None:
        self._wake_up()

    def on_check(self, addr: IPAddress, outcome: Outcome) -> None:
        # A peer's every good check renews its news (`ecmp.serving`'s freshness).
        self._wake_up()

    def on_link(self, up: bool) -> None:
        # The uplink's state reaches the router through BGP and BFD; the routes are on lo.
        pass

    async def relink(self, pre: Preflight) -> VipLink:
        self.pre = pre
        return VipLink(pre.link.name, pre.link.index, pre.link.mac)

    def on_track(self, adj: Adjustment) -> None:
        pass  # not used in this mode yet (docs/design/routed.md)

    def reconfigure(self, cfg: Config) -> None:
        self.cfg = cfg
        self._wake_up()

    async def resign(self, graceful: bool) -> None:
        """Announcements off, the drain, bindings off; then return (also after a crash)."""
        self.was_announcing = self.announcing
        if self.routes is None:
            return
        now = self.clock()
        if self.was_announcing:
            for vip in self.vips:
                metrics.ROUTED_WITHDRAWALS.labels(vip=str(vip), reason="stop").inc()
                if self.cfg.announce.speaker:
                    metrics.BGP_WITHDRAWALS.labels(reason="stop").inc()
            if self._publish is not None:
                self._publish(Transition(FOLLOWER, "stop", "stopping: withdrawing", now))
        for vip in self.vips:
            metrics.ROUTED_ANNOUNCED.labels(vip=str(vip)).set(0)
        await asyncio.to_thread(self._withdraw)
        vlog.event(self.log, logging.INFO, "routed: withdrawn", drain_s=self.cfg.announce.drain)

    def _withdraw(self) -> None:
        assert self.routes is not None
        with self._lock:
            self.routes.withdraw_all(self.vips, self.cfg.announce.drain)

    async def close(self) -> None:
        # The speaker's sessions end with a Cease first; BFD's AdminDown after them.
        try:
            if self.routes is not None:
                routes, self.routes = self.routes, None
                await asyncio.to_thread(routes.close)
        finally:
            if self.bfd is not None:
                bfd, self.bfd = self.bfd, None
                bfd.close()

    # -- observability -------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        return (True, "ready") if self._started else (False, "starting")

    def status(self, now: float) -> dict[str, Any]:
        d = self.state.decision
        a = self.cfg.announce
        return {
            "role": LEADER if self.announcing else FOLLOWER,
            "role_since_s": None if self._role_since is None else round(now - self._role_since, 6),
            "last_reason": "" if d is None else d.reason,
            "duplicate_claim": False,
            "routed": {
                "mode": a.mode,
                "announcing": self.announcing,
                "phases": {str(v): t.phase.value for v, t in self.state.tracks.items()},
                "table": a.table,
                "protocol": a.protocol,
                "drain_s": a.drain,
                **self._bgp_status(),
            },
            "master": None,
            "peers": [],
            "counters": {"transitions": self.transitions, "route_errors": self.errors},
        }

    def _bgp_status(self) -> dict[str, Any]:
        """bgp mode: each router's session and what the speaker announces (no password)."""
        speaker = getattr(self.routes, "speaker", None)
        if not self.cfg.announce.speaker or speaker is None:
            return {}
        return {
            "bgp": {
                "sessions": {str(p): up for p, up in speaker.sessions().items()},
                "announced": sorted(map(str, speaker.announced())),
            }
        }

    def stopped_fields(self) -> dict[str, object]:
        return {"was_announcing": self.was_announcing, "route_errors": self.errors}
