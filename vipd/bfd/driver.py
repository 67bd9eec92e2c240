"""The BFD shell: UDP sockets, the event loop's clock and timers around the pure sessions.

What it is: :class:`BfdSessions`, a set of single-hop BFD sessions (RFC 5881) in asynchronous
mode, one per peer address, run on the asyncio loop of vipd's own process, so that BFD lives
and dies with whatever vipd announces: a vipd that is killed stops answering, and the peer
declares the session Down within its detection time. The client (the BGP speaker) is told of
every change between Up and not-Up through ``on_state(peer, up, diag)``.

The transport, RFC 5881:

- §4: Control packets go to UDP port 3784; each session sends from a source port of its own
  in 49152-65535, the same for the life of the session.
- §5: sent with TTL / Hop Limit 255 (IP_TTL, IPV6_UNICAST_HOPS) and, since vipd has no
  authentication, a received packet whose TTL / Hop Limit is not 255 is dropped (read from
  IP_RECVTTL / IPV6_RECVHOPLIMIT ancillary data), so BFD cannot be spoofed from off-link.
- §3 and RFC 5880 §6.8.6: a packet is demultiplexed by its Your Discriminator, or, when that
  is zero, by its source address; one that names a session but comes from another address
  is dropped too.

Every dropped packet is counted in :attr:`BfdSessions.dropped` under a stable reason (the
codec's :class:`vipd.bfd.packet.BadPacket` reasons, plus ``ttl``, ``unknown_session``,
``wrong_source``, ``receive_error``: :data:`DROP_REASONS`); a packet the kernel would not
send in :attr:`BfdSessions.send_errors`.

What it must not do: decide anything about BFD (that is :mod:`vipd.bfd.session`'s), or
anything about routes (the client's, through ``on_state``). One :class:`BfdSessions` owns
port 3784 of its network namespace: another BFD daemon on the same host cannot run beside it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import secrets
import socket
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from vipd.bfd.packet import BAD_PACKET_REASONS, BadPacket, Diag, State, decode, encode
from vipd.bfd.session import Action, Send, Session, StateChange, Timers

__all__ = [
    "CONTROL_PORT",
    "DROP_REASONS",
    "BfdSessions",
    "OnChange",
    "OnState",
    "PeerStatus",
]

log = logging.getLogger(__name__)

CONTROL_PORT = 3784  # RFC 5881 §4
SOURCE_PORTS = (49152, 65535)  # RFC 5881 §4
TTL = 255  # RFC 5881 §5
IP_RECVTTL = 12  # <linux/in.h>; Python's socket module only names it from 3.12 on
TOS_CS6 = 0xC0  # network control, as routing protocols mark theirs
_INT = struct.Struct("@i")

DROP_REASONS = (*BAD_PACKET_REASONS, "ttl", "unknown_session", "wrong_source", "receive_error")

OnState = Callable[[str, bool, int], None]
"""``on_state(peer, up, diag)``: the session with ``peer`` came Up (``up`` True, ``diag`` 0)
or left Up. ``diag`` says why it left: a :class:`vipd.bfd.packet.Diag` value; the peer
having signalled AdminDown is ``Diag.ADMINISTRATIVELY_DOWN`` (RFC 5882 §3.2: that is not a
path failure, and a client may keep its session), a silent peer
``Diag.CONTROL_DETECTION_TIME_EXPIRED``, a peer that said Down
``Diag.NEIGHBOR_SIGNALED_SESSION_DOWN``."""

OnChange = Callable[[str, StateChange], None]
"""``on_change(peer, change)``: every state change (Down → Init included), for metrics and logs."""

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """What ``/status`` or a test may want to know about one session."""

    peer: str
    state: State
    local_diag: int
    remote_state: State
    remote_diag: int
    local_discr: int
    remote_discr: int
    source_port: int


class _Peer:
    def __init__(
        self, addr: Address, scope: int, session: Session, sock: socket.socket, port: int
    ) -> None:
        self.addr = addr
        self.session = session
        self.sock = sock
        self.timer: asyncio.TimerHandle | None = None
        self.dest: tuple[str, int] | tuple[str, int, int, int] = (
            (str(addr), port) if addr.version == 4 else (str(addr), port, 0, scope)
        )


def _address(text: str) -> Address:
    """An address without its ``%zone`` (a session is keyed by the address alone)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def _link_local(addr: Address) -> bool:
    return addr.version == 6 and addr.is_link_local


def client_diag(change: StateChange) -> int:
    """The ``diag`` handed to ``on_state`` for a change (see :data:`OnState`)."""
    if change.new is State.UP:
        return Diag.NONE
    if change.remote_state is State.ADMIN_DOWN and change.new is State.DOWN:
        return Diag.ADMINISTRATIVELY_DOWN
    return change.diag


