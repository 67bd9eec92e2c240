"""vipd's HTTP endpoint: /metrics, /healthz, /readyz and /status on ``metrics.listen``.

What it is: the answers of a GET-only HTTP/1.1 endpoint, from state the event loop
publishes into an `Endpoint`: a heartbeat timestamp, a readiness verdict and a status
document. The connections, the HTTP syntax and the limits that keep a hostile client from
knocking the endpoint over are ``vipd.endpoint.serving``'s (h11 under a fixed pool of
threads); who may read /metrics and /status is ``vipd.endpoint.auth``'s. It runs in threads
of its own, so it still answers when the event loop is blocked, and that is how /healthz can
say so.

- ``/metrics``: Prometheus text exposition of ``vipd.metrics.REGISTRY`` (OpenMetrics when the
  scraper asks for it).
- ``/healthz``: 200 ``ok`` while the event loop's heartbeat (at least every
  ``HEARTBEAT_INTERVAL`` s) is at most ``HEALTHZ_MAX_AGE`` s old; else 503 with the age. A
  liveness probe: restart a vipd whose loop is stuck. (A process that is stopped or gone does
  not answer at all.)
- ``/readyz``: 200 ``ready`` while the node takes part in the election (config loaded,
  sockets open, interface up, adverts going out); else 503 with the reason. Also 503 when the
  loop is not healthy: a node whose loop is stuck takes part in nothing.
- ``/status``: the status document (JSON) that ``vipd status`` prints; see ``vipd.endpoint.status``.
  Built when asked, not on a timer: the HTTP thread asks the loop for it (`Endpoint.attach`)
  and waits up to ``STATUS_WAIT`` s; a loop too busy to answer in time gets the last document
  built instead (the verdicts in it are fresh either way).

The heartbeat is a loop timer every ``HEARTBEAT_INTERVAL`` s, but any other timer of the loop
that runs when the heartbeat is less than half an interval away beats in its place
(`Endpoint.offer_beat`; the VRRP driver offers every loop timer it runs) and pushes the
heartbeat's own timer a whole interval on. A VRRP Backup that wakes every few hundred
milliseconds for its down timer then pays no wake-up for the heartbeat (below 0.1 s a
Master's steady adverts come from the advert pacer's thread, ``vipd.vrrp.pacer``, and cannot
beat for the loop); the beat's age still never exceeds one interval on a live loop, and a loop
that is stuck beats nowhere.

The I/O thread sleeps in ``select`` with no timeout while no connection is open: an idle
endpoint costs no wake-ups. It answers /healthz, /readyz and unknown paths itself
(`Endpoint._quick`: published values only), so the probes never wait for a worker; /metrics
and /status go to a worker. A client that hangs up before its answer is written is its own
business and is not logged.

With ``metrics.cert_file`` the endpoint speaks TLS; with ``metrics.auth`` /metrics and /status
need a bearer token the API server vouches for (TokenReview) and allows ``get`` on the path
(SubjectAccessReview), or a client certificate signed by ``metrics.client_ca_file``.
/healthz and /readyz stay open: the kubelet's probes send neither.

Binding is separate from serving and happens first (`Endpoint.bind`, before vipd joins the
election): the port is the per-node lock that keeps two vipd instances apart (``vipd
adopt`` relies on it), so a port already taken is a `ListenError` and vipd exits with
``EXIT_LISTEN`` (3) before it touches anything. The lock is let go only when the process
ends (`Endpoint.close` with ``keep_lock``): what the interpreter still does on its way out
(joining a thread whose API call is in flight, say) must not overlap a successor.

What it must not do: touch the daemon's objects from its thread (it only reads what the
loop published: plain floats, bools and an immutable snapshot), or block the loop.
"""

from __future__ import annotations

import concurrent.futures
import errno
import json
import math
import socket
import time
from collections.abc import Callable, Mapping
from ipaddress import IPv6Address, ip_address
from typing import TYPE_CHECKING, Any

from vipd.aio import on_loop
from vipd.endpoint import serving
from vipd.host import sdnotify

if TYPE_CHECKING:
    import asyncio
    import ssl
    from types import ModuleType

    from vipd.config import Metrics
    from vipd.endpoint.auth import Guard


