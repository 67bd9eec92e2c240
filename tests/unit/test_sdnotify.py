"""sd_notify: a datagram on $NOTIFY_SOCKET (path or abstract), nothing without it."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

from vipd.host import sdnotify


def test_ready_reaches_a_path_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(path)
        assert sdnotify.notify("READY=1", env={"NOTIFY_SOCKET": path})
        assert srv.recv(64) == b"READY=1"


def test_stopping_reaches_an_abstract_socket() -> None:
    name = "vipd-test-" + secrets.token_hex(4)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        assert sdnotify.notify("STOPPING=1", env={"NOTIFY_SOCKET": "@" + name})
        assert srv.recv(64) == b"STOPPING=1"


def test_without_a_socket_or_with_a_dead_one_it_is_a_no_op(tmp_path: Path) -> None:
    assert not sdnotify.notify("READY=1", env={})
    assert not sdnotify.notify("READY=1", env={"NOTIFY_SOCKET": "relative/path"})
    assert not sdnotify.notify("READY=1", env={"NOTIFY_SOCKET": str(tmp_path / "gone")})


def test_watchdog_period_from_the_environment() -> None:
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "10000000"}, pid=42) == 10.0
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "42"}, 42) == 10.0
    # For another process (a child that inherited the environment), or not set, or garbage.
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "7"}, 42) is None
    assert sdnotify.watchdog_period({}, 42) is None
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "0"}, 42) is None
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "ten"}, 42) is None
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "1", "WATCHDOG_PID": "x"}, 42) is None


def test_watchdog_pings_at_most_every_half_period() -> None:
    name = "vipd-test-" + secrets.token_hex(4)
    env = {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "42"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        srv.setblocking(False)
        dog = sdnotify.Watchdog.from_env(env, pid=42)
        assert dog.period == 2.0
        sent = [t for t in (100.0, 100.5, 100.99, 101.0, 101.5, 102.2, 102.3) if dog.ping(t)]
        assert sent == [100.0, 101.0, 102.2]
        assert [srv.recv(64) for _ in sent] == [b"WATCHDOG=1"] * 3
        try:
            extra = srv.recv(64)
        except BlockingIOError:
            extra = b""
        assert extra == b""


def test_watchdog_off_sends_nothing() -> None:
    name = "vipd-test-" + secrets.token_hex(4)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        srv.setblocking(False)
        dog = sdnotify.Watchdog.from_env({"NOTIFY_SOCKET": "@" + name}, pid=42)
        assert dog.period is None and not dog.ping(1.0) and not dog.ping(100.0)
        other = sdnotify.Watchdog.from_env(
            {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "7"}, pid=42
        )
        assert not other.ping(1.0)
        try:
            got = srv.recv(64)
        except BlockingIOError:
            got = b""
        assert got == b""
