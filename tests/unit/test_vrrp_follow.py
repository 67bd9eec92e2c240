"""Quiet following: a Backup reads its steady master's unchanged adverts in batches.

What it tests: the driver's side on a fake wire whose follow filter is an equality test (the
real filter is tested on a kernel in ``tests/netns/test_follow.py``, and its program here on a
small classic-BPF interpreter): the master's first advert starts the following; its unchanged
copies then wake nobody and are handled when the down timer comes, each at its receive time, so
the takeover after the master stops is at the same instant as when every advert woke us; what
differs (a priority 0) is handled at once, after the queued copies, not before them; a priority
change handles the queue first; a copy taken by both sockets is handled once; leaving the
Backup state ends the following. And the filter program: exactly the followed datagram passes
the quiet one, everything else the polled one.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from ipaddress import IPv4Address
from typing import Any

import pytest

from tests.unit.hostfakes import FakeWire, advert
from tests.unit.test_vrrp_driver import PEER, Node, run, until
from vipd import config, metrics
from vipd.vrrp import packet, state
from vipd.vrrp.driver import TIMER_SLACK
from vipd.vrrp.transport import SO_TIMESTAMPNS, Datagram, Transport, follow_filter, verdict_filter


def _wire(n: Node) -> FakeWire:
    assert n.wire is not None
    return n.wire


def _mdi(n: Node) -> float:
    return n.election.machine.mdi


async def _following(n: Node, priority: int = 200) -> None:
    """Started, and the master's first advert (at 1000.0) handled."""
    await n.start()
    _wire(n).inject(advert(PEER, priority))
    await until(lambda: n.election.stats.adverts_received == 1)
    assert _wire(n).followed == advert(PEER, priority)


def _at_priority(priority: int) -> config.Config:
    """The test node's config at another priority (for ``reconfigure``)."""
    return config.parse(
        {
            "node": "n1",
            "vip": "10.0.0.100",
            "interface": "eth0",
            "election": {"mode": "vrrp", "vrrp": {"vrid": 51, "priority": priority}},
        }
    )


def _copies(n: Node, *at: float) -> FakeWire:
    """The master's unchanged advert received at each of ``at`` (the fake clock left there)."""
    wire = _wire(n)
    for t in at:
        n.clock.now = t
        wire.inject(advert(PEER, 200))
    return wire


def test_the_masters_unchanged_adverts_wait_for_the_timer_and_count_from_their_arrival() -> None:
    async def scenario(n: Node) -> None:
        await _following(n)
        wire = _copies(n, 1001.0, 1002.0, 1003.0)
        assert len(wire.quiet) == 3 and wire.queue == []  # nothing woke the loop
        assert n.election.stats.adverts_received == 1
        due = n.timers.fire_next()  # the down timer armed from the first advert
        assert abs(due - (1000.0 + _mdi(n) - TIMER_SLACK)) < 1e-9
        m = n.election.machine
        assert m.state is state.State.BACKUP
        assert n.election.stats.adverts_received == 4
        assert m.last_advert_at == 1003.0
        assert m.deadline is not None and abs(m.deadline - (1003.0 + _mdi(n))) < 1e-9
        # The master stops: the takeover is at 1003 + Master_Down_Interval, as if every
        # advert had woken us.
        due = n.timers.fire_next()
        assert abs(due - (1003.0 + _mdi(n) - TIMER_SLACK)) < 1e-9
        assert n.election.machine.state is state.State.ACTIVE
        assert abs(n.clock.now - (1003.0 + _mdi(n))) < 1e-9
        assert wire.followed is None  # a leader hears every advert on the polled socket
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_priority_zero_is_handled_at_once_after_the_queued_copies() -> None:
    async def scenario(n: Node) -> None:
        await _following(n)
        wire = _copies(n, 1001.0, 1002.0)
        n.clock.now = 1002.5
        wire.inject(advert(PEER, 0))  # differs from the followed advert: wakes the loop
        await until(lambda: n.election.stats.adverts_received == 4)
        m = n.election.machine
        # The queued copies came first; the resignation, last, set the Skew_Time timer. In
        # the other order they would have pushed the takeover out by a whole down interval.
        assert m.deadline is not None and abs(m.deadline - (1002.5 + m.skew)) < 1e-9
        assert m.last_advert_at == 1002.0
        n.timers.fire_next()  # the advert; the bind after the contest window
        assert m.contest_pending
        n.timers.fire_next()
        assert m.state is state.State.ACTIVE
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_priority_change_handles_the_queue_at_the_old_priority_first() -> None:
    async def scenario(n: Node) -> None:
        await _following(n)
        _copies(n, 1001.0, 1002.0)
        n.clock.now = 1002.2
        n.election.reconfigure(_at_priority(250))
        m = n.election.machine
        # Received while we were below the master, so they were the master's to follow
        # (at 250 they would be discarded and the preemption would come a down interval early).
        assert m.last_advert_at == 1002.0
        assert n.election.stats.adverts_received == 3
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_copy_both_sockets_took_is_handled_once() -> None:
    async def scenario(n: Node) -> None:
        await _following(n)
        wire = _wire(n)
        # While the filters changed, the polled socket took the advert received at 1000.0
        # (handled above) and so did the quiet one.
        wire.quiet.append((1000.0, advert(PEER, 200)))
        n.clock.now = 1000.5
        assert n.election.follower.catch_up() == 0
        assert n.election.stats.adverts_received == 1
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_lower_priority_master_is_not_followed_when_we_preempt() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        _wire(n).inject(advert(PEER, 50))
        await until(lambda: n.election.stats.adverts_received == 1)
        # Discarded (we preempt it when the down timer fires): every advert is read.
        assert _wire(n).followed is None
        n.stop.set()
        await n.stopped()

    run(scenario)


