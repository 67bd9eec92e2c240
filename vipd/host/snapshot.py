"""The host's links and addresses as plain data, and the one reader that fills them.

What it is: the snapshot types every host-facing part shares (`HostLink`, `HostAddress`,
`HostView`, the ``IFA_F_*`` flag bits of linux/if_addr.h) and `read_host`, which dumps the
links and addresses over rtnetlink (RFC 3549 §3.1.1 links, §3.1.2 addresses). Preflight
(``vipd.preflight``) checks the config against a `HostView`; the link watch
(``vipd.host.linkwatch``) describes the interface it follows as a `HostLink`.

What it must not do: change anything on the host. `read_host` only reads; it never creates a
network namespace, even one that is missing. The types know nothing about the config.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv6Address,
    IPv6Interface,
    ip_address,
    ip_interface,
)

__all__ = [
    "IFA_F_DADFAILED",
    "IFA_F_DEPRECATED",
    "IFA_F_SECONDARY",
    "IFA_F_TENTATIVE",
    "IFF_LOOPBACK",
    "IFF_UP",
    "HostAddress",
    "HostLink",
    "HostView",
    "read_host",
]

IPAddress = IPv4Address | IPv6Address
IPInterface = IPv4Interface | IPv6Interface

# linux/if_addr.h
IFA_F_SECONDARY = 0x01
IFA_F_DADFAILED = 0x08
IFA_F_DEPRECATED = 0x20  # preferred lifetime over (vipd adds the VIP with preferred_lft 0)
IFA_F_TENTATIVE = 0x40  # IPv6 duplicate address detection still running
# linux/if.h
IFF_UP = 0x1
IFF_LOOPBACK = 0x8


@dataclass(frozen=True, slots=True)
class HostAddress:
    address: IPInterface  # address with its prefix, e.g. 10.0.0.1/24
    flags: int = 0  # IFA_F_* bits

    @property
    def ip(self) -> IPAddress:
        return self.address.ip

    @property
    def deprecated(self) -> bool:
        return bool(self.flags & IFA_F_DEPRECATED)

    @property
    def host_prefix(self) -> bool:
        """/32 or /128: how vipd binds a VIP (so it adds no subnet route)."""
        return self.address.network.prefixlen == self.address.max_prefixlen


@dataclass(frozen=True, slots=True)
class HostLink:
    name: str
    index: int
    up: bool  # IFF_UP: administratively up
    loopback: bool
    mac: str  # "aa:bb:cc:dd:ee:ff", or "" for links without one
    addresses: tuple[HostAddress, ...] = ()


@dataclass(frozen=True, slots=True)
class HostView:
    links: tuple[HostLink, ...]

    def link(self, name: str) -> HostLink | None:
        return next((link for link in self.links if link.name == name), None)


# -- the reader ------------------------------------------------------------------------------


def read_host(netns: str | None = None) -> HostView:
    """Dump links and addresses over rtnetlink (in network namespace ``netns`` if given).

    Read-only and needs no privileges. A ``netns`` that doesn't exist is FileNotFoundError;
    it is never created (pyroute2's IPRoute creates a missing one unless flags=0). Our own
    namespace is read with ``vipd.host.rtnl`` on a plain socket; another one (the lab, the
    tests) through pyroute2, which knows how to enter it.
    """
    if netns is None:
        return _read_own_host()
    # Imported here so the pure checks above (and their tests) don't load pyroute2.
    from pyroute2 import IPRoute

    kwargs: dict[str, object] = {"netns": netns, "flags": 0}
    try:
        ipr = IPRoute(**kwargs)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such network namespace", netns) from None
    with ipr:
        link_msgs = list(ipr.get_links())
        addr_msgs = list(ipr.get_addr())

    by_index: dict[int, list[HostAddress]] = {}
    for msg in addr_msgs:
        # IPv4: IFA_LOCAL is the address itself; IFA_ADDRESS is the peer on point-to-point
        # links. IPv6 has only IFA_ADDRESS.
        text = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
        if not text:
            continue
        # IFA_FLAGS carries all 32 bits; the header's 8-bit field only the low ones
        flags = msg.get_attr("IFA_FLAGS")
        by_index.setdefault(int(msg["index"]), []).append(
            HostAddress(
                address=ip_interface(f"{text}/{msg['prefixlen']}"),
                flags=int(msg["flags"] if flags is None else flags),
            )
        )

    links = []
    for msg in link_msgs:
        index = int(msg["index"])
        links.append(
            HostLink(
                name=str(msg.get_attr("IFLA_IFNAME")),
                index=index,
                up=bool(msg["flags"] & IFF_UP),
                loopback=bool(msg["flags"] & IFF_LOOPBACK),
                mac=str(msg.get_attr("IFLA_ADDRESS") or "").lower(),
                addresses=tuple(by_index.get(index, ())),
            )
        )
    return HostView(links=tuple(links))


def _read_own_host() -> HostView:
    """``read_host`` for our own network namespace, without pyroute2."""
    import socket

    from vipd.host import rtnl

    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(2.0)
        sock.bind((0, 0))
        link_msgs = rtnl.dump(sock, rtnl.link_dump_request(1))
        addr_msgs = rtnl.dump(
            sock,
            rtnl.address_request(
                rtnl.RTM_GETADDR, rtnl.NLM_F_REQUEST | rtnl.NLM_F_DUMP, 2, family=socket.AF_UNSPEC
            ),
        )
    by_index: dict[int, list[HostAddress]] = {}
    for raw in addr_msgs:
        rec = rtnl.parse_address(raw)
        if rec is None or rec.address is None:
            continue
        ip = ip_address(rec.address)
        by_index.setdefault(rec.index, []).append(
            HostAddress(address=ip_interface(f"{ip}/{rec.prefixlen}"), flags=rec.flags)
        )
    links = []
    for raw in link_msgs:
        link = rtnl.parse_link(raw)
        if link is None:
            continue
        links.append(
            HostLink(
                name=link.name,
                index=link.index,
                up=bool(link.flags & IFF_UP),
                loopback=bool(link.flags & IFF_LOOPBACK),
                mac=link.mac,
                addresses=tuple(by_index.get(link.index, ())),
            )
        )
    return HostView(links=tuple(links))
