"""The Lease backend's shell: the official ``kubernetes`` client feeding `vipd.lease.logic`.

What it is
    `LeaseApi` turns the core's `Request` into one blocking call of the ``kubernetes`` client
    (``CoordinationV1Api``: read, create, replace) with an explicit total timeout, and the
    answer into an `Outcome`. `LeaseInstance` runs those calls on a small thread pool, never on
    the event loop, feeds the results and ``time.monotonic()`` to the `Elector`, and gives the
    controller its role exactly as ``vipd.daemon.VrrpInstance`` does (``set_leader``: the VIP is
    bound and the first gratuitous ARP sent in the same call). On SIGTERM it releases the Lease
    and keeps the VIP (quiet) until it reads another holder in the Lease or one retry period
    has passed, then removes it (make-before-break, as the VRRP backend's stop).

Reaching the API server (the issue's point 3)
    Never through the VIP: ``election.lease.api_server`` (default ``https://127.0.0.1:6443``,
    this node's own API server, checked against ``tls_server_name``, default ``kubernetes``,
    which kubeadm always puts in the serving certificate) replaces the kubeconfig's server,
    which in kubeadm's ``admin.conf`` *is* the VIP. Credentials: ``kubeconfig`` null picks
    ``/etc/kubernetes/admin.conf`` when it exists, else the pod's ServiceAccount (in-cluster,
    still pointed at the local API server). On Kubernetes >= 1.29, during the first ``kubeadm
    init`` ``admin.conf`` is not yet authorised (its group's ClusterRoleBinding is created
    through the control-plane endpoint, which is this VIP): a 401/403 with ``admin.conf`` when
    ``super-admin.conf`` sits next to it switches to ``super-admin.conf``, said in the log; vipd
    keeps it until restarted.

    The client retries nothing by itself (``retries=False``): the core decides when to try
    again. ``MicroTime`` values are sent with a non-zero microsecond: the client formats
    datetimes with ``isoformat()``, which drops the fraction when it is zero, and the API server
    only parses ``MicroTime`` with exactly six digits.

What it must not do
    Decide anything (the core does), block the loop (every API call is in the executor, with a
    timeout no longer than the core asked for), or exit because the Lease was lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vipd import __version__, metrics, sdnotify
from vipd import log as vlog
from vipd.actuators.address import AddressActuator
from vipd.actuators.announce import Announcer
from vipd.config import Config, ConfigError, Lease
from vipd.controller import Controller, GarpPolicy
from vipd.httpd import Endpoint
from vipd.lease import logic
from vipd.neighbor import announcement, parse_mac
from vipd.preflight import Preflight

ADMIN_CONF = "/etc/kubernetes/admin.conf"
SUPER_ADMIN_CONF = "super-admin.conf"
IN_CLUSTER = "in-cluster"
EXIT_OK = 0
EXIT_CRASH = 1
# The loop looks at health and the core at least this often while waiting.
MAX_SLEEP = 0.25
# How often a stopping leader reads the Lease while it waits for its successor.
HANDOVER_POLL = 0.05
# How long a stopping node keeps the VIP after it read its successor in the Lease.
SUCCESSOR_GRACE = 0.1


@dataclass(frozen=True)
class Credentials:
    """One way to authenticate: a kubeconfig file, or the pod's ServiceAccount."""

    label: str  # for logs: the path, or "in-cluster"
    kubeconfig: str | None  # None: in-cluster


def candidates(
    lease: Lease, env: dict[str, str], exists: Callable[[str], bool]
) -> list[Credentials]:
    """The credentials to try, in order, or a `ConfigError` naming ``election.lease.kubeconfig``.

    ``exists`` and ``env`` are passed in so that the rule is testable without a host.
    """
    key = "election.lease.kubeconfig"
    path = lease.kubeconfig
    if path == IN_CLUSTER:
        if not env.get("KUBERNETES_SERVICE_HOST"):
            raise ConfigError(key, '"in-cluster" needs a pod (KUBERNETES_SERVICE_HOST is not set)')
        return [Credentials(IN_CLUSTER, None)]
    if path is None:
        if exists(ADMIN_CONF):
            path = ADMIN_CONF
        elif env.get("KUBERNETES_SERVICE_HOST"):
            return [Credentials(IN_CLUSTER, None)]
        else:
            raise ConfigError(
                key,
                f"is not set, {ADMIN_CONF} does not exist and this is not a pod: set the path of "
                "a kubeconfig",
            )
    if not exists(path):
        raise ConfigError(key, "the file does not exist", path)
    out = [Credentials(path, path)]
    if Path(path).name == "admin.conf":
        sibling = str(Path(path).with_name(SUPER_ADMIN_CONF))
        if exists(sibling):
            out.append(Credentials(sibling, sibling))
    return out


