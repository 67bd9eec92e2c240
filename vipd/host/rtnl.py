"""The few rtnetlink message bodies vipd uses: addresses (ifaddrmsg) and links (ifinfomsg).

What it is: encoders for the address requests (RTM_NEWADDR / RTM_DELADDR / RTM_GETADDR) and
the link dump (RTM_GETLINK), decoders for the replies, and ``dump`` to read a dump's replies
off a NETLINK_ROUTE socket it is given. Layouts from RFC 3549 §3.1.1 (link messages) and
§3.1.2 (address messages) and the kernel's ``linux/if_addr.h``, ``linux/if_link.h`` and
``linux/rtnetlink.h``. Written by hand because these are the only netlink messages a VRRP
node needs, and pyroute2's package import costs ~22 MB and ~0.2 s per process: it is loaded
only where a feature needs more (IPVS, the virtual MAC link, other network namespaces).

What it must not do: open sockets, or know anything about what the addresses mean (the
address actuator and the preflight checks decide that).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from vipd.host import netlink

# linux/netlink.h
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_REPLACE = 0x100
NLM_F_CREATE = 0x400
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
# linux/rtnetlink.h
RTM_GETLINK = 18
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
# linux/if_addr.h
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_CACHEINFO = 6
IFA_FLAGS = 8
# linux/if_link.h
IFLA_ADDRESS = 1
IFLA_IFNAME = 3

IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
CACHEINFO = struct.Struct("=IIII")  # ifa_prefered, ifa_valid, cstamp, tstamp
RTATTR = struct.Struct("=HH")  # length, type

Attr = tuple[int, bytes]


def _align(n: int) -> int:
    return (n + 3) & ~3


def attr(kind: int, payload: bytes) -> bytes:
    """One rtattr, padded to the 4-byte boundary the next one starts on."""
    length = RTATTR.size + len(payload)
    return RTATTR.pack(length, kind) + payload + b"\x00" * (_align(length) - length)


def u32(value: int) -> bytes:
    return struct.pack("=I", value)


def cacheinfo(preferred: int, valid: int) -> bytes:
    return CACHEINFO.pack(preferred, valid, 0, 0)


def message(msg_type: int, flags: int, seq: int, body: bytes) -> bytes:
    return netlink.HEADER.pack(netlink.HEADER.size + len(body), msg_type, flags, seq, 0) + body


def address_request(
    msg_type: int,
    flags: int,
    seq: int,
    *,
    family: int,
    prefixlen: int = 0,
    index: int = 0,
    attrs: Iterable[Attr] = (),
) -> bytes:
    """An address message (add, delete, or with NLM_F_DUMP a dump request for ``family``)."""
    body = IFADDRMSG.pack(family, prefixlen, 0, 0, index)
    return message(msg_type, flags, seq, body + b"".join(attr(k, v) for k, v in attrs))


def link_dump_request(seq: int) -> bytes:
    return message(
        RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    )


def attributes(data: bytes, offset: int) -> dict[int, bytes]:
    """The rtattrs from ``offset`` to the end of one message (a later duplicate wins)."""
    out: dict[int, bytes] = {}
    while offset + RTATTR.size <= len(data):
        length, kind = RTATTR.unpack_from(data, offset)
        if length < RTATTR.size or offset + length > len(data):
            break
        out[kind & 0x3FFF] = data[offset + RTATTR.size : offset + length]  # less NLA_F_* bits
        offset += _align(length)
    return out


@dataclass(frozen=True, slots=True)
class AddressRecord:
    family: int
    prefixlen: int
    flags: int  # all 32 bits (IFA_FLAGS) when the kernel sends them, else the header's 8
    index: int
    attrs: dict[int, bytes] = field(default_factory=dict)

    @property
    def address(self) -> bytes | None:
        """IPv4: IFA_LOCAL is the address itself (IFA_ADDRESS is the peer on point-to-point
        links); IPv6 has only IFA_ADDRESS."""
        return self.attrs.get(IFA_LOCAL) or self.attrs.get(IFA_ADDRESS)


@dataclass(frozen=True, slots=True)
class LinkRecord:
    index: int
    flags: int
    name: str
    mac: str  # "aa:bb:cc:dd:ee:ff", or "" for links without one


def parse_address(msg: bytes) -> AddressRecord | None:
    start = netlink.HEADER.size
    if len(msg) < start + IFADDRMSG.size:
        return None
    family, prefixlen, flags, _scope, index = IFADDRMSG.unpack_from(msg, start)
    attrs = attributes(msg, start + IFADDRMSG.size)
    wide = attrs.get(IFA_FLAGS)
    if wide is not None and len(wide) >= 4:
        flags = struct.unpack_from("=I", wide)[0]
    return AddressRecord(family, prefixlen, flags, index, attrs)


def parse_link(msg: bytes) -> LinkRecord | None:
    start = netlink.HEADER.size
    if len(msg) < start + IFINFOMSG.size:
        return None
    _family, _type, index, flags, _change = IFINFOMSG.unpack_from(msg, start)
    attrs = attributes(msg, start + IFINFOMSG.size)
    name = attrs.get(IFLA_IFNAME, b"").split(b"\x00", 1)[0].decode(errors="replace")
    hw = attrs.get(IFLA_ADDRESS, b"")
    return LinkRecord(index, flags, name, ":".join(f"{b:02x}" for b in hw))


class DumpError(OSError):
    """The kernel answered a dump with an error."""


def dump(sock: socket.socket, request: bytes, *, recv_size: int = 1 << 16) -> list[bytes]:
    """Send a dump request on ``sock`` and return the reply messages up to NLMSG_DONE."""
    sock.send(request)
    seq = netlink.HEADER.unpack_from(request)[3]
    out: list[bytes] = []
    while True:
        for msg_type, msg_seq, raw in netlink.messages(sock.recv(recv_size)):
            if msg_seq != seq:
                continue  # a notification or an older request's late reply
            if msg_type == netlink.NLMSG_DONE:
                return out
            if msg_type == netlink.NLMSG_ERROR:
                code = netlink.error_code(raw)
                raise DumpError(code, f"netlink dump failed: errno {code}")
            out.append(raw)
