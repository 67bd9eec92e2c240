"""vipd's HTTP endpoint: /metrics, /healthz, /readyz and /status on ``metrics.listen``.

What it is: a small threaded HTTP server (the standard library's, in one daemon thread of its
own) that answers from state the event loop publishes into an `Endpoint`: a heartbeat
timestamp, a readiness verdict and a status document. Because it runs in its own thread it
still answers when the event loop is blocked, and that is how /healthz can say so.

- ``/metrics``: Prometheus text exposition of ``vipd.metrics.REGISTRY`` (OpenMetrics when the
  scraper asks for it).
- ``/healthz``: 200 ``ok`` while the event loop's heartbeat (every ``HEARTBEAT_INTERVAL`` s)
  is at most ``HEALTHZ_MAX_AGE`` s old; else 503 with the age. A liveness probe: restart a
  vipd whose loop is stuck. (A process that is stopped or gone does not answer at all.)
- ``/readyz``: 200 ``ready`` while the node takes part in the election (config loaded,
  sockets open, interface up, adverts going out); else 503 with the reason. Also 503 when the
  loop is not healthy: a node whose loop is stuck takes part in nothing.
- ``/status``: the status document (JSON) that ``vipd status`` prints; see ``vipd.endpoint.status``.
  Built when asked, not on a timer: the HTTP thread asks the loop for it (`Endpoint.attach`)
  and waits up to ``STATUS_WAIT`` s; a loop too busy to answer in time gets the last document
  built instead (the verdicts in it are fresh either way).

The HTTP thread sleeps in ``select`` on the listening socket and a wake-up pipe, with no
timeout: an idle endpoint costs no wake-ups (``serve_forever`` polls every ``poll_interval``).

Binding is separate from serving and happens first (`Endpoint.bind`, before vipd joins the
election): the port is the per-node lock that keeps two vipd instances apart (``vipd
adopt`` relies on it), so a port already taken is a `ListenError` and vipd exits with
``EXIT_LISTEN`` (3) before it touches anything.

What it must not do: touch the daemon's objects from its thread (it only reads what the
loop published: plain floats, bools and an immutable snapshot), or block the loop.
"""

from __future__ import annotations

import concurrent.futures
import errno
import json
import logging
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv6Address, ip_address
from typing import TYPE_CHECKING, Any

from vipd import log as vlog
from vipd.host import sdnotify

if TYPE_CHECKING:
    import asyncio

# asyncio and the metrics are imported where they are used: binding the
# port comes first in a start, and the rest of the imports run while the start-up probe
# waits (vipd.cli), so the lock is taken early and the start is not longer for it.

EXIT_LISTEN = 3
# The loop beats this often; /healthz fails when the last beat is older than HEALTHZ_MAX_AGE.
# 2 s is 4 missed beats: longer than any GC pause or scheduling hiccup seen on a busy machine
# (tens of ms), shorter than the default Master_Down_Interval (~3.4 s at advert 1 s).
HEARTBEAT_INTERVAL = 0.5
HEALTHZ_MAX_AGE = 2.0
# How long a /status request waits for the loop to build the document (then: the last one).
STATUS_WAIT = 1.0


class ListenError(Exception):
    """The endpoint's address cannot be bound; ``str()`` is one line for stderr."""


