"""How the endpoint's answers leave a connection: from the I/O thread at once, or from a worker.

What it is: one connection's state (`_Conn`: its socket, its h11 parser, its deadline) and
the answering half of ``vipd.endpoint.serving.Server``, as the mixin `Answering`: an answer
that never blocks (a probe) or a refusal, written by the I/O thread all at once into the
socket buffer, a refusal then closed after a lingering close (RFC 9112 section 9.6); the
workers, which answer a complete request with the handler's answer within
``write_timeout``; and the fresh parser for a kept-alive connection's next request.

What it must not do: parse HTTP itself (h11 does), accept or select (the I/O thread in
``serving`` does), or block the I/O thread on a client.
"""

from __future__ import annotations

import http
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h11

from vipd.endpoint.wire import Answer, Count, Handler, Limits, Request, response

if TYPE_CHECKING:
    import ssl

# A refused connection lingers this long (and discards at most this much) before it is closed.
LINGER = 1.0
LINGER_BYTES = 1 << 20


class _Conn:
    __slots__ = ("accepted", "deadline", "h11", "idle", "lingering", "peer", "shaken", "sock")

    def __init__(self, sock: socket.socket, peer: Any, now: float, limits: Limits) -> None:
        self.sock = sock
        self.peer = peer
        self.accepted = now
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head)
        self.idle = False  # True: kept alive, no byte of the next request yet
        self.deadline = now + limits.head_timeout  # the TLS handshake counts too
        self.shaken = not hasattr(sock, "do_handshake")  # TLS handshake done (or plain)
        self.lingering = 0  # > 0: refused, discarding; the bytes still allowed


class Answering:
    """The answering half of ``serving.Server`` (see the module docstring): the server
    provides what is declared here."""

    handler: Handler
    limits: Limits
    count: Count
    tls: ssl.SSLContext | None
    _free: threading.Semaphore
    _jobs: queue.SimpleQueue[tuple[_Conn, Request] | None]
    _back: queue.SimpleQueue[_Conn | None]
    _drop: Callable[[_Conn], None]
    _wake: Callable[[], None]

    def _answer_here(self, c: _Conn, req: Request, answer: Answer) -> bool:
        """Send ``answer`` from the I/O thread: all at once or not at all (a few hundred
        bytes into a socket buffer that holds kilobytes). True: the connection waits for its
        next request."""
        out = response(c.h11, answer, head=req.method == "HEAD", close=False)
        try:
            sent = c.sock.send(out)
        except OSError:  # ssl's errors included (SSLWantWriteError: not at once, so not here)
            sent = -1
        if sent != len(out) or not self._next_cycle(c):
            self._drop(c)
            return False
        c.idle = not c.h11.trailing_data[0]
        now = time.monotonic()
        c.deadline = now + (self.limits.idle_timeout if c.idle else self.limits.head_timeout)
        return not c.idle

    def _refuse(self, c: _Conn, code: int, why: str) -> None:
        """Answer from the I/O thread without blocking, then close after a lingering close."""
        data = f"{why}\n".encode()
        answer = Answer(code, data, "text/plain; charset=utf-8")
        try:
            out = response(c.h11, answer, head=False, close=True)
        except h11.LocalProtocolError:
            # h11 no longer writes on this connection (it gave up on it): write it plainly.
            out = (
                f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}\r\nServer: vipd\r\n"
                f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode() + data
        try:
            c.sock.send(out)  # a fresh socket buffer takes a few hundred bytes
            if self.tls is None:
                c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(c)
            return
        c.lingering = LINGER_BYTES
        c.deadline = time.monotonic() + LINGER

    # -- the workers -------------------------------------------------------------------

    def _work(self) -> None:
        self._free.release()
        while (job := self._jobs.get()) is not None:
            c, req = job
            keep = False
            try:
                keep = self._serve(c, req)
            except Exception:
                pass  # a client that hung up or stalled mid-answer: its own business
            finally:
                if not keep:
                    c.sock.close()
                self._back.put(c if keep else None)
                self._free.release()
                self._wake()

    def _serve(self, c: _Conn, req: Request) -> bool:
        """Answer ``req`` on ``c``; True: keep the connection for the next request."""
        try:
            answer = self.handler(req)
        except Exception:
            answer = Answer(500, b"internal error\n", "text/plain; charset=utf-8")
        # h11 adds "Connection: close" itself when the client asked for it (or is HTTP/1.0).
        out = response(c.h11, answer, head=req.method == "HEAD", close=False)
        deadline = time.monotonic() + self.limits.write_timeout
        view = memoryview(out)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            c.sock.settimeout(left)
            sent = c.sock.send(view)
            view = view[sent:]
        c.sock.setblocking(False)
        return self._next_cycle(c)

    def _next_cycle(self, c: _Conn) -> bool:
        """After an answer: a fresh parser for the connection's next request; False when the
        connection must close (the client asked, or HTTP/1.0)."""
        if c.h11.our_state is not h11.DONE or c.h11.their_state is not h11.DONE:
            return False
        # A fresh parser for the next request rather than h11's start_next_cycle: it is fed
        # what the client already sent without the empty lines h11 would refuse.
        rest, closed = c.h11.trailing_data
        c.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head)
        rest = rest.lstrip(b"\r\n")
        if rest:
            c.h11.receive_data(rest)
        if closed:
            c.h11.receive_data(b"")  # (empty data is h11's word for the client's end)
        return True
