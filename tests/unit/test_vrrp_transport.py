"""``vrrp.transport.Transport.send``: the socket address each destination is sent to.

What it tests: the per-destination socket address (formatted once, then looked up by the
address object's identity) is right for every destination, for equal addresses that are
different objects, and for IPv6 (with the interface index). The socket is a recorder: opening
a raw socket needs root, and what is checked here is what vipd hands to ``sendmsg``.
"""

from __future__ import annotations

import socket
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from vipd.vrrp.transport import Transport


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, int, Any]] = []

    def sendmsg(self, buffers: list[bytes], ancdata: Any, flags: int, addr: Any) -> int:
        self.sent.append((buffers[0], flags, addr))
        return len(buffers[0])


class RecordingTransport(Transport):
    def _open(self) -> socket.socket:
        return Recorder()  # type: ignore[return-value]

    def _open_quiet(self) -> socket.socket | None:
        return None


def test_each_destination_gets_its_own_address_every_time() -> None:
    peers = (IPv4Address("10.0.0.12"), IPv4Address("10.0.0.13"))
    t = RecordingTransport(
        ifname="eth0", ifindex=2, source=IPv4Address("10.0.0.11"), unicast_peers=peers
    )
    rec: Recorder = t.sock  # type: ignore[assignment]
    for _ in range(3):
        for dst in t.destinations:
            t.send(b"m", dst)
    t.send(b"m", IPv4Address("10.0.0.12"))  # equal to a peer, another object
    t.send(b"m", IPv4Address("10.0.0.14"))
    assert [addr for _, _, addr in rec.sent] == [("10.0.0.12", 0), ("10.0.0.13", 0)] * 3 + [
        ("10.0.0.12", 0),
        ("10.0.0.14", 0),
    ]
    assert all(flags == 0 for _, flags, _ in rec.sent)  # unicast may be routed


def test_the_multicast_group_is_sent_without_routing_and_v6_names_the_interface() -> None:
    t4 = RecordingTransport(ifname="eth0", ifindex=2, source=IPv4Address("10.0.0.11"))
    t6 = RecordingTransport(ifname="eth0", ifindex=7, source=IPv6Address("fe80::11"))
    for t in (t4, t6):
        t.send(b"m", t.destinations[0])
        t.send(b"m", t.destinations[0])
    rec4: Recorder = t4.sock  # type: ignore[assignment]
    rec6: Recorder = t6.sock  # type: ignore[assignment]
    assert [a for _, _, a in rec4.sent] == [("224.0.0.18", 0)] * 2
    assert [a for _, _, a in rec6.sent] == [("ff02::12", 0, 0, 7)] * 2
    assert {f for _, f, _ in rec4.sent + rec6.sent} == {socket.MSG_DONTROUTE}
