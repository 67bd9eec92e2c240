"""The Lease backend's state, and how the core's actions are carried out.

What it is
    `LeaseFeed` holds one node's Lease election on the shell side: the `vipd.lease.logic.Elector`
    it feeds, the API (``vipd.lease.api``), the thread pool the calls run on, the request in
    flight, and what the agent pushes (health, tracks, the link). It carries out the core's
    actions (`_apply`: a `Send` runs on the pool, a role change or a hold is published as a
    `Transition` with the core's reason label, logged and counted) and hands every answer
    back to the core with the clock and the health (`_result`). The local health the core
    is given (`healthy`) and "a healthy peer" (`peer_healthy`) are read here.
    ``vipd.lease.evidence``, ``vipd.lease.handover`` and ``vipd.lease.driver`` (the loop
    that feeds the core) build on it.

What it must not do
    Decide anything (the core does), touch the VIP (the agent's controller does), block the
    loop (every API call is in the executor), or exit because the Lease was lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from collections.abc import Callable

from vipd import log as vlog
from vipd import metrics
from vipd.config import Config
from vipd.controller import Controller
from vipd.election import FOLLOWER, LEADER, IPAddress, Publish, Transition
from vipd.health.checker import HealthChecker
from vipd.health.tracker import BackendHealth
from vipd.host.arpwatch import ClaimWatch
from vipd.lease import logic
from vipd.lease.api import Api, ApiFactory, open_api
from vipd.lease.model import PeerState
from vipd.preflight import Preflight
from vipd.track import NONE as NO_ADJUSTMENT
from vipd.track import Adjustment

__all__ = ["LeaseFeed", "self_addresses"]


def self_addresses(cfg: Config, pre: Preflight) -> frozenset[str]:
    """Every name this node's own API server may be listed under: never a peer."""
    addrs = {str(a.ip) for a in pre.link.addresses}
    addrs |= {str(pre.source), *map(str, pre.sources), "127.0.0.1", "::1"}
    addrs |= {str(v) for v in cfg.vips}
    if cfg.health is not None:
        addrs.add(str(cfg.health.local))
    return frozenset(addrs)


