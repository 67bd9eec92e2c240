"""`vipd adopt` against a real port held by a real process.

The holder below stands in for the static vipd and the kubelet together: it listens on the
port (the per-node lock) and exits once its manifest file is gone, as the kubelet stops a
static pod whose file was removed. No root: it uses a free port on 127.0.0.1.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HOLDER = """
import os, socket, sys, time
manifest, port, follow = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "follow"
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen()
print("listening", flush=True)
while True:
    time.sleep(0.2)
    if follow and not os.path.exists(manifest):
        time.sleep(0.5)  # a graceful stop takes a moment
        sys.exit(0)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, int, list[subprocess.Popen[str]]]]:
    manifest = tmp_path / "manifests" / "vipd.yaml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    procs: list[subprocess.Popen[str]] = []
    yield manifest, free_port(), procs
    for p in procs:
        p.kill()
        p.wait()


def start_holder(manifest: Path, port: int, follow: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(manifest), str(port), "follow" if follow else "stay"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
    return proc


def adopt(manifest: Path, port: int, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vipd", "adopt", "--manifest", str(manifest),
         "--listen", f"127.0.0.1:{port}", "--timeout", str(timeout), "--interval", "0.05"],
        capture_output=True, text=True, timeout=timeout + 30, check=False,
    )  # fmt: skip


def test_adopt_removes_the_manifest_and_returns_once_the_port_is_released(
    holder: tuple[Path, int, list[subprocess.Popen[str]]],
) -> None:
    manifest, port, procs = holder
    static = start_holder(manifest, port, follow=True)
    procs.append(static)
    started = time.monotonic()
    out = adopt(manifest, port, timeout=30)
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert not manifest.exists()
    assert static.wait(timeout=5) == 0  # it was still running when adopt began waiting
    assert took >= 0.5, "adopt returned before the holder could have let go"
    assert f"removed the static manifest {manifest}" in out.stderr
    assert f"127.0.0.1:{port} is free after" in out.stderr


def test_adopt_times_out_with_a_clear_message_when_the_port_stays_taken(
    holder: tuple[Path, int, list[subprocess.Popen[str]]],
) -> None:
    manifest, port, procs = holder
    stuck = start_holder(manifest, port, follow=False)
    procs.append(stuck)
    started = time.monotonic()
    out = adopt(manifest, port, timeout=0.5)  # 10 polls at --interval 0.05
    took = time.monotonic() - started
    assert out.returncode == 1, out.stderr
    assert took >= 0.5
    assert stuck.poll() is None  # adopt never kills anything
    assert not manifest.exists()
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("vipd adopt: gave up after")
    assert f"127.0.0.1:{port} is still taken" in last and "not starting a second vipd" in last


def test_adopt_without_a_static_manifest_only_checks_the_port(tmp_path: Path) -> None:
    port = free_port()
    out = adopt(tmp_path / "absent.yaml", port, timeout=5)
    assert out.returncode == 0, out.stderr
    assert "no static manifest at" in out.stderr


def test_a_connection_in_time_wait_does_not_count_as_taken(tmp_path: Path) -> None:
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end goes to TIME_WAIT
    client.close()
    server.close()
    out = adopt(tmp_path / "absent.yaml", port, timeout=5)
    assert out.returncode == 0, out.stderr


def test_adopt_refuses_what_waiting_cannot_fix(tmp_path: Path) -> None:
    (tmp_path / "dir.yaml").mkdir()
    out = adopt(tmp_path / "dir.yaml", free_port(), timeout=5)
    assert out.returncode == 2 and "not a regular file" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "vipd", "adopt", "--manifest", str(tmp_path / "x"),
         "--listen", "127.0.0.1:http"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 2 and "--listen" in out.stderr
