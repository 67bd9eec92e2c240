"""The agent: the one asyncio shell around an election backend.

What it is
    Everything both election backends share, in one place: the HTTP endpoint's heartbeat and
    status (``vipd.endpoint.server``), the controller that turns a role into desired state on
    the host (``vipd.controller``: the VIP, its gratuitous ARP, the IPVS leader flag), the
    address and announcement actuators on the VIP's link, the link watch of the configured
    interface (followed by name: deleted, it is a Shutdown; created again, a Startup on fresh
    sockets and actuators; a new primary address, the node's new source address), the
    health checker of the API servers (``vipd.health.checker``), the IPVS
    runtime (``vipd.ipvs.runtime``), sd_notify, the ordered stop and the exit codes. It picks
    the backend with a plain ``if`` (`make_election`) and talks to it only through the
    election port (``vipd.election``): the backend publishes `Transition` records, the agent
    pushes health and link events to it.

    Several VIPs: the agent runs one election *instance* per set of VIPs that moves together
    (`make_elections`): with VRRP one virtual router per address family (RFC 9568 §7: the
    IPv4 VIPs in one, the IPv6 VIPs in another, each its own election with its own leader),
    with the Lease one instance for every VIP. Each instance has its own controller, and each
    VIP its own actuators (address, announcer). Health, tracking, the link watch and reloads
    are the node's and go to every instance.

    Start: the VIP's link (``prepare``), the actuators and the controller, the link watch, the
    health checker, the backend's gating on it, IPVS, then the election itself. Signal handlers
    only set an event. Stop (SIGTERM/SIGINT, exit 0) and crash (exit 1) take the same ordered
    path: stop the health checks and the controller's resync, let the backend resign (it keeps
    the VIP until a successor shows, bounded: make-before-break), remove the VIP, remove IPVS,
    close the backend, close the actuators. A step that fails is logged and counted
    (``vipd_stop_errors_total{step}``) and the stop goes on releasing.

What it must not do: decide anything about the election (the backends' cores do), touch a
backend's sockets or clients, or let one failed stop step leave the rest undone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vipd import __version__, metrics
from vipd import log as vlog
from vipd import reload as vreload
from vipd.config import Config, ConfigError
from vipd.controller import Address, Announce, Controller, GarpPolicy, VipActuators
from vipd.election import Election, Host, IPAddress, Transition, VipLink
from vipd.health.checker import HealthChecker
from vipd.health.tracker import BackendHealth, Outcome
from vipd.hooks import HookRunner
from vipd.host import sdnotify
from vipd.host.address import AddressActuator
from vipd.host.announce import Announcer
from vipd.host.faultsig import FAULT_SIGNALS as FAULT_SIGNALS  # re-exported: tests, callers
from vipd.host.faultsig import block_fault_signals as block_fault_signals
from vipd.host.linkwatch import Interface, LinkWatch
from vipd.host.neighbor import announcement, parse_mac
from vipd.preflight import Preflight, advert_source
from vipd.track import Adjustment
from vipd.tracking import TrackChecker

if TYPE_CHECKING:
    from vipd.endpoint.server import Endpoint
    from vipd.ipvs.runtime import IpvsRuntime

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_SIGNAL_BASE = 128  # stopped by another terminating signal: 128 + its number, as a shell


# A reload's source of the new config: reads and validates it, raises ConfigError.
Loader = Callable[[], Config]


class LinkState(Protocol):
    """What the agent needs of ``vipd.host.linkwatch.LinkWatch`` (a fake in unit tests)."""

    @property
    def state(self) -> bool: ...
    @property
    def iface(self) -> Interface: ...

    def fileno(self) -> int: ...
    def on_readable(self) -> None: ...
    def close(self) -> None: ...


class Actuator(Address, Protocol):
    def close(self) -> None: ...


class Announcement(Announce, Protocol):
    def close(self) -> None: ...


# The host seams: the VIP's actuators on a link, and the watch of the configured interface
# (by name; the second callback hears every address change: index, address or None).
MakeActuators = Callable[
    [VipLink, IPAddress, Callable[[int], None]], "tuple[Actuator, Announcement]"
]
WatchLink = Callable[
    [str, Callable[[Interface], None], Callable[[int, IPAddress | None], None]], LinkState
]
# A relink that failed (the interface went again, the virtual MAC could not be made) is
# tried again this much later, or at the next change of the interface, whichever is first.
RELINK_RETRY = 1.0


def host_actuators(
    link: VipLink, vip: IPAddress, on_sent: Callable[[int], None]
) -> tuple[Actuator, Announcement]:
    """The real ones: netlink for the address, a packet socket for the announcements."""
    announcer = Announcer(link.name, announcement(parse_mac(link.mac), vip), on_sent)
    return AddressActuator(link.index, vip), announcer


def make_elections(cfg: Config, pre: Preflight) -> list[Election]:
    """The backend ``election.mode`` names, as instances: the Lease moves every VIP with one
    Lease; VRRP runs one virtual router per address family of the VIPs (RFC 9568 §7), IPv4
    first, each on ``election.vrrp.vrid``."""
    if cfg.election.mode == "lease":
        from vipd.lease.driver import LeaseElection

        return [LeaseElection(cfg, pre)]
    from vipd.vrrp.driver import VrrpElection

    return [VrrpElection(cfg, pre, vips=cfg.family(f)) for f in cfg.families]


@dataclass
class Instance:
    """One election instance and what the agent runs for it: its controller over its VIPs'
    actuators, and its notify hooks (whose ``<vip>`` is its VIPs, comma-separated)."""

    election: Election
    hooks: HookRunner
    controller: Controller | None = None
    actuators: list[tuple[Actuator, Announcement]] = field(default_factory=list)
    link: VipLink | None = None  # where its VIPs are bound (the interface, or its macvlan)
    ready: bool = False

    @property
    def vips(self) -> tuple[IPAddress, ...]:
        return self.election.vips


class Agent:
    """One node's agent: the shared shell around ``election``."""

    def __init__(
        self,
        cfg: Config,
        pre: Preflight,
        election: Election | Sequence[Election],
        endpoint: Endpoint | None = None,
        *,
        actuators: MakeActuators = host_actuators,
        watch_link: WatchLink = LinkWatch,
        loader: Loader | None = None,
    ) -> None:
        self.cfg = cfg
        self.loader = loader
        self.stop_signal: int | None = None
        self._make_actuators = actuators
        self._watch_link = watch_link
        self.pre = pre
        self.endpoint = endpoint
        self.log = vlog.get()
        elections = list(election) if isinstance(election, Sequence) else [election]
        if not elections:
            raise ValueError("the agent needs at least one election instance")
        self.instances = [
            Instance(
                e,
                HookRunner(
                    cfg.notify,
                    node=cfg.node,
                    vip=",".join(map(str, e.vips)),
                    log=self.log,
                    scripts=cfg.scripts,
                ),
            )
            for e in elections
        ]
        self.linkwatch: LinkState | None = None
        self._usable = False  # what the backend was last told (on_link)
        self._link_changed = asyncio.Event()
        self.health: HealthChecker | None = None
        self.ipvs: IpvsRuntime | None = None
        self.tracks: TrackChecker | None = None
        self.garp_sent = 0
        self.stop_errors = 0
        self._stopping = False
        self._fatal: asyncio.Future[None] | None = None

    # -- the instances -----------------------------------------------------------------------

    @property
    def election(self) -> Election:
        """The first instance's election: the backend name, and the top of ``/status``."""
        return self.instances[0].election

    @property
    def vip_link(self) -> VipLink | None:
        """The first instance's VIP link."""
        return self.instances[0].link

    @property
    def elections(self) -> list[Election]:
        return [inst.election for inst in self.instances]

    @property
    def controller(self) -> Controller | None:
        """The first instance's controller (the only one with a single VIP family)."""
        return self.instances[0].controller

    @property
    def controllers(self) -> list[Controller]:
        return [i.controller for i in self.instances if i.controller is not None]

    @property
    def hooks(self) -> HookRunner:
        return self.instances[0].hooks

    @property
    def health_peers(self) -> list[IPAddress]:
        """Every instance's health peers, each once, in order."""
        return list(dict.fromkeys(a for e in self.elections for a in e.health_peers))

    # -- what the backend calls -------------------------------------------------------------

    def _on_transition(self, inst: Instance, t: Transition) -> None:
        """A role change from one instance's core: desired state, metrics, status.

        Once the stop has begun the VIP goes only through the ordered stop (the backend keeps
        it bound while it waits for a successor), so a transition then changes the metrics and
        the status, not the host."""
        if inst.controller is not None and not self._stopping:
            inst.controller.set_leader(t.leader, t.at)
            # After the VIPs are bound and announced (or removed): hooks only queue here.
            inst.hooks.on_transition(t)
        backend = inst.election.backend
        for vip in inst.vips:
            metrics.set_role(backend, t.role, str(vip))
        metrics.TRANSITIONS.labels(backend=backend, role=t.role, reason=t.label).inc()
        self._publish(time.monotonic())

    def _on_ready(self, inst: Instance) -> None:
        inst.ready = True
        if all(i.ready for i in self.instances):
            sdnotify.notify("READY=1")  # in every election (or waiting for the link)
        self._publish(time.monotonic())

    # -- health and link: pushed to the backend ---------------------------------------------

    def _start_health(self) -> HealthChecker | None:
        h = self.cfg.health
        if h is None:
            return None
        peers = [a for a in self.health_peers if a != h.local]
        health = HealthChecker(
            peers,
            h,
            lambda addr, s: self._guarded(self._on_health, addr, s),
            log=self.log,
            on_check=self._count_health_check,
        )
        for addr in health.targets():
            metrics.HEALTH_BACKEND_HEALTHY.labels(
                target=str(addr), local=str(addr == h.local).lower()
            ).set(0)
        return health

    def _count_health_check(self, addr: IPAddress, outcome: Outcome) -> None:
        metrics.HEALTH_CHECKS.labels(target=str(addr), result="ok" if outcome.ok else "fail").inc()
        metrics.HEALTH_CHECK_DURATION.labels(target=str(addr)).observe(outcome.duration)
        if not self._stopping:
            for e in self.elections:
                e.on_check(addr, outcome)

    def _on_health(self, addr: IPAddress, health: BackendHealth) -> None:
        local = self.cfg.health is not None and addr == self.cfg.health.local
        metrics.HEALTH_BACKEND_HEALTHY.labels(target=str(addr), local=str(local).lower()).set(
            1 if health.healthy else 0
        )
        if not self._stopping:
            for e in self.elections:
                e.on_health(addr, health)

    def _on_track(self, adj: Adjustment) -> None:
        if not self._stopping:
            for e in self.elections:
                e.on_track(adj)
        self._publish(time.monotonic())

    def _on_link(self, iface: Interface) -> None:
        """The configured interface changed: `_follow_link` applies it, in order."""
        metrics.INTERFACE_UP.labels(interface=self.pre.link.name).set(1 if iface.up else 0)
        self._link_changed.set()
        self._publish(time.monotonic())

    def _on_address(self, index: int, ip: IPAddress | None) -> None:
        """An address changed somewhere: a VIP's own on its instance's link is that
        controller's to check at once (a VIP removed by someone else is added again); None:
        notifications were lost, so every controller looks again."""
        if self._stopping:
            return
        for inst in self.instances:
            link = inst.link
            if inst.controller is None:
                continue
            if ip is None or (ip in inst.vips and link is not None and index == link.index):
                inst.controller.kick()

    def _pre_sources(self) -> tuple[IPAddress, ...]:
        """The advert sources in use, one per family of the VIPs (preflight's, or the last
        relink's)."""
        return self.pre.sources or (self.pre.source,)

    def _sources(self, iface: Interface) -> tuple[IPAddress, ...] | None:
        """The node's advert source on ``iface`` for each family of the VIPs (preflight's
        rule), IPv4 first; None if the interface is gone or any family has none."""
        if not iface.present:
            return None
        link = iface.host_link()
        out: list[IPAddress] = []
        for version in self.cfg.families:
            src = advert_source(self.cfg.family(version)[0], link, self.pre.peers_for(version))
            if src is None:
                return None
            out.append(src)
        return tuple(out)

    async def _follow_link(self) -> None:
        """Apply every change of the configured interface, one at a time, until cancelled."""
        while True:
            await self._link_changed.wait()
            self._link_changed.clear()
            if self.linkwatch is not None and not self._stopping:
                await self._apply_link(self.linkwatch.iface)

    def _on_link_all(self, up: bool) -> None:
        for e in self.elections:
            e.on_link(up)

    async def _apply_link(self, iface: Interface) -> None:
        """RFC 9568 §6.4 on the interface as it is now, for every instance.

        Usable means present, up, and with a source address for every family of the VIPs.
        Losing any of it is a Shutdown (``on_link(False)``; a deleted link took the VIPs with
        it: the controllers are unlinked). The same name with another index or MAC is a new
        interface, and a new source address a new identity on the wire: the backends reopen
        their sockets on it (``relink``), the agent makes new actuators on each instance's
        VIP link. Then, usable again, a Startup (``on_link(True)``)."""
        sources = self._sources(iface)
        usable = iface.up and sources is not None
        new_link = iface.present and (iface.index, iface.mac) != (
            self.pre.link.index,
            self.pre.link.mac,
        )
        if self._usable and (not usable or new_link):
            self._usable = False
            why = (
                "deleted"
                if not iface.present
                else "re-created"
                if new_link
                else "down"
                if not iface.up
                else "without a source address"
            )
            vlog.event(
                self.log,
                logging.WARNING,
                "interface unusable: leaving the election",
                interface=iface.name,
                why=why,
            )
            self._on_link_all(False)
        if not iface.present:
            for controller in self.controllers:
                controller.unlink()
        if usable and (new_link or sources != self._pre_sources()):
            assert sources is not None
            if not await self._relink(iface, sources, new_link):
                return
        if usable and not self._usable:
            self._usable = True
            self._on_link_all(True)
        self._publish(time.monotonic())

    async def _relink(
        self, iface: Interface, sources: tuple[IPAddress, ...], new_link: bool
    ) -> bool:
        """Fresh sockets and actuators on the interface as it is now, for every instance;
        False if that failed (tried again `RELINK_RETRY` later, or at the next change)."""
        old = self.pre
        source = next(s for s in sources if s.version == self.cfg.vip.version)
        pre = dataclasses.replace(old, link=iface.host_link(), source=source, sources=sources)
        try:
            for inst in self.instances:
                link = await inst.election.relink(pre)
                if new_link or link != inst.link:
                    fresh = [self._make_actuators(link, v, self._count_garp) for v in inst.vips]
                    for address, announcer in inst.actuators:
                        for part in (address, announcer):
                            with contextlib.suppress(OSError):
                                part.close()
                    inst.actuators = fresh
                    if inst.controller is not None:
                        inst.controller.relink([VipActuators(a, b) for a, b in fresh])
                    inst.link = link
        except Exception as exc:
            vlog.event(
                self.log,
                logging.ERROR,
                "could not rejoin on the interface: trying again",
                interface=iface.name,
                index=iface.index,
                error=exc,
                retry_s=RELINK_RETRY,
            )
            asyncio.get_running_loop().call_later(RELINK_RETRY, self._link_changed.set)
            return False
        self.pre = pre
        vlog.event(
            self.log,
            logging.INFO,
            "interface re-created: fresh sockets on it" if new_link else "source address changed",
            interface=iface.name,
            index=iface.index,
            index_was=old.link.index,
            mac=iface.mac,
            source=",".join(map(str, sources)),
            source_was=",".join(map(str, old.sources or (old.source,))),
            vip_link=",".join(i.link.name for i in self.instances if i.link is not None),
        )
        h = self.cfg.health
        if h is not None and h.local == old.source and source != old.source:
            vlog.event(
                self.log,
                logging.WARNING,
                "health.local is the node's old address: the local API server is still "
                "checked there (change it in the config and restart)",
                local=h.local,
                source=source,
            )
        return True

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Loop callbacks run through here so that a bug ends the run instead of vanishing."""
        try:
            fn(*args)
        except Exception as exc:
            if self._fatal is not None and not self._fatal.done():
                self._fatal.set_exception(exc)

    def _count_garp(self, n: int) -> None:
        self.garp_sent += n
        metrics.GARP_SENT.inc(n)

    # -- status ------------------------------------------------------------------------------

    @property
    def link_up(self) -> bool:
        return bool(self.linkwatch is not None and self.linkwatch.state)

    def readiness(self) -> tuple[bool, str]:
        """/readyz: does this node take part in the election right now, and if not, why."""
        if self._stopping:
            return False, "stopping: leaving the election"
        for e in self.elections:
            ready, reason = e.readiness()
            if not ready:
                return ready, reason
        return True, "ready"

    def status(self, now: float) -> dict[str, Any]:
        """The /status document (``vipd.endpoint.status`` documents its shape): the first
        instance's election at the top, as with one VIP; ``vips`` lists every VIP with its
        instance's role, and with several instances ``instances`` has each one's part."""
        parts = [inst.election.status(now) for inst in self.instances]
        counters = dict(parts[0].pop("counters", {}))
        counters["garp_sent"] = self.garp_sent
        vips: list[dict[str, Any]] = []
        for inst, part in zip(self.instances, parts, strict=True):
            bound = dict(inst.controller.bound_by_vip()) if inst.controller is not None else {}
            for vip in inst.vips:
                vips.append(
                    {
                        "vip": str(vip),
                        "bound": bool(bound.get(vip, False)),
                        "role": part.get("role"),
                        "vrid": part["vrrp"]["vrid"] if "vrrp" in part else None,
                    }
                )
        doc: dict[str, Any] = {
            "node": self.cfg.node,
            "version": __version__,
            "vip": str(self.cfg.vip),
            "vips": vips,
            "interface": self.pre.link.name,
            "source": str(self.pre.source),
            "backend": self.election.backend,
            "vip_bound": bool(self.controller is not None and self.controller.bound),
            "interface_up": self.link_up,
            **parts[0],
            "backends": self._backends(),
            "tracks": self.tracks.snapshot() if self.tracks is not None else [],
            "counters": counters,
        }
        if len(self.instances) > 1:
            doc["instances"] = [
                {"vips": [str(v) for v in inst.vips], **part}
                for inst, part in zip(self.instances, parts, strict=True)
            ]
        return doc

    def _backends(self) -> list[dict[str, Any]]:
        """Every health-check target (the local API server first, then the peers the backend
        asked for and the IPVS backends) with its health and last check."""
        if self.health is None:
            return []
        local = self.health.local
        peers = set(self.health_peers)
        out: list[dict[str, Any]] = []
        snap = self.health.snapshot()
        for addr in sorted(snap, key=lambda a: (a != local, a.version, int(a))):
            h = snap[addr]
            detail = h.error or (f"HTTP {h.status}" if h.status is not None else "not checked yet")
            out.append(
                {
                    "name": "local" if addr == local else "peer" if addr in peers else "backend",
                    "address": str(addr),
                    "url": self.health.url(addr),
                    "healthy": h.healthy,
                    "detail": detail,
                    "checks": h.checks,
                    "last_check_ms": None if h.duration is None else round(h.duration * 1e3, 3),
                }
            )
        return out

    def _publish(self, now: float) -> None:
        """Hand the readiness verdict to the HTTP thread (on every change and heartbeat: a
        few attribute reads). The status document is built only when /status asks for it
        (`_status_doc`). A bug here must not kill the election, so it is logged instead."""
        if self.endpoint is None:
            return
        try:
            ready, reason = self.readiness()
            self.endpoint.set_ready(ready, reason)
        except Exception:
            self.log.exception("could not publish the readiness")

    def _status_doc(self) -> dict[str, Any]:
        """/status, built on the loop for a request (``Endpoint.attach``)."""
        try:
            return self.status(time.monotonic())
        except Exception:
            self.log.exception("could not build the status")
            raise

    # -- signals: reload, status, stop ---------------------------------------------------------

    def request_stop(self, signum: int, stop: asyncio.Event) -> None:
        """A terminating signal: the ordered stop, once (a second signal changes nothing)."""
        if self.stop_signal is None:
            self.stop_signal = signum
            vlog.event(self.log, logging.INFO, "signal: stopping", signal=signal_name(signum))
        stop.set()

    def log_status(self, signum: int) -> None:
        """SIGUSR1/SIGUSR2: the /status document as one log line."""
        doc = self.status(time.monotonic())
        vlog.event(
            self.log,
            logging.INFO,
            "status",
            signal=signal_name(signum),
            status=json.dumps(doc, default=str, separators=(",", ":")),
        )

    def reload(self) -> str:
        """SIGHUP: read and validate the config again; apply it only if every changed key
        applies live (``vipd.reload``). Returns the result label of ``vipd_reloads_total``.

        Never raises: a reload that cannot be done is one log line, and the agent runs on
        with the config it had. Nothing here binds, removes or announces the VIP."""
        result = self._reload()
        metrics.RELOADS.labels(result=result).inc()
        return result

    def _reload(self) -> str:
        if self._stopping:
            return "refused"
        if self.loader is None:
            vlog.event(
                self.log,
                logging.WARNING,
                "reload refused: the config was read from stdin; restart vipd to change it",
            )
            return "refused"
        try:
            new = self.loader()
        except ConfigError as exc:
            vlog.event(
                self.log,
                logging.ERROR,
                "reload failed: keeping the running config",
                error=str(exc),
            )
            return "invalid"
        p = vreload.plan(self.cfg, new)
        if p.refused:
            vlog.event(
                self.log,
                logging.ERROR,
                "reload refused: keeping the running config (these keys need a restart)",
                keys=",".join(p.refused),
            )
            return "refused"
        if not p.changed:
            vlog.event(self.log, logging.INFO, "reload: nothing changed")
            return "unchanged"
        try:
            self._apply_config(new)
        except Exception:
            # A bug: say so, and keep running (parts may already have the new values).
            self.log.exception("reload failed while applying the live keys")
            return "invalid"
        vlog.event(self.log, logging.INFO, "reloaded", keys=",".join(p.live))
        return "applied"

    def _apply_config(self, new: Config) -> None:
        """The live keys of ``new`` (``vipd.reload.LIVE``) into the running parts."""
        self.cfg = new
        logging.getLogger(vlog.LOGGER_NAME).setLevel(new.log.level.upper())
        for controller in self.controllers:
            controller.garp = GarpPolicy.from_config(new.garp)
        if self.health is not None and new.health is not None:
            self.health.reconfigure(new.health)
        if self.ipvs is not None:
            self.ipvs.reconfigure(new)
        for inst in self.instances:
            inst.hooks.reconfigure(new.notify, new.scripts)
        if self.tracks is not None:
            self.tracks.reconfigure(new.track, new.scripts)
        for e in self.elections:
            e.reconfigure(new)
        if self.health is not None and new.health is not None:
            targets = {*self.health_peers}
            if self.ipvs is not None:
                targets |= set(self.ipvs.spec.backends)
            self.health.set_targets(a for a in targets if a != new.health.local)
        self._publish(time.monotonic())

    # -- life cycle --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set (exit 0) or something breaks (exit 1)."""
        loop = asyncio.get_running_loop()
        self._fatal = loop.create_future()
        worker: asyncio.Task[None] | None = None
        elect: asyncio.Task[None] | None = None
        heart: asyncio.Task[None] | None = None
        follow: asyncio.Task[None] | None = None
        code = EXIT_OK
        for e in self.elections:
            e.init_metrics()
        if self.endpoint is not None:
            self.endpoint.beat(time.monotonic())
            self.endpoint.attach(loop, self._status_doc)
            heart = loop.create_task(self.endpoint.heartbeat(self._publish), name="heartbeat")
        try:
            for inst in self.instances:
                link = inst.link = await inst.election.prepare()
                inst.actuators = [
                    self._make_actuators(link, vip, self._count_garp) for vip in inst.vips
                ]
                inst.controller = Controller(
                    vips=[VipActuators(a, b) for a, b in inst.actuators],
                    garp=GarpPolicy.from_config(self.cfg.garp),
                    log=self.log,
                )
            controllers = self.controllers
            worker = loop.create_task(self._run_controllers(controllers), name="controller")
            for inst in self.instances:
                inst.hooks.start()
            self.linkwatch = self._watch_link(
                self.pre.link.name,
                lambda iface: self._guarded(self._on_link, iface),
                lambda index, ip: self._guarded(self._on_address, index, ip),
            )
            iface = self.linkwatch.iface
            self._usable = (
                iface.up
                and (iface.index, iface.mac) == (self.pre.link.index, self.pre.link.mac)
                and self._sources(iface) == self._pre_sources()
            )
            self._link_changed.set()  # whatever changed since preflight's snapshot
            self.health = self._start_health()
            for inst, controller in zip(self.instances, controllers, strict=True):
                inst.election.attach(
                    Host(
                        controller,
                        self.health,
                        self._usable,
                        None if self.endpoint is None else self.endpoint.offer_beat,
                    )
                )
            if self.cfg.track:
                self.tracks = TrackChecker(
                    self.cfg.track,
                    lambda a: self._guarded(self._on_track, a),
                    log=self.log,
                    scripts=self.cfg.scripts,
                )
                for e in self.elections:
                    e.on_track(self.tracks.adjustment())  # every track starts down
                self.tracks.start()
            if self.health is not None:
                self.health.start()
                if self.cfg.ipvs.enabled:
                    # Only IPVS nodes pay for its modules (and their Kubernetes client).
                    # One VIP only (config.py), so one instance and its controller.
                    from vipd.ipvs.runtime import IpvsRuntime

                    self.ipvs = IpvsRuntime(self.cfg, self.pre.source, self.log)
                    self.ipvs.start(self.health, controllers[0].leader)
                    controllers[0].follow(self.ipvs)
            loop.add_reader(self.linkwatch.fileno(), self._guarded, self.linkwatch.on_readable)
            metrics.INTERFACE_UP.labels(interface=self.pre.link.name).set(
                1 if self.linkwatch.state else 0
            )
            elect = loop.create_task(self._run_elections(), name="election")
            follow = loop.create_task(self._follow_link(), name="link")
            stopper = loop.create_task(stop.wait(), name="stop-signal")
            waiters: set[asyncio.Future[Any]] = {stopper, self._fatal, worker, elect, follow}
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            for fut in done:
                if fut is not stopper and (exc := fut.exception()) is not None:
                    raise exc
            if worker in done:
                raise RuntimeError("the controller stopped unexpectedly")
            if elect in done:
                raise RuntimeError("the election stopped unexpectedly")
            if follow in done:
                raise RuntimeError("the link follower stopped unexpectedly")
        except Exception:
            self.log.exception("crashed: releasing the VIP and exiting")
            code = EXIT_CRASH
        if code == EXIT_OK and self.stop_signal not in (None, signal.SIGTERM, signal.SIGINT):
            assert self.stop_signal is not None
            code = EXIT_SIGNAL_BASE + self.stop_signal
        self._stopping = True
        if follow is not None and not follow.done():
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
        self._publish(time.monotonic())
        await self._stop(worker, elect, graceful=code != EXIT_CRASH)
        if heart is not None:
            heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heart
        return code

    async def _run_controllers(self, controllers: list[Controller]) -> None:
        """Every instance's controller; the first to end (a bug) ends them all."""
        async with asyncio.TaskGroup() as tg:
            for i, c in enumerate(controllers):
                tg.create_task(c.run(), name=f"controller-{i}")

    async def _run_elections(self) -> None:
        """Every instance's election, each publishing to its own controller; the first to
        raise ends them all (and the agent takes the ordered stop)."""
        async with asyncio.TaskGroup() as tg:
            for i, inst in enumerate(self.instances):
                tg.create_task(
                    inst.election.run(
                        lambda t, inst=inst: self._on_transition(inst, t),  # type: ignore[misc]
                        lambda inst=inst: self._on_ready(inst),  # type: ignore[misc]
                    ),
                    name=f"election-{i}",
                )

    async def _step(
        self, step: str, what: str, action: Callable[[], Awaitable[None] | None]
    ) -> None:
        """One step of the ordered stop: a failure is logged and counted, never raised."""
        try:
            result = action()
            if result is not None:
                await result
        except Exception as exc:
            self.stop_errors += 1
            metrics.STOP_ERRORS.labels(step=step).inc()
            vlog.event(self.log, logging.ERROR, "stop step failed", step=step, what=what, error=exc)

    async def _stop(
        self,
        worker: asyncio.Task[None] | None,
        elect: asyncio.Task[None] | None,
        graceful: bool,
    ) -> None:
        """Health and resync off, the backend resigns (keeping the VIP until a successor shows),
        then the VIP, IPVS, the backend's sockets and the actuators go, in that order."""
        loop = asyncio.get_running_loop()
        sdnotify.notify("STOPPING=1")
        if self.health is not None:
            self.health.stop()
        if self.tracks is not None:
            self.tracks.stop()
        for task in (elect, worker):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for controller in self.controllers:
            controller.quiesce()

        async def resign_all() -> None:
            # Each instance waits for its own successor (bounded), side by side, so a second
            # family adds nothing to the stop's length.
            results = await asyncio.gather(
                *(e.resign(graceful) for e in self.elections), return_exceptions=True
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r

        await self._step("resign", "resign", resign_all)
        for controller in self.controllers:
            await self._step("vip", "remove the VIP", controller.release)
        ipvs = self.ipvs
        if ipvs is not None:
            await self._step("ipvs", "remove the IPVS service", ipvs.stop)
        linkwatch = self.linkwatch
        if linkwatch is not None:

            def close_linkwatch() -> None:
                loop.remove_reader(linkwatch.fileno())
                linkwatch.close()

            await self._step("host", "close the link watch", close_linkwatch)
        for e in self.elections:
            await self._step("election", "close the election", e.close)
        for inst in self.instances:
            for address, announcer in inst.actuators:
                await self._step("host", "close the announcer", announcer.close)
                await self._step("host", "close the address actuator", address.close)
        for inst in self.instances:
            await self._step("host", "run the stop hooks", inst.hooks.close)
        vlog.event(
            self.log,
            logging.INFO,
            "stopped",
            **self.election.stopped_fields(),
            # The other instances' (a second VRRP family): the same fields, by family.
            **{
                f"instance{i}": inst.election.stopped_fields()
                for i, inst in enumerate(self.instances)
                if i > 0
            },
            garp_sent=self.garp_sent,
            stop_errors=self.stop_errors,
        )


def signal_name(signum: int) -> str:
    """``SIGTERM``; a real-time signal without a name of its own as ``SIGRTMIN+7``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIGRTMIN+{signum - signal.SIGRTMIN}"


def install_signal_handlers(agent: Agent, stop: asyncio.Event) -> None:
    """SIGHUP reloads, SIGUSR1 and SIGUSR2 log the status, and every other signal whose
    default action ends the process (signal(7): Term and Core) takes the ordered stop, so
    that no catchable signal leaves the VIP bound on a stopped vipd. SIGPIPE stays ignored
    (Python's default: a closed socket is an EPIPE error, not a death). The synchronous
    fault signals go to `watch_fault_signals`. The handlers only schedule work on the loop.
    """
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, agent.reload)
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        loop.add_signal_handler(sig, agent.log_status, sig)
    terminating = [
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGQUIT,
        signal.SIGABRT,
        signal.SIGALRM,
        signal.SIGVTALRM,
        signal.SIGPROF,
        signal.SIGIO,
        signal.SIGPWR,
        signal.SIGSTKFLT,
        signal.SIGXCPU,
        signal.SIGXFSZ,
        *range(signal.SIGRTMIN, signal.SIGRTMAX + 1),
    ]
    for sig in terminating:
        loop.add_signal_handler(sig, agent.request_stop, sig, stop)


def watch_fault_signals(agent: Agent, stop: asyncio.Event) -> None:
    """A thread that takes the blocked fault signals sent by kill(2) (sigwaitinfo) and hands
    each to the loop as an ordered stop."""
    loop = asyncio.get_running_loop()

    def wait() -> None:
        while True:
            info = signal.sigwaitinfo(FAULT_SIGNALS)
            try:
                loop.call_soon_threadsafe(agent.request_stop, info.si_signo, stop)
            except RuntimeError:  # the loop is closed: vipd is on its way out anyway
                return

    threading.Thread(target=wait, name="vipd-signals", daemon=True).start()


async def serve(
    cfg: Config, pre: Preflight, endpoint: Endpoint | None = None, loader: Loader | None = None
) -> int:
    stop = asyncio.Event()
    agent = Agent(cfg, pre, make_elections(cfg, pre), endpoint, loader=loader)
    install_signal_handlers(agent, stop)
    watch_fault_signals(agent, stop)
    return await agent.run(stop)


def run(
    cfg: Config, pre: Preflight, endpoint: Endpoint | None = None, loader: Loader | None = None
) -> int:
    """Run the agent on uvloop when it is installed, else on asyncio's default loop.

    ``endpoint`` is the HTTP endpoint, already bound by the caller (the port is the per-node
    lock, taken before joining the election); it serves while the agent runs. ``loader``
    reads the config again for a reload (None: the config came from stdin)."""
    block_fault_signals()
    if endpoint is not None:
        endpoint.start()
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(serve(cfg, pre, endpoint, loader))
        return uvloop.run(serve(cfg, pre, endpoint, loader))
    finally:
        if endpoint is not None:
            # The per-node lock outlives this call: the process may still join a thread
            # with an API call in flight, and the successor must not start before it ends.
            endpoint.close(keep_lock=True)