# -- the filter program, on a classic BPF interpreter (linux/filter.h semantics) -------------


def _run_bpf(program: bytes, pkt: bytes) -> int:
    insns = [struct.unpack_from("@HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = (int(x) for x in insns[pc])
        if code in (0x20, 0x28, 0x30):  # ld W/H/B abs: out of bounds drops the packet
            size = {0x20: 4, 0x28: 2, 0x30: 1}[code]
            if k + size > len(pkt):
                return 0
            acc = int.from_bytes(pkt[k : k + size], "big")
        elif code == 0x54:
            acc &= k
        elif code == 0x15:
            pc += jt if acc == k else jf
        elif code == 0x05:
            pc += k
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


SRC, DST = IPv4Address(PEER), packet.GROUP_V4


def _ipv4(
    message: bytes, src: IPv4Address = SRC, ttl: int = 255, frag: int = 0, ihl: int = 5
) -> bytes:
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x40 | ihl,
        0xC0,
        20 + len(message),
        7,
        frag,
        ttl,
        112,
        0,
        src.packed,
        DST.packed,
    )
    return header + b"\x00" * (4 * ihl - 20) + message


@pytest.mark.parametrize("addresses", [1, 3, 100])
def test_the_filter_passes_exactly_the_followed_datagram(addresses: int) -> None:
    vips = tuple(IPv4Address(f"10.0.{i // 250}.{i % 250 + 1}") for i in range(addresses))
    msg = packet.encode(
        packet.Advert(version=3, vrid=51, priority=200, interval_cs=100, addresses=vips),
        SRC,
        DST,
    )
    quiet = follow_filter(SRC, DST, msg, keep=True)
    polled = follow_filter(SRC, DST, msg, keep=False)
    other_prio = packet.encode(
        packet.Advert(version=3, vrid=51, priority=0, interval_cs=100, addresses=vips), SRC, DST
    )
    same = _ipv4(msg)
    assert _run_bpf(quiet, same) == 0xFFFFFFFF and _run_bpf(polled, same) == 0
    # The IP header's identification and checksum may change: still the same advert.
    assert _run_bpf(quiet, same[:4] + b"\x12\x34" + same[6:]) == 0xFFFFFFFF
    different = [
        _ipv4(other_prio),
        _ipv4(msg, src=IPv4Address("10.0.0.13")),
        _ipv4(msg, ttl=254),
        _ipv4(msg, frag=0x2000),  # more fragments
        _ipv4(msg, ihl=6),  # options shift the message
        _ipv4(msg[:-1] + bytes([msg[-1] ^ 1])),  # the last address byte
        _ipv4(msg + b"\x00\x00\x00\x00"),  # longer
    ]
    for pkt in different:
        assert _run_bpf(quiet, pkt) == 0, pkt.hex()
        assert _run_bpf(polled, pkt) == 0xFFFFFFFF, pkt.hex()
    assert _run_bpf(verdict_filter(0), same) == 0
    assert _run_bpf(verdict_filter(0xFFFFFFFF), same) == 0xFFFFFFFF


def test_the_masters_advert_age_counts_the_queued_copies() -> None:
    def age() -> float | None:
        return metrics.REGISTRY.get_sample_value(
            "vipd_vrrp_master_advert_age_seconds", {"vip": "10.0.0.100"}
        )

    async def scenario(n: Node) -> None:
        await _following(n)
        wire = _wire(n)
        n.clock.now = 1001.0
        wire.inject(advert(PEER, 200))
        n.clock.now = 1001.25
        assert age() == pytest.approx(0.25)  # a scrape on the loop's thread reads them
        n.clock.now = 1002.0
        wire.inject(advert(PEER, 200))
        n.clock.now = 1002.5
        assert await asyncio.to_thread(age) == pytest.approx(0.5)  # the HTTP thread's scrape
        n.clock.now = 1003.0
        wire.inject(advert(PEER, 200))
        n.clock.now = 1003.75
        master = n.agent.status(n.clock.now)["master"]
        assert master is not None and master["advert_age_s"] == pytest.approx(0.75)
        assert n.election.stats.adverts_received == 4
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_formerly_followed_advert_on_the_quiet_socket_takes_the_ordinary_path() -> None:
    async def scenario(n: Node) -> None:
        await _following(n)
        wire = _wire(n)
        # Another master of higher priority took over; a copy of the old master's advert
        # came on the quiet socket just before the filters changed to the new one's.
        other = advert("10.0.0.13", 250)
        n.clock.now = 1000.5
        wire.inject(other)
        await until(lambda: n.election.machine.master_ip == IPv4Address("10.0.0.13"))
        assert wire.followed == other
        wire.quiet.append((1000.6, advert(PEER, 200)))
        n.clock.now = 1000.7
        assert n.election.follower.catch_up() == 1
        m = n.election.machine
        # Handled as what it is (the old master's advert, priority 200), not as a copy of
        # the followed one: the master is the old one again, as if it had come the usual way.
        assert (m.master_ip, m.master_priority, m.last_advert_at) == (
            IPv4Address(PEER),
            200,
            1000.6,
        )
        n.stop.set()
        await n.stopped()

    run(scenario)


class _QueuedSocket:
    """A raw socket's receive side: queued IPv4 frames, each with its SO_TIMESTAMPNS."""

    def __init__(self) -> None:
        self.frames: list[tuple[bytes, float]] = []
        self.filters = 0

    def setsockopt(self, *args: object) -> None:
        self.filters += 1

    def recvmsg(
        self, size: int, space: int
    ) -> tuple[bytes, list[tuple[int, int, bytes]], int, Any]:
        if not self.frames:
            raise BlockingIOError
        data, at = self.frames.pop(0)
        sec, nsec = int(at), int((at - int(at)) * 1e9)
        stamp = (socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("@qq", sec, nsec))
        return data, [stamp], 0, (str(SRC), 0)


class _QuietTransport(Transport):
    def _open(self) -> socket.socket:
        return _QueuedSocket()  # type: ignore[return-value]

    def _open_quiet(self) -> socket.socket | None:
        return _QueuedSocket()  # type: ignore[return-value]


def test_the_quiet_socket_hands_back_the_followed_datagram_itself_for_each_copy() -> None:
    """A copy (any IP ID and header checksum) is the followed Datagram object, not parsed
    again; a datagram that differs (queued from an earlier following) is parsed as before,
    and so is every datagram once the following ends. Each comes with its age."""
    msg = packet.encode(
        packet.Advert(version=3, vrid=51, priority=200, interval_cs=100, addresses=(SRC,)),
        SRC,
        DST,
    )
    older = packet.encode(
        packet.Advert(version=3, vrid=51, priority=150, interval_cs=100, addresses=(SRC,)),
        SRC,
        DST,
    )
    t = _QuietTransport(ifname="eth0", ifindex=2, source=IPv4Address("10.0.0.11"))
    quiet: _QueuedSocket = t.quiet  # type: ignore[assignment]
    followed = Datagram(SRC, DST, 255, msg)
    t.follow(followed)
    now = time.time()
    other_id = bytearray(_ipv4(msg))
    other_id[4:6] = b"\x12\x34"  # the IP ID, as each of the master's adverts has its own
    quiet.frames = [
        (_ipv4(older), now - 0.3),
        (_ipv4(msg), now - 0.2),
        (bytes(other_id), now - 0.1),
        (_ipv4(msg, ttl=254), now - 0.05),
    ]
    got = t.receive_quiet()
    assert [d is followed for _, d in got] == [False, True, True, False]
    assert got[0][1] == Datagram(SRC, DST, 255, older)
    assert got[3][1] == Datagram(SRC, DST, 254, msg)
    assert [age for age, _ in got] == pytest.approx([0.3, 0.2, 0.1, 0.05], abs=0.05)
    t.follow(None)
    quiet.frames = [(_ipv4(msg), now)]
    ((_, d),) = t.receive_quiet()
    assert d == followed and d is not followed


def _armed(n: Node) -> list[Any]:
    return [t for t in n.timers.pending if not t.cancelled]


def test_a_master_we_would_now_preempt_is_no_longer_followed() -> None:
    # Our priority rose above the master's: its copies would no longer only restart the down
    # timer (following.follows_quietly), so the copies queued so far are taken at the old
    # priority and every advert is read again.
    async def scenario(n: Node) -> None:
        await _following(n)
        _copies(n, 1001.0, 1002.0)
        n.clock.now = 1002.2
        n.election.reconfigure(_at_priority(250))
        m = n.election.machine
        assert m.last_advert_at == 1002.0 and n.election.stats.adverts_received == 3
        assert _wire(n).followed is None
        assert _armed(n) != []  # the down timer, on the loop
        n.stop.set()
        await n.stopped()

    run(scenario)
