"""vipd.routed.bgp_bfd: which BFD changes reach bgp mode's routes (RFC 5882 §3.2, §4.2), and
the source address of each session. No socket is opened: ``on_state`` is called directly."""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_interface

from vipd.bfd import Diag
from vipd.config.bfd import Bfd
from vipd.election import IPAddress
from vipd.host.snapshot import HostAddress
from vipd.routed.bgp_bfd import BgpBfd, local_for


class FakeRoutes:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, IPAddress]] = []
        self.fail = fail

    def bfd_down(self, peer: IPAddress) -> None:
        self.calls.append(("down", peer))
        if self.fail:
            raise RuntimeError("speaker gone")

    def bfd_up(self, peer: IPAddress) -> None:
        self.calls.append(("up", peer))


def calls(events: list[tuple[bool, int]], fail: bool = False) -> list[tuple[str, IPAddress]]:
    routes = FakeRoutes(fail)

    async def go() -> None:
        bfd = BgpBfd(Bfd(enabled=True), routes)
        try:
            for up, diag in events:
                bfd.on_state("192.0.2.1", up, diag)
        finally:
            bfd.close()

    asyncio.run(go())
    return routes.calls


PEER = IPv4Address("192.0.2.1")


def test_a_detection_time_expiry_or_a_signalled_down_withdraws_toward_the_peer() -> None:
    assert calls([(False, Diag.CONTROL_DETECTION_TIME_EXPIRED)]) == [("down", PEER)]
    assert calls([(False, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN)]) == [("down", PEER)]


def test_up_announces_again() -> None:
    assert calls([(False, Diag.CONTROL_DETECTION_TIME_EXPIRED), (True, Diag.NONE)]) == [
        ("down", PEER),
        ("up", PEER),
    ]


def test_admin_down_is_not_a_path_failure() -> None:
    assert calls([(False, Diag.ADMINISTRATIVELY_DOWN)]) == []


def test_a_failing_speaker_does_not_raise_into_the_driver() -> None:
    assert calls([(False, Diag.CONTROL_DETECTION_TIME_EXPIRED)], fail=True) == [("down", PEER)]


def test_the_source_is_the_nodes_address_on_the_peers_subnet() -> None:
    addrs = [
        HostAddress(ip_interface("10.0.0.5/24")),
        HostAddress(ip_interface("10.78.1.1/31")),
        HostAddress(ip_interface("fd00:78:1::1/127")),
    ]
    assert local_for(ip_address("10.78.1.0"), addrs) == "10.78.1.1"
    assert local_for(IPv6Address("fd00:78:1::"), addrs) == "fd00:78:1::1"
    assert local_for(ip_address("192.0.2.1"), addrs) is None


def test_the_section_is_announce_bgp_bfd() -> None:
    from tests.unit.test_config_bgp import error_of, parse, with_bgp

    assert parse(with_bgp()).announce.bgp.bfd == Bfd()
    cfg = parse(with_bgp(bfd={"enabled": True, "min_tx_ms": 300, "multiplier": 5}))
    assert cfg.announce.bgp.bfd == Bfd(enabled=True, min_tx_ms=300, multiplier=5)
    assert "announce.bgp.bfd.min_rx_ms" in error_of(with_bgp(bfd={"min_rx_ms": 10}))