class LeaseFeed:
    """One node's Lease election on the shell side: its state and the core's actions carried
    out. ``clock``, ``open_api`` and ``jitter`` are the seams the unit tests use (a fake clock,
    an API double that answers in memory, no randomness)."""

    def __init__(
        self,
        cfg: Config,
        pre: Preflight,
        *,
        clock: Callable[[], float] = time.monotonic,
        open_api: ApiFactory = open_api,
        jitter: Callable[[], float] = random.random,
        claimwatch: bool = True,
    ) -> None:
        assert cfg.election.lease is not None
        self.cfg = cfg
        self.pre = pre
        self.lease = cfg.election.lease
        self.log = vlog.get()
        self.clock = clock
        self._open_api = open_api
        self._jitter = jitter
        self._want_claimwatch = claimwatch
        self.self_addresses = self_addresses(cfg, pre)
        self.elector = logic.Elector(
            logic.Params(
                identity=cfg.node,
                duration=float(self.lease.duration),
                renew_deadline=self.lease.renew_deadline,
                retry_period=self.lease.retry_period,
                keep_on_unreachable=self.lease.keep_on_unreachable,
                self_addresses=self.self_addresses,
            )
        )
        self._peer_checks: dict[IPAddress, tuple[float, PeerState]] = {}
        self._peers_told: dict[str, PeerState] | None = None
        self.claimwatches: list[ClaimWatch] = []  # one per IPv4 VIP
        self._successor_heard: asyncio.Event | None = None
        self.foreign_claims = 0
        self.errors: dict[str, int] = {}
        self.controller: Controller | None = None
        self.health: HealthChecker | None = None
        self.api: Api | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="lease-api"
        )
        self._inflight: asyncio.Future[logic.Outcome] | None = None
        self._inflight_id = 0
        self._inflight_req: logic.Request | None = None
        self._publish: Publish | None = None
        self._wake: asyncio.Event | None = None
        self._started = False
        self._was_leader = False
        self._role_since: float | None = None
        self._last_reason = ""
        self.transitions = 0
        self._track = NO_ADJUSTMENT
        self._link_up = True  # the interface is usable (on_link)
        self._watch_stop = threading.Event()
        self._log_error = vlog.Sparse(self.log, "lease request failed", every=100)

    # -- health (pushed by the agent) ----------------------------------------------------

    @property
    def vips(self) -> tuple[IPAddress, ...]:
        """Every VIP: one Lease moves the whole set."""
        return self.cfg.vips

    @property
    def health_peers(self) -> list[IPAddress]:
        """The other nodes' API servers checked for "a healthy peer can take over":
        ``health.peers``, else ``ipvs.backends``; never one of this node's own addresses."""
        h = self.cfg.health
        if h is None:
            return []
        listed = h.peers or self.cfg.ipvs.backends
        return [a for a in listed if str(a) not in self.self_addresses]

    def healthy(self) -> bool:
        """The local API server's health and the tracked checks: a down track (or a file
        value below 0) counts as unhealthy, which gives way only to a healthy peer."""
        if not self._track.ok or not self._link_up:
            return False
        if self.health is not None:
            return self.health.local_healthy()
        return True  # no health section: see the log line at start

    def on_track(self, adj: Adjustment) -> None:
        self._track = adj
        if self._wake is not None:
            self._wake.set()

    def peer_healthy(self) -> bool:
        """Some other node's API server is healthy (no health section: none can be known)."""
        if self.health is None:
            return False
        return any(self.health.healthy(a) for a in self.health_peers)

    def on_health(self, addr: IPAddress, health: BackendHealth) -> None:
        """The core is polled whenever health changes (``Elector.poll``'s contract)."""
        if self._wake is not None:
            self._wake.set()

    def reconfigure(self, cfg: Config) -> None:
        """A reload's live keys: the health section's peers and gating are read from ``cfg``
        at the next poll (``vipd.reload`` refuses every change to the Lease itself)."""
        self.cfg = cfg

    # -- carrying out the core's actions ------------------------------------------------

    def _apply(self, actions: list[logic.Action], now: float) -> None:
        assert self.api is not None
        loop = asyncio.get_running_loop()
        for a in actions:
            if isinstance(a, logic.Send):
                self._inflight_id = a.request.id
                self._inflight = loop.run_in_executor(self._pool, self.api.call, a.request)
                self._inflight_req = a.request
            elif isinstance(a, logic.BecomeLeader):
                self._transition(LEADER, a.label, a.reason, now)
            elif isinstance(a, logic.BecomeFollower):
                self._transition(FOLLOWER, a.label, a.reason, now)
            elif isinstance(a, logic.Hold):
                # Not a role change: the leader keeps the VIP for a reason of its own.
                metrics.LEASE_KEEPING.set(1)
                self._last_reason = a.reason
                if self._publish is not None:
                    self._publish(Transition(LEADER, a.label, a.reason, now))
                vlog.event(self.log, logging.WARNING, "keeping the VIP", reason=a.reason)

    def _transition(self, role: str, label: str, reason: str, now: float) -> None:
        rec = self.elector.observed
        self.transitions += 1
        self._role_since = self.clock()
        self._last_reason = reason
        metrics.LEASE_KEEPING.set(0)
        if self._publish is not None:
            self._publish(Transition(role, label, reason, now))
        vlog.event(
            self.log,
            logging.INFO,
            f"became {role}",
            lease=f"{self.lease.namespace}/{self.lease.name}",
            reason=reason,
            holder=rec.holder if rec else None,
            transitions=rec.transitions if rec else None,
            duration_s=self.lease.duration,
            renew_deadline_s=self.lease.renew_deadline,
            retry_period_s=self.lease.retry_period,
        )

    def _result(self, outcome: logic.Outcome) -> list[logic.Action]:
        kind = logic.outcome_kind(outcome)
        req = self._inflight_req
        assert req is not None
        metrics.LEASE_REQUESTS.labels(purpose=req.purpose.value, result=kind).inc()
        if isinstance(outcome, logic.Ok):
            metrics.set_lease_holder(outcome.record.holder)
        elif kind != "ok":
            metrics.LEASE_ERRORS.labels(kind=kind).inc()
        if kind != "ok":
            self.errors[kind] = self.errors.get(kind, 0) + 1
            self._log_error(
                kind,
                level=logging.DEBUG if kind in ("conflict", "not-found") else logging.WARNING,
                request=req.purpose.value,
                kind=kind,
                detail=getattr(outcome, "detail", ""),
            )
        return self.elector.on_result(
            self.clock(), self._inflight_id, outcome, self.healthy(), self.peer_healthy()
        )