def check(cfg: Config, env: dict[str, str] | None = None) -> None:
    """Start-up check for ``vipd run``/``check``: raises `ConfigError` (exit 2)."""
    if cfg.election.mode != "lease" or cfg.election.lease is None:
        return
    cands = candidates(cfg.election.lease, dict(env or os.environ), os.path.exists)
    for c in cands:
        if c.kubeconfig is not None:
            try:
                _configuration(cfg.election.lease, c)
            except Exception as exc:
                raise ConfigError(
                    "election.lease.kubeconfig", f"cannot be loaded: {exc}", c.kubeconfig
                ) from None


def microtime(now: datetime | None = None) -> datetime:
    """A UTC time that the client serialises with six fractional digits (see the docstring)."""
    t = now or datetime.now(UTC)
    return t if t.microsecond else t.replace(microsecond=1)


def _configuration(lease: Lease, cred: Credentials) -> Any:
    from kubernetes import client, config

    c = client.Configuration()
    if cred.kubeconfig is None:
        config.load_incluster_config(client_configuration=c)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=cred.kubeconfig, client_configuration=c, persist_config=False
        )

    def overrides(conf: Any) -> None:
        if lease.api_server is not None:
            conf.host = lease.api_server
        if lease.tls_server_name is not None:
            conf.tls_server_name = lease.tls_server_name

    overrides(c)
    # The loaders install a hook that re-reads the token before every request (rotation) and
    # copies the kubeconfig's server back over ours with it: re-apply ours after it, or every
    # request would go to the kubeconfig's server, the VIP. The kubeconfig loader's hook also
    # installs a fresh copy of itself each time it runs (kubernetes/config/kube_config.py,
    # ``_set_config``), so ours wraps whichever hook is there after every run, not only the
    # first one.

    def wrap(conf: Any) -> None:
        hook = conf.refresh_api_key_hook
        if hook is None:
            return

        def refresh(conf: Any) -> None:
            hook(conf)
            overrides(conf)
            if conf.refresh_api_key_hook is not refresh:
                wrap(conf)

        conf.refresh_api_key_hook = refresh

    wrap(c)
    c.retries = False  # the core decides when to try again
    c.connection_pool_maxsize = 4
    return c


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
        self.creds = creds
        self.log = log
        self.index = 0
        self._api: Any = None
        self._last: Any = None  # the last V1Lease we read or wrote (to keep its metadata)

    @property
    def using(self) -> Credentials:
        return self.creds[self.index]

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client

            conf = _configuration(self.lease, self.using)
            self._api = client.CoordinationV1Api(client.ApiClient(conf))
        return self._api

    def call(self, req: logic.Request) -> logic.Outcome:
        outcome = self._call(req)
        if (
            isinstance(outcome, logic.Rejected)
            and outcome.status in (401, 403)
            and self.index + 1 < len(self.creds)
        ):
            old = self.using.label
            self.index += 1
            self._api = None
            self.log.warning(
                "kubeconfig not authorised: falling back",
                extra={
                    "fields": {
                        "from": old,
                        "to": self.using.label,
                        "status": outcome.status,
                        "why": "on Kubernetes >= 1.29 admin.conf only works once kubeadm init "
                        "has finished; super-admin.conf is used until vipd restarts",
                    }
                },
            )
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
            code = int(exc.status or 0)
            detail = _status_message(exc)
            if code == 404:
                return logic.NotFound()
            if code == 409:
                return logic.Conflict()
            if code == 429 or code >= 500:
                return logic.Unavailable(code, detail)
            if code == 0:
                return logic.Unreachable(detail)
            return logic.Rejected(code, detail)
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