class BfdSessions:
    """Single-hop BFD sessions on the running loop; the seam for a routing client.

    ``add_peer`` opens a session (and, for the first peer of an address family, the receive
    socket on port 3784), ``remove_peer`` tells the peer AdminDown once and forgets the
    session, ``close`` does that for all. Timers are milliseconds, as in FRR's and the
    config's terms."""

    def __init__(
        self,
        on_state: OnState,
        *,
        on_change: OnChange | None = None,
        port: int = CONTROL_PORT,
        peer_port: int = CONTROL_PORT,
    ) -> None:
        # ``port``/``peer_port`` other than 3784 are for tests that run two ends on one host
        self._on_state = on_state
        self._on_change = on_change
        self._port = port
        self._peer_port = peer_port
        self._loop = asyncio.get_running_loop()
        self._peers: dict[Address, _Peer] = {}
        self._by_discr: dict[int, _Peer] = {}
        self._rx: dict[int, socket.socket] = {}
        self._random = random.SystemRandom()
        self.dropped: Counter[str] = Counter()
        self.send_errors = 0

    # -- the seam --------------------------------------------------------------------------

    def add_peer(
        self,
        addr: str,
        tx_ms: int = 100,
        rx_ms: int = 100,
        mult: int = 3,
        *,
        local: str | None = None,
        interface: str | None = None,
    ) -> None:
        """Start a session with ``addr`` (IPv4 or IPv6). ``local``: the source address the
        peer expects (the kernel's choice if None); ``interface``: the link to send on
        (SO_BINDTODEVICE; required for a link-local IPv6 peer, whose zone it is). Raises
        ValueError for a bad argument or a peer that already has a session, OSError if a
        socket cannot be had or the interface does not exist."""
        key = _address(addr)
        if key in self._peers:
            raise ValueError(f"BFD peer {key} already has a session")
        timers = Timers(tx_ms * 1000, rx_ms * 1000, mult)
        family = socket.AF_INET if key.version == 4 else socket.AF_INET6
        local_ip = None if local is None else _address(local)
        if local_ip is not None and local_ip.version != key.version:
            raise ValueError(f"local address {local} is not of the family of peer {key}")
        if interface is None and (_link_local(key) or (local_ip and _link_local(local_ip))):
            raise ValueError(f"BFD peer {key}: a link-local address needs its interface")
        scope = socket.if_nametoindex(interface) if interface is not None else 0
        self._open_rx(family)
        sock = self._open_tx(family, local_ip, interface, scope)
        discr = self._new_discr()
        session = Session(discr, timers, self._loop.time(), self._random.random)
        peer = _Peer(key, scope if _link_local(key) else 0, session, sock, self._peer_port)
        self._peers[key] = peer
        self._by_discr[discr] = peer
        self._arm(peer)

    def remove_peer(self, addr: str) -> None:
        """End the session with ``addr``: one AdminDown packet (RFC 5880 §6.8.16) so the peer
        knows at once rather than after its detection time, then nothing more. No
        ``on_state`` call: the client asked for it."""
        peer = self._peers.pop(_address(addr), None)
        if peer is None:
            return
        self._by_discr.pop(peer.session.local_discr, None)
        if peer.timer is not None:
            peer.timer.cancel()
        for action in peer.session.admin_down(self._loop.time()):
            if isinstance(action, Send):
                self._send(peer, action)
        peer.sock.close()

    def set_timers(self, addr: str, tx_ms: int, rx_ms: int, mult: int) -> None:
        """New intervals for a running session (a Poll Sequence while Up, RFC 5880 §6.5)."""
        peer = self._peers[_address(addr)]
        self._perform(
            peer,
            peer.session.set_timers(Timers(tx_ms * 1000, rx_ms * 1000, mult), self._loop.time()),
        )

    def status(self) -> list[PeerStatus]:
        return [
            PeerStatus(
                str(p.addr),
                p.session.state,
                p.session.local_diag,
                p.session.remote_state,
                p.session.remote_diag,
                p.session.local_discr,
                p.session.remote_discr,
                p.sock.getsockname()[1],
            )
            for p in self._peers.values()
        ]

    def close(self) -> None:
        for addr in list(self._peers):
            self.remove_peer(str(addr))
        for sock in self._rx.values():
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._rx.clear()

    # -- sockets ---------------------------------------------------------------------------

    def _open_rx(self, family: int) -> None:
        if family in self._rx:
            return
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
                sock.bind(("0.0.0.0", self._port))
            else:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
                sock.bind(("::", self._port))
            sock.setblocking(False)
        except OSError as err:
            sock.close()
            raise OSError(
                err.errno, f"cannot receive BFD on UDP port {self._port}: {err.strerror}"
            ) from err
        self._rx[family] = sock
        self._loop.add_reader(sock.fileno(), self._readable, sock)

    def _open_tx(
        self, family: int, local: Address | None, interface: str | None, scope: int
    ) -> socket.socket:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, TTL)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_CS6)
            else:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, TTL)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, TOS_CS6)
            if interface is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
            self._bind_source_port(sock, family, local, scope)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    def _bind_source_port(
        self, sock: socket.socket, family: int, local: Address | None, scope: int
    ) -> None:
        host = (
            str(local) if local is not None else ("0.0.0.0" if family == socket.AF_INET else "::")
        )
        zone = scope if local is not None and _link_local(local) else 0
        low, high = SOURCE_PORTS
        start = self._random.randint(low, high)
        span = high - low + 1
        for i in range(span):
            port = low + (start - low + i) % span
            try:
                sock.bind((host, port) if family == socket.AF_INET else (host, port, 0, zone))
            except OSError as err:
                if err.errno == 98:  # EADDRINUSE: the next port
                    continue
                raise
            return
        raise OSError(98, f"no free BFD source port in {low}-{high}")

    def _new_discr(self) -> int:
        while True:
            discr = secrets.randbits(32)
            if discr and discr not in self._by_discr:
                return discr

    # -- receive ---------------------------------------------------------------------------

    def _readable(self, sock: socket.socket) -> None:
        for _ in range(64):  # bounded per wake-up, so a flood cannot starve the loop
            try:
                data, ancdata, _flags, source = sock.recvmsg(512, socket.CMSG_SPACE(_INT.size))
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                log.warning("BFD receive failed: %s", err)
                self.dropped["receive_error"] += 1
                return
            self._datagram(data, ancdata, source[0])

    def _datagram(self, data: bytes, ancdata: list[tuple[int, int, bytes]], source: str) -> None:
        ttl = None
        for level, kind, value in ancdata:
            if (level, kind) in (
                (socket.IPPROTO_IP, socket.IP_TTL),
                (socket.IPPROTO_IPV6, socket.IPV6_HOPLIMIT),
            ):
                ttl = _INT.unpack_from(value)[0] if len(value) >= _INT.size else value[0]
        if ttl != TTL:
            self.dropped["ttl"] += 1
            return
        try:
            packet = decode(data)
        except BadPacket as err:
            self.dropped[err.reason] += 1
            return
        src = _address(source)
        if isinstance(src, ipaddress.IPv6Address) and src.ipv4_mapped is not None:
            src = src.ipv4_mapped
        if packet.your_discr:
            peer = self._by_discr.get(packet.your_discr)
            if peer is not None and peer.addr != src:
                self.dropped["wrong_source"] += 1
                return
        else:
            peer = self._peers.get(src)
        if peer is None:
            self.dropped["unknown_session"] += 1
            return
        try:
            actions = peer.session.receive(packet, self._loop.time())
        except BadPacket as err:
            self.dropped[err.reason] += 1
            return
        self._perform(peer, actions)

    # -- actions and timers ----------------------------------------------------------------

    def _perform(self, peer: _Peer, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                self._send(peer, action)
            else:
                self._changed(peer, action)
        self._arm(peer)

    def _changed(self, peer: _Peer, change: StateChange) -> None:
        name = str(peer.addr)
        log.info(
            "BFD session with %s: %s -> %s (diag %d, remote %s diag %d)",
            name,
            change.old.name,
            change.new.name,
            change.diag,
            change.remote_state.name,
            change.remote_diag,
        )
        if self._on_change is not None:
            self._on_change(name, change)
        if (change.old is State.UP) != (change.new is State.UP):
            self._on_state(name, change.new is State.UP, client_diag(change))

    def _send(self, peer: _Peer, send: Send) -> None:
        try:
            peer.sock.sendto(encode(send.packet), peer.dest)
        except OSError:
            # A full buffer or an unreachable peer: BFD's answer to loss is the detection
            # time, on both ends, not a retry here.
            self.send_errors += 1

    def _arm(self, peer: _Peer) -> None:
        if peer.timer is not None:
            peer.timer.cancel()
            peer.timer = None
        deadline = peer.session.deadline
        if deadline is not None and self._peers.get(peer.addr) is peer:
            peer.timer = self._loop.call_at(deadline, self._due, peer)

    def _due(self, peer: _Peer) -> None:
        peer.timer = None
        self._perform(peer, peer.session.on_timer(self._loop.time()))
