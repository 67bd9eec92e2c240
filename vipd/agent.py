"""The agent: the one asyncio shell around the election backends.

What it is
    The backends' shared shell, wired together: one controller per election instance
    (``vipd.controller``: the VIP, its gratuitous ARP, the IPVS leader flag) over its VIPs'
    actuators (``vipd.instance``), the interface followed by name (``vipd.linkfollow``), the
    health and tracked checks (``vipd.checkfeed``), IPVS, the endpoint's heartbeat and status
    (``vipd.statusdoc``), sd_notify, reloads (``vipd.livereload``), the ordered stop and the
    exit codes. It picks the backend with a plain ``if`` (`make_elections`: VRRP runs one
    virtual router per address family, RFC 9568 §7; the Lease one instance for all) and talks
    to it only through the election port (``vipd.election``).

    The lifecycle is declared (``vipd.lifecycle``): `_start` brings the parts up in order and
    spawns the named tasks (controller, election, link), which run until the stop event or
    the first of them ends; `_stop_plan` is the ordered stop, the same for SIGTERM/SIGINT
    (exit 0), another terminating signal (128 + n) and a crash (1): stop the health checks,
    the tracked checks and the resync, let the backend resign (the VIP stays until a
    successor shows, bounded), remove the VIP, remove vipd's IPVS service, close the backend,
    close the actuators, run the stop hooks. A guarded step that fails is logged and counted
    (``vipd_stop_errors_total{step}``) and the stop goes on.

What it must not do: decide anything about the election (the backends' cores do), touch a
backend's sockets or clients, or let one failed stop step leave the rest undone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from vipd import livereload, metrics, statusdoc
from vipd import log as vlog
from vipd.checkfeed import CheckFeed
from vipd.config import Config
from vipd.controller import Controller, GarpPolicy, VipActuators
from vipd.election import Election, Host, IPAddress, Transition
from vipd.health.checker import HealthChecker
from vipd.hooks import HookRunner
from vipd.host import sdnotify
from vipd.host.faultsig import FAULT_SIGNALS as FAULT_SIGNALS  # re-exported: tests, callers
from vipd.host.linkwatch import LinkWatch
from vipd.instance import Instance, MakeActuators, host_actuators, inert_actuators
from vipd.lifecycle import OrderedStop, Step, Tasks, Wiring, together
from vipd.linkfollow import LinkFollower, WatchLink
from vipd.livereload import Loader
from vipd.preflight import Preflight
from vipd.signals import signal_name as signal_name  # re-exported: tests
from vipd.tracking import TrackChecker

if TYPE_CHECKING:
    from vipd.endpoint.server import Endpoint
    from vipd.ipvs.runtime import IpvsRuntime
    from vipd.membership.follower import MembershipFollower

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_SIGNAL_BASE = 128  # stopped by another terminating signal: 128 + its number, as a shell


def make_elections(cfg: Config, pre: Preflight) -> list[Election]:
    """The backend ``election.mode`` names, as instances: the Lease moves every VIP with one
    Lease; VRRP runs one virtual router per address family of the VIPs (RFC 9568 §7), IPv4
    first, each on ``election.vrrp.vrid``. Routing-table mode with the ECMP pool elects
    nothing: one instance for every VIP applies the ECMP pool rule (``vipd.routed.backend``);
    with ``pool: leader`` the election runs as in ARP mode and its holder announces."""
    if cfg.announce.ecmp:
        from vipd.routed.backend import RoutedElection

        return [RoutedElection(cfg, pre)]
    if cfg.election.mode == "lease":
        from vipd.lease.driver import LeaseElection

        return [LeaseElection(cfg, pre)]
    from vipd.vrrp.driver import VrrpElection

    return [VrrpElection(cfg, pre, vips=cfg.family(f)) for f in cfg.families]


class Agent:
    """One node's agent: the shared shell around ``election`` (one instance or several)."""

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
        if cfg.announce.routed and actuators is host_actuators:
            # Routes bind and announce the VIP: no address, no ARP. The ECMP pool's backend
            # writes them itself (vipd.routed.backend); with pool: leader the controller
            # drives them as it would the address (vipd.routed.leader).
            if cfg.announce.ecmp:
                actuators = inert_actuators
            else:
                from vipd.routed.leader import leader_actuators

                actuators = leader_actuators(cfg, pre)
        self._make_actuators = actuators
        self._watch_link = watch_link
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
        self.tasks = Tasks()
        self.stopper = OrderedStop(self.log)
        wiring = Wiring(
            config=lambda: self.cfg,
            stopping=lambda: self._stopping,
            guard=self.tasks.guard,
            publish=lambda: self._publish(time.monotonic()),
            log=self.log,
        )
        self.links = LinkFollower(
            pre, self.instances, wiring, make_actuators=actuators, on_sent=self._count_garp
        )
        self.feed = CheckFeed(self.elections, wiring)
        self.health: HealthChecker | None = None
        self.ipvs: IpvsRuntime | None = None
        self.tracks: TrackChecker | None = None
        self.membership: MembershipFollower | None = None
        self.garp_sent = 0
        self._stopping = False

    # -- the instances -----------------------------------------------------------------------

    @property
    def pre(self) -> Preflight:
        """The link and advert sources in use: preflight's, or the last relink's."""
        return self.links.pre

    @property
    def election(self) -> Election:
        """The first instance's election: the backend name, and the top of ``/status``."""
        return self.instances[0].election

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

    def _count_garp(self, n: int) -> None:
        self.garp_sent += n
        metrics.GARP_SENT.inc(n)

    # -- status ------------------------------------------------------------------------------

    @property
    def link_up(self) -> bool:
        return self.links.link_up

    def readiness(self) -> tuple[bool, str]:
        """/readyz: does this node take part in the election right now, and if not, why."""
        return statusdoc.readiness(self._stopping, self.elections)

    def status(self, now: float) -> dict[str, Any]:
        """The /status document (``vipd.statusdoc``)."""
        return statusdoc.document(
            now,
            cfg=self.cfg,
            pre=self.pre,
            instances=self.instances,
            link_up=self.link_up,
            health=self.health,
            health_peers=self.health_peers,
            tracks=self.tracks,
            garp_sent=self.garp_sent,
            membership=self.membership.snapshot() if self.membership is not None else None,
        )

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
        applies live (``vipd.livereload``). Returns the result label of
        ``vipd_reloads_total``. Never raises: a reload that cannot be done is one log line,
        and the agent runs on with the config it had."""
        result = self._reload()
        metrics.RELOADS.labels(result=result).inc()
        return result

    def _reload(self) -> str:
        if self._stopping:
            return "refused"
        result, new, p = livereload.read(self.cfg, self.loader, self.log)
        if new is None or p is None:
            return result
        self.cfg = new
        if self.membership is not None:
            self.membership.reconfigure(new)
            new = self.membership.effective(new)  # the followed lists stay merged in
        try:
            livereload.apply(
                new,
                controllers=self.controllers,
                instances=self.instances,
                health=self.health,
                health_peers=lambda: self.health_peers,
                ipvs=self.ipvs,
                tracks=self.tracks,
            )
        except Exception:
            # A bug: say so, and keep running (parts may already have the new values).
            self.log.exception("reload failed while applying the live keys")
            return "invalid"
        self._publish(time.monotonic())
        vlog.event(self.log, logging.INFO, "reloaded", keys=",".join(p.live))
        return "applied"

    # -- life cycle --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set (exit 0, or 128 + the signal) or something breaks (1)."""
        loop = asyncio.get_running_loop()
        self.tasks.open()
        code = EXIT_OK
        for e in self.elections:
            e.init_metrics()
        if self.endpoint is not None:
            self.endpoint.beat(time.monotonic())
            self.endpoint.attach(loop, self._status_doc)
            beat = self.endpoint.heartbeat(self._publish)
            self.tasks.spawn("heartbeat", beat, "heartbeat", watched=False)
        try:
            await self._start()
            await self.tasks.run(stop)
        except Exception:
            self.log.exception("crashed: releasing the VIP and exiting")
            code = EXIT_CRASH
        if code == EXIT_OK and self.stop_signal not in (None, signal.SIGTERM, signal.SIGINT):
            assert self.stop_signal is not None
            code = EXIT_SIGNAL_BASE + self.stop_signal
        self._stopping = True
        await self.tasks.cancel("link")
        self._publish(time.monotonic())
        sdnotify.notify("STOPPING=1")
        await self.stopper.run(self._stop_plan(graceful=code != EXIT_CRASH))
        self._log_stopped()
        await self.tasks.cancel("heartbeat")
        return code

    async def _start(self) -> None:
        """Every part, in order, then the named tasks the run waits on."""
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
        # Every instance's controller as one task: the first to end (a bug) ends them all.
        runs = [(f"controller-{i}", c.run()) for i, c in enumerate(controllers)]
        self.tasks.spawn("controller", together(runs), "controller")
        for inst in self.instances:
            inst.hooks.start()
        self.links.open(self._watch_link)
        self.health = self.feed.health_checker(self.health_peers)
        for inst, controller in zip(self.instances, controllers, strict=True):
            beat = None if self.endpoint is None else self.endpoint.offer_beat
            inst.election.attach(Host(controller, self.health, self.links.usable, beat))
        self.tracks = self.feed.start_tracks()
        if self.health is not None:
            self.health.start()
            if self.cfg.ipvs.enabled:
                # Only IPVS nodes pay for its modules (and their Kubernetes client).
                # One VIP only (config.py), so one instance and its controller.
                from vipd.ipvs.runtime import IpvsRuntime

                self.ipvs = IpvsRuntime(self.cfg, self.pre.source, self.log)
                self.ipvs.start(self.health, controllers[0].leader)
                controllers[0].follow(self.ipvs)
        self._follow_membership()
        self.links.listen()
        # Every instance's election, each publishing to its own controller, as one task.
        elections = [
            (
                f"election-{i}",
                inst.election.run(
                    partial(self._on_transition, inst), partial(self._on_ready, inst)
                ),
            )
            for i, inst in enumerate(self.instances)
        ]
        self.tasks.spawn("election", together(elections), "election")
        self.tasks.spawn("link", self.links.follow(), "link follower")

    def _follow_membership(self) -> None:
        """The ``*_from`` keys: the membership task (``vipd.membership``), when any is set."""
        from vipd.membership import policy

        if not policy.followed_lists(self.cfg):
            return
        from vipd.membership.follower import MembershipFollower, apply_to

        own = frozenset(
            {a.ip for a in self.pre.link.addresses} | {self.pre.source, *self.pre.sources}
        )
        apply = partial(
            apply_to,
            elections=self.elections,
            health=self.health,
            ipvs=self.ipvs,
            health_peers=lambda: self.health_peers,
        )
        self.membership = MembershipFollower(self.cfg, own, apply, self.log)
        self.tasks.spawn("membership", self.membership.run(), "membership")

    def _stop_plan(self, graceful: bool) -> list[Step]:
        """The ordered stop (docs/design/architecture.md), for the parts that were started.
        Health and resync off, the backend resigns (keeping the VIP until a successor shows),
        then the VIP, IPVS, the backend's sockets, the actuators and the stop hooks go."""
        plan: list[Step] = []
        if self.health is not None:
            plan.append(Step(None, "stop the health checks", self.health.stop))
        if self.tracks is not None:
            plan.append(Step(None, "stop the tracked checks", self.tracks.stop))
        tasks = ("membership", "election", "controller")
        plan.append(Step(None, "stop the election and the resync", self.tasks.canceller(*tasks)))
        plan += [Step(None, "quiesce the controller", c.quiesce) for c in self.controllers]

        async def resign_all() -> None:
            # Each instance waits for its own successor (bounded), side by side, so a second
            # family adds nothing to the stop's length.
            results = await asyncio.gather(
                *(e.resign(graceful) for e in self.elections), return_exceptions=True
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r

        plan.append(Step("resign", "resign", resign_all))
        plan += [Step("vip", "remove the VIP", c.release) for c in self.controllers]
        if self.ipvs is not None:
            plan.append(Step("ipvs", "remove the IPVS service", self.ipvs.stop))
        if self.links.watch is not None:
            plan.append(Step("host", "close the link watch", self.links.close))
        plan += [Step("election", "close the election", e.close) for e in self.elections]
        for inst in self.instances:
            for address, announcer in inst.actuators:
                plan.append(Step("host", "close the announcer", announcer.close))
                plan.append(Step("host", "close the address actuator", address.close))
        plan += [Step("host", "run the stop hooks", i.hooks.close) for i in self.instances]
        return plan

    def _log_stopped(self) -> None:
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
            stop_errors=self.stopper.errors,
        )
