"""The Lease election backend: the official ``kubernetes`` client feeding `vipd.lease.logic`.

What it is
    `LeaseApi` turns the core's `Request` into one blocking call of the ``kubernetes`` client
    (``CoordinationV1Api``: read, create, replace) with an explicit total timeout, and the
    answer into an `Outcome`; credentials, the local API server and the ``super-admin.conf``
    fallback come from ``vipd.kube``. `LeaseElection` implements the election port
    (``vipd.election``): it runs those calls on a small thread pool, never on the event loop,
    feeds the results, the clock and the health the agent pushes (``on_health``) to the
    `Elector`, and publishes each of the core's decisions as a `Transition` with the core's
    reason label. On SIGTERM it releases the Lease and keeps the VIP (quiet) until the
    successor shows (make-before-break, as the VRRP backend's stop), at most one retry period
    and a little: see "The handover" below.

    The evidence for the unreachable-store rule (docs/design/lease-unreachable.md)
        - **The peers**: every result of the health checker's checks of the other API servers
          (``on_check``) becomes a `logic.PeerState` for `logic.Elector.observe_peers`:
          ``READY`` when the last check answered 200; ``NOT_READY`` only when the answer
          named the etcd check as failed (``[-]etcd…`` in the body, which kube-apiserver's
          ``/readyz`` and ``/healthz`` list in every failing answer): its store is down for
          that node; ``UNREACHABLE`` for everything else: another failure (a 500 of a
          shutting-down server says nothing about its store), a 401/403, never checked yet,
          or a last answer older than two intervals and a timeout. A check with no answer
          (timeout, refused) leaves the last answer standing until it is that old, so a
          partitioned node loses its evidence within that lag, and one slow answer of a
          peer whose store is down does not end it. Without a ``health``
          section nothing is observed (client-go's rule: step down at the renew deadline);
          with one and no peers, an empty mapping (a lone node). This node's own addresses
          (every address on the interface, the source address, ``health.local``, 127.0.0.1,
          ::1 and the VIP) are never peers.
        - **The wire** (IPv4): ``vipd.host.arpwatch.ClaimWatch`` on the interface; an ARP
          for the VIP from a MAC that is not ours is `logic.Elector.foreign_claim`.

    Writes by someone else
        ``vipd.lease.watch`` watches the Lease on a thread of its own (when the API has a
        ``watch``: `LeaseApi` does, the unit tests' in-memory store does not); every event
        goes to `logic.Elector.watched` on the loop, so a leader whose Lease someone else
        renamed, emptied or deleted lets go at once (docs/design/lease.md, "When someone
        else writes the Lease"). The watch needs ``list`` and ``watch`` on the Lease; without
        them it is refused, logged, and tried again a minute later, and the core's rules
        keep the holders apart without it.

    The handover (graceful stop)
        The release write is sent; the VIP stays. The successor reads the release at its
        next retry, writes its acquire, binds the VIP on the answer and announces it. This
        node drops the VIP at the first of: the successor's gratuitous ARP heard (its VIP
        is up: no gap, no overlap beyond the frame's way), or ``SUCCESSOR_GRACE`` after the
        send of the last read that did *not* show a successor, once a read shows one. The
        successor's write was committed after that read was served, and it binds only after
        its write is answered, so the two hold at once for less than ``SUCCESSOR_GRACE``
        whatever the polling lag. Nobody seen within one retry period and a little: drop.

    ``MicroTime`` values are sent with a non-zero microsecond: the client formats datetimes
    with ``isoformat()``, which drops the fraction when it is zero, and the API server only
    parses ``MicroTime`` with exactly six digits.

What it must not do
    Decide anything (the core does), touch the VIP (the agent's controller does), block the
    loop (every API call is in the executor, with a timeout no longer than the core asked
    for), or exit because the Lease was lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from ipaddress import IPv4Address
from typing import Any, Protocol

from vipd import kube, metrics
from vipd import log as vlog
from vipd.config import Config, Lease
from vipd.controller import Controller
from vipd.election import FOLLOWER, LEADER, Host, IPAddress, Publish, Transition, VipLink
from vipd.health.checker import HealthChecker
from vipd.health.tracker import BackendHealth
from vipd.health.tracker import Outcome as CheckOutcome
from vipd.host.arpwatch import ClaimWatch
from vipd.kube import ADMIN_CONF, Credentials
from vipd.lease import logic
from vipd.lease import watch as lease_watch
from vipd.lease.logic import PeerState, Role
from vipd.preflight import Preflight
from vipd.track import NONE as NO_ADJUSTMENT
from vipd.track import Adjustment

__all__ = ["ADMIN_CONF", "Credentials", "LeaseApi", "LeaseElection", "check", "microtime"]

# How often a stopping leader reads the Lease while it waits for its successor.
HANDOVER_POLL = 0.05
# The overlap bound of a handover (see the module docstring), less the time the agent takes
# to remove the address once the wait ends: the make-before-break overlap stays under 0.1 s.
SUCCESSOR_GRACE = 0.08
# A peer check result older than this many check intervals (plus one timeout) is stale.
PEER_STALE_INTERVALS = 2


def check(cfg: Config, env: dict[str, str] | None = None) -> None:
    """Start-up check for ``vipd run``/``check``: raises `ConfigError` (exit 2)."""
    if cfg.election.mode != "lease" or cfg.election.lease is None:
        return
    kube.check(kube.Access.from_lease(cfg.election.lease), env)


def microtime(now: datetime | None = None) -> datetime:
    """A UTC time that the client serialises with six fractional digits (see the docstring)."""
    t = now or datetime.now(UTC)
    return t if t.microsecond else t.replace(microsecond=1)


def self_addresses(cfg: Config, pre: Preflight) -> frozenset[str]:
    """Every name this node's own API server may be listed under: never a peer."""
    addrs = {str(a.ip) for a in pre.link.addresses}
    addrs |= {str(pre.source), *map(str, pre.sources), "127.0.0.1", "::1"}
    addrs |= {str(v) for v in cfg.vips}
    if cfg.health is not None:
        addrs.add(str(cfg.health.local))
    return frozenset(addrs)


