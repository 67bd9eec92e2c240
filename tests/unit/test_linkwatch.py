"""Parsing rtnetlink link and address notifications, and following one interface by name
through them (deleted, created again with a new index and MAC, renamed, readdressed)."""

from __future__ import annotations

import socket
import struct
from ipaddress import ip_address, ip_interface

from vipd.host import netlink, rtnl
from vipd.host.linkwatch import (
    IFF_LOWER_UP,
    IFF_RUNNING,
    IFF_UP,
    RTM_DELLINK,
    RTM_NEWLINK,
    Interface,
    fold,
    is_up,
    parse,
    parse_link_events,
    snapshot,
)
from vipd.preflight import advert_source


def message(msg_type: int, index: int, flags: int, attrs: bytes = b"") -> bytes:
    body = struct.pack("=BBHiII", 0, 0, 1, index, flags, 0xFFFFFFFF) + attrs
    length = 16 + len(body)
    padded = body + b"\x00" * ((-length) % 4)
    return struct.pack("=IHHII", length, msg_type, 0, 0, 0) + padded


def test_up_needs_admin_up_and_carrier() -> None:
    assert is_up(IFF_UP | IFF_RUNNING | IFF_LOWER_UP)
    assert is_up(IFF_UP | IFF_LOWER_UP)
    assert not is_up(IFF_UP)  # no carrier: the peer end of a veth is down
    assert not is_up(IFF_RUNNING | IFF_LOWER_UP)  # `ip link set down`


def test_events_for_other_interfaces_are_ignored_and_order_is_kept() -> None:
    data = (
        message(RTM_NEWLINK, 3, IFF_UP | IFF_RUNNING)
        + message(RTM_NEWLINK, 2, IFF_UP, attrs=b"\x08\x00\x03\x00eth\x00x")
        + message(RTM_NEWLINK, 2, IFF_UP | IFF_RUNNING | IFF_LOWER_UP)
        + message(RTM_DELLINK, 2, IFF_UP | IFF_RUNNING)
    )
    assert parse_link_events(data, 2) == [False, True, False]
    assert parse_link_events(data, 3) == [True]
    assert parse_link_events(data, 9) == []


def test_truncated_reads_do_not_raise() -> None:
    data = message(RTM_NEWLINK, 2, IFF_UP | IFF_RUNNING)
    for cut in range(len(data)):
        parse_link_events(data[:cut], 2)
    assert parse_link_events(struct.pack("=IHHII", 0, RTM_NEWLINK, 0, 0, 0) + data, 2) == []


# -- following an interface by name: links and addresses -----------------------------------


def link_message(msg_type: int, index: int, flags: int, name: str, mac: bytes = b"") -> bytes:
    attrs = rtnl.attr(rtnl.IFLA_IFNAME, name.encode() + b"\x00")
    if mac:
        attrs += rtnl.attr(rtnl.IFLA_ADDRESS, mac)
    return message(msg_type, index, flags, attrs)


def address_message(msg_type: int, index: int, cidr: str, flags: int = 0) -> bytes:
    iface = ip_interface(cidr)
    family = socket.AF_INET if iface.version == 4 else socket.AF_INET6
    attrs = [(rtnl.IFA_ADDRESS, iface.ip.packed)]
    if iface.version == 4:
        attrs.append((rtnl.IFA_LOCAL, iface.ip.packed))
    if flags:
        attrs.append((rtnl.IFA_FLAGS, rtnl.u32(flags)))
    return rtnl.address_request(
        msg_type, 0, 0, family=family, prefixlen=iface.network.prefixlen, index=index, attrs=attrs
    )


UP = IFF_UP | IFF_RUNNING | IFF_LOWER_UP
MAC_A = bytes.fromhex("020000000011")
MAC_B = bytes.fromhex("020000000099")


def follow(name: str, data: bytes, start: Interface | None = None) -> Interface:
    iface = start or Interface(name)
    for event in parse(data):
        iface = fold(iface, event)
    return iface


