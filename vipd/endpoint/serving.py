"""The endpoint's HTTP/1.1 connection engine: bounded threads, bounded memory, bounded time.

What it is: the transport under ``vipd.endpoint.server``. One I/O thread accepts connections
and reads request heads without blocking (a ``selectors`` loop); a fixed pool of worker threads
answers complete requests. The HTTP/1.1 message syntax (RFC 9112) is h11's, a sans-I/O parser
(https://github.com/python-hyper/h11), fed by the I/O thread, the messages
``vipd.endpoint.wire``'s; this module owns only the sockets, the limits and the threads (how
an answer is written, by the I/O thread or a worker: ``vipd.endpoint.answers``).
TLS (optional) is the standard library's ``ssl``, its handshake driven by the same loop.

Why this shape: a neighbour must not be able to take the endpoint down, because the kubelet
restarts a vipd whose /healthz stops answering.

- Connections cost a descriptor and at most ``max_head`` bytes, not a thread: idle
  keep-alive connections and clients trickling their request head wait in the I/O thread's
  selector. At ``max_connections`` the oldest one still waiting for a whole request is closed
  to make room (a probe is a new connection; a flood of silent ones only churns itself).
- A request head (and the TLS handshake before it) must arrive whole within ``head_timeout``
  of its first byte, however slowly it trickles (slowloris); it is at most ``max_head``
  bytes (431). A connection with no request waits ``idle_timeout``.
- No request bodies: a request with ``Content-Length`` > 0 gets 413, one with
  ``Transfer-Encoding`` 400, at once, without the body being read (RFC 9110 section 15.5.14).
  The connection is then closed after a short lingering close (``LINGER`` s, at most
  ``LINGER_BYTES`` discarded into a fixed buffer) so that the answer is not destroyed by the
  reset a close with unread data makes (RFC 9112 section 9.6).
- ``workers`` threads, all started up front: a complete request when none is free gets 503
  at once from the I/O thread (RFC 9110 section 15.6.4). A worker writes its answer within
  ``write_timeout``. Answers that never block (``quick``: the probes) are given by the I/O
  thread itself, all at once into the socket buffer, so they need no worker at all.
- Accepting never stops: accept's EMFILE/ENFILE/ENOBUFS/ENOMEM pause accepting for a
  back-off that doubles up to ``ACCEPT_BACKOFF_MAX`` s, and a worker thread that cannot be
  started (a pids limit) is retried on the same back-off; both are counted (``count``).

What it must not do: parse HTTP itself, know the endpoint's paths, or block the I/O thread on
a client (every socket operation there is non-blocking).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h11

from vipd import log as vlog
from vipd.endpoint.answers import Answering, _Conn
from vipd.endpoint.wire import Answer, Count, Handler, Limits, Request

__all__ = ["Answer", "Count", "Handler", "Limits", "Request", "Server"]

if TYPE_CHECKING:
    import ssl

ACCEPT_BACKOFF_MIN = 0.05
ACCEPT_BACKOFF_MAX = 2.0
# accept() errors that mean "out of a resource, try later", not "this client gave up".
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Server(Answering):
    """Serve ``handler`` on the bound, listening ``sock`` (see the module docstring).

    ``count`` is called (from the server's threads) with: ``busy`` (503: no free worker),
    ``evicted`` (closed to make room at max_connections), ``head-timeout``,
    ``head-too-large``, ``bad-request``, ``body`` (413/400), ``tls`` (handshake failed),
    ``accept-backoff`` (accept ran out of descriptors or memory), ``thread-backoff`` (a
    worker could not be started)."""

    def __init__(
        self,
        sock: socket.socket,
        handler: Handler,
        limits: Limits,
        count: Count,
        tls: ssl.SSLContext | None = None,
        quick: Callable[[Request], Answer | None] | None = None,
    ) -> None:
        self.sock = sock
        self.handler = handler
        # Answers that never block (None: the handler's, on a worker), given on the I/O
        # thread: the probes are answered even when every worker is busy.
        self.quick: Callable[[Request], Answer | None] | None = quick
        self.limits = limits
        self.count = count
        self.tls = tls
        self._sel = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}  # by descriptor: waiting in the selector
        self._busy = 0  # connections handed to a worker
        self._free = threading.Semaphore(0)  # one per worker waiting for a request
        self._jobs: queue.SimpleQueue[tuple[_Conn, Request] | None] = queue.SimpleQueue()
        self._back: queue.SimpleQueue[_Conn | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._closing = False
        self._thread: threading.Thread | None = None
        self._accept_paused_until = 0.0
        self._accept_backoff = ACCEPT_BACKOFF_MIN
        self._worker_retry_at = 0.0
        self._worker_backoff = ACCEPT_BACKOFF_MIN
        self._faulted = False
        self._scratch = bytearray(65536)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self.sock.setblocking(False)
        # The I/O thread first (it starts the workers): it alone can answer, if only 503.
        self._thread = threading.Thread(target=self._run, name="httpd", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop both kinds of thread and close every connection (not the listening socket)."""
        self._closing = True
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for _ in self._workers:
            self._jobs.put(None)
        for t in self._workers:
            t.join(timeout=5)
        self._workers.clear()
        while True:  # kept-alive connections the workers handed back after the I/O thread left
            try:
                c = self._back.get_nowait()
            except queue.Empty:
                break
            if c is not None:
                c.sock.close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # already woken (the pipe is full), or closed
            os.write(self._wake_w, b"x")

    def _start_workers(self, now: float) -> None:
        """Start the workers still missing; a failed start is retried on a back-off."""
        while len(self._workers) < self.limits.workers:
            t = threading.Thread(target=self._work, name="httpd-worker", daemon=True)
            try:
                t.start()
            except RuntimeError:  # "can't start new thread": a pids or memory limit
                self.count("thread-backoff")
                self._worker_retry_at = now + self._worker_backoff
                self._worker_backoff = min(ACCEPT_BACKOFF_MAX, self._worker_backoff * 2)
                return
            self._workers.append(t)
        self._worker_retry_at = 0.0
        self._worker_backoff = ACCEPT_BACKOFF_MIN

    @property
    def workers(self) -> int:
        return len(self._workers)

    # -- the I/O thread ----------------------------------------------------------------

    def _run(self) -> None:
        sel = self._sel
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        sel.register(self.sock, selectors.EVENT_READ, self.sock)
        self._start_workers(time.monotonic())
        try:
            while not self._closing:
                try:
                    self._turn()
                except Exception as exc:  # a bug: keep accepting rather than die silently
                    if not self._faulted:
                        self._faulted = True
                        vlog.event(
                            vlog.get(), logging.ERROR, "endpoint I/O error", error=repr(exc)
                        )  # fmt: skip
                    time.sleep(ACCEPT_BACKOFF_MIN)
        finally:
            for c in list(self._conns.values()):
                self._drop(c)
            sel.close()

    def _turn(self) -> None:
        """One wait of the I/O thread and what follows."""
        sel = self._sel
        now = time.monotonic()
        listening = self.sock.fileno() in sel.get_map()
        if not listening and now >= self._accept_paused_until:
            sel.register(self.sock, selectors.EVENT_READ, self.sock)
            listening = True
        if self._worker_retry_at and now >= self._worker_retry_at:
            self._start_workers(now)
        # The connections' bytes first, new connections last: a request that has arrived is
        # read before accepting (and the room it makes) could close its connection.
        ready = sorted(
            sel.select(self._timeout(now, listening)), key=lambda e: e[0].data is self.sock
        )
        for key, _ in ready:
            if key.data is None:
                os.read(self._wake_r, 4096)
            elif key.data is self.sock:
                if not self._accept():
                    sel.unregister(self.sock)
                    listening = False
            else:
                self._guarded(self._readable, key.data)
            if self._closing:
                return
        self._take_back()
        self._expire(time.monotonic())

    def _timeout(self, now: float, listening: bool) -> float | None:
        """Until the next deadline; None (no wake-up at all) when nothing is pending."""
        due = [c.deadline for c in self._conns.values()]
        if not listening:
            due.append(self._accept_paused_until)
        if self._worker_retry_at:
            due.append(self._worker_retry_at)
        return max(0.0, min(due) - now) if due else None

    def _accept(self) -> bool:
        """Accept what is waiting; False: out of descriptors or memory, pause accepting."""
        for _ in range(16):  # then the connections' bytes get a turn
            try:
                sock, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                break
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRNOS:
                    break  # the client gave up between select and accept
                self.count("accept-backoff")
                self._accept_paused_until = time.monotonic() + self._accept_backoff
                self._accept_backoff = min(ACCEPT_BACKOFF_MAX, self._accept_backoff * 2)
                self._evict_oldest()  # and free a descriptor for the next try
                return False
            self._accept_backoff = ACCEPT_BACKOFF_MIN
            if len(self._conns) + self._busy >= self.limits.max_connections:
                self._evict_oldest()
            self._admit(sock, peer)
        return True

    def _admit(self, sock: socket.socket, peer: Any) -> None:
        sock.setblocking(False)
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError:
                sock.close()
                return
        c = _Conn(sock, peer, time.monotonic(), self.limits)
        self._conns[sock.fileno()] = c
        self._sel.register(sock, selectors.EVENT_READ, c)

    def _evict_oldest(self) -> None:
        """Make room: a refused connection still lingering, else the oldest one that has not
        sent a whole request yet, else the oldest kept alive (a scraper's, which reconnects
        if it ever gets here)."""
        if not self._conns:
            return
        order = sorted(self._conns.values(), key=lambda c: (not c.lingering, c.idle, c.accepted))
        victim = order[0]
        if not victim.lingering:
            # Spare one whose request has arrived but is not read yet (a probe, likely): the
            # first of the oldest few with nothing waiting goes.
            for c in order[:8]:
                try:
                    waiting = bool(c.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
                except (BlockingIOError, InterruptedError):
                    waiting = False
                except OSError:
                    waiting = False  # broken: as good a victim as any
                if not waiting:
                    victim = c
                    break
            self.count("evicted")
        self._drop(victim)

    def _drop(self, c: _Conn) -> None:
        fd = c.sock.fileno()
        if self._conns.pop(fd, None) is not None:
            self._sel.unregister(fd)
        c.sock.close()

    def _expire(self, now: float) -> None:
        for c in [c for c in self._conns.values() if c.deadline <= now]:
            if not c.lingering and not c.idle:
                self.count("head-timeout")
            self._drop(c)

    def _guarded(self, step: Callable[[_Conn], None], c: _Conn) -> None:
        """One connection's step; what goes wrong with it ends that connection, never the
        I/O thread (which alone accepts)."""
        try:
            step(c)
        except Exception as exc:
            self.count("bad-request")
            self._drop(c)
            if not self._faulted:
                self._faulted = True  # said once: a bug worth reporting, not a flood of lines
                vlog.event(
                    vlog.get(), logging.ERROR, "endpoint dropped a connection on an error",
                    error=repr(exc),
                )  # fmt: skip

    def _readable(self, c: _Conn) -> None:
        now = time.monotonic()
        try:
            if not c.shaken:
                c.sock.do_handshake()  # type: ignore[attr-defined]
                c.shaken = True
            if c.lingering:
                n = c.sock.recv_into(self._scratch)  # discarded: into one fixed buffer
                c.lingering = max(0, c.lingering - n)
                if not n or not c.lingering:
                    self._drop(c)
                return
            data = c.sock.recv(65536)
            if data and self.tls is not None:
                while c.sock.pending():  # type: ignore[attr-defined]
                    data += c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as exc:
            if self.tls is not None:
                # Loaded with the context already. Without TLS ssl is not imported at all:
                # an import here, out of descriptors, would fail every connection (EMFILE).
                import ssl

                if isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError)):
                    return
                if isinstance(exc, ssl.SSLError):
                    self.count("tls")
            self._drop(c)
            return
        if c.h11.trailing_data[1]:
            self._drop(c)  # the client's end was seen already; nothing more can come
            return
        if data and c.h11.their_state is h11.IDLE and not c.h11.trailing_data[0]:
            # Empty lines before a request line are ignored (RFC 9112 section 2.2); h11
            # refuses them, so they never reach it.
            data = data.lstrip(b"\r\n")
            if not data:
                return
        if c.idle and data:
            c.idle = False
            c.deadline = now + self.limits.head_timeout
        c.h11.receive_data(data)
        self._advance(c)

    def _advance(self, c: _Conn) -> None:
        """Act on what h11 has parsed from ``c``'s bytes so far: requests answered here one
        after the other (pipelined), until one goes to a worker or more bytes are needed."""
        while self._step(c):
            pass

    def _step(self, c: _Conn) -> bool:
        """One request of ``c``; True: answered here, and the next may be waiting."""
        try:
            event = c.h11.next_event()
        except h11.RemoteProtocolError as exc:
            too_large = exc.error_status_hint == 431
            self.count("head-too-large" if too_large else "bad-request")
            why = "request head too long" if too_large else f"bad request: {exc}"
            self._refuse(c, exc.error_status_hint, why)
            return False
        if event is h11.NEED_DATA:
            return False
        if not isinstance(event, h11.Request):
            self._drop(c)  # ConnectionClosed, or the client's half of a finished exchange
            return False
        size = len(event.method) + len(event.target) + 12
        size += sum(len(n) + len(v) + 4 for n, v in event.headers)
        if size > self.limits.max_head:
            # h11 only limits a head still incomplete; this one arrived whole, at once.
            self.count("head-too-large")
            self._refuse(c, 431, "request head too long")
            return False
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        version = event.http_version
        if version not in (b"1.1", b"1.0"):
            self.count("bad-request")
            self._refuse(c, 505, "HTTP/1.1 only")
            return False
        if "transfer-encoding" in headers:
            self.count("body")
            self._refuse(c, 400, "no request bodies")
            return False
        if int(headers.get("content-length", "0")) > 0:  # h11 checked it is a number
            self.count("body")
            self._refuse(c, 413, "no request bodies")
            return False
        method = event.method.decode("ascii")
        if method not in ("GET", "HEAD"):
            self.count("bad-request")
            self._refuse(c, 501, "GET only")
            return False
        peer_cert = None
        if self.tls is not None:
            peer_cert = c.sock.getpeercert() or None  # type: ignore[attr-defined]
        c.h11.next_event()  # the request's (empty) end: EndOfMessage
        req = Request(method, event.target.decode("latin-1"), headers, peer_cert)
        quick = self.quick(req) if self.quick is not None else None
        if quick is not None:
            return self._answer_here(c, req, quick)
        if not self._free.acquire(blocking=False):
            self.count("busy")
            self._refuse(c, 503, "busy: try again")
            return False
        self._conns.pop(c.sock.fileno())
        self._sel.unregister(c.sock)
        self._busy += 1
        self._jobs.put((c, req))
        return False

    def _take_back(self) -> None:
        """Connections the workers finished with: wait for their next request."""
        while True:
            try:
                c = self._back.get_nowait()
            except queue.Empty:
                return
            self._busy -= 1
            if c is None:
                continue
            if self._closing:
                c.sock.close()
                continue
            c.idle = True
            c.deadline = time.monotonic() + self.limits.idle_timeout
            self._conns[c.sock.fileno()] = c
            self._sel.register(c.sock, selectors.EVENT_READ, c)
            rest, closed = c.h11.trailing_data
            if rest:  # a pipelined request is already here
                c.idle = False
                c.deadline = time.monotonic() + self.limits.head_timeout
                self._guarded(self._advance, c)
            elif closed:
                self._drop(c)  # the client has sent all it will
