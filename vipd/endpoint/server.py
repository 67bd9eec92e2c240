"""vipd's HTTP endpoint: /metrics, /healthz, /readyz and /status on ``metrics.listen``.

What it is: a small threaded HTTP/1.1 server (RFC 9112 message syntax; GET only, persistent
connections as RFC 9112 section 9.3 says) that answers from state the event loop publishes
into an `Endpoint`: a heartbeat timestamp, a readiness verdict and a status document. It runs
in threads of its own (one that accepts, one per connection), so it still answers when the
event loop is blocked, and that is how /healthz can say so. It is vipd's own rather than
``http.server``, which brings ``email``, ``http.client`` and ``ssl`` (~7 MiB of RSS) into a
process that serves four fixed paths.

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
milliseconds for its down timer then pays no wake-up for the heartbeat (a Master's steady
adverts come from the advert pacer's thread, ``vipd.vrrp.pacer``, and cannot beat for the
loop); the beat's age still never exceeds one interval on a live loop, and a loop that is
stuck beats nowhere.

The accepting thread sleeps in ``select`` on the listening socket and a wake-up pipe, with no
timeout: an idle endpoint costs no wake-ups. A connection's thread reads requests until the
client closes, asks to close, or is idle for ``IDLE_TIMEOUT`` s; a client that hangs up before
its answer is written is its own business and is not logged.

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
import contextlib
import errno
import json
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from ipaddress import IPv6Address, ip_address
from typing import TYPE_CHECKING, Any

from vipd import log as vlog
from vipd.aio import on_loop
from vipd.host import sdnotify

if TYPE_CHECKING:
    import asyncio
    from types import ModuleType


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
# A connection with no request for this long is closed (a scraper reconnects; a half-open
# connection does not hold a thread for ever). Prometheus scrapes at most every few seconds.
IDLE_TIMEOUT = 60.0
# The request line and headers of a GET: far more than any scraper or probe sends.
MAX_HEAD = 16 * 1024


# Descriptors of listening sockets kept bound until the process ends (Endpoint.close).
_HELD_LOCKS: list[int] = []


class ListenError(Exception):
    """The endpoint's address cannot be bound; ``str()`` is one line for stderr."""