def test_the_interface_is_followed_by_name_through_deletion_and_re_creation() -> None:
    eth0 = follow(
        "eth0",
        link_message(RTM_NEWLINK, 2, UP, "eth0", MAC_A)
        + link_message(RTM_NEWLINK, 3, UP, "eth1")
        + address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.11/24")
        + address_message(rtnl.RTM_NEWADDR, 3, "10.1.0.11/24"),
    )
    assert (eth0.index, eth0.up, eth0.mac) == (2, True, "02:00:00:00:00:11")
    assert [str(a.address) for a in eth0.addresses] == ["10.0.0.11/24"]
    gone = follow("eth0", link_message(RTM_DELLINK, 2, 0, "eth0"), eth0)
    assert not gone.present and not gone.up and gone.addresses == ()
    # The same name again: another index and MAC, down at first, its addresses after it.
    back = follow(
        "eth0",
        link_message(RTM_NEWLINK, 7, 0, "eth0", MAC_B)
        + link_message(RTM_NEWLINK, 7, UP, "eth0", MAC_B)
        + address_message(rtnl.RTM_NEWADDR, 7, "10.0.0.21/24"),
        gone,
    )
    assert (back.index, back.up, back.mac) == (7, True, "02:00:00:00:00:99")
    assert [str(a.address) for a in back.addresses] == ["10.0.0.21/24"]
    # A late deletion of the old index says nothing about the new interface.
    assert follow("eth0", link_message(RTM_DELLINK, 2, 0, "eth0"), back) == back


def test_a_new_index_under_our_name_starts_without_the_old_addresses() -> None:
    eth0 = follow(
        "eth0",
        link_message(RTM_NEWLINK, 2, UP, "eth0", MAC_A)
        + address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.11/24"),
    )
    # The deletion was lost (ENOBUFS): the new link alone must not inherit them.
    new = follow("eth0", link_message(RTM_NEWLINK, 9, UP, "eth0", MAC_B), eth0)
    assert (new.index, new.addresses) == (9, ())


def test_renamed_away_is_gone_and_renamed_back_is_followed() -> None:
    eth0 = follow("eth0", link_message(RTM_NEWLINK, 2, UP, "eth0", MAC_A))
    away = follow("eth0", link_message(RTM_NEWLINK, 2, UP, "old0", MAC_A), eth0)
    assert not away.present
    assert follow("eth0", link_message(RTM_NEWLINK, 2, UP, "eth0", MAC_A), away).index == 2


def test_addresses_are_added_replaced_in_place_and_removed() -> None:
    eth0 = follow(
        "eth0",
        link_message(RTM_NEWLINK, 2, UP, "eth0", MAC_A)
        + address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.11/24")
        + address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.12/24")
        + address_message(rtnl.RTM_NEWADDR, 2, "fe80::11/64")
        # The kernel's RTM_NEWADDR for a changed address (flags): same place, new flags.
        + address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.11/24", flags=0x20),
    )
    assert [str(a.address) for a in eth0.addresses] == [
        "10.0.0.11/24",
        "10.0.0.12/24",
        "fe80::11/64",
    ]
    assert eth0.addresses[0].deprecated
    less = follow("eth0", address_message(rtnl.RTM_DELADDR, 2, "10.0.0.11/24"), eth0)
    assert [str(a.address) for a in less.addresses] == ["10.0.0.12/24", "fe80::11/64"]
    # Another interface's addresses are not ours.
    assert follow("eth0", address_message(rtnl.RTM_NEWADDR, 5, "10.9.0.1/24"), less) == less


def test_the_source_address_follows_the_interfaces_addresses() -> None:
    eth0 = follow(
        "eth0",
        link_message(RTM_NEWLINK, 2, UP, "eth0", MAC_A)
        + address_message(rtnl.RTM_NEWADDR, 2, "fe80::11/64")
        + address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.11/24"),
    )
    vip4, vip6 = ip_address("10.0.0.100"), ip_address("fd00::100")
    assert advert_source(vip4, eth0.host_link()) == ip_address("10.0.0.11")
    assert advert_source(vip6, eth0.host_link()) == ip_address("fe80::11")
    moved = follow(
        "eth0",
        address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.21/24")
        + address_message(rtnl.RTM_DELADDR, 2, "10.0.0.11/24"),
        eth0,
    )
    assert advert_source(vip4, moved.host_link()) == ip_address("10.0.0.21")
    none = follow("eth0", address_message(rtnl.RTM_DELADDR, 2, "10.0.0.21/24"), moved)
    assert advert_source(vip4, none.host_link()) is None


def test_snapshot_of_a_dump() -> None:
    links = [
        rec
        for _t, _s, raw in netlink.messages(
            link_message(RTM_NEWLINK, 4, UP, "eth1") + link_message(RTM_NEWLINK, 2, UP, "eth0")
        )
        if (rec := rtnl.parse_link(raw)) is not None
    ]
    addrs = parse(address_message(rtnl.RTM_NEWADDR, 2, "10.0.0.11/24"))
    snap = snapshot("eth0", links, addrs)
    assert snap.index == 2 and [str(a.ip) for a in snap.addresses] == ["10.0.0.11"]
    assert not snapshot("eth9", links, addrs).present
