"""`vipd.routed.exabgp.ExaBgpSpeaker` with the real ExaBGP 5.0 and its relay, against a peer
that never answers (a closed port on loopback): the child's start and replay, its death as a
withdrawal in vipd's view, the restart, a stuck child killed, the relay ending ExaBGP when
vipd's side of the socket closes, and a graceful stop that leaves nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address, ip_network

import pytest

from vipd.routed.exabgp import ExaBgpSpeaker, daemon_user_env, exabgp_problem
from vipd.routed.speaker import Peer, SpeakerConfig

NET = ip_network("10.79.0.100/32")
NET6 = ip_network("fd00:79::100/128")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(what: str, check: Callable[[], bool], timeout: float = 20.0) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.fixture
def speaker(tmp_path: os.PathLike[str]) -> Iterator[ExaBgpSpeaker]:
    problem = exabgp_problem()
    if problem is not None:
        pytest.skip(problem)
    cfg = SpeakerConfig(
        65100,
        IPv4Address("127.0.0.1"),
        9,
        (Peer(IPv4Address("127.0.0.2"), 65000, closed_port()),),
    )
    sp = ExaBgpSpeaker(cfg, runtime_root=str(tmp_path), stuck_after=3.0)
    sp.start()
    try:
        yield sp
    finally:
        sp.stop(graceful=False)


def test_announce_is_replayed_to_a_restarted_child_and_a_death_is_a_withdrawal(
    speaker: ExaBgpSpeaker,
) -> None:
    speaker.announce(NET)
    speaker.announce(NET6)  # no IPv6 peer: recorded, sent to nobody
    wait("the relay connects", lambda: speaker.announced() == {NET, NET6})
    wait("the announce is answered", lambda: not speaker._pending)
    assert speaker.errors == 0 and speaker.bad_lines == 0
    assert speaker.sessions() == {IPv4Address("127.0.0.2"): False}
    proc = speaker._proc
    assert proc is not None
    proc.kill()
    wait("the death is seen", lambda: speaker.deaths == 1)
    assert speaker.announced() == frozenset() or speaker.starts == 2
    wait("a new child", lambda: speaker.starts == 2 and speaker.announced() == {NET, NET6})
    speaker.withdraw(NET)
    assert speaker.announced() == {NET6}
    wait("the withdraw is answered", lambda: not speaker._pending)
    assert speaker.errors == 0


def test_a_stuck_child_is_killed_and_restarted(speaker: ExaBgpSpeaker) -> None:
    wait("the relay connects", lambda: speaker._conn is not None)
    proc = speaker._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)  # stuck: no answer to the next ping
    took = wait("the stuck child is killed", lambda: speaker.kills == 1, 15)
    print(f"stuck child killed after {took:.1f} s")
    wait("a new child", lambda: speaker.starts == 2 and speaker._conn is not None)


def test_the_relay_ends_exabgp_when_vipds_side_closes(speaker: ExaBgpSpeaker) -> None:
    wait("the relay connects", lambda: speaker._conn is not None)
    proc = speaker._proc
    assert proc is not None
    conn = speaker._conn
    assert conn is not None
    conn.shutdown(socket.SHUT_RDWR)  # what the kernel does when vipd dies
    wait("ExaBGP ended by its relay", lambda: proc.poll() is not None, 10)
    assert proc.returncode == -signal.SIGKILL


def test_a_graceful_stop_ends_the_child_and_removes_the_runtime_dir(
    speaker: ExaBgpSpeaker,
) -> None:
    wait("the relay connects", lambda: speaker._conn is not None)
    proc = speaker._proc
    assert proc is not None and speaker.dir is not None
    assert oct(speaker.dir.stat().st_mode & 0o777) == oct(0o700)
    assert oct((speaker.dir / "exabgp.conf").stat().st_mode & 0o777) == oct(0o600)
    speaker.stop(graceful=True)
    assert proc.poll() is not None
    assert not speaker.dir.exists()
    assert speaker.deaths == 0  # a stop is not a death


def test_a_user_without_a_passwd_entry_keeps_exabgps_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # systemd's DynamicUser= without nss-systemd: the lookup fails, the child must still start.
    assert daemon_user_env(0) == {"exabgp_daemon_user": "root"}

    def unknown(uid: int) -> object:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr("vipd.routed.exabgp.pwd.getpwuid", unknown)
    assert daemon_user_env(64542) == {}
