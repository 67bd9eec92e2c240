"""Follows one interface by name, and every address change, through rtnetlink notifications.

What it is: a sensor for the agent. It keeps the configured interface as the kernel last
described it (`Interface`: index, flags, MAC, addresses), folding in RTM_NEWLINK /
RTM_DELLINK (RFC 3549 §3.1.1) and RTM_NEWADDR / RTM_DELADDR (§3.1.2) as they come, and
calls back when that picture changes. It follows the *name*, not an index: an interface that
is deleted and created again (a bond or VLAN rebuilt, a NIC re-plugged, a veth recreated)
comes back with a new index, maybe a new MAC and new addresses, and the agent rejoins the
election on it (RFC 9568 §6.4: the interface going away is a Shutdown event, its coming back
a Startup event). Every address notification, of any interface, also goes to a second
callback: the agent's controller follows the VIP's own presence with it, instead of
polling the address table.

An interface counts as up when it exists, is administratively up (IFF_UP) and has carrier
(IFF_RUNNING / IFF_LOWER_UP).

How: one NETLINK_ROUTE socket subscribed to the link and both address groups, read from the
event loop. The starting picture comes from dumps on a second, unsubscribed socket (so that
no notification is swallowed while a dump is read); when the kernel says notifications were
lost (ENOBUFS) the picture is dumped again and every listener is told to look again.

What it must not do: act. It reports and calls back; the agent decides. It never blocks on
the event loop: the subscribed socket is non-blocking, and the dumps are bounded (2 s).
The pure part (`fold`, `parse`) takes bytes and records and returns records.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_interface

from vipd.host import netlink, rtnl
from vipd.host.netlink import HEADER
from vipd.host.snapshot import IFF_LOOPBACK, HostAddress, HostLink
from vipd.host.snapshot import IFF_UP as IFF_UP  # re-exported: is_up's bit, for the tests

IPAddress = IPv4Address | IPv6Address

RTMGRP_LINK = 0x1
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV6_IFADDR = 0x100
GROUPS = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
NLM_F_REQUEST = 0x1
IFF_RUNNING = 0x40
IFF_LOWER_UP = 0x10000

# struct ifinfomsg { u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change; }
_IFINFOMSG = struct.Struct("=BBHiII")


def is_up(flags: int) -> bool:
    return bool(flags & IFF_UP) and bool(flags & (IFF_RUNNING | IFF_LOWER_UP))


def parse_link_events(data: bytes, ifindex: int) -> list[bool]:
    """The up/down states reported for ``ifindex`` in one netlink read, in order.

    A deleted interface reads as down.
    """
    states: list[bool] = []
    for msg_type, _seq, msg in netlink.messages(data):
        if msg_type in (RTM_NEWLINK, RTM_DELLINK) and len(msg) >= HEADER.size + _IFINFOMSG.size:
            _fam, _pad, _type, index, flags, _change = _IFINFOMSG.unpack_from(msg, HEADER.size)
            if index == ifindex:
                states.append(msg_type == RTM_NEWLINK and is_up(flags))
    return states


# -- the pure part: records in, records out -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interface:
    """The followed interface now; ``index`` 0 while no interface of that name exists."""

    name: str
    index: int = 0
    flags: int = 0
    mac: str = ""
    addresses: tuple[HostAddress, ...] = ()

    @property
    def present(self) -> bool:
        return self.index != 0

    @property
    def up(self) -> bool:
        return self.present and is_up(self.flags)

    def host_link(self) -> HostLink:
        """As preflight's snapshot of a link (for the source address rule)."""
        return HostLink(
            self.name,
            self.index,
            bool(self.flags & IFF_UP),
            bool(self.flags & IFF_LOOPBACK),
            self.mac,
            self.addresses,
        )


@dataclass(frozen=True, slots=True)
class LinkEvent:
    deleted: bool
    record: rtnl.LinkRecord


@dataclass(frozen=True, slots=True)
class AddressEvent:
    deleted: bool
    index: int
    address: HostAddress


Event = LinkEvent | AddressEvent


def _host_address(rec: rtnl.AddressRecord) -> HostAddress | None:
    raw = rec.address
    if raw is None or len(raw) not in (4, 16):
        return None
    return HostAddress(ip_interface(f"{ip_address(raw)}/{rec.prefixlen}"), rec.flags)


