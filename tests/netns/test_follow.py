"""Quiet following on a real kernel: the classic follow filters on two raw VRRP sockets, and
the eBPF filter that counts the copies in a map.

What it tests: ``vrrp.transport.Transport.follow`` between two lab nodes (real veths through
the lab's bridge), both ways. Classic: the kernel accepts both classic BPF programs and reads
the IPv4 header at the offsets they use; copies of the followed advert go to the quiet socket
only, each with a kernel receive time (its age is small and the oldest comes first). eBPF
(``vrrp.kernel_follow``): the verifier accepts the program, the map counts the copies and
stamps the last one on the clock of ``time.monotonic()``. Either way the copies wake no
``select`` on the polled socket; anything else from the same sender (a priority 0), the same
message from another node, and everything after ``follow(None)`` go to the polled socket
only. For eBPF also: the longest adverts (255 addresses, VRRPv2 with its authentication
data) match, a copy with another TTL does not, a follow of another advert starts counting
that one, and a copy checked while the pattern is being written is delivered, not counted.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import time
from ipaddress import IPv4Address

import pytest

from vipd.lab.nsthread import in_netns
from vipd.lab.topology import Lab
from vipd.vrrp import kernel_follow, packet
from vipd.vrrp.transport import Datagram, Transport

VIPS = (IPv4Address("10.0.0.100"),)


def _transport(lab: Lab, name: str, *, kernel: bool = False) -> Transport:
    node = lab.node(name)
    return in_netns(
        node.ns,
        lambda: Transport(
            ifname="eth0",
            ifindex=socket.if_nametoindex("eth0"),
            source=IPv4Address(node.ipv4),
            kernel=kernel,
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


def _counting(t: Transport) -> None:
    """The eBPF filter is in use, or the test cannot say anything (a skip with the reason;
    under CI=true a failure)."""
    if t.follow_kind == "ebpf":
        return
    why = f"the eBPF follow filter could not be loaded: {t.kernel_error}"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


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


@pytest.mark.parametrize("kernel", [False, True], ids=["classic", "ebpf"])
def test_the_followed_advert_is_kept_off_the_polled_socket_and_the_rest_wakes_the_loop(
    lab: Lab, kernel: bool
) -> None:
    n1, n2, n3 = (_transport(lab, n, kernel=kernel) for n in ("n1", "n2", "n3"))
    try:
        src1, src3 = IPv4Address(lab.node("n1").ipv4), IPv4Address(lab.node("n3").ipv4)
        steady = _advert(src1, 200)
        n1.send(steady, packet.GROUP_V4)
        (first,) = _polled(n2)
        assert (first.src, first.ttl, first.message) == (src1, 255, steady)

        n2.follow(first)
        if kernel:
            _counting(n2)
            assert n2.quiet is None  # the map replaces the quiet socket
        else:
            assert n2.follow_kind == "classic"
        sent_at = []
        for _ in range(3):
            sent_at.append(time.monotonic())
            n1.send(steady, packet.GROUP_V4)
            time.sleep(0.05)
        assert _polled(n2, wait=0.3) == []  # nothing woke the polled socket
        counted = n2.receive_quiet()
        # The quiet socket gives each copy, the map one count with the last arrival.
        assert [n for _, _, n in counted] == ([3] if kernel else [1, 1, 1])
        quiet = [(age, d) for age, d, n in counted for _ in range(n)]
        assert [d for _, d in quiet] == [first] * 3
        ages = [age for age, _ in quiet]
        assert ages == sorted(ages, reverse=True)  # oldest first
        # Received when sent (same host): the ages agree with the send times, within 50 ms.
        now = time.monotonic()
        sent_ages = [now - at for at in sent_at]
        if kernel:
            sent_ages = [sent_ages[-1]] * len(sent_ages)
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
    """Send ``message`` ``n`` times; how many copies the receiver's map counted."""
    for _ in range(n):
        sender.send(message, packet.GROUP_V4)
        time.sleep(0.01)
    return sum(n for _, _, n in receiver.receive_quiet())


def test_the_ebpf_filter_matches_the_longest_adverts_and_nothing_but_the_pattern(
    lab: Lab,
) -> None:
    n1, n2 = (_transport(lab, n, kernel=True) for n in ("n1", "n2"))
    try:
        n2.prepare_follow()  # loaded before anything is followed: it matches nothing yet
        _counting(n2)
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
            _counting(n2)
            followed[message] = first
            assert _counted_after(n1, n2, message) == 2
            assert _polled(n2, wait=0.1) == []

        # The same message with TTL 254 (RFC 9568 §7.1 drops it: the loop must see it) and
        # with one address less are not the pattern.
        n1.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 254)
        assert _counted_after(n1, n2, longest) == 0
        assert [d.ttl for d in _polled(n2)] == [254, 254]
        n1.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        assert _counted_after(n1, n2, _advert(src1, 200, many[:-1])) == 0
        assert len(_polled(n2)) == 2

        # Copies counted but not read when another advert is followed are the old one's.
        for _ in range(2):
            n1.send(longest, packet.GROUP_V4)
            time.sleep(0.01)
        n2.follow(followed[v2])
        assert n2.counted_age() is None  # nothing of v2 yet
        assert [(d, n) for _, d, n in n2.receive_quiet()] == [(followed[longest], 2)]
        sent = time.monotonic()
        n1.send(v2, packet.GROUP_V4)
        time.sleep(0.01)
        age = n2.counted_age()  # a look that takes nothing
        assert age is not None and abs(age - (time.monotonic() - sent)) < 0.05
        assert _counted_after(n1, n2, v2) == 3
        assert _counted_after(n1, n2, longest) == 0 and len(_polled(n2)) == 2

        # While the pattern is being written (an odd sequence count) a copy is delivered.
        counted = n2._counted
        assert counted is not None
        seq = struct.unpack_from("@I", counted._mem, kernel_follow.SEQ)[0]
        struct.pack_into("@I", counted._mem, kernel_follow.SEQ, seq + 1)
        assert _counted_after(n1, n2, v2, n=1) == 0
        assert [d.message for d in _polled(n2)] == [v2]
        struct.pack_into("@I", counted._mem, kernel_follow.SEQ, seq + 2)
        assert _counted_after(n1, n2, v2, n=1) == 1
    finally:
        for t in (n1, n2):
            t.close()


def test_the_ebpf_loader_child_gives_up_real_time_scheduling(
    netns_ok: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast-advert daemon runs SCHED_RR (vipd.host.sched); the forked loader, whose verifier
    work has no deadline, must not keep a core from the real-time threads that have one. The
    child's _create is replaced by one that reports the child's policy as its error."""

    def report() -> tuple[int, int]:
        raise OSError(errno.EPERM, f"policy {os.sched_getscheduler(0)}")

    monkeypatch.setattr(kernel_follow, "_create", report)
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(10))
    try:
        with pytest.raises(OSError) as got:
            kernel_follow.load()
    finally:
        os.sched_setscheduler(0, before[0], before[1])
    assert str(got.value).endswith(f"policy {os.SCHED_OTHER}"), got.value
