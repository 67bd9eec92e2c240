"""The VIP as a /32 (/128) address on the leader's interface, through netlink.

What it is: an idempotent actuator: ``observe``, ``plan`` (pure) and ``add``/``remove``, which
the controller combines (it skips the observation on the takeover path). The VIP is added with
``preferred_lft 0`` (the kernel marks it IFA_F_DEPRECATED) so that the node never picks it as
the source address of its own connections: a node that loses the VIP must not have open
connections sourced from it, and the API server's clients must see the node's own address. IPv6
VIPs also get IFA_F_NODAD: duplicate address detection would keep a fresh holder silent for a
second, and VRRP already guarantees one holder (RFC 9568 §7.4 leaves DAD to the router).

How: the RTM_NEWADDR / RTM_DELADDR requests are encoded once, at start (``vipd.host.rtnl``),
and written on a plain NETLINK_ROUTE socket whose acknowledgement is read at once (the kernel
handles the request inside ``send()``, so the ack is already queued). That costs ~15 µs on the
takeover path, where pyroute2's IPRoute costs ~0.5 ms (its asyncio flavour cannot run on
uvloop, and its synchronous flavour runs an event loop of its own per call). Dumps (observe)
are parsed by ``vipd.host.rtnl`` as well; pyroute2 is loaded only to open a socket in another
network namespace (the lab and the tests).

What it must not do: decide who holds the VIP (the controller does), or touch any address but
the VIP on the one interface it was given.
"""

from __future__ import annotations

import errno
import socket
from enum import Enum
from ipaddress import IPv4Address, IPv6Address

from vipd.host import netlink, rtnl

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


class AddressActuator:
    """Keeps the VIP on or off one interface, in the network namespace ``netns`` (None: ours)."""

    def __init__(self, ifindex: int, vip: IPAddress, netns: str | None = None) -> None:
        self.ifindex = ifindex
        self.vip = vip
        self.netns = netns
        self.prefixlen = 32 if isinstance(vip, IPv4Address) else 128
        self.family = socket.AF_INET if isinstance(vip, IPv4Address) else socket.AF_INET6
        self.sock = self._open()
        base = {"family": self.family, "prefixlen": self.prefixlen, "index": ifindex}
        ident = [(rtnl.IFA_LOCAL, vip.packed), (rtnl.IFA_ADDRESS, vip.packed)]
        if isinstance(vip, IPv6Address):
            ident = [(rtnl.IFA_ADDRESS, vip.packed)]
        # ``replace`` makes a second add a no-op rather than EEXIST.
        self._add_msg = rtnl.address_request(
            rtnl.RTM_NEWADDR,
            rtnl.NLM_F_REQUEST | rtnl.NLM_F_ACK | rtnl.NLM_F_CREATE | rtnl.NLM_F_REPLACE,
            1,
            **base,
            attrs=[
                *ident,
                (rtnl.IFA_CACHEINFO, rtnl.cacheinfo(0, INFINITY_LIFE_TIME)),
                (rtnl.IFA_FLAGS, rtnl.u32(IFA_F_NODAD if isinstance(vip, IPv6Address) else 0)),
            ],
        )
        self._del_msg = rtnl.address_request(
            rtnl.RTM_DELADDR, rtnl.NLM_F_REQUEST | rtnl.NLM_F_ACK, 2, **base, attrs=ident
        )
        self._dump_msg = rtnl.address_request(
            rtnl.RTM_GETADDR, rtnl.NLM_F_REQUEST | rtnl.NLM_F_DUMP, 3, family=self.family
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
        try:
            replies = rtnl.dump(self.sock, self._dump_msg, recv_size=_RECV_SIZE)
        except rtnl.DumpError as exc:
            code = exc.errno or 0
            raise NetlinkError(code, f"address dump failed: {errno.errorcode.get(code)}") from None
        want = self.vip.packed
        for raw in replies:
            rec = rtnl.parse_address(raw)
            if (
                rec is not None
                and rec.index == self.ifindex
                and rec.prefixlen == self.prefixlen
                and rec.address == want
            ):
                return True
        return False

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
