"""Quiet following on a real kernel: the classic follow filters on two raw VRRP sockets.

What it tests: ``vrrp.transport.Transport.follow`` between two lab nodes (real veths through
the lab's bridge), both ways: the kernel accepts both classic BPF programs and reads the IPv4
header at the offsets they use; copies of the followed advert go to the quiet socket only, each
with a kernel receive time (its age is small and the oldest comes first), and wake no
``select`` on the polled socket; anything else from the same sender (a priority 0), the same
message from another node, and everything after ``follow(None)`` go to the polled socket only.
Also: the longest adverts (255 addresses, VRRPv2 with its authentication data) match, a copy
with another TTL or one address less does not, and copies queued before a follow of another
advert come back as what they are (the old advert), not as the new one.
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
            ifname="eth0",
            ifindex=socket.if_nametoindex("eth0"),
            source=IPv4Address(node.ipv4),
        ),
    )


def _advert(
    src: IPv4Address,
    priority: int,
    vips: tuple[IPv4Address, ...] = VIPS,
    *,
    version: int = 3,
    auth: bytes = b"",
) -> bytes:
    return packet.encode(
        packet.Advert(
            version=version,
            vrid=51,
            priority=priority,
            interval_cs=100,
            addresses=vips,
            auth_type=1 if auth else 0,
            auth_data=auth,
        ),
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


def test_the_followed_advert_is_kept_off_the_polled_socket_and_the_rest_wakes_the_loop(
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
        assert n2.quiet is not None
        sent_at = []
        for _ in range(3):
            sent_at.append(time.monotonic())
            n1.send(steady, packet.GROUP_V4)
            time.sleep(0.05)
        assert _polled(n2, wait=0.3) == []  # nothing woke the polled socket
        quiet = n2.receive_quiet()
        # The quiet socket gives each copy with its own receive time.
        assert [d for _, d in quiet] == [first] * 3
        ages = [age for age, _ in quiet]
        assert ages == sorted(ages, reverse=True)  # oldest first
        # Received when sent (same host): the ages agree with the send times, within 50 ms.
        now = time.monotonic()
        sent_ages = [now - at for at in sent_at]
        for age, want in zip(ages, sent_ages, strict=True):
            assert abs(age - want) < 0.05, (ages, sent_ages)

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


def _counted_after(sender: Transport, receiver: Transport, message: bytes, n: int = 2) -> int:
    """Send ``message`` ``n`` times; how many copies the receiver's quiet socket took."""
    for _ in range(n):
        sender.send(message, packet.GROUP_V4)
        time.sleep(0.01)
    return len(receiver.receive_quiet())


def test_the_classic_filter_matches_the_longest_adverts_and_nothing_but_the_advert(
    lab: Lab,
) -> None:
    n1, n2 = (_transport(lab, n) for n in ("n1", "n2"))
    try:
        src1 = IPv4Address(lab.node("n1").ipv4)
        many = tuple(IPv4Address(f"10.9.{i // 250}.{i % 250 + 1}") for i in range(255))
        v2 = _advert(src1, 200, version=2, auth=b"secret")
        longest = _advert(src1, 200, many)
        assert len(longest) == 8 + 4 * 255  # the program's last word is compared
        followed: dict[bytes, Datagram] = {}
        for message in (v2, longest):
            n1.send(message, packet.GROUP_V4)
            (first,) = _polled(n2)
            n2.follow(first)
            followed[message] = first
            assert _counted_after(n1, n2, message) == 2
            assert _polled(n2, wait=0.1) == []

        # The same message with TTL 254 (RFC 9568 §7.1 drops it: the loop must see it) and
        # with one address less are not the followed advert.
        n1.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 254)
        assert _counted_after(n1, n2, longest) == 0
        assert [d.ttl for d in _polled(n2)] == [254, 254]
        n1.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        assert _counted_after(n1, n2, _advert(src1, 200, many[:-1])) == 0
        assert len(_polled(n2)) == 2

        # Copies queued but not read when another advert is followed are the old one's.
        for _ in range(2):
            n1.send(longest, packet.GROUP_V4)
            time.sleep(0.01)
        n2.follow(followed[v2])
        old = n2.receive_quiet()
        assert [d for _, d in old] == [followed[longest]] * 2
        assert all(d is not followed[v2] for _, d in old)
        assert _counted_after(n1, n2, v2) == 2
        assert _counted_after(n1, n2, longest) == 0 and len(_polled(n2)) == 2
    finally:
        for t in (n1, n2):
            t.close()