class Endpoint:
    """What the loop publishes and the HTTP thread reads (single writer, plain values)."""

    def __init__(self, server: ThreadingHTTPServer, listen: str) -> None:
        self.server = server
        self.listen = listen
        self.last_beat = time.monotonic()
        self.ready = False
        self.not_ready_reason = "starting"
        self._status: Mapping[str, Any] = {"ready": False, "ready_reason": "starting"}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._build: Callable[[], Mapping[str, Any]] | None = None
        self._wake_r, self._wake_w = os.pipe()
        self._closing = False

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def bind(cls, listen: str) -> Endpoint:
        """Bind ``listen`` ("HOST:PORT", "[V6]:PORT") now, or raise `ListenError`."""
        host, _, port_text = listen.rpartition(":")
        host = host.strip("[]")
        server_cls = _Server6 if isinstance(ip_address(host), IPv6Address) else _Server
        try:
            server = server_cls((host, int(port_text)), _Handler)
        except OSError as exc:
            why = exc.strerror or str(exc)
            hint = ""
            if exc.errno == errno.EADDRINUSE:
                hint = " (is another vipd running on this node?)"
            raise ListenError(f"cannot listen on {listen} (metrics.listen): {why}{hint}") from None
        endpoint = cls(server, listen)
        server.endpoint = endpoint
        return endpoint

    def start(self) -> None:
        """Serve in a daemon thread (the port is already bound)."""
        self._thread = threading.Thread(target=self._serve, name="httpd")
        self._thread.daemon = True
        self._thread.start()

    def _serve(self) -> None:
        """Accept until `close`: one ``select`` with no timeout, so no periodic wake-up."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.server.fileno(), selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self._closing:
                for key, _ in sel.select():
                    if key.fd == self._wake_r or self._closing:
                        return
                    # Readable: handle_request's own select returns at once.
                    self.server.handle_request()

    def close(self) -> None:
        self._closing = True
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        self.server.server_close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:  # a second close is a no-op
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -- what the loop calls -----------------------------------------------------------

    def beat(self, now: float) -> None:
        self.last_beat = now

    async def heartbeat(self, on_beat: Callable[[float], None] | None = None) -> None:
        """Beat every HEARTBEAT_INTERVAL until cancelled, measuring how late the loop woke
        us (vipd_event_loop_lag_seconds); ``on_beat(now)`` republishes the status. Under a
        unit with ``WatchdogSec=`` each beat also feeds systemd's watchdog: the loop that
        stops beating (and fails /healthz) is the one systemd restarts."""
        from asyncio import sleep

        from vipd import metrics

        watchdog = sdnotify.Watchdog.from_env()
        while True:
            asked = time.monotonic() + HEARTBEAT_INTERVAL
            await sleep(HEARTBEAT_INTERVAL)
            now = time.monotonic()
            metrics.LOOP_LAG.observe(max(0.0, now - asked))
            self.beat(now)
            watchdog.ping(now)
            if on_beat is not None:
                on_beat(now)

    def attach(
        self, loop: asyncio.AbstractEventLoop, build: Callable[[], Mapping[str, Any]]
    ) -> None:
        """From now on /status is ``build()``, called on ``loop`` when a request asks."""
        self._loop, self._build = loop, build

    def set_ready(self, ready: bool, reason: str) -> None:
        """The readiness verdict (``reason`` when not ready); cheap, so the loop sets it on
        every change and heartbeat."""
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
            return False, (
                f"event loop blocked: last heartbeat {age:.3f} s ago (limit {HEALTHZ_MAX_AGE:g} s)"
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
        done: concurrent.futures.Future[Mapping[str, Any]] = concurrent.futures.Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(build())
                except Exception as exc:
                    done.set_exception(exc)

        try:
            loop.call_soon_threadsafe(run)
            self._status = done.result(timeout=STATUS_WAIT)
        except concurrent.futures.TimeoutError:
            done.cancel()  # a loop that gets to it later does not build it for nobody
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # SO_REUSEADDR lets a restarted vipd bind while old connections sit in TIME_WAIT; it
    # does not let two live listeners share the port, so the port still works as a lock.
    allow_reuse_address = True
    endpoint: Endpoint

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line instead of socketserver's traceback on stderr; a client that hung up
        before its answer was written (a probe's timeout, a `curl` interrupted) is its own
        business and not logged at all."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        vlog.event(
            vlog.get(), logging.WARNING, "endpoint request failed",
            client=str(client_address[0]) if client_address else "", error=repr(exc),
        )  # fmt: skip


class _Server6(_Server):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        # "[::]:2112" serves IPv4 too unless the host disabled it (bindv6only).
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "vipd"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        endpoint = self.server.endpoint
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            from vipd import metrics
            from vipd.exposition import negotiate

            metrics.LOOP_HEARTBEAT_AGE.set(endpoint.heartbeat_age())
            openmetrics, content_type = negotiate(self.headers.get("Accept", ""))
            self._send(200, metrics.REGISTRY.expose(openmetrics), content_type)
        elif path == "/healthz":
            ok, why = endpoint.health()
            self._send(200 if ok else 503, f"{why}\n".encode(), "text/plain; charset=utf-8")
        elif path == "/readyz":
            ok, why = endpoint.readiness()
            self._send(200 if ok else 503, f"{why}\n".encode(), "text/plain; charset=utf-8")
        elif path == "/status":
            body = json.dumps(endpoint.status(), indent=2, default=str) + "\n"
            self._send(200, body.encode(), "application/json")
        else:
            self._send(404, b"not found: try /metrics, /healthz, /readyz or /status\n")

    def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes are not news: no access log."""
