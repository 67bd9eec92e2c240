"""Address conflict detection for the VIP (RFC 5227 for IPv4, RFC 4862 §5.4 DAD for IPv6).

What it is: the frames and the judgement, no I/O.

- ``probe_frame(mac, vip, to=None)``: IPv4, an ARP Probe (RFC 5227 §2.1.1): an ARP request
  with sender IP 0.0.0.0, so that asking does not itself claim the address, for target IP =
  the VIP; broadcast, or unicast to one MAC (``to``: is that host still holding it?).
  IPv6, a DAD Neighbor Solicitation (RFC 4862 §5.4.2): from ``::`` to the VIP's
  solicited-node multicast group, target = the VIP, no source link-layer option.
- ``parse_claim(frame, vip)``: whether a received Ethernet frame says that some host *has*
  the VIP, and which MAC: IPv4, any ARP packet whose sender IP is the VIP (a reply to our
  probe, a gratuitous ARP, or an ordinary request from the holder; RFC 5227 §2.1.1 and
  §2.4); IPv6, a Neighbor Advertisement whose target is the VIP (its link-layer address
  from the Target Link-Layer Address option, else the frame's source MAC).
- ``Conflict``: who answered and what to say about it.

Who is *foreign* is for the caller: this node's own MAC is excluded here, but a VRRP peer
that holds the VIP legitimately answers a probe too; ``vipd.host.arpwatch`` tells them apart by
listening for VRRP adverts of our VRID.

What it must not do: open sockets, read clocks, or decide to exit.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from vipd.host.neighbor import BROADCAST_MAC, ETH_P_ARP, ETH_P_IPV6, internet_checksum

ICMPV6_NS = 135
ICMPV6_NA = 136
OPT_TARGET_LLADDR = 2
UNSPECIFIED_V6 = IPv6Address("::")


def format_mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def solicited_node(vip: IPv6Address) -> IPv6Address:
    """ff02::1:ffXX:XXXX for the low 24 bits of ``vip`` (RFC 4291 §2.7.1)."""
    return IPv6Address(b"\xff\x02" + b"\x00" * 9 + b"\x01\xff" + vip.packed[13:])


def multicast_mac(group: IPv6Address) -> bytes:
    """33:33 + the low 32 bits of the group (RFC 2464 §7)."""
    return b"\x33\x33" + group.packed[12:]


def probe_frame(mac: bytes, vip: IPv4Address | IPv6Address, to: bytes | None = None) -> bytes:
    """The Ethernet frame that asks whether anyone (IPv4: or only the host ``to``) has
    ``vip`` without claiming it."""
    if len(mac) != 6:
        raise ValueError("mac must be 6 bytes")
    if to is not None and (len(to) != 6 or not isinstance(vip, IPv4Address)):
        raise ValueError("a unicast probe is an IPv4 ARP probe to a 6-byte MAC")
    if isinstance(vip, IPv4Address):
        # RFC 5227 §2.1.1 broadcasts its probes; a unicast one asks only that host, and a
        # Linux host answers it as it does a broadcast one (net/ipv4/arp.c, arp_process).
        eth = (to or BROADCAST_MAC) + mac + struct.pack("!H", ETH_P_ARP)
        # htype 1, ptype IPv4, hlen 6, plen 4, op 1 (request); sender IP 0.0.0.0,
        # target MAC zero (RFC 5227 §2.1.1: "SHOULD be set to all zeroes").
        arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + b"\x00" * 4 + b"\x00" * 6
        return eth + arp + vip.packed
    group = solicited_node(vip)
    body = b"\x00\x00\x00\x00" + vip.packed  # reserved, target; no SLLA from ::
    pseudo = (
        UNSPECIFIED_V6.packed
        + group.packed
        + struct.pack("!I", 4 + len(body))
        + b"\x00\x00\x00"
        + struct.pack("!B", 58)
    )
    csum = internet_checksum(pseudo + struct.pack("!BBH", ICMPV6_NS, 0, 0) + body)
    icmp = struct.pack("!BBH", ICMPV6_NS, 0, csum) + body
    ipv6 = struct.pack("!IHBB", 6 << 28, len(icmp), 58, 255) + UNSPECIFIED_V6.packed + group.packed
    return multicast_mac(group) + mac + struct.pack("!H", ETH_P_IPV6) + ipv6 + icmp


def parse_claim(frame: bytes, vip: IPv4Address | IPv6Address) -> bytes | None:
    """The MAC of a host that this frame shows holding ``vip``, or None."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    if isinstance(vip, IPv4Address):
        if ethertype != ETH_P_ARP or len(frame) < 42:
            return None
        htype, ptype, hlen, plen = struct.unpack_from("!HHBB", frame, 14)
        if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4):
            return None
        sender_mac, sender_ip = frame[22:28], frame[28:32]
        return bytes(sender_mac) if sender_ip == vip.packed else None
    if ethertype != ETH_P_IPV6 or len(frame) < 14 + 40 + 24:
        return None
    ip6 = frame[14:54]
    if ip6[6] != 58:  # next header ICMPv6 (no extension headers in an NA)
        return None
    icmp = frame[54:]
    if icmp[0] != ICMPV6_NA or icmp[8:24] != vip.packed:
        return None
    # Options after the 24-byte NA: take the Target Link-Layer Address if there is one.
    opts = icmp[24:]
    while len(opts) >= 8 and opts[1] > 0:
        kind, length = opts[0], opts[1] * 8
        if kind == OPT_TARGET_LLADDR and length >= 8:
            return bytes(opts[2:8])
        opts = opts[length:]
    return bytes(frame[6:12])


@dataclass(frozen=True, slots=True)
class Conflict:
    """Hosts other than this node that answered for the VIP, by MAC."""

    vip: IPv4Address | IPv6Address
    interface: str
    macs: tuple[str, ...]
    vrrp_heard: tuple[str, ...] = ()  # VRRP routers heard advertising our VRID meanwhile

    @property
    def foreign(self) -> bool:
        """A host answers for the VIP and no VRRP router of our VRID explains it."""
        return bool(self.macs) and not self.vrrp_heard

    def describe(self) -> str:
        how = "answered an ARP probe" if isinstance(self.vip, IPv4Address) else "answered DAD"
        return (
            f"{self.vip} is already in use on {self.interface} by "
            f"{', '.join(self.macs)} (it {how}, RFC "
            f"{'5227' if isinstance(self.vip, IPv4Address) else '4862'}) and no VRRP router "
            "advertises our VRID for it: refusing to claim it; remove it from that host or "
            "choose another VIP"
        )
