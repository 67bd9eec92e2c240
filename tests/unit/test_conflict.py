"""Address-conflict frames and judgement (vipd.host.conflict): RFC 5227 probes, DAD, claims."""

from __future__ import annotations

import socket
import struct
from ipaddress import IPv4Address, IPv6Address

import pytest

from vipd.host.conflict import (
    Conflict,
    format_mac,
    multicast_mac,
    parse_claim,
    probe_frame,
    solicited_node,
)
from vipd.host.neighbor import announcement, internet_checksum

MAC = bytes.fromhex("020000000001")
OTHER = bytes.fromhex("0200000000ff")
VIP4 = IPv4Address("10.0.0.100")
VIP6 = IPv6Address("fd00::1:2:3")


def test_arp_probe_does_not_claim_the_address() -> None:
    f = probe_frame(MAC, VIP4)
    assert len(f) == 42
    assert f[:6] == b"\xff" * 6 and f[6:12] == MAC and f[12:14] == b"\x08\x06"
    htype, ptype, hlen, plen, op = struct.unpack("!HHBBH", f[14:22])
    assert (htype, ptype, hlen, plen, op) == (1, 0x0800, 6, 4, 1)
    assert f[22:28] == MAC
    assert f[28:32] == b"\x00\x00\x00\x00"  # sender IP 0.0.0.0 (RFC 5227 §2.1.1)
    assert f[32:38] == b"\x00" * 6 and f[38:42] == VIP4.packed
    # A probe is not a claim: nobody reading it learns that we have the VIP.
    assert parse_claim(f, VIP4) is None


def test_dad_probe_is_a_valid_neighbor_solicitation_from_unspecified() -> None:
    f = probe_frame(MAC, VIP6)
    group = solicited_node(VIP6)
    assert str(group) == "ff02::1:ff02:3"
    assert f[:6] == multicast_mac(group) == bytes.fromhex("3333ff020003")
    ip6, icmp = f[14:54], f[54:]
    assert ip6[6] == 58 and ip6[7] == 255
    assert ip6[8:24] == IPv6Address("::").packed and ip6[24:40] == group.packed
    assert icmp[0] == 135 and icmp[8:24] == VIP6.packed and len(icmp) == 24  # no SLLA
    pseudo = ip6[8:40] + struct.pack("!I", len(icmp)) + b"\x00\x00\x00\x3a"
    assert internet_checksum(pseudo + icmp) == 0


def test_a_gratuitous_arp_or_reply_from_another_host_is_a_claim() -> None:
    assert parse_claim(announcement(OTHER, VIP4), VIP4) == OTHER
    reply = (
        MAC + OTHER + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2)
        + OTHER + VIP4.packed + MAC + b"\x00" * 4
    )  # fmt: skip
    assert parse_claim(reply, VIP4) == OTHER
    # Another address, or a truncated frame, is not about us.
    assert parse_claim(announcement(OTHER, IPv4Address("10.0.0.101")), VIP4) is None
    assert parse_claim(reply[:30], VIP4) is None
    assert parse_claim(b"", VIP4) is None


def test_a_neighbor_advertisement_for_the_vip_is_a_claim() -> None:
    na = announcement(OTHER, VIP6)
    assert parse_claim(na, VIP6) == OTHER
    assert parse_claim(announcement(OTHER, IPv6Address("fd00::9")), VIP6) is None
    # Our own solicitation is not an advertisement.
    assert parse_claim(probe_frame(MAC, VIP6), VIP6) is None
    # Without a target link-layer option the frame's source MAC is the claimant.
    no_opt = bytearray(na[: 14 + 40 + 24])
    no_opt[18:20] = struct.pack("!H", 24)
    assert parse_claim(bytes(no_opt), VIP6) == OTHER


def test_conflict_is_foreign_only_without_a_vrrp_router() -> None:
    c = Conflict(VIP4, "eth0", ("02:00:00:00:00:ff",))
    assert c.foreign
    text = c.describe()
    assert "10.0.0.100 is already in use on eth0 by 02:00:00:00:00:ff" in text
    assert "RFC 5227" in text and "\n" not in text
    assert not Conflict(VIP4, "eth0", ("02:00:00:00:00:ff",), ("10.0.0.11",)).foreign
    assert not Conflict(VIP4, "eth0", ()).foreign
    assert "4862" in Conflict(VIP6, "eth0", ("x",)).describe()


def test_a_unicast_arp_probe_asks_one_host_only() -> None:
    f = probe_frame(MAC, VIP4, to=OTHER)
    assert f[:6] == OTHER and f[6:12] == MAC
    assert f[12:] == probe_frame(MAC, VIP4)[12:]  # the same probe, to one MAC
    with pytest.raises(ValueError, match="unicast probe"):
        probe_frame(MAC, VIP6, to=OTHER)  # DAD solicits a multicast group
    with pytest.raises(ValueError, match="unicast probe"):
        probe_frame(MAC, VIP4, to=b"\x02")


def test_format_mac_and_bad_input() -> None:
    assert format_mac(OTHER) == "02:00:00:00:00:ff"
    with pytest.raises(ValueError):
        probe_frame(b"\x00", VIP4)


def test_a_watch_socket_takes_its_protocol_at_bind_not_at_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opened with its protocol, a packet socket takes every interface's frames until bind,
    and the bind then waits out an RCU grace period; opened with 0 it takes none until bind
    names both."""
    from vipd.host import arpwatch

    calls: list[tuple[str, object]] = []

    class Recorder:
        def __init__(self, family: int, kind: int, proto: int) -> None:
            calls.append(("open", (family, kind, proto)))

        def bind(self, addr: object) -> None:
            calls.append(("bind", addr))

        def setblocking(self, flag: bool) -> None:
            calls.append(("setblocking", flag))

    monkeypatch.setattr(socket, "socket", Recorder)  # the module arpwatch opens it from
    arpwatch._open("eth0", 0x0806)
    assert calls == [
        ("open", (socket.AF_PACKET, socket.SOCK_RAW, 0)),
        ("bind", ("eth0", 0x0806)),
        ("setblocking", False),
    ]
