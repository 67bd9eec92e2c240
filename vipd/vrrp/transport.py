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

Quiet following (IPv4): a Backup that follows a steady master need not wake for every one of
its adverts, which are byte for byte the same (RFC 9568 §6.4.2 only restarts the down timer on
them). ``follow`` gives the socket a classic BPF filter that keeps exactly that advert out, and
a second socket ("quiet") the inverse filter that takes only it. The quiet socket is not polled:
the driver reads it, with each datagram's kernel receive time (``SO_TIMESTAMPNS``), when its
down timer is due or something else arrives. Anything different from the followed advert (a
priority 0, another router, a TTL other than 255, a changed address list) still wakes the
loop at once. IPv6 raw sockets do not show the IPv6 header to a filter (the source and the hop
limit), so IPv6 is never followed quietly.

Source address: set per packet with ``IP_PKTINFO`` / ``IPV6_PKTINFO`` rather than ``bind()``,
because a raw IPv4 socket bound to an address only receives datagrams addressed to that
address, which would hide the multicast adverts. The VRRPv3 IPv4 checksum covers the source,
so it must be the one we computed it with, never the kernel's choice.
"""

from __future__ import annotations

import array
import errno
import select
import socket
import struct
import time
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
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35  # also the control message's type (SCM_TIMESTAMPNS)
_TIMESPEC = struct.Struct("@qq")
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
# A drain of the quiet socket stops after this many datagrams (a replayed flood of the
# followed advert), the rest wait for the next one.
QUIET_BURST = 4096
_TTL_VRRP = bytes((255, VRRP_PROTO))  # an IPv4 header's bytes 8 and 9 on a VRRP advert

# Classic BPF (linux/filter.h): the few instructions the follow filters use.
_LD_W, _LD_H, _LD_B = 0x20, 0x28, 0x30  # BPF_LD | size | BPF_ABS
_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JA = 0x05  # BPF_JMP | BPF_JA
_RET_K = 0x06  # BPF_RET | BPF_K
_INSN = struct.Struct("@HBBI")  # struct sock_filter
ACCEPT, REJECT = 0xFFFFFFFF, 0  # a filter's verdict: bytes to keep


@dataclass(frozen=True, slots=True)
class Datagram:
    """A received VRRP message with the IP-layer facts that the receive checks need."""

    src: IPAddress
    dst: IPAddress
    ttl: int
    message: bytes


def follow_filter(src: IPv4Address, dst: IPv4Address, message: bytes, *, keep: bool) -> bytes:
    """A classic BPF program over an IPv4 datagram (a raw socket's filter sees the IP header)
    that matches exactly ``message`` from ``src`` to ``dst``: a 20-byte header, unfragmented,
    TTL 255, protocol 112, and every byte of the VRRP message (its checksum among them). With
    ``keep`` the match is accepted and the rest dropped (the quiet socket), else the reverse.
    """
    checks: list[tuple[int, int, int | None, int]] = [  # (load, offset, mask, value)
        (_LD_B, 0, None, 0x45),
        (_LD_H, 6, 0x3FFF, 0),  # no MF flag, no fragment offset
        (_LD_H, 2, None, 20 + len(message)),
        (_LD_B, 8, None, 255),
        (_LD_B, 9, None, 112),
        (_LD_W, 12, None, int.from_bytes(src.packed, "big")),
        (_LD_W, 16, None, int.from_bytes(dst.packed, "big")),
    ]
    whole = len(message) - len(message) % 4
    for at in range(0, whole, 4):
        checks.append((_LD_W, 20 + at, None, int.from_bytes(message[at : at + 4], "big")))
    for at in range(whole, len(message)):
        checks.append((_LD_B, 20 + at, None, message[at]))
    insns: list[tuple[int, int, int, int]] = []
    jumps: list[int] = []  # the "ja mismatch" slots, patched below
    for load, offset, mask, value in checks:
        insns.append((load, 0, 0, offset))
        if mask is not None:
            insns.append((_AND_K, 0, 0, mask))
        # Equal: skip the jump to the mismatch (8-bit conditional offsets would not reach it
        # across a long address list; ja's offset is 32 bits).
        insns.append((_JEQ_K, 1, 0, value))
        jumps.append(len(insns))
        insns.append((_JA, 0, 0, 0))
    insns.append((_RET_K, 0, 0, ACCEPT if keep else REJECT))  # every check held
    mismatch = len(insns)
    insns.append((_RET_K, 0, 0, REJECT if keep else ACCEPT))
    for at in jumps:
        insns[at] = (_JA, 0, 0, mismatch - at - 1)
    return b"".join(_INSN.pack(*insn) for insn in insns)


def verdict_filter(verdict: int) -> bytes:
    """A program that returns ``verdict`` for every datagram (all kept, or none)."""
    return _INSN.pack(_RET_K, 0, 0, verdict)


def attach_filter(sock: socket.socket, program: bytes) -> None:
    """SO_ATTACH_FILTER: replaces the socket's filter atomically (the kernel copies it)."""
    # The program's address, for struct sock_fprog, from an array (ctypes would cost the
    # daemon 0.4 MiB of memory for this one pointer); ``buf`` lives until the kernel copied it.
    buf = array.array("B", program)
    fprog = struct.pack("@HL", len(program) // _INSN.size, buf.buffer_info()[0])
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


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
        # The quiet socket (IPv4, receiving sockets only), opened here: in the namespace and
        # with the privileges of the polled one. It takes nothing until ``follow``.
        self.quiet = self._open_quiet() if receive and not self.v6 else None
        self.can_follow = self.quiet is not None
        self.followed: Datagram | None = None
        # The followed datagram from its IP header's addresses on (bytes 12..20) to its end.
        self._copy_tail = b""

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

    def follow(self, dgram: Datagram | None) -> None:
        """Take ``dgram``'s exact copies off the polled socket onto the quiet one (None: every
        datagram back on the polled socket). The socket that gains a datagram's copies gets
        its filter first: in between both take them (the driver drops the later duplicate by
        its receive time), never neither."""
        if not self.can_follow:
            raise OSError(errno.EOPNOTSUPP, "quiet following is IPv4 only")
        if dgram is None:
            if self.followed is not None:
                attach_filter(self.sock, verdict_filter(ACCEPT))
                if self.quiet is not None:
                    attach_filter(self.quiet, verdict_filter(REJECT))
            self.followed = None
            return
        assert isinstance(dgram.src, IPv4Address) and isinstance(dgram.dst, IPv4Address)
        assert self.quiet is not None
        attach_filter(self.quiet, follow_filter(dgram.src, dgram.dst, dgram.message, keep=True))
        attach_filter(self.sock, follow_filter(dgram.src, dgram.dst, dgram.message, keep=False))
        self.followed = dgram
        self._copy_tail = dgram.src.packed + dgram.dst.packed + dgram.message

    def _open_quiet(self) -> socket.socket | None:
        sock = self._open()
        try:
            attach_filter(sock, verdict_filter(REJECT))
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            # What queued before the filter went on is not the followed advert.
            while True:
                try:
                    sock.recv(MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    break
        except BaseException:
            sock.close()
            raise
        return sock

    def receive_quiet(self) -> list[tuple[float, Datagram]]:
        """The followed advert's copies received since the last call, oldest first: (age in
        seconds, now minus the kernel's receive time and never negative; the datagram)."""
        quiet = self.quiet
        if quiet is None:
            return []
        out: list[tuple[float | None, Datagram]] = []
        followed = self.followed
        # A copy is known by the bytes its filter checked: the header's version and length,
        # its TTL and protocol, then from the addresses on (12..20) the whole message.
        tail = self._copy_tail
        for _ in range(QUIET_BURST):
            try:
                data, ancdata, _flags, _addr = quiet.recvmsg(MAX_DATAGRAM, _STAMP_SPACE)
            except (BlockingIOError, InterruptedError):
                break
            stamp: float | None = None
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    stamp = sec + nsec / 1e9
            if (
                followed is not None
                and data[0] == 0x45
                and data[8:10] == _TTL_VRRP
                and data[12:] == tail
            ):
                # A copy of the followed datagram (the filter let nothing else through while
                # it was followed): that datagram itself, without parsing it again.
                out.append((stamp, followed))
                continue
            try:
                src, dst, ttl, payload = parse_ipv4(data)
            except DecodeError:
                continue  # the filter took only well-formed copies of one datagram
            out.append((stamp, Datagram(src, dst, ttl, payload)))
        if not out:
            return []
        wall = time.time()
        return [(0.0 if at is None else max(0.0, wall - at), d) for at, d in out]

    def wait_readable(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a datagram (on either socket); True if one is
        waiting."""
        fds = [self.sock.fileno()]
        if self.quiet is not None:
            fds.append(self.quiet.fileno())
        readable, _, _ = select.select(fds, [], [], timeout)
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
        if self.quiet is not None:
            self.quiet.close()
