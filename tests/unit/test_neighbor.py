"""Gratuitous ARP and unsolicited NA frames, dissected with scapy's layers."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

import pytest
from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6NDOptDstLLAddr, IPv6
from scapy.layers.l2 import ARP, Ether

from vipd.host.neighbor import announcement, gratuitous_arp, parse_mac, unsolicited_na

MAC = parse_mac("02:00:00:00:00:0a")


def test_gratuitous_arp_is_a_broadcast_request_for_the_vip() -> None:
    frame = gratuitous_arp(MAC, IPv4Address("10.0.0.100"))
    assert len(frame) == 42
    pkt = Ether(frame)
    assert pkt.dst == "ff:ff:ff:ff:ff:ff"
    assert pkt.src == "02:00:00:00:00:0a"
    arp = pkt[ARP]
    assert arp.op == 1
    assert arp.hwsrc == "02:00:00:00:00:0a"
    assert arp.psrc == arp.pdst == "10.0.0.100"
    assert arp.hwdst == "ff:ff:ff:ff:ff:ff"


@pytest.mark.parametrize("router", [False, True])
def test_unsolicited_na_fields_and_checksum(router: bool) -> None:
    vip = IPv6Address("fd00:77::100")
    frame = unsolicited_na(MAC, vip, router=router)
    pkt = Ether(frame)
    assert pkt.dst == "33:33:00:00:00:01"
    ip6 = pkt[IPv6]
    assert ip6.src == str(vip)
    assert ip6.dst == "ff02::1"
    assert ip6.hlim == 255
    na = pkt[ICMPv6ND_NA]
    assert na.tgt == str(vip)
    assert (int(router), 0, 1) == (na.R, na.S, na.O)
    assert pkt[ICMPv6NDOptDstLLAddr].lladdr == "02:00:00:00:00:0a"
    # Let scapy recompute the checksum from scratch and compare with ours.
    ours = na.cksum
    del na.cksum
    rebuilt = Ether(bytes(pkt))
    assert rebuilt[ICMPv6ND_NA].cksum == ours


def test_announcement_picks_the_family() -> None:
    assert announcement(MAC, IPv4Address("10.0.0.1"))[12:14] == b"\x08\x06"
    assert announcement(MAC, IPv6Address("fd00::1"))[12:14] == b"\x86\xdd"


@pytest.mark.parametrize("bad", ["", "02:00:00:00:00", "zz:00:00:00:00:00", "1:2:3:4:5:6:7"])
def test_parse_mac_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError, match="not a MAC"):
        parse_mac(bad)


def test_the_lab_capture_reads_back_our_gratuitous_arp_and_nothing_else() -> None:
    """vipd.lab.wire reads the order of announcements off the bridge: it must recognise the
    frame vipd sends, and not an ARP request (sender and target addresses differ)."""
    from vipd.lab.wire import gratuitous_arp as read_back

    vip = IPv4Address("10.0.0.100")
    frame = gratuitous_arp(MAC, vip)
    assert read_back(frame) == vip
    request = frame[:38] + IPv4Address("10.0.0.1").packed + frame[42:]
    assert read_back(request) is None
    assert read_back(frame[:30]) is None