def peer_state(outcome: CheckOutcome) -> PeerState:
    """One check of a peer's API server as evidence (see the module docstring)."""
    if outcome.ok:
        return PeerState.READY
    if any(name.startswith("etcd") for name in outcome.failed_checks):
        return PeerState.NOT_READY
    return PeerState.UNREACHABLE


def to_record(obj: Any) -> logic.Record:
    spec = obj.spec
    meta = obj.metadata

    def t(v: Any) -> str | None:
        return v.isoformat() if isinstance(v, datetime) else (str(v) if v else None)

    return logic.Record(
        resource_version=str(meta.resource_version),
        holder=(spec.holder_identity or None) if spec else None,
        duration_seconds=spec.lease_duration_seconds if spec else None,
        transitions=(spec.lease_transitions or 0) if spec else 0,
        acquire_time=t(spec.acquire_time) if spec else None,
        renew_time=t(spec.renew_time) if spec else None,
    )


class LeaseApi:
    """Blocking calls to the API server; every method runs in an executor thread."""

    def __init__(self, lease: Lease, creds: list[Credentials], log: logging.Logger) -> None:
        self.lease = lease
        self.log = log
        self.session = kube.Session(kube.Access.from_lease(lease), creds, log)
        self._api: Any = None
        self._last: Any = None  # the last V1Lease we read or wrote (to keep its metadata)

    @property
    def using(self) -> Credentials:
        return self.session.using

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client

            self._api = client.CoordinationV1Api(self.session.api_client())
        return self._api

    def watch(self, deliver: lease_watch.Deliver, stop: threading.Event, retry: float) -> None:
        """Watch the Lease on the calling thread until ``stop`` (`vipd.lease.watch`)."""
        lease_watch.watch_lease(
            self._client,
            self.lease.namespace,
            self.lease.name,
            deliver,
            stop,
            retry,
            self.log,
            to_record,
        )

    def call(self, req: logic.Request) -> logic.Outcome:
        outcome = self._call(req)
        if isinstance(outcome, logic.Rejected) and self.session.fall_back(outcome.status):
            self._api = None
            outcome = self._call(req)
        return outcome

    def _call(self, req: logic.Request) -> logic.Outcome:
        from kubernetes.client import ApiException

        try:
            api = self._client()
            name, ns = self.lease.name, self.lease.namespace
            if req.verb is logic.Verb.GET:
                obj = api.read_namespaced_lease(name, ns, _request_timeout=req.timeout)
            elif req.verb is logic.Verb.CREATE:
                obj = api.create_namespaced_lease(ns, self._body(req), _request_timeout=req.timeout)
            else:
                obj = api.replace_namespaced_lease(
                    name, ns, self._body(req), _request_timeout=req.timeout
                )
            self._last = obj
            return logic.Ok(to_record(obj))
        except ApiException as exc:
            # The core tells a store-wide refusal (NOSPACE) from this API server's own
            # trouble (5xx, 429) by the status and the message.
            return logic.classify(int(exc.status or 0), _status_message(exc))
        except Exception as exc:  # urllib3 timeouts/connection/TLS errors, a bad answer
            return logic.Unreachable(f"{type(exc).__name__}: {_short(exc)}")

    def _body(self, req: logic.Request) -> Any:
        from kubernetes import client

        now = microtime()
        if req.stamp_acquire or not req.acquire_time:
            acquire = now
        else:
            acquire = microtime(datetime.fromisoformat(req.acquire_time))
        spec = client.V1LeaseSpec(
            holder_identity=req.holder,
            lease_duration_seconds=req.duration_seconds,
            acquire_time=acquire,
            renew_time=now,
            lease_transitions=req.transitions,
        )
        last = self._last
        if (
            req.verb is logic.Verb.UPDATE
            and last is not None
            and last.metadata is not None
            and last.metadata.resource_version == req.resource_version
        ):
            # Keep labels and annotations someone else put on the Lease.
            meta = last.metadata
        else:
            meta = client.V1ObjectMeta(name=self.lease.name, namespace=self.lease.namespace)
            if req.resource_version is not None:
                meta.resource_version = req.resource_version
        return client.V1Lease(metadata=meta, spec=spec)


