"""Raw IP protocol 112 sockets for VRRP adverts on one interface.

What it is: the driver that puts encoded adverts on the wire and hands received datagrams,
with the facts the checks need (source, destination, TTL/hop limit), to the caller. RFC 9568
§5.1 (IPv4 and IPv6 header fields: TTL/hop limit 255, destination 224.0.0.18 / ff02::12,
protocol/next header 112) and §7.1 (receivers drop adverts whose TTL/hop limit is not 255).

What it must not do: decode, judge or act on adverts (that is ``vrrp.packet`` and
``vrrp.state``), or block: sockets are non-blocking and the caller polls them from its event
loop (``wait_readable`` blocks only as long as the caller asks: the last ~2 ms before a
takeover). One socket serves both directions; it is bound to the interface and, in multicast mode,
joined to the group on that interface only (``IP_MULTICAST_ALL`` off), so adverts of other
interfaces never reach it.

Source address: set per packet with ``IP_PKTINFO`` / ``IPV6_PKTINFO`` rather than ``bind()``,
because a raw IPv4 socket bound to an address only receives datagrams addressed to that
address, which would hide the multicast adverts. The VRRPv3 IPv4 checksum covers the source,
so it must be the one we computed it with, never the kernel's choice.
"""

from __future__ import annotations

import errno
import select
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

from vipd.vrrp.packet import GROUP_V4, GROUP_V6, VRRP_PROTO, DecodeError, parse_ipv4

IPAddress = IPv4Address | IPv6Address

# Linux values the socket module does not export.
SO_BINDTODEVICE = 25
IP_PKTINFO = 8
IP_MULTICAST_ALL = 49
IPV6_MULTICAST_ALL = 29
IPTOS_PREC_INTERNETCONTROL = 0xC0
MAX_DATAGRAM = 2048
# A VRRP message (incl. the v2 auth trailer) is at most 8 + 255*16 + 8 bytes.
RECV_BURST = 256
# A flood of garbage must not push the real adverts out of the queue before we drain it:
# 4 MiB holds a few thousand small datagrams (each costs ~1 KiB of skb overhead).
RECV_BUFFER = 4 << 20
SO_RCVBUFFORCE = 33


@dataclass(frozen=True, slots=True)
class Datagram:
    """A received VRRP message with the IP-layer facts that the receive checks need."""

    src: IPAddress
    dst: IPAddress
    ttl: int
    message: bytes


class Transport:
    """A VRRP socket on one interface, for one address family.

    ``destinations`` is the group address in multicast mode or the unicast peers.
    """

    def __init__(
        self,
        *,
        ifname: str,
        ifindex: int,
        source: IPAddress,
        unicast_peers: Iterable[IPAddress] = (),
        receive: bool = True,
    ) -> None:
        # receive=False: a send-only socket (the virtual MAC's macvlan sends the leader's
        # adverts; they are received on the parent), so it joins no group.
        self.receive_enabled = receive
        self.ifname = ifname
        self.ifindex = ifindex
        self.source = source
        self.v6 = isinstance(source, IPv6Address)
        peers = tuple(unicast_peers)
        self.unicast = bool(peers)
        group: IPAddress = GROUP_V6 if self.v6 else GROUP_V4
        self.destinations: tuple[IPAddress, ...] = peers or (group,)
        self.sock = self._open()
        self._pktinfo = self._source_cmsg()
        self._addrs: dict[int, tuple[IPAddress, tuple[str, int] | tuple[str, int, int, int]]] = {}

    def _open(self) -> socket.socket:
        family = socket.AF_INET6 if self.v6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_RAW, VRRP_PROTO)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, self.ifname.encode())
            try:
                # CAP_NET_ADMIN lifts net.core.rmem_max; without it the kernel caps the size.
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECV_BUFFER)
            except PermissionError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
            if self.v6:
                self._setup_v6(sock)
            else:
                self._setup_v4(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def _setup_v4(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, IPTOS_PREC_INTERNETCONTROL)
        # RFC 9568 §5.1.1.3: TTL 255 whether the advert is multicast or unicast.
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        mreqn = GROUP_V4.packed + b"\x00\x00\x00\x00" + struct.pack("@i", self.ifindex)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn)
        if not self.unicast and self.receive_enabled:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)

    def _setup_v6(self, sock: socket.socket) -> None:
        # The kernel computes the checksum on send and drops bad ones on receive.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_CHECKSUM, 6)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, IPTOS_PREC_INTERNETCONTROL)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, self.ifindex)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
        if not self.unicast and self.receive_enabled:
            mreq = GROUP_V6.packed + struct.pack("@I", self.ifindex)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)

    def _source_cmsg(self) -> list[tuple[int, int, bytes]]:
        if self.v6:
            info = self.source.packed + struct.pack("@I", self.ifindex)
            return [(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, info)]
        # struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }
        info = struct.pack("@i", self.ifindex) + self.source.packed + b"\x00\x00\x00\x00"
        return [(socket.IPPROTO_IP, IP_PKTINFO, info)]

    def wait_readable(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a datagram; True if one is waiting."""
        readable, _, _ = select.select([self.sock.fileno()], [], [], timeout)
        return bool(readable)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: bytes, dst: IPAddress) -> None:
        """Send one encoded VRRP message to ``dst``; raises OSError on failure."""
        # MSG_DONTROUTE for the link-local group, as keepalived does; unicast may be routed.
        flags = 0 if self.unicast else socket.MSG_DONTROUTE
        # A handful of destinations, each formatted once, looked up by identity: the caller
        # sends the same address objects every tick, and an address's own hash is Python code.
        # The entry keeps ``dst`` alive, so its id cannot be reused by another object.
        known = self._addrs.get(id(dst))
        if known is None or known[0] is not dst:
            known = (dst, (str(dst), 0, 0, self.ifindex) if self.v6 else (str(dst), 0))
            self._addrs[id(dst)] = known
        addr = known[1]
        self.sock.sendmsg([message], self._pktinfo, flags, addr)

    def receive(self) -> Iterator[Datagram | DecodeError]:
        """Drain up to ``RECV_BURST`` datagrams; malformed IP framing is yielded as an error."""
        for _ in range(RECV_BURST):
            try:
                if self.v6:
                    data, ancdata, _flags, addr = self.sock.recvmsg(MAX_DATAGRAM, 256)
                else:
                    data, addr = self.sock.recvfrom(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return
                raise
            if self.v6:
                yield self._v6_datagram(data, ancdata, addr)
            else:
                try:
                    src, dst, ttl, payload = parse_ipv4(data)
                except DecodeError as err:
                    yield err
                    continue
                yield Datagram(src, dst, ttl, payload)

    def _v6_datagram(
        self, data: bytes, ancdata: list[tuple[int, int, bytes]], addr: tuple[object, ...]
    ) -> Datagram | DecodeError:
        hoplimit = -1
        dst: IPAddress | None = None
        for level, kind, value in ancdata:
            if level != socket.IPPROTO_IPV6:
                continue
            if kind == socket.IPV6_HOPLIMIT and len(value) >= 4:
                hoplimit = struct.unpack("@i", value[:4])[0]
            elif kind == socket.IPV6_PKTINFO and len(value) >= 16:
                dst = IPv6Address(value[:16])
        if dst is None or hoplimit < 0:
            return DecodeError("truncated", "IPv6 datagram without pktinfo/hoplimit")
        host = str(addr[0]).split("%", 1)[0]
        src = ip_address(host)
        return Datagram(src, dst, hoplimit, data)

    def close(self) -> None:
        self.sock.close()
