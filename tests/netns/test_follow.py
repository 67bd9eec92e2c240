"""Quiet following on a real kernel: the follow filters on two raw VRRP sockets.

What it tests: ``vrrp.transport.Transport.follow`` between two lab nodes (real veths through
the lab's bridge): the kernel accepts both classic BPF programs and reads the IPv4 header at
the offsets they use. Copies of the followed advert go to the quiet socket only, each with a
kernel receive time (its age is small and the oldest comes first) and wake no ``select`` on
the polled socket; anything else from the same sender (a priority 0), the same message from
another node, and everything after ``follow(None)`` go to the polled socket only.
"""

from __future__ import annotations

import select
import socket
import time
from ipaddress import IPv4Address

from vipd.lab.nsthread import in_netns
from vipd.lab.topology import Lab
from vipd.vrrp import packet
from vipd.vrrp.transport import Datagram, Transport

VIPS = (IPv4Address("10.0.0.100"),)


def _transport(lab: Lab, name: str) -> Transport:
    node = lab.node(name)
    return in_netns(
        node.ns,
        lambda: Transport(
            ifname="eth0", ifindex=socket.if_nametoindex("eth0"), source=IPv4Address(node.ipv4)
        ),
    )


def _advert(src: IPv4Address, priority: int) -> bytes:
    return packet.encode(
        packet.Advert(version=3, vrid=51, priority=priority, interval_cs=100, addresses=VIPS),
        src,
        packet.GROUP_V4,
    )


def _polled(t: Transport, wait: float = 0.5) -> list[Datagram]:
    """What the polled socket has within ``wait`` (the loop's view: select, then drain)."""
    out: list[Datagram] = []
    end = time.monotonic() + wait
    while time.monotonic() < end:
        ready, _, _ = select.select([t.sock], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        out.extend(d for d in t.receive() if isinstance(d, Datagram))
    return out


def test_the_followed_advert_goes_to_the_quiet_socket_and_the_rest_wakes_the_loop(
    lab: Lab,
) -> None:
    n1, n2, n3 = (_transport(lab, n) for n in ("n1", "n2", "n3"))
    try:
        src1, src3 = IPv4Address(lab.node("n1").ipv4), IPv4Address(lab.node("n3").ipv4)
        steady = _advert(src1, 200)
        n1.send(steady, packet.GROUP_V4)
        (first,) = _polled(n2)
        assert (first.src, first.ttl, first.message) == (src1, 255, steady)

        n2.follow(first)
        sent_at = []
        for _ in range(3):
            sent_at.append(time.monotonic())
            n1.send(steady, packet.GROUP_V4)
            time.sleep(0.05)
        assert _polled(n2, wait=0.3) == []  # nothing woke the polled socket
        quiet = n2.receive_quiet()
        assert [d for _, d in quiet] == [first] * 3
        ages = [age for age, _ in quiet]
        assert ages == sorted(ages, reverse=True)  # oldest first
        # Received when sent (same host): the ages agree with the send times, within 50 ms.
        now = time.monotonic()
        for age, at in zip(ages, sent_at, strict=True):
            assert abs(age - (now - at)) < 0.05, (ages, [now - a for a in sent_at])

        resign = _advert(src1, 0)
        n1.send(resign, packet.GROUP_V4)
        n3.send(_advert(src3, 200), packet.GROUP_V4)  # another router's steady advert
        got = _polled(n2)
        assert sorted((d.src, d.message[2]) for d in got) == [(src1, 0), (src3, 200)]
        assert n2.receive_quiet() == []

        n2.follow(None)
        n1.send(steady, packet.GROUP_V4)
        assert [d.message for d in _polled(n2)] == [steady]
        assert n2.receive_quiet() == []
    finally:
        for t in (n1, n2, n3):
            t.close()
