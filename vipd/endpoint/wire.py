"""The endpoint's HTTP messages: what a request is, what an answer is, and the bytes of one.

What it is: the plain data the connection engine (``vipd.endpoint.serving``) and the endpoint's
answers (``vipd.endpoint.server``) share: its `Limits`, a parsed `Request`, an `Answer`, and
`response`, which frames an answer with h11 (RFC 9112 section 6: ``Content-Length``; the
``Date`` of RFC 9110 section 6.6.1 in IMF-fixdate, section 5.6.7).

What it must not do: touch a socket, a thread or a clock other than the ``Date`` it writes.
"""

from __future__ import annotations

import http
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import h11


@dataclass(frozen=True, slots=True)
class Limits:
    workers: int = 4
    max_connections: int = 64
    max_head: int = 16 * 1024
    head_timeout: float = 10.0
    idle_timeout: float = 60.0
    write_timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    headers: Mapping[str, str]  # lower-case names; repeated ones joined with ", "
    peer_cert: Mapping[str, Any] | None  # the verified TLS client certificate, if any


@dataclass(frozen=True, slots=True)
class Answer:
    code: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Answer]
# count(what): a refused connection or a recovered fault (see `Server`'s docstring).
Count = Callable[[str], None]

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(when: float) -> str:
    """IMF-fixdate (RFC 9110 section 5.6.7), in English whatever the locale."""
    t = time.gmtime(when)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def response(conn: h11.Connection, answer: Answer, *, head: bool, close: bool) -> bytes:
    headers = [
        ("Server", "vipd"),
        ("Date", http_date(time.time())),
        ("Content-Type", answer.content_type),
        ("Content-Length", str(len(answer.body))),
        ("Cache-Control", "no-store"),
        *answer.headers,
    ]
    if close:
        headers.append(("Connection", "close"))
    try:
        reason = http.HTTPStatus(answer.code).phrase
    except ValueError:
        reason = "Error"
    out = conn.send(h11.Response(status_code=answer.code, headers=headers, reason=reason)) or b""
    if not head:
        out += conn.send(h11.Data(data=answer.body)) or b""
    return out + (conn.send(h11.EndOfMessage()) or b"")
