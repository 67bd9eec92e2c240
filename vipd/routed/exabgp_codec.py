"""ExaBGP's configuration file, API commands and API messages, and the supervisor's
decisions: pure functions for `vipd.routed.exabgp`.

What it is
    - `render_config`: the file ExaBGP 5.0 reads (one ``neighbor`` block per peer, the API
      ``process`` that relays to vipd, ``neighbor-changes`` so session states are reported,
      JSON encoding). A password goes in base64 (``md5-base64 true``), so no byte of it can
      end the quoted string; the file lives in a private directory (mode 0700, file 0600).
    - Commands, one line each (ExaBGP's text API, ``doc/`` of
      https://github.com/Exa-Networks/exabgp and ``src/exabgp/reactor/api/command/``):
      ``neighbor P announce route PREFIX next-hop self``, ``… withdraw route PREFIX``,
      ``neighbor P teardown 2`` (Cease, Administrative Shutdown, RFC 4486 §4) and ``# ping``
      (a comment: ExaBGP answers ``done``; the liveness probe).
    - `parse`: one line from ExaBGP: ``done`` / ``error`` (the answer to each command, in
      order), or a JSON object; of those only ``"type": "state"`` (a peer's session
      ``connected``, ``up`` or ``down``) and the ``shutdown`` notification matter, the rest
      is `Ignored`. A line that is neither raises `BadLine` (the driver counts and drops it).
    - The supervisor's decisions: `restart_delay` (exponential backoff, reset after a child
      that lived long enough) and `stuck` (the oldest unanswered command is too old).

What it must not do: I/O, clocks (time comes in as ``now``), or hold state.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

from vipd.routed.speaker import SpeakerConfig

__all__ = [
    "PING",
    "Ack",
    "BadLine",
    "Ignored",
    "SessionEvent",
    "Shutdown",
    "announce",
    "parse",
    "render_config",
    "restart_delay",
    "stuck",
    "teardown",
    "withdraw",
]

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

PING = "# ping"
MAX_LINE = 65536  # a state message is a few hundred bytes; anything this long is not one


class BadLine(ValueError):
    """A line from ExaBGP that is not an answer or a JSON message."""


@dataclass(frozen=True, slots=True)
class Ack:
    ok: bool  # "done" (True) or "error" (False)


@dataclass(frozen=True, slots=True)
class SessionEvent:
    peer: IPAddress
    state: str  # "connected", "up", "down"
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


@dataclass(frozen=True, slots=True)
class Ignored:
    kind: str


Event = Ack | SessionEvent | Shutdown | Ignored


def render_config(cfg: SpeakerConfig, relay: Sequence[str]) -> str:
    """The configuration file; ``relay`` is the API process's argv (absolute program)."""
    for word in relay:
        if not word or any(ch in word for ch in " \t\n;{}'\""):
            raise ValueError(f"relay argument {word!r} cannot be written in ExaBGP's config")
    lines = [
        "process vipd {",
        f"    run {' '.join(relay)};",
        "    encoder json;",
        "}",
    ]
    for p in cfg.peers:
        family = "ipv4 unicast" if p.address.version == 4 else "ipv6 unicast"
        lines += [
            f"neighbor {p.address} {{",
            f"    router-id {cfg.router_id};",
            f"    local-as {cfg.local_asn};",
            f"    peer-as {p.asn};",
            f"    hold-time {cfg.hold_time};",
            "    passive false;",
            f"    connect {p.port};",
            "    group-updates false;",
        ]
        if p.password is not None:
            lines += [
                f'    md5-password "{base64.b64encode(p.password).decode()}";',
                "    md5-base64 true;",
            ]
        lines += [
            f"    family {{ {family}; }}",
            "    api { processes [ vipd ]; neighbor-changes; }",
            "}",
        ]
    return "\n".join(lines) + "\n"


def announce(peer: IPAddress, prefix: IPNetwork) -> str:
    return f"neighbor {peer} announce route {prefix} next-hop self"


def withdraw(peer: IPAddress, prefix: IPNetwork) -> str:
    return f"neighbor {peer} withdraw route {prefix}"


def teardown(peer: IPAddress) -> str:
    """Close the session with a Cease, subcode 2 Administrative Shutdown (RFC 4486 §4)."""
    return f"neighbor {peer} teardown 2"


def parse(line: str) -> Event:
    """One line from ExaBGP's API (without its newline)."""
    text = line.strip()
    if text == "done":
        return Ack(True)
    if text == "error":
        return Ack(False)
    if len(text) > MAX_LINE or not text.startswith("{"):
        raise BadLine(f"not an answer or a JSON message: {text[:80]!r}")
    try:
        msg = json.loads(text)
    except ValueError:
        raise BadLine(f"not valid JSON: {text[:80]!r}") from None
    if not isinstance(msg, dict):
        raise BadLine(f"not a JSON object: {text[:80]!r}")
    kind = msg.get("type")
    if kind == "notification" and msg.get("notification") == "shutdown":
        return Shutdown()
    if kind != "state":
        return Ignored(str(kind))
    neighbor = msg.get("neighbor")
    if not isinstance(neighbor, dict):
        raise BadLine("a state message without a neighbor")
    addr = neighbor.get("address")
    state = neighbor.get("state")
    if not isinstance(addr, dict) or not isinstance(state, str):
        raise BadLine("a state message without a peer address or state")
    try:
        peer = ip_address(str(addr.get("peer")))
    except ValueError:
        raise BadLine(f"a state message with a bad peer address: {addr.get('peer')!r}") from None
    if state not in ("connected", "up", "down"):
        raise BadLine(f"an unknown session state {state!r}")
    return SessionEvent(peer, state, str(neighbor.get("reason", "")))


def restart_delay(
    failures: int, lived: float, *, base: float = 0.5, cap: float = 30.0, stable: float = 60.0
) -> tuple[float, int]:
    """The wait before the next start and the new failure count, after a child that lived
    ``lived`` seconds and ``failures`` short-lived predecessors in a row: a child that lived
    ``stable`` seconds resets the count (a crash once a day restarts at once, a crash loop
    backs off to ``cap``)."""
    if lived >= stable:
        failures = 0
    return min(cap, base * (2**failures)), failures + 1


def stuck(now: float, oldest_pending: float | None, limit: float) -> bool:
    """The child has left a command unanswered for ``limit`` seconds (it is kill and restart
    then): ExaBGP answers each command once its reactor has handled it."""
    return oldest_pending is not None and now - oldest_pending >= limit