def parse(data: bytes) -> list[Event]:
    """The link and address notifications in one netlink read, in order (others skipped)."""
    out: list[Event] = []
    for msg_type, _seq, msg in netlink.messages(data):
        if msg_type in (RTM_NEWLINK, RTM_DELLINK):
            link = rtnl.parse_link(msg)
            if link is not None:
                out.append(LinkEvent(msg_type == RTM_DELLINK, link))
        elif msg_type in (rtnl.RTM_NEWADDR, rtnl.RTM_DELADDR):
            rec = rtnl.parse_address(msg)
            addr = _host_address(rec) if rec is not None else None
            if rec is not None and addr is not None:
                out.append(AddressEvent(msg_type == rtnl.RTM_DELADDR, rec.index, addr))
    return out


def fold(iface: Interface, event: Event) -> Interface:
    """``iface`` after ``event``.

    A link of our name with another index is a new interface: its addresses start empty
    (the kernel announces each with an RTM_NEWADDR after the link). Our index deleted, or
    renamed away, leaves no interface of that name."""
    if isinstance(event, LinkEvent):
        rec = event.record
        if rec.index == iface.index and (event.deleted or (rec.name and rec.name != iface.name)):
            return Interface(iface.name)
        if event.deleted or rec.name != iface.name:
            return iface
        addresses = iface.addresses if rec.index == iface.index else ()
        return Interface(iface.name, rec.index, rec.flags, rec.mac or iface.mac, addresses)
    if not iface.present or event.index != iface.index:
        return iface
    kept = tuple(a for a in iface.addresses if a.address != event.address.address)
    if event.deleted:
        return replace(iface, addresses=kept)
    # A replaced address (flags, lifetimes) keeps its place: primaries stay before secondaries.
    for i, a in enumerate(iface.addresses):
        if a.address == event.address.address:
            return replace(iface, addresses=(*kept[:i], event.address, *kept[i:]))
    return replace(iface, addresses=(*iface.addresses, event.address))


def snapshot(name: str, links: Iterable[rtnl.LinkRecord], addresses: Iterable[Event]) -> Interface:
    """The interface called ``name`` in a dump of the links and of the addresses."""
    iface = Interface(name)
    for link in links:
        iface = fold(iface, LinkEvent(False, link))
    for event in addresses:
        iface = fold(iface, event)
    return iface


# -- the shell -------------------------------------------------------------------------------


OnAddress = Callable[[int, IPAddress | None], None]


def _dump(name: str) -> Interface:
    """Links and addresses now, on a socket of its own (blocking, bounded)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(2.0)
        sock.bind((0, 0))
        links = [
            rec
            for raw in rtnl.dump(sock, rtnl.link_dump_request(1))
            if (rec := rtnl.parse_link(raw)) is not None
        ]
        request = rtnl.address_request(
            rtnl.RTM_GETADDR, rtnl.NLM_F_REQUEST | rtnl.NLM_F_DUMP, 2, family=socket.AF_UNSPEC
        )
        events: list[Event] = []
        for raw in rtnl.dump(sock, request):
            found = rtnl.parse_address(raw)
            addr = _host_address(found) if found is not None else None
            if found is not None and addr is not None:
                events.append(AddressEvent(False, found.index, addr))
    return snapshot(name, links, events)


class LinkWatch:
    """The interface ``name``, followed; ``on_change(iface)`` when it changed.

    ``on_address(index, ip)``: every address added or removed anywhere (``ip`` None: lost
    notifications, look again). ``state`` is whether the interface is up now."""

    def __init__(
        self,
        name: str,
        on_change: Callable[[Interface], None],
        on_address: OnAddress | None = None,
    ) -> None:
        self.name = name
        self.on_change = on_change
        self.on_address = on_address
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        try:
            # Subscribed before the dump: a change in between shows up as a notification.
            self.sock.bind((0, GROUPS))
            self.sock.setblocking(False)
            self.iface = _dump(name)
        except BaseException:
            self.sock.close()
            raise

    @property
    def state(self) -> bool:
        return self.iface.up

    def fileno(self) -> int:
        return self.sock.fileno()

    def on_readable(self) -> None:
        """Drain notifications; call back once if the interface changed."""
        before = self.iface
        touched: list[tuple[int, IPAddress | None]] = []
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                # ENOBUFS: notifications were lost; dump again rather than guess.
                self.iface = _dump(self.name)
                touched.append((0, None))
                continue
            for event in parse(data):
                self.iface = fold(self.iface, event)
                if isinstance(event, AddressEvent):
                    touched.append((event.index, event.address.ip))
        if self.on_address is not None:
            for index, ip in dict.fromkeys(touched):
                self.on_address(index, ip)
        if self.iface != before:
            self.on_change(self.iface)

    def close(self) -> None:
        self.sock.close()