def _reason_label(reason: str) -> str:
    """A short stable label for vipd_role_transitions_total from the core's reason text."""
    for word, label in (
        ("created", "created"),
        ("acquired", "acquired"),
        ("store reachable again", "store-back"),
        ("renewed", "renewed"),
        ("released", "released"),
        ("release", "released"),
        ("renew deadline", "renew-deadline"),
        ("held by", "lost"),
        ("deleted", "deleted"),
        ("unhealthy", "unhealthy"),
        ("holding", "store-down-ended"),
    ):
        if word in reason:
            return label
    return "other"


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


@dataclass
class LeaseStats:
    renewals: int = 0
    acquisitions: int = 0
    errors: dict[str, int] | None = None
    holds: int = 0


class LeaseInstance:
    """One node's Lease election driving the controller; the Lease twin of VrrpInstance."""

    def __init__(
        self,
        cfg: Config,
        pre: Preflight,
        *,
        healthy: Callable[[], bool] | None = None,
        env: dict[str, str] | None = None,
        endpoint: Endpoint | None = None,
    ) -> None:
        assert cfg.election.lease is not None
        self.cfg = cfg
        self.pre = pre
        self.lease = cfg.election.lease
        self.log = vlog.get()
        self.ifname = pre.link.name
        self.ifindex = pre.link.index
        self._healthy = healthy
        self.env = dict(env if env is not None else os.environ)
        self.elector = logic.Elector(
            logic.Params(
                identity=cfg.node,
                duration=float(self.lease.duration),
                renew_deadline=self.lease.renew_deadline,
                retry_period=self.lease.retry_period,
                keep_on_unreachable=self.lease.keep_on_unreachable,
            )
        )
        self.errors: dict[str, int] = {}
        self.garp_sent = 0
        self.controller: Controller | None = None
        self.address: AddressActuator | None = None
        self.announcer: Announcer | None = None
        self.health: Any = None
        self.ipvs: Any = None  # vipd.ipvs.runtime.IpvsRuntime with ipvs.enabled
        self.api: LeaseApi | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="lease-api"
        )
        self._inflight: asyncio.Future[logic.Outcome] | None = None
        self._inflight_id = 0
        self.endpoint = endpoint
        self._stopping = False
        self._started = False
        self._role_since: float | None = None
        self._last_reason = ""
        self.transitions = 0

    # -- health ---------------------------------------------------------------------------

    def healthy(self) -> bool:
        if self._healthy is not None:
            return self._healthy()
        if self.health is not None:
            return bool(self.health.local_healthy())
        return True  # no health section: see the log line at start

    def peers(self) -> list[Any]:
        """The other nodes' API servers checked for "a healthy peer can take over":
        ``health.peers``, else ``ipvs.backends``; never the local API server's address."""
        h = self.cfg.health
        if h is None:
            return []
        listed = h.peers or self.cfg.ipvs.backends
        return [a for a in listed if a != h.local]

    def peer_healthy(self) -> bool:
        """Some other node's API server is healthy (no health section: none can be known)."""
        if self.health is None:
            return False
        return any(self.health.healthy(a) for a in self.peers())

    def _on_health(self, addr: Any, state: Any) -> None:
        h = self.cfg.health
        local = h is not None and addr == h.local
        # The checker logs the change; the loop sees it at its next poll (MAX_SLEEP).
        metrics.HEALTH_BACKEND_HEALTHY.labels(backend=str(addr), local=str(local).lower()).set(
            1 if state.healthy else 0
        )

    def _start_health(self) -> None:
        if self._healthy is not None or self.cfg.health is None:
            self.log.info(
                "lease: no health section, the local API server counts as healthy "
                "(the unreachable-store rule then keeps the VIP on every 5xx/429 outage)",
                extra={"fields": {"keep_on_unreachable": self.lease.keep_on_unreachable}},
            )
            return
        from vipd.health.checker import HealthChecker

        peers = self.peers()
        self.health = HealthChecker(peers, self.cfg.health, self._on_health, log=self.log)
        for addr in self.health.targets():
            metrics.HEALTH_BACKEND_HEALTHY.labels(
                backend=str(addr), local=str(addr == self.cfg.health.local).lower()
            ).set(0)
        self.log.info(
            "lease: health gating on"
            + ("" if peers else " (no peers listed: this node never gives way)"),
            extra={
                "fields": {
                    "url": self.health.url(self.cfg.health.local),
                    "peers": ",".join(str(a) for a in peers) or "-",
                }
            },
        )
        self.health.start()

    # -- the core's actions ---------------------------------------------------------------

    def _apply(self, actions: list[logic.Action], now: float) -> None:
        assert self.controller is not None and self.api is not None
        loop = asyncio.get_running_loop()
        for a in actions:
            if isinstance(a, logic.Send):
                self._inflight_id = a.request.id
                self._inflight = loop.run_in_executor(self._pool, self.api.call, a.request)
                self._inflight_req = a.request
            elif isinstance(a, logic.BecomeLeader):
                self.controller.set_leader(True, now)
                if self.ipvs is not None:
                    self.ipvs.set_leader(True)
                self._transition("leader", a.reason)
            elif isinstance(a, logic.BecomeFollower):
                self.controller.set_leader(False, now)
                if self.ipvs is not None:
                    self.ipvs.set_leader(False)
                self._transition("follower", a.reason)
            elif isinstance(a, logic.Hold):
                metrics.LEASE_KEEPING.set(1)
                metrics.TRANSITIONS.labels(
                    backend="lease", role="leader", reason="store-down"
                ).inc()
                self._last_reason = a.reason
                self.log.warning("keeping the VIP", extra={"fields": {"reason": a.reason}})

    def _transition(self, role: str, reason: str) -> None:
        e = self.elector
        rec = e.observed
        self.transitions += 1
        self._role_since = time.monotonic()
        self._last_reason = reason
        metrics.set_role("lease", role)
        metrics.LEASE_KEEPING.set(0)
        metrics.TRANSITIONS.labels(backend="lease", role=role, reason=_reason_label(reason)).inc()
        self.log.info(
            f"became {role}",
            extra={
                "fields": {
                    "lease": f"{self.lease.namespace}/{self.lease.name}",
                    "reason": reason,
                    "holder": rec.holder if rec else None,
                    "transitions": rec.transitions if rec else None,
                    "duration_s": self.lease.duration,
                    "renew_deadline_s": self.lease.renew_deadline,
                    "retry_period_s": self.lease.retry_period,
                }
            },
        )

    def _result(self, outcome: logic.Outcome) -> list[logic.Action]:
        kind = logic.outcome_kind(outcome)
        req = self._inflight_req
        metrics.LEASE_REQUESTS.labels(purpose=req.purpose.value, result=kind).inc()
        if kind == "ok" and req.purpose is logic.Purpose.RENEW:
            metrics.LEASE_RENEWALS.inc()
        if isinstance(outcome, logic.Ok):
            metrics.set_lease_holder(outcome.record.holder)
        elif kind != "ok":
            metrics.LEASE_ERRORS.labels(kind=kind).inc()
        if kind != "ok":
            self.errors[kind] = self.errors.get(kind, 0) + 1
            n = self.errors[kind]
            if n & (n - 1) == 0 or n % 100 == 0:  # 1, 2, 4, 8, …: a storm cannot flood the log
                level = logging.DEBUG if kind in ("conflict", "not-found") else logging.WARNING
                self.log.log(
                    level,
                    "lease request failed",
                    extra={
                        "fields": {
                            "request": req.purpose.value,
                            "kind": kind,
                            "detail": getattr(outcome, "detail", ""),
                            "count": n,
                        }
                    },
                )
        now = time.monotonic()
        return self.elector.on_result(
            now, self._inflight_id, outcome, self.healthy(), self.peer_healthy()
        )

    # -- life cycle -----------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """/readyz: takes part in the election (started, not stopping)."""
        if self._stopping:
            return False, "stopping: released the Lease"
        if not self._started:
            return False, "starting"
        return True, "ready"

    def status(self, now: float) -> dict[str, Any]:
        """The /status document (vipd.status's shape; ``master`` is the Lease holder)."""
        e = self.elector
        rec = e.observed
        holder = rec.holder if rec else None
        last = e.last_renew_sent
        return {
            "node": self.cfg.node,
            "version": __version__,
            "vip": str(self.cfg.vip),
            "interface": self.ifname,
            "source": str(self.pre.source),
            "backend": "lease",
            "role": "leader" if e.leader else "follower",
            "role_since_s": None if self._role_since is None else round(now - self._role_since, 6),
            "last_reason": self._last_reason,
            "vip_bound": bool(self.controller is not None and self.controller.bound),
            "duplicate_claim": False,
            "interface_up": True,
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
            },
            "master": None
            if not holder
            else {"address": holder, "priority": None, "self": holder == self.cfg.node,
                  "advert_age_s": None},
            "peers": [],
            "backends": self._backends(),
            "counters": {
                "transitions": self.transitions,
                "renewals": e.stats_renewals,
                "lease_errors": dict(self.errors),
                "garp_sent": self.garp_sent,
            },
        }  # fmt: skip

    def _backends(self) -> list[dict[str, Any]]:
        """The checked API servers (local first, then the peers), as `vipd status` shows."""
        if self.health is None:
            return []
        local = self.health.local
        snap = self.health.snapshot()
        out: list[dict[str, Any]] = []
        for addr in sorted(snap, key=lambda a: (a != local, a.version, int(a))):
            h = snap[addr]
            detail = h.error or (f"HTTP {h.status}" if h.status is not None else "not checked yet")
            out.append(
                {
                    "name": "local" if addr == local else "peer",
                    "address": str(addr),
                    "url": self.health.url(addr),
                    "healthy": h.healthy,
                    "detail": detail,
                    "checks": h.checks,
                }
            )
        return out

    def _publish(self, now: float) -> None:
        if self.endpoint is None:
            return
        try:
            ready, reason = self.readiness()
            self.endpoint.publish(self.status(now), ready, reason)
        except Exception:
            self.log.exception("could not publish the status")

    def _renew_age(self) -> float:
        last = self.elector.last_renew_sent
        return -1.0 if last is None or not self.elector.leader else time.monotonic() - last

    async def run(self, stop: asyncio.Event) -> int:
        loop = asyncio.get_running_loop()
        worker: asyncio.Task[None] | None = None
        heart: asyncio.Task[None] | None = None
        code = EXIT_OK
        metrics.init_lease(node=self.cfg.node, vip=str(self.cfg.vip), interface=self.ifname)
        metrics.LEASE_RENEW_AGE.set_function(self._renew_age)
        if self.endpoint is not None:
            self.endpoint.beat(time.monotonic())
            heart = loop.create_task(self.endpoint.heartbeat(self._publish), name="heartbeat")
        try:
            self.api = LeaseApi(
                self.lease, candidates(self.lease, self.env, os.path.exists), self.log
            )
            mac = parse_mac(self.pre.link.mac)
            self.announcer = Announcer(self.ifname, announcement(mac, self.cfg.vip), self._garp)
            self.address = AddressActuator(self.ifindex, self.cfg.vip)
            self.controller = Controller(
                address=self.address,
                announcer=self.announcer,
                garp=GarpPolicy.from_config(self.cfg.garp),
                log=self.log,
            )
            worker = loop.create_task(self.controller.run(), name="controller")
            self._start_health()
            if self.cfg.ipvs.enabled and self.health is not None:  # IPVS (vipd.ipvs.runtime)
                from vipd.ipvs.runtime import IpvsRuntime

                self.ipvs = IpvsRuntime(self.cfg, self.pre.source, self.log)
                self.ipvs.start(self.health, self.elector.leader)
            self.log.info(
                "lease election started",
                extra={
                    "fields": {
                        "node": self.cfg.node,
                        "vip": self.cfg.vip,
                        "interface": self.ifname,
                        "lease": f"{self.lease.namespace}/{self.lease.name}",
                        "api_server": self.lease.api_server or "(kubeconfig)",
                        "credentials": self.api.using.label,
                        "duration_s": self.lease.duration,
                        "renew_deadline_s": self.lease.renew_deadline,
                        "retry_period_s": self.lease.retry_period,
                    }
                },
            )
            sdnotify.notify("READY=1")
            self._started = True
            metrics.set_role("lease", "follower")
            stopper = loop.create_task(stop.wait(), name="stop-signal")
            while not stop.is_set():
                now = time.monotonic()
                self._apply(
                    self.elector.poll(
                        now, self.healthy(), random.random(), peer_healthy=self.peer_healthy()
                    ),
                    now,
                )
                waiters: set[asyncio.Future[Any]] = {stopper, worker}
                if self._inflight is not None:
                    waiters.add(self._inflight)
                delay = min(MAX_SLEEP, max(0.0, self.elector.wake_at - time.monotonic()))
                done, _ = await asyncio.wait(
                    waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED
                )
                if worker in done:
                    exc = worker.exception()
                    raise exc or RuntimeError("the controller stopped unexpectedly")
                if self._inflight is not None and self._inflight.done():
                    fut, self._inflight = self._inflight, None
                    actions = self._result(fut.result())
                    self._apply(actions, time.monotonic())
            stopper.cancel()
        except Exception:
            self.log.exception("crashed: releasing the VIP and exiting")
            code = EXIT_CRASH
        self._stopping = True
        self._publish(time.monotonic())
        await self._shutdown(worker, graceful=code == EXIT_OK)
        if heart is not None:
            heart.cancel()
            with contextlib.suppress(BaseException):
                await heart
        return code

    def _garp(self, n: int) -> None:
        self.garp_sent += n
        metrics.GARP_SENT.inc(n)

    async def _shutdown(self, worker: asyncio.Task[None] | None, graceful: bool) -> None:
        """Release the Lease, keep the VIP until a successor shows in the Lease, remove it."""
        loop = asyncio.get_running_loop()
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(BaseException):
                await worker
        if self.controller is not None:
            self.controller.quiesce()
        was_leader = self.elector.leader
        if self.api is not None and was_leader:
            timeout = max(0.2, min(self.lease.renew_deadline * 0.5, 5.0))
            # From here on this node does not lead (it will never renew again), whatever the
            # release's fate; the VIP stays, quiet, until the successor shows up
            # (make-before-break).
            self._transition("follower", "stopping: releasing the Lease")
            actions = self.elector.release(time.monotonic(), timeout)
            released = False
            for a in actions:
                if isinstance(a, logic.Send):
                    try:
                        outcome = await asyncio.wait_for(
                            loop.run_in_executor(self._pool, self.api.call, a.request),
                            timeout + 0.5,
                        )
                    except TimeoutError:
                        outcome = logic.Unreachable("timed out")
                    released = isinstance(outcome, logic.Ok)
                    if released:
                        self.log.info("released the Lease", extra={"fields": {"outcome": "ok"}})
                    else:
                        self.log.warning(
                            "could not release the Lease: peers wait for it to expire",
                            extra={"fields": {"outcome": logic.outcome_kind(outcome)}},
                        )
            if released and graceful:
                await self._await_successor()
        if self.controller is not None:
            try:
                self.controller.release()
            except Exception as exc:
                self.log.error("could not remove the VIP", extra={"fields": {"error": exc}})
        if self.ipvs is not None:
            await self.ipvs.stop()
        if self.health is not None:
            self.health.stop()
        if self.announcer is not None:
            self.announcer.close()
        if self.address is not None:
            self.address.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.log.info(
            "stopped",
            extra={
                "fields": {
                    "was_leader": was_leader,
                    "renewals": self.elector.stats_renewals,
                    "errors": dict(self.errors),
                    "garp_sent": self.garp_sent,
                }
            },
        )

    async def _await_successor(self) -> None:
        """Make-before-break: keep the (quiet) VIP until a peer holds the Lease, at most one
        retry period plus a little (the successor reads at its next retry, then writes)."""
        assert self.api is not None
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        bound = self.lease.retry_period + 0.5
        while time.monotonic() - started < bound:
            req = logic.Request(0, logic.Verb.GET, logic.Purpose.READ, timeout=0.5)
            try:
                outcome = await asyncio.wait_for(
                    loop.run_in_executor(self._pool, self.api.call, req), 1.0
                )
            except TimeoutError:
                outcome = logic.Unreachable("timed out")
            if isinstance(outcome, logic.Ok) and outcome.record.holder not in (None, self.cfg.node):
                # The write is visible here a moment before the winner has its answer and
                # binds the VIP: give it that moment, so clients never find nobody.
                await asyncio.sleep(SUCCESSOR_GRACE)
                self.log.info(
                    "new holder seen: releasing the VIP",
                    extra={
                        "fields": {
                            "holder": outcome.record.holder,
                            "after_s": round(time.monotonic() - started, 6),
                        }
                    },
                )
                return
            await asyncio.sleep(HANDOVER_POLL)
        self.log.info(
            "no new holder seen: releasing the VIP", extra={"fields": {"waited_s": bound}}
        )