class Endpoint:
    """What the loop publishes and the HTTP thread reads (single writer, plain values)."""

    def __init__(self, sock: socket.socket, listen: str) -> None:
        self.sock = sock
        self.listen = listen
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
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._build: Callable[[], Mapping[str, Any]] | None = None
        self._wake_r, self._wake_w = os.pipe()
        self._closing = False

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def bind(cls, listen: str) -> Endpoint:
        """Bind ``listen`` ("HOST:PORT", "[V6]:PORT") now, or raise `ListenError`."""
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
            sock.listen(16)
        except OSError as exc:
            sock.close()
            why = exc.strerror or str(exc)
            hint = ""
            if exc.errno == errno.EADDRINUSE:
                hint = " (is another vipd running on this node?)"
            raise ListenError(f"cannot listen on {listen} (metrics.listen): {why}{hint}") from None
        return cls(sock, listen)

    def start(self) -> None:
        """Serve in a daemon thread (the port is already bound)."""
        self._thread = threading.Thread(target=self._serve, name="httpd")
        self._thread.daemon = True
        self._thread.start()

    def _serve(self) -> None:
        """Accept until `close`: one ``select`` with no timeout, so no periodic wake-up."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock.fileno(), selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self._closing:
                for key, _ in sel.select():
                    if key.fd == self._wake_r or self._closing:
                        return
                    try:
                        conn, peer = self.sock.accept()
                    except OSError:
                        continue  # the client gave up between select and accept
                    t = threading.Thread(
                        target=self._connection, args=(conn, peer), name="httpd-conn"
                    )
                    t.daemon = True
                    t.start()

    def close(self, *, keep_lock: bool = False) -> None:
        """Stop serving. The port is released at once, or with ``keep_lock`` only when the
        process ends: the listening socket's descriptor is left open for the kernel to
        close at exit (connections made until then wait unanswered in its backlog)."""
        self._closing = True
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        if keep_lock:
            if self.sock.fileno() >= 0:
                _HELD_LOCKS.append(self.sock.detach())
        else:
            self.sock.close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:  # a second close is a no-op
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -- one connection (its own thread) ---------------------------------------------

    def _connection(self, conn: socket.socket, peer: Any) -> None:
        try:
            with conn:
                conn.settimeout(IDLE_TIMEOUT)
                _serve_connection(conn, self._answer)
        except (ConnectionError, TimeoutError):
            pass  # a client that hung up or went quiet: its own business
        except Exception as exc:
            vlog.event(
                vlog.get(), logging.WARNING, "endpoint request failed",
                client=str(peer[0]) if peer else "", error=repr(exc),
            )  # fmt: skip

    def _answer(self, target: str, headers: Mapping[str, str]) -> tuple[int, bytes, str]:
        """(status code, body, content type) for a GET of ``target``."""
        path = target.split("?", 1)[0]
        if path == "/metrics":
            from vipd import metrics

            metrics.LOOP_HEARTBEAT_AGE.set(self.heartbeat_age())
            scrape, content_type = metrics.exposition(headers.get("accept", ""))
            return 200, scrape, content_type
        if path == "/healthz":
            ok, why = self.health()
            return (200 if ok else 503), f"{why}\n".encode(), "text/plain; charset=utf-8"
        if path == "/readyz":
            ok, why = self.readiness()
            return (200 if ok else 503), f"{why}\n".encode(), "text/plain; charset=utf-8"
        if path == "/status":
            body = json.dumps(self.status(), indent=2, default=str) + "\n"
            return 200, body.encode(), "application/json"
        return 404, b"not found: try /metrics, /healthz, /readyz or /status\n", "text/plain"

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


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(when: float) -> str:
    """IMF-fixdate (RFC 9110 section 5.6.7), in English whatever the locale."""
    t = time.gmtime(when)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def response(
    code: int, body: bytes, content_type: str, *, close: bool, head: bool = False
) -> bytes:
    """One HTTP/1.1 response; ``head``: the headers of the GET answer without its body."""
    lines = [
        f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}",
        "Server: vipd",
        f"Date: {http_date(time.time())}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
    ]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head else body)


class _Reader:
    """The bytes of one connection, read as they come, split into request heads."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buf = b""

    def head(self) -> bytes | None:
        """The next request's line and headers, without the blank line; None at a clean end
        of the connection (no partial request pending); ValueError when too long."""
        while True:
            # Empty lines before a request line are to be ignored (RFC 9112 section 2.2).
            self.buf = self.buf.lstrip(b"\r\n")
            end = self.buf.find(b"\r\n\r\n")
            sep = 4
            if end < 0:
                end, sep = self.buf.find(b"\n\n"), 2  # bare LF line ends: RFC 9112 section 2.2
            if end > MAX_HEAD or (end < 0 and len(self.buf) > MAX_HEAD):
                raise ValueError("request head too long")
            if end >= 0:
                head, self.buf = self.buf[:end], self.buf[end + sep :]
                return head
            chunk = self.conn.recv(65536)
            if not chunk:
                if self.buf.strip():
                    raise ConnectionResetError("the client closed mid-request")
                return None
            self.buf += chunk

    def skip(self, n: int) -> None:
        """Read and drop a request body of ``n`` bytes (a GET has none worth reading)."""
        if n < 0:
            raise ValueError(f"negative Content-Length {n}")
        while len(self.buf) < n:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise ConnectionResetError("the client closed mid-body")
            self.buf += chunk
        self.buf = self.buf[n:]


def parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, target, version, headers with lower-case names) of a request head; ValueError
    when it is not HTTP/1.x syntax."""
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(f"bad request line {lines[0][:80]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError(f"bad header line {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return method, target, version, headers


def _refuse(conn: socket.socket, code: int, why: bytes) -> None:
    """Answer an unusable request and end the connection, reading what the client still
    sends for a moment: closing with unread bytes makes the kernel reset the connection,
    and a reset can destroy the answer before the client reads it."""
    conn.sendall(response(code, why, "text/plain", close=True))
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(1.0)
    with contextlib.suppress(OSError):
        for _ in range(64):
            if not conn.recv(65536):
                break


def _serve_connection(
    conn: socket.socket, answer: Callable[[str, Mapping[str, str]], tuple[int, bytes, str]]
) -> None:
    """Answer requests on ``conn`` until it ends: persistent for HTTP/1.1 unless the client
    says ``Connection: close``, one request for HTTP/1.0 unless it asks to keep it alive."""
    reader = _Reader(conn)
    while True:
        try:
            head = reader.head()
        except ValueError:
            _refuse(conn, 431, b"request head too long\n")
            return
        if head is None:
            return
        try:
            method, target, version, headers = parse_head(head)
        except ValueError as exc:
            _refuse(conn, 400, f"{exc}\n".encode())
            return
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            _refuse(conn, 505, b"HTTP/1.1 only\n")
            return
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        close = "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)
        if "transfer-encoding" in headers:
            # A chunked body we would have to parse to find the next request: not for a GET.
            _refuse(conn, 400, b"no request bodies\n")
            return
        try:
            reader.skip(int(headers.get("content-length", "0")))
        except ValueError:
            _refuse(conn, 400, b"bad Content-Length\n")
            return
        if method not in ("GET", "HEAD"):
            _refuse(conn, 501, b"GET only\n")
            return
        code, body, content_type = answer(target, headers)
        conn.sendall(response(code, body, content_type, close=close, head=method == "HEAD"))
        if close:
            return
