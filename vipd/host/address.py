"""The VIP as a /32 (/128) address on the leader's interface, through netlink.

What it is: an idempotent actuator: ``observe``, ``plan`` (pure) and ``add``/``remove``, which
the controller combines (it skips the observation on the takeover path). The VIP is added with
``preferred_lft 0`` (the kernel marks it IFA_F_DEPRECATED) so that the node never picks it as
the source address of its own connections: a node that loses the VIP must not have open
connections sourced from it, and the API server's clients must see the node's own address. IPv6
VIPs also get IFA_F_NODAD: duplicate address detection would keep a fresh holder silent for a
second, and VRRP already guarantees one holder (RFC 9568 §7.4 leaves DAD to the router).

How: the RTM_NEWADDR / RTM_DELADDR requests are encoded once, at start, with pyroute2's
``ifaddrmsg``, and written on a plain NETLINK_ROUTE socket whose acknowledgement is read at
once (the kernel handles the request inside ``send()``, so the ack is already queued). That
costs ~15 µs on the takeover path, where pyroute2's IPRoute costs ~0.5 ms (its asyncio flavour
cannot run on uvloop, and its synchronous flavour runs an event loop of its own per call).
Dumps (observe) are parsed with pyroute2's ``ifaddrmsg`` as well.

What it must not do: decide who holds the VIP (the controller does), or touch any address but
the VIP on the one interface it was given.
"""

from __future__ import annotations

import errno
import socket
from enum import Enum
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

from vipd.host import netlink

IPAddress = IPv4Address | IPv6Address

IFA_F_NODAD = 0x02
INFINITY_LIFE_TIME = 0xFFFFFFFF

_RECV_SIZE = 1 << 16


class NetlinkError(OSError):
    """A netlink request was refused; ``errno`` is the kernel's."""


class Op(Enum):
    ADD = "add"
    REMOVE = "remove"


def plan(present: bool, wanted: bool) -> Op | None:
    """What to do to get from ``present`` to ``wanted``; None when nothing is to be done."""
    if wanted and not present:
        return Op.ADD
    if present and not wanted:
        return Op.REMOVE
    return None


def _encode(msg_type: int, flags: int, seq: int, fields: dict[str, int], attrs: list[Any]) -> bytes:
    from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg

    msg = ifaddrmsg()
    for key, value in fields.items():
        msg[key] = value
    msg["attrs"] = attrs
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = flags
    msg["header"]["seq"] = seq
    msg.encode()
    return bytes(msg.data)


class AddressActuator:
    """Keeps the VIP on or off one interface, in the network namespace ``netns`` (None: ours)."""

    def __init__(self, ifindex: int, vip: IPAddress, netns: str | None = None) -> None:
        from pyroute2.netlink import (
            NLM_F_ACK,
            NLM_F_CREATE,
            NLM_F_DUMP,
            NLM_F_REPLACE,
            NLM_F_REQUEST,
        )
        from pyroute2.netlink.rtnl import RTM_DELADDR, RTM_GETADDR, RTM_NEWADDR

        self.ifindex = ifindex
        self.vip = vip
        self.netns = netns
        self.prefixlen = 32 if isinstance(vip, IPv4Address) else 128
        self.family = socket.AF_INET if isinstance(vip, IPv4Address) else socket.AF_INET6
        self.sock = self._open()
        base = {"family": self.family, "prefixlen": self.prefixlen, "index": ifindex}
        ident = [("IFA_LOCAL", str(vip)), ("IFA_ADDRESS", str(vip))]
        if isinstance(vip, IPv6Address):
            ident = [("IFA_ADDRESS", str(vip))]
        # ``replace`` makes a second add a no-op rather than EEXIST.
        self._add_msg = _encode(
            RTM_NEWADDR,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
            1,
            base,
            [
                *ident,
                (
                    "IFA_CACHEINFO",
                    {
                        "ifa_preferred": 0,
                        "ifa_valid": INFINITY_LIFE_TIME,
                        "cstamp": 0,
                        "tstamp": 0,
                    },
                ),
                ("IFA_FLAGS", IFA_F_NODAD if isinstance(vip, IPv6Address) else 0),
            ],
        )
        self._del_msg = _encode(RTM_DELADDR, NLM_F_REQUEST | NLM_F_ACK, 2, base, ident)
        self._dump_msg = _encode(
            RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 3, {"family": self.family}, []
        )

    def _open(self) -> socket.socket:
        if self.netns:
            from pyroute2 import netns as pr_netns

            sock: socket.socket = pr_netns.create_socket(
                self.netns, socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE
            )
        else:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.settimeout(2.0)
        sock.bind((0, 0))
        return sock

    def _request(self, message: bytes) -> int:
        """Send a request and return the kernel's errno (0 = done)."""
        self.sock.send(message)
        seq = netlink.HEADER.unpack_from(message)[3]
        while True:
            for msg_type, msg_seq, msg in netlink.messages(self.sock.recv(_RECV_SIZE)):
                if msg_type == netlink.NLMSG_ERROR and msg_seq == seq:
                    return netlink.error_code(msg)

    def observe(self) -> bool:
        """Is the VIP bound to the interface now?"""
        from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg

        self.sock.send(self._dump_msg)
        found = False
        while True:
            for msg_type, _seq, raw in netlink.messages(self.sock.recv(_RECV_SIZE)):
                if msg_type == netlink.NLMSG_DONE:
                    return found
                if msg_type == netlink.NLMSG_ERROR:
                    code = netlink.error_code(raw)
                    raise NetlinkError(code, f"address dump failed: {errno.errorcode.get(code)}")
                msg = ifaddrmsg(raw)
                msg.decode()
                if msg["index"] == self.ifindex and msg["prefixlen"] == self.prefixlen:
                    address = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
                    if address is not None and ip_address(address) == self.vip:
                        found = True

    def add(self) -> None:
        """Bind the VIP (idempotent)."""
        code = self._request(self._add_msg)
        if code:
            raise NetlinkError(code, f"adding {self.vip}: {errno.errorcode.get(code, code)}")

    def remove(self) -> bool:
        """Unbind the VIP; returns False when it was not there."""
        code = self._request(self._del_msg)
        if code in (errno.EADDRNOTAVAIL, errno.ENOENT, errno.ENODEV):
            return False
        if code:
            raise NetlinkError(code, f"removing {self.vip}: {errno.errorcode.get(code, code)}")
        return True

    def close(self) -> None:
        self.sock.close()
