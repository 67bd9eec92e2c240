"""Gratuitous ARP and unsolicited Neighbor Advertisement frames, as bytes.

What it is: pure builders of the Ethernet frames a new VIP holder puts on the wire so that
clients and switches re-point the VIP at its MAC at once:

- IPv4: a gratuitous ARP *request* (RFC 826, RFC 5227 §3 "ARP Announcement"; RFC 9568 §6.4.1
  asks a new Active router to broadcast one per address). Ethernet broadcast, sender and target
  protocol address both the VIP, target hardware address ff:ff:ff:ff:ff:ff as keepalived sends
  it (every Linux host accepts either that or zeros).
- IPv6: an unsolicited Neighbor Advertisement (RFC 4861 §7.2.6) to ff02::1 from the VIP itself,
  hop limit 255, Override set, Solicited clear, Router set only when the node forwards, with a
  Target Link-Layer Address option.

What it must not do: no sockets, no clocks, no scapy. The frames are built once, before they
are needed, so that the takeover path only writes prebuilt bytes; scapy is used in the tests to
dissect them, not here (importing its layers costs the daemon ~35 MB of RSS and 0.2 s).
"""

from __future__ import annotations

import struct
from ipaddress import IPv4Address, IPv6Address

ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
BROADCAST_MAC = b"\xff" * 6
ALL_NODES_V6 = IPv6Address("ff02::1")
# 33:33 + the low 32 bits of ff02::1 (RFC 2464 §7).
ALL_NODES_MAC = b"\x33\x33\x00\x00\x00\x01"

ICMPV6_NA = 136
NA_ROUTER = 0x80000000
NA_SOLICITED = 0x40000000
NA_OVERRIDE = 0x20000000


def parse_mac(text: str) -> bytes:
    """``aa:bb:cc:dd:ee:ff`` → 6 bytes; raises ValueError naming the bad text."""
    parts = text.split(":")
    if len(parts) != 6:
        raise ValueError(f"not a MAC address: {text!r}")
    try:
        raw = bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"not a MAC address: {text!r}") from None
    return raw


def internet_checksum(data: bytes) -> int:
    """RFC 1071 one's-complement sum of 16-bit words, complemented."""
    if len(data) % 2:
        data += b"\x00"
    words: tuple[int, ...] = struct.unpack(f"!{len(data) // 2}H", data)
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def gratuitous_arp(mac: bytes, vip: IPv4Address, *, eth_src: bytes | None = None) -> bytes:
    """The 42-byte Ethernet frame of an ARP announcement of ``vip`` at ``mac``.

    ``eth_src``: the frame's source when it is not ``mac`` (a node that relays another
    holder's MAC sends from its own, so switches do not learn that MAC on its port)."""
    if len(mac) != 6 or (eth_src is not None and len(eth_src) != 6):
        raise ValueError("mac must be 6 bytes")
    ip = vip.packed
    eth = BROADCAST_MAC + (eth_src or mac) + struct.pack("!H", ETH_P_ARP)
    # htype 1 (Ethernet), ptype IPv4, hlen 6, plen 4, op 1 (request)
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + ip + BROADCAST_MAC + ip
    return eth + arp


def unsolicited_na(mac: bytes, vip: IPv6Address, *, router: bool = False) -> bytes:
    """The Ethernet frame of an unsolicited Neighbor Advertisement of ``vip`` at ``mac``."""
    if len(mac) != 6:
        raise ValueError("mac must be 6 bytes")
    flags = NA_OVERRIDE | (NA_ROUTER if router else 0)
    # Option type 2 (Target Link-Layer Address), length 1 (8 octets).
    body = struct.pack("!I", flags) + vip.packed + struct.pack("!BB", 2, 1) + mac
    icmp_len = 4 + len(body)
    pseudo = (
        vip.packed
        + ALL_NODES_V6.packed
        + struct.pack("!I", icmp_len)
        + b"\x00\x00\x00"
        + struct.pack("!B", 58)
    )
    unsummed = struct.pack("!BBH", ICMPV6_NA, 0, 0) + body
    csum = internet_checksum(pseudo + unsummed)
    icmp = struct.pack("!BBH", ICMPV6_NA, 0, csum) + body
    ipv6 = struct.pack("!IHBB", 6 << 28, icmp_len, 58, 255) + vip.packed + ALL_NODES_V6.packed
    eth = ALL_NODES_MAC + mac + struct.pack("!H", ETH_P_IPV6)
    return eth + ipv6 + icmp


def announcement(mac: bytes, vip: IPv4Address | IPv6Address, *, router: bool = False) -> bytes:
    """The frame that announces ``vip`` for its family."""
    if isinstance(vip, IPv4Address):
        return gratuitous_arp(mac, vip)
    return unsolicited_na(mac, vip, router=router)