# asyncio and the metrics are imported where they are used: binding the
# port comes first in a start, and the rest of the imports run while the start-up probe
# waits (vipd.cli), so the lock is taken early and the start is not longer for it.

EXIT_LISTEN = 3
# The loop beats this often; /healthz fails when the last beat is older than HEALTHZ_MAX_AGE.
# 2 s is 4 missed beats: longer than any GC pause or scheduling hiccup seen on a busy machine
# (tens of ms), shorter than the default Master_Down_Interval (~3.4 s at advert 1 s).
HEARTBEAT_INTERVAL = 1.0
HEALTHZ_MAX_AGE = 2.0
# How long a /status request waits for the loop to build the document (then: the last one).
STATUS_WAIT = 1.0
# The limits (vipd.endpoint.serving): 4 workers (a scrape, two probes and a `vipd status` at
# once, with one to spare); 64 open connections (the oldest goes to make room); a request head
# of at most 16 KiB (far more than any scraper or probe sends) that must arrive whole within
# 10 s of its first byte; a kept-alive connection idle for 60 s is closed (Prometheus scrapes
# at most every few seconds); an answer must be written within 10 s.
LIMITS = serving.Limits(
    workers=4,
    max_connections=64,
    max_head=16 * 1024,
    head_timeout=10.0,
    idle_timeout=60.0,
    write_timeout=10.0,
)


# Descriptors of listening sockets kept bound until the process ends (Endpoint.close).
_HELD_LOCKS: list[int] = []


class ListenError(Exception):
    """The endpoint's address cannot be bound; ``str()`` is one line for stderr."""


