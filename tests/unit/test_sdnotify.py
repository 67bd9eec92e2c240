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