def _status_message(exc: Any) -> str:
    import json

    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason or "")[:200]
    except (ValueError, TypeError, AttributeError):
        return str(getattr(exc, "reason", ""))[:200]


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


class Api(Protocol):
    """What the election needs of `LeaseApi` (an in-memory store in the unit tests)."""

    @property
    def using(self) -> Credentials: ...

    def call(self, req: logic.Request) -> logic.Outcome: ...


ApiFactory = Callable[[Lease, logging.Logger], Api]


def open_api(lease: Lease, log: logging.Logger) -> Api:
    """The API client for this host's credentials (``vipd.kube.candidates``)."""
    session = kube.Session.open(kube.Access.from_lease(lease), log)
    return LeaseApi(lease, session.creds, log)


class LeaseElection:
    """One node's Lease election, behind the election port.

    ``clock``, ``open_api`` and ``jitter`` are the seams the unit tests use (a fake clock, an
    API double that answers in memory, no randomness)."""

    backend = "lease"

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

    def on_check(self, addr: IPAddress, outcome: CheckOutcome) -> None:
        """Every finished health check: a peer's is evidence for the core (`peer_state`)."""
        if addr not in self.health_peers:
            return
        now = self.clock()
        last = self._peer_checks.get(addr)
        if outcome.status is None and last is not None:
            # No answer this time: the last answer stands until it is stale. kube-apiserver
            # rate-limits its etcd probe and lets an unlimited one block for its timeout
            # (``newETCD3Check``), so a peer whose store is down answers most checks at once
            # and now and then not in time: that one says nothing new.
            pass
        else:
            self._peer_checks[addr] = (now, peer_state(outcome))
        self._observe_peers(always=True)

    def peer_view(self, now: float) -> dict[str, PeerState]:
        """Each peer's state now; a peer never checked, or checked too long ago, proves
        nothing (``UNREACHABLE``)."""
        h = self.cfg.health
        assert h is not None
        stale = PEER_STALE_INTERVALS * h.interval + h.timeout
        view: dict[str, PeerState] = {}
        for addr in self.health_peers:
            got = self._peer_checks.get(addr)
            fresh = got is not None and now - got[0] <= stale
            view[str(addr)] = got[1] if got is not None and fresh else PeerState.UNREACHABLE
        return view

    def _observe_peers(self, always: bool = False) -> None:
        """Tell the core the peers' states (on every result, and when one turns stale).
        Without a health section nothing is known, and nothing is said (client-go's rule)."""
        if self.health is None or self.cfg.health is None or self._publish is None:
            return
        now = self.clock()
        view = self.peer_view(now)
        if not always and view == self._peers_told:
            return
        self._peers_told = view
        self._apply(self.elector.observe_peers(now, view), now)
        if self._wake is not None:
            self._wake.set()

    # -- the wire (IPv4): another MAC announcing the VIP ----------------------------------

    def _start_claimwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """One ARP watch per IPv4 VIP: another MAC announcing any of them is the set's
        successor or a claimant (the Lease moves them together)."""
        if not self._want_claimwatch:
            return
        for vip in self.cfg.vips:
            if not isinstance(vip, IPv4Address):
                continue
            try:
                watch = ClaimWatch(self.pre.link.name, self.pre.link.mac, vip, self._on_claim)
            except OSError as exc:
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "lease: cannot watch ARP for the VIP: another node's announcement will "
                    "not make this one yield at once",
                    vip=vip,
                    error=str(exc),
                )
                continue
            self.claimwatches.append(watch)
            loop.add_reader(watch.fileno(), self._on_claim_readable, watch)

    def _on_claim_readable(self, watch: ClaimWatch) -> None:
        try:
            watch.on_readable()
        except Exception:
            # A bad frame must not end the daemon: the watch is a hint, the Lease decides.
            self.log.exception("lease: ARP watch failed on a frame")

    def _on_claim(self, mac: str) -> None:
        """Another MAC announced the VIP: in a handover, the successor is up (drop at once);
        otherwise the core yields if it holds it."""
        if self._successor_heard is not None:
            self._successor_heard.set()
            return
        if self._publish is None or not self.elector.leader:
            return
        self.foreign_claims += 1
        vlog.event(
            self.log,
            logging.WARNING,
            "another node announced the VIP: yielding",
            claimant_mac=mac,
            count=self.foreign_claims,
        )
        now = self.clock()
        self._apply(self.elector.foreign_claim(now), now)
        if self._wake is not None:
            self._wake.set()

    def on_link(self, up: bool) -> None:
        """The interface stopped (or started) being usable: deleted, down, or without an
        address. The node cannot serve the VIP there, so it counts as an unhealthy local
        node, the core's own rule: a leader gives way to a healthy peer (it releases the
        Lease, and a peer binds the VIP on a working link), and without one it keeps the
        Lease and its VIP comes back with the interface (the agent binds it on the new
        link). A follower takes no free Lease while a healthy peer can."""
        if up == self._link_up:
            return
        self._link_up = up
        vlog.event(
            self.log,
            logging.INFO if up else logging.WARNING,
            "lease: interface usable again: the local node counts as healthy"
            if up
            else "lease: interface unusable: the local node counts as unhealthy "
            "(gives way to a healthy peer)",
            interface=self.pre.link.name,
        )
        if self._wake is not None:
            self._wake.set()

    async def relink(self, pre: Preflight) -> VipLink:
        """The interface re-created or its address changed: this node's addresses (never
        peers) follow it, and the ARP watch is reopened on the new interface (its MAC)."""
        self.pre = pre
        self.self_addresses = self_addresses(self.cfg, pre)
        self.elector.params = dataclasses.replace(
            self.elector.params, self_addresses=self.self_addresses
        )
        watches, self.claimwatches = self.claimwatches, []
        for watch in watches:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(watch.fileno())
            watch.close()
        if self._started:
            self._start_claimwatch(asyncio.get_running_loop())
        link = pre.link
        return VipLink(link.name, link.index, link.mac)

    # -- set-up --------------------------------------------------------------------------

    def init_metrics(self) -> None:
        metrics.init_lease(
            node=self.cfg.node, vips=[str(v) for v in self.cfg.vips], interface=self.pre.link.name
        )
        metrics.LEASE_RENEW_AGE.set_function(self._renew_age)

    async def prepare(self) -> VipLink:
        """The configured interface; the API client for this host's credentials."""
        self.api = self._open_api(self.lease, self.log)
        link = self.pre.link
        return VipLink(link.name, link.index, link.mac)

    def attach(self, host: Host) -> None:
        self.controller = host.controller
        self.health = host.health
        self._link_up = host.link_up
        h = self.cfg.health
        if self.health is None or h is None:
            vlog.event(
                self.log,
                logging.INFO,
                "lease: no health section, the local API server counts as healthy "
                "(and with no peers' readiness to go on, the leader steps down at the renew "
                "deadline when its calls fail, as client-go's; the store's NOSPACE refusals "
                "and another node's ARP for the VIP still count)",
                keep_on_unreachable=self.lease.keep_on_unreachable,
            )
            return
        peers = self.health_peers
        vlog.event(
            self.log,
            logging.INFO,
            "lease: health gating on"
            + ("" if peers else " (no peers listed: this node never gives way)"),
            url=self.health.url(h.local),
            peers=",".join(str(a) for a in peers) or "-",
        )

    # -- the election --------------------------------------------------------------------

    async def run(self, publish: Publish, ready: Callable[[], None]) -> None:
        """Poll the core at its ``wake_at``, on every answer and on every health change;
        runs until cancelled."""
        assert self.api is not None
        self._publish = publish
        self._wake = asyncio.Event()
        vlog.event(
            self.log,
            logging.INFO,
            "lease election started",
            node=self.cfg.node,
            vip=",".join(map(str, self.cfg.vips)),
            interface=self.pre.link.name,
            lease=f"{self.lease.namespace}/{self.lease.name}",
            api_server=self.lease.api_server or "(kubeconfig)",
            credentials=self.api.using.label,
            duration_s=self.lease.duration,
            renew_deadline_s=self.lease.renew_deadline,
            retry_period_s=self.lease.retry_period,
        )
        self._started = True
        for vip in self.cfg.vips:
            metrics.set_role(self.backend, FOLLOWER, str(vip))
        ready()
        loop = asyncio.get_running_loop()
        self._start_claimwatch(loop)
        self._start_watch(loop)
        self._observe_peers(always=True)
        while True:
            self._observe_peers()  # a result that turned stale
            now = self.clock()
            self._wake.clear()
            self._apply(
                self.elector.poll(
                    now, self.healthy(), self._jitter(), peer_healthy=self.peer_healthy()
                ),
                now,
            )
            woken = loop.create_task(self._wake.wait(), name="lease-wake")
            waiters: set[asyncio.Future[Any]] = {woken}
            if self._inflight is not None:
                waiters.add(self._inflight)
            delay = max(0.0, self.elector.wake_at - self.clock())
            try:
                await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
            if self._inflight is not None and self._inflight.done():
                fut, self._inflight = self._inflight, None
                self._apply(self._result(fut.result()), self.clock())

    def _start_watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The watch on the Lease (`vipd.lease.watch`), on a thread of its own: a leader
        learns of a write it did not make at once. An API without one (the unit tests'
        in-memory store) has none: the core's rules hold without it."""
        start = getattr(self.api, "watch", None)
        if start is None:
            return

        def deliver(rec: logic.Record | None) -> None:
            loop.call_soon_threadsafe(self._on_watch, rec)

        threading.Thread(
            target=start,
            args=(deliver, self._watch_stop, self.lease.retry_period),
            name="lease-watch",
            daemon=True,  # a read blocked on a dead server must not hold the exit up
        ).start()

    def _on_watch(self, rec: logic.Record | None) -> None:
        if self._publish is None or self._watch_stop.is_set():
            return
        now = self.clock()
        actions = self.elector.watched(now, rec)
        if actions:
            vlog.event(
                self.log,
                logging.WARNING,
                "the Lease was written by someone else: letting go",
                holder=rec.holder if rec else None,
                resource_version=rec.resource_version if rec else None,
                deleted=rec is None,
            )
        self._apply(actions, now)
        if self._wake is not None:
            self._wake.set()

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

    # -- stop ----------------------------------------------------------------------------

    async def resign(self, graceful: bool) -> None:
        """Release the Lease; after a graceful stop keep the VIP until a successor shows in
        the Lease (the agent removes it when this returns)."""
        # Release whatever the role: a leader whose VIP waits for ``bind_at`` holds the Lease
        # too (``leader`` is False then). The successor wait is only for a VIP that is up.
        held_vip = self.elector.leader
        await self._settle_takeover()
        self._was_leader = self.elector.role is not Role.FOLLOWER
        if self.api is None or not self._was_leader:
            return
        timeout = max(0.2, min(self.lease.renew_deadline * 0.5, 5.0))
        # From here on this node does not lead (it will never renew again), whatever the
        # release's fate; the VIP stays, quiet, until the successor shows up
        # (make-before-break).
        now = self.clock()
        self._transition(FOLLOWER, "released", "stopping: releasing the Lease", now)
        released = False
        released_at = now
        actions = self.elector.release(now, timeout)
        outcome: logic.Outcome | None = None
        # One more try after a 409: a renewal in flight at the stop lands first and moves
        # the resourceVersion on; without the retry the peers would wait out the Lease.
        for attempt in (1, 2):
            sends = [a for a in actions if isinstance(a, logic.Send)]
            if not sends:
                break
            released_at = time.monotonic()
            outcome = await self._call(sends[0].request, timeout + 0.5)
            released = isinstance(outcome, logic.Ok)
            if released or attempt == 2 or not isinstance(outcome, logic.Conflict):
                break
            read = logic.Request(0, logic.Verb.GET, logic.Purpose.READ, timeout=timeout)
            fresh = await self._call(read, timeout + 0.5)
            if not isinstance(fresh, logic.Ok):
                break
            vlog.event(
                self.log,
                logging.INFO,
                "release refused on a stale version: releasing again",
                holder=fresh.record.holder,
            )
            actions = self.elector.release_again(self.clock(), timeout, fresh.record)
        if released:
            vlog.event(self.log, logging.INFO, "released the Lease", outcome="ok")
        elif outcome is not None:
            vlog.event(
                self.log,
                logging.WARNING,
                "could not release the Lease: peers wait for it to expire",
                outcome=logic.outcome_kind(outcome),
            )
        if released and graceful and held_vip:
            await self._await_successor(released_at)
        self._successor_heard = None

    async def _settle_takeover(self) -> None:
        """A follower's takeover write (acquire or create) in flight when the stop began can
        still land. Wait for its answer (bounded by its own timeout): a Lease won at the stop
        is then released like any other, not left to a holder that is gone, for the peers to
        wait out its whole duration with nobody holding the VIP. Only the role is taken from
        the answer; nothing more is sent, and the stopping agent binds nothing."""
        fut, req = self._inflight, self._inflight_req
        takeover = (logic.Purpose.ACQUIRE, logic.Purpose.CREATE)
        if fut is None or req is None or req.purpose not in takeover:
            return
        if self.elector.role is not Role.FOLLOWER:
            return
        try:
            outcome = await asyncio.wait_for(asyncio.shield(fut), req.timeout + 0.5)
        except TimeoutError:
            return  # not answered: whether it landed is unknown, as after a crash
        self._inflight = None
        actions = self._result(outcome)
        self._apply([a for a in actions if not isinstance(a, logic.Send)], self.clock())

    async def _call(self, request: logic.Request, timeout: float) -> logic.Outcome:
        """One API call on the pool, its answer or Unreachable after ``timeout``."""
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(self._pool, self._api_call, request), timeout
            )
        except TimeoutError:
            return logic.Unreachable("timed out")

    def _api_call(self, request: logic.Request) -> logic.Outcome:
        assert self.api is not None
        return self.api.call(request)

    async def _await_successor(self, released_at: float) -> None:
        """Make-before-break: keep the (quiet) VIP until the successor is up, at most one
        retry period plus a little (the successor reads at its next retry, then writes).
        ``released_at``: when the release write was sent (monotonic); the bound on the
        overlap is in the module docstring."""
        assert self.api is not None
        loop = asyncio.get_running_loop()
        heard = self._successor_heard = asyncio.Event()
        bound = self.lease.retry_period + 0.5
        # The send time of the last read that showed no successor: its write came later.
        clear = released_at
        holder: str | None = None
        while (left := released_at + bound - time.monotonic()) > 0:
            sent = time.monotonic()
            req = logic.Request(0, logic.Verb.GET, logic.Purpose.READ, timeout=0.5)
            read = loop.run_in_executor(self._pool, self.api.call, req)
            listen = loop.create_task(heard.wait(), name="lease-successor-arp")
            both: set[asyncio.Future[Any]] = {read, listen}
            try:
                await asyncio.wait(
                    both, timeout=min(1.0, left), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                listen.cancel()
            if heard.is_set():
                self._handover_done("announcement heard", released_at, holder)
                return
            if not read.done():
                continue  # no answer in a second: read again (the bound still holds)
            outcome = read.result()
            if isinstance(outcome, logic.Ok) and outcome.record.holder not in (None, self.cfg.node):
                holder = outcome.record.holder
                # Its write is visible here a moment before it has its answer and binds the
                # VIP: keep the VIP until ``clear + SUCCESSOR_GRACE`` (or its ARP), so that
                # clients never find nobody and the overlap stays bounded.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        heard.wait(), max(0.0, clear + SUCCESSOR_GRACE - time.monotonic())
                    )
                self._handover_done(
                    "announcement heard" if heard.is_set() else "new holder seen",
                    released_at,
                    holder,
                )
                return
            clear = sent
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard.wait(), HANDOVER_POLL)
            if heard.is_set():
                self._handover_done("announcement heard", released_at, holder)
                return
        vlog.event(self.log, logging.INFO, "no new holder seen: releasing the VIP", waited_s=bound)

    def _handover_done(self, how: str, released_at: float, holder: str | None) -> None:
        vlog.event(
            self.log,
            logging.INFO,
            f"{how}: releasing the VIP",
            holder=holder,
            after_s=round(time.monotonic() - released_at, 6),
        )

    async def close(self) -> None:
        self._watch_stop.set()
        for watch in self.claimwatches:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(watch.fileno())
            watch.close()
        self.claimwatches.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def stopped_fields(self) -> dict[str, object]:
        return {
            "was_leader": self._was_leader,
            "renewals": self.elector.stats_renewals,
            "errors": dict(self.errors),
        }

    # -- observability -------------------------------------------------------------------

    def _renew_age(self) -> float | None:
        last = self.elector.last_renew_sent
        return None if last is None or not self.elector.leader else self.clock() - last

    def readiness(self) -> tuple[bool, str]:
        """/readyz: takes part in the election (started)."""
        if not self._started:
            return False, "starting"
        return True, "ready"

    def status(self, now: float) -> dict[str, Any]:
        """The Lease part of /status (``master`` is the Lease holder)."""
        e = self.elector
        rec = e.observed
        holder = rec.holder if rec else None
        last = e.last_renew_sent
        return {
            "role": LEADER if e.leader else FOLLOWER,
            "role_since_s": None if self._role_since is None else round(now - self._role_since, 6),
            "last_reason": self._last_reason,
            "duplicate_claim": False,
            "lease": {
                "name": f"{self.lease.namespace}/{self.lease.name}",
                "state": e.role.value,
                "holder": holder,
                "transitions": rec.transitions if rec else None,
                "resource_version": rec.resource_version if rec else None,
                "duration_s": self.lease.duration,
                "renew_deadline_s": self.lease.renew_deadline,
                "retry_period_s": self.lease.retry_period,
                "last_renewal_age_s": None if last is None else round(now - last, 6),
                "credentials": self.api.using.label if self.api else None,
                "local_healthy": self.healthy(),
                "peer_healthy": self.peer_healthy(),
                "gave_way": e.stats_yields,
                "peers": None if e.peers is None else {k: v.value for k, v in e.peers.items()},
                "evidence": e.evidence(now),
                "foreign_claims": self.foreign_claims,
            },
            "master": None
            if not holder
            else {"address": holder, "priority": None, "self": holder == self.cfg.node,
                  "advert_age_s": None},
            "peers": [],
            "counters": {
                "transitions": self.transitions,
                "renewals": e.stats_renewals,
                "lease_errors": dict(self.errors),
            },
        }  # fmt: skip