class Endpoint:
    """What the loop publishes and the HTTP thread reads (single writer, plain values)."""

    def __init__(
        self,
        sock: socket.socket,
        listen: str,
        tls: ssl.SSLContext | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.sock = sock
        self.listen = listen
        self.tls = tls
        self.guard = guard  # None: /metrics and /status are open
        self.last_beat = time.monotonic()
        # The heartbeat's timer (`heartbeat`): its handle, when it is due, and what it calls.
        self._heart: asyncio.TimerHandle | None = None
        self._heart_loop: asyncio.AbstractEventLoop | None = None
        self._heart_due = 0.0
        self._on_beat: Callable[[float], None] | None = None
        self._watchdog: sdnotify.Watchdog | None = None
        self._metrics: ModuleType | None = None
        self._published: tuple[bool, str] | None = None  # set_ready's last arguments
        self.ready = False
        self.not_ready_reason = "starting"
        self._status: Mapping[str, Any] = {"ready": False, "ready_reason": "starting"}
        self._server: serving.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._build: Callable[[], Mapping[str, Any]] | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def bind(cls, listen: str, config: Metrics | None = None) -> Endpoint:
        """Bind ``listen`` ("HOST:PORT", "[V6]:PORT") now, or raise `ListenError`; TLS and
        authentication as ``config`` says (`check_security` has vetted it)."""
        tls, guard = security(config) if config is not None else (None, None)
        host, _, port_text = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if isinstance(ip_address(host), IPv6Address) else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            # SO_REUSEADDR lets a restarted vipd bind while old connections sit in TIME_WAIT;
            # it does not let two live listeners share the port, so the port is still a lock.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # "[::]:2112" serves IPv4 too unless the host disabled it (bindv6only).
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((host, int(port_text)))
            # A deep backlog: a burst of connections must not fill it before the I/O thread
            # accepts (a full queue drops a probe's SYN; the kernel caps it at somaxconn).
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            why = exc.strerror or str(exc)
            hint = ""
            if exc.errno == errno.EADDRINUSE:
                hint = " (is another vipd running on this node?)"
            raise ListenError(f"cannot listen on {listen} (metrics.listen): {why}{hint}") from None
        return cls(sock, listen, tls, guard)

    def start(self) -> None:
        """Serve in threads of its own (the port is already bound)."""
        # Loaded now: what the I/O thread counts must not need a file opened later, when the
        # process may be out of descriptors (EMFILE is one of the faults it counts).
        from vipd import metrics  # noqa: F401

        self._server = serving.Server(
            self.sock, self._answer, LIMITS, _count, self.tls, quick=self._quick
        )
        self._server.start()

    @property
    def _thread(self) -> Any:
        """The I/O thread (for tests)."""
        return None if self._server is None else self._server._thread

    def close(self, *, keep_lock: bool = False) -> None:
        """Stop serving. The port is released at once, or with ``keep_lock`` only when the
        process ends: the listening socket's descriptor is left open for the kernel to
        close at exit (connections made until then wait unanswered in its backlog)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if keep_lock:
            if self.sock.fileno() >= 0:
                _HELD_LOCKS.append(self.sock.detach())
        else:
            self.sock.close()

    # -- one request (a worker thread) -----------------------------------------------

    def _quick(self, req: serving.Request) -> serving.Answer | None:
        """The answers that read only plain values (the probes, an unknown path): given on
        the I/O thread, so a kubelet's probe is answered even when every worker is busy.
        None: /metrics and /status, which a worker answers."""
        path = req.target.split("?", 1)[0]
        text = "text/plain; charset=utf-8"
        if path == "/healthz":
            ok, why = self.health()
            return serving.Answer(200 if ok else 503, f"{why}\n".encode(), text)
        if path == "/readyz":
            ok, why = self.readiness()
            return serving.Answer(200 if ok else 503, f"{why}\n".encode(), text)
        if path in ("/metrics", "/status"):
            return None
        return serving.Answer(
            404, b"not found: try /metrics, /healthz, /readyz or /status\n", "text/plain"
        )

    def _answer(self, req: serving.Request) -> serving.Answer:
        """/metrics and /status (a worker thread), behind the guard when there is one."""
        quick = self._quick(req)
        if quick is not None:
            return quick
        path = req.target.split("?", 1)[0]
        if self.guard is not None:
            denied = self.guard.check(path, req.headers, req.peer_cert)
            if denied is not None:
                body = f"{denied.why}\n".encode()
                return serving.Answer(
                    denied.code, body, "text/plain; charset=utf-8", denied.headers
                )
        if path == "/metrics":
            from vipd import metrics

            metrics.LOOP_HEARTBEAT_AGE.set(self.heartbeat_age())
            body, content_type = _render_metrics(req.headers.get("accept", ""))
            return serving.Answer(200, body, content_type)
        doc = json.dumps(self.status(), indent=2, default=str) + "\n"
        return serving.Answer(200, doc.encode(), "application/json")

    # -- what the loop calls -----------------------------------------------------------

    def beat(self, now: float) -> None:
        self.last_beat = now

    async def heartbeat(self, on_beat: Callable[[float], None] | None = None) -> None:
        """Beat at least every HEARTBEAT_INTERVAL until cancelled (see the module docstring
        for the beats other timers give). Each beat records how late the loop ran the timer
        that gave it (vipd_event_loop_lag_seconds) and calls ``on_beat(now)``, which
        republishes the readiness. Under a unit with ``WatchdogSec=`` each beat also feeds
        systemd's watchdog: the loop that stops beating (and fails /healthz) is the one
        systemd restarts."""
        import asyncio

        from vipd import metrics

        loop = asyncio.get_running_loop()
        self._metrics = metrics  # imported once here: a beat runs on every VRRP wake-up
        self._on_beat = on_beat
        self._watchdog = sdnotify.Watchdog.from_env()
        self._heart_loop = loop
        self._arm_heart(time.monotonic() + HEARTBEAT_INTERVAL)
        try:
            await loop.create_future()  # the beats run from the timer, until cancelled
        finally:
            if self._heart is not None:
                self._heart.cancel()
            self._heart = self._heart_loop = None

    def offer_beat(self, lag: float) -> None:
        """A timer of the loop has just run, ``lag`` s after the time it was set for: it
        beats for the heartbeat if the heartbeat's own timer is due within half an
        interval. Called on the loop; costs a clock read and a comparison otherwise."""
        if self._heart is None:
            return
        now = time.monotonic()
        if self._heart_due - now <= HEARTBEAT_INTERVAL / 2:
            self._heart.cancel()
            self._beat(now, lag)

    def _arm_heart(self, due: float) -> None:
        assert self._heart_loop is not None
        self._heart_due = due
        self._heart = self._heart_loop.call_later(
            max(0.0, due - time.monotonic()), self._heart_fired
        )

    def _heart_fired(self) -> None:
        now = time.monotonic()
        self._beat(now, now - self._heart_due)

    def _beat(self, now: float, lag: float) -> None:
        assert self._metrics is not None
        self._metrics.LOOP_LAG.observe(max(0.0, lag))
        self.beat(now)
        self._arm_heart(now + HEARTBEAT_INTERVAL)
        if self._watchdog is not None:
            self._watchdog.ping(now)
        if self._on_beat is not None:
            self._on_beat(now)

    def attach(
        self, loop: asyncio.AbstractEventLoop, build: Callable[[], Mapping[str, Any]]
    ) -> None:
        """From now on /status is ``build()``, called on ``loop`` when a request asks."""
        self._loop, self._build = loop, build

    def set_ready(self, ready: bool, reason: str) -> None:
        """The readiness verdict (``reason`` when not ready); cheap, so the loop sets it on
        every change and heartbeat."""
        if self._published == (ready, reason):
            return  # the heartbeat's republishing, unchanged
        self._published = (ready, reason)
        self.ready = ready
        self.not_ready_reason = "" if ready else reason
        from vipd import metrics

        metrics.READY.set(1 if ready else 0)

    def publish(self, status: Mapping[str, Any], ready: bool, reason: str) -> None:
        """Replace the status document and the readiness verdict (``reason`` when not)."""
        self._status = status
        self.set_ready(ready, reason)

    # -- what the HTTP thread calls ----------------------------------------------------

    def heartbeat_age(self) -> float:
        return max(0.0, time.monotonic() - self.last_beat)

    def health(self) -> tuple[bool, str]:
        age = self.heartbeat_age()
        if age > HEALTHZ_MAX_AGE:
            # Milliseconds rounded up: an age just past the limit never reads as the limit.
            shown = math.ceil(age * 1000) / 1000
            return False, (
                f"event loop blocked: last heartbeat {shown:.3f} s ago "
                f"(limit {HEALTHZ_MAX_AGE:g} s)"
            )
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        healthy, why = self.health()
        if not healthy:
            return False, why
        if not self.ready:
            return False, self.not_ready_reason
        return True, "ready"

    def _fresh_status(self) -> Mapping[str, Any]:
        """The loop builds the document now; the last one if it cannot within STATUS_WAIT."""
        loop, build = self._loop, self._build
        if loop is None or build is None:
            return self._status
        try:
            self._status = on_loop(loop, build, STATUS_WAIT)
        except concurrent.futures.TimeoutError:
            pass
        except Exception:
            # The loop is closed (vipd is stopping), or the build failed (the loop logged
            # it): the last document stands.
            pass
        return self._status

    def status(self) -> dict[str, Any]:
        doc = dict(self._fresh_status())
        healthy, health_reason = self.health()
        ready, ready_reason = self.readiness()
        doc.update(
            healthy=healthy,
            health_reason=health_reason,
            ready=ready,
            ready_reason=ready_reason,
            heartbeat_age_s=round(self.heartbeat_age(), 6),
        )
        return doc


def _render_metrics(accept: str) -> tuple[bytes, str]:
    """The /metrics body and its Content-Type for a scraper's ``Accept`` header."""
    from vipd import metrics

    return metrics.exposition(accept)


def _count(what: str) -> None:
    """A connection refused, or a fault the server recovered from (`serving.Server`)."""
    from vipd import metrics

    if what.endswith("-backoff"):
        metrics.HTTP_BACKOFFS.labels(what=what.removesuffix("-backoff")).inc()
    else:
        metrics.HTTP_REFUSED.labels(reason=what).inc()


def check_security(config: Metrics) -> None:
    """Start-up check of the TLS and authentication keys; `ConfigError` (exit 2) names the key."""
    security(config)


def security(config: Metrics) -> tuple[ssl.SSLContext | None, Guard | None]:
    """The TLS context and the guard of /metrics and /status that ``config`` asks for."""
    if config.cert_file is None and config.auth == "none":
        return None, None  # no ssl import: plain HTTP costs nothing more
    from vipd.endpoint import auth

    return auth.tls_context(config), auth.guard(config)
