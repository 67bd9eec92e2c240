"""vipd.bfd.driver on the loopback: two BfdSessions in one process (each on a port of its
own instead of 3784), real UDP sockets, the event loop's clock. What RFC 5881 asks of the
transport (TTL 255 sent and required, the source port range) and the seam's callbacks."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from vipd.bfd import BfdSessions, Diag, State
from vipd.bfd.driver import SOURCE_PORTS, client_diag
from vipd.bfd.packet import ControlPacket, encode
from vipd.bfd.session import StateChange

Calls = list[tuple[str, bool, int]]
MS, MULT = 100, 3  # the defaults: a detection time of 0.3 s
MARGIN = 0.5  # s on top of a protocol bound, as the netns tests allow on this shared machine


def free_udp_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def until(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def pair(
    host: str, body: Callable[[BfdSessions, BfdSessions, Calls, Calls], Awaitable[None]]
) -> None:
    """Two ends, ``a`` and ``b``, each with ``host`` as its one peer, Up before ``body``."""

    async def main() -> None:
        pa, pb = free_udp_port(host), free_udp_port(host)
        calls_a: Calls = []
        calls_b: Calls = []
        a = BfdSessions(lambda *c: calls_a.append(c), port=pa, peer_port=pb)
        b = BfdSessions(lambda *c: calls_b.append(c), port=pb, peer_port=pa)
        try:
            a.add_peer(host, MS, MS, MULT)
            b.add_peer(host, MS, MS, MULT)
            await until(lambda: bool(calls_a) and bool(calls_b))
            assert calls_a[0][1:] == (True, Diag.NONE) and calls_b[0][1:] == (True, Diag.NONE)
            await body(a, b, calls_a, calls_b)
        finally:
            a.close()
            b.close()

    asyncio.run(main())


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


HOSTS = [
    "127.0.0.1",
    pytest.param(
        "::1", marks=pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback here")
    ),
]


@pytest.mark.parametrize("host", HOSTS)
def test_two_ends_come_up_and_stay_up(host: str) -> None:
    async def body(a: BfdSessions, b: BfdSessions, ca: Calls, cb: Calls) -> None:
        await asyncio.sleep(1.0)  # 10 intervals: the Poll Sequence for 100 ms is over
        assert len(ca) == len(cb) == 1
        [sa] = a.status()
        assert sa.state is State.UP and sa.remote_state is State.UP
        assert SOURCE_PORTS[0] <= sa.source_port <= SOURCE_PORTS[1]
        assert sum(a.dropped.values()) == sum(b.dropped.values()) == 0, (a.dropped, b.dropped)

    pair(host, body)


@pytest.mark.parametrize("host", HOSTS)
def test_removing_a_peer_tells_it_admin_down(host: str) -> None:
    async def body(a: BfdSessions, b: BfdSessions, ca: Calls, cb: Calls) -> None:
        a.remove_peer(host)
        await until(lambda: len(cb) == 2)
        assert cb[1] == (host, False, Diag.ADMINISTRATIVELY_DOWN)
        assert ca == [(host, True, Diag.NONE)]  # the remover is not told: it asked
        assert a.status() == []

    pair(host, body)


def test_silence_is_detected() -> None:
    async def body(a: BfdSessions, b: BfdSessions, ca: Calls, cb: Calls) -> None:
        loop = asyncio.get_running_loop()
        # a goes quiet without a word (what a killed process does)
        for peer in a._peers.values():
            if peer.timer is not None:
                peer.timer.cancel()
            peer.sock.close()
        a._peers.clear()
        t0 = loop.time()
        await until(lambda: len(cb) == 2)
        assert cb[1] == ("127.0.0.1", False, Diag.CONTROL_DETECTION_TIME_EXPIRED)
        # the detection time at the agreed fast rate (3 × 100 ms), not the slow start's 3 s
        assert loop.time() - t0 <= MULT * MS / 1000 + MARGIN

    pair("127.0.0.1", body)


def test_ttl_other_than_255_unknown_sessions_and_wrong_sources_are_dropped() -> None:
    async def body(a: BfdSessions, b: BfdSessions, ca: Calls, cb: Calls) -> None:
        [sa] = a.status()
        port = a._port
        good = ControlPacket(State.UP, 0, 3, sa.remote_discr, sa.local_discr, 100_000, 100_000)

        def send(data: bytes, ttl: int, source: str = "127.0.0.1") -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
                s.bind((source, 0))
                s.sendto(data, ("127.0.0.1", port))

        send(encode(good), 64)
        send(encode(good), 254)
        await until(lambda: a.dropped["ttl"] == 2)
        unknown = ControlPacket(State.UP, 0, 3, 7, sa.local_discr ^ 1, 100_000, 100_000)
        send(encode(unknown), 255)
        await until(lambda: a.dropped["unknown_session"] == 1)
        send(encode(good), 255, source="127.0.0.2")
        await until(lambda: a.dropped["wrong_source"] == 1)
        send(b"\x20" * 10, 255)
        await until(lambda: a.dropped["short"] == 1)
        assert [s.state for s in a.status()] == [State.UP]

    pair("127.0.0.1", body)


def test_a_peer_twice_or_of_the_wrong_family_is_refused() -> None:
    async def main() -> None:
        s = BfdSessions(lambda *_: None, port=free_udp_port("127.0.0.1"))
        try:
            s.add_peer("127.0.0.1")
            with pytest.raises(ValueError, match="already"):
                s.add_peer("127.0.0.1")
            with pytest.raises(ValueError, match="family"):
                s.add_peer("127.0.0.2", local="::1")
            with pytest.raises(ValueError, match="link-local address needs its interface"):
                s.add_peer("fe80::1")
            with pytest.raises(OSError):
                s.add_peer("fe80::1", interface="no-such-if0")
            assert [p.peer for p in s.status()] == ["127.0.0.1"]
        finally:
            s.close()

    asyncio.run(main())


def change(new: State, diag: int, remote: State, remote_diag: int = 0) -> StateChange:
    return StateChange(State.UP, new, diag, remote, remote_diag)


def test_client_diag() -> None:
    # RFC 5882 §3.2: the peer's AdminDown is told apart from a failure
    admin = change(State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, State.ADMIN_DOWN, 7)
    assert client_diag(admin) == Diag.ADMINISTRATIVELY_DOWN
    said_down = change(State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, State.DOWN)
    assert client_diag(said_down) == Diag.NEIGHBOR_SIGNALED_SESSION_DOWN
    silent = change(State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED, State.UP)
    assert client_diag(silent) == Diag.CONTROL_DETECTION_TIME_EXPIRED
