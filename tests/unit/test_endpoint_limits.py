"""The endpoint as a hostile neighbour sees it: slow heads, big bodies, a full pool, floods,
a pids limit (vipd.endpoint.serving under vipd.endpoint.server).

The timing these tests rely on is the documented limits (a head deadline shortened here to
2 s), each with the observation made well past it; "at once" is judged by what the client had
sent when the answer came (the rest of a 64 MB body), never by a wall-clock bound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.prereq import missing
from vipd import metrics
from vipd.endpoint import server as httpd


def start(monkeypatch: pytest.MonkeyPatch, head_timeout: float = 10.0) -> httpd.Endpoint:
    limits = dataclasses.replace(httpd.LIMITS, head_timeout=head_timeout)
    monkeypatch.setattr(httpd, "LIMITS", limits)
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    return ep


def beating(ep: httpd.Endpoint, stop: threading.Event) -> None:
    """Stands in for the event loop's heartbeat (else /healthz turns 503 after 2 s)."""
    while not stop.wait(0.2):
        ep.beat(time.monotonic())


@pytest.fixture
def ep(monkeypatch: pytest.MonkeyPatch) -> Iterator[httpd.Endpoint]:
    e = start(monkeypatch, head_timeout=2.0)
    stop = threading.Event()
    beat = threading.Thread(target=beating, args=(e, stop))
    beat.start()
    # Every worker running (the I/O thread starts them), so thread counts are stable.
    deadline = time.monotonic() + 10
    while e._server is not None and e._server.workers < httpd.LIMITS.workers:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        yield e
    finally:
        stop.set()
        beat.join()
        e.close()


def probe(port: int, path: str = "/healthz", timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def refused(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("vipd_http_refused_total", {"reason": reason}) or 0


def read_all(sock: socket.socket) -> bytes:
    out = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_a_trickled_head_is_cut_at_the_deadline_while_probes_are_answered(
    ep: httpd.Endpoint,
) -> None:
    """Slowloris: one byte every 0.2 s is never "idle", but the whole head has 2 s."""
    before = refused("head-timeout")
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    clients = [socket.create_connection(("127.0.0.1", ep.port), timeout=10) for _ in range(20)]
    codes: list[int] = []
    started = time.monotonic()
    cut_after: list[float] = []
    alive = list(clients)
    for i in range(len(head)):
        for c in list(alive):
            try:
                c.send(head[i : i + 1])
            except OSError:
                cut_after.append(time.monotonic() - started)
                alive.remove(c)
        if not alive:
            break
        codes.append(probe(ep.port))
        time.sleep(0.2)
    for c in clients:
        c.close()
    # The head would take 200 x 0.2 s = 40 s; every client was cut, none before its deadline.
    assert not alive, "a trickling client was never cut"
    assert min(cut_after) >= 2.0
    assert set(codes) == {200}, codes
    assert refused("head-timeout") - before >= 20


def test_a_big_body_is_refused_without_being_read(ep: httpd.Endpoint) -> None:
    size = 64 << 20
    rss_before = _rss()
    client = socket.create_connection(("127.0.0.1", ep.port), timeout=10)
    client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
    sent = [0]
    chunk = memoryview(b"x" * (1 << 20))

    def send_body() -> None:
        with contextlib.suppress(OSError):
            while sent[0] < size:
                sent[0] += client.send(chunk)

    sender = threading.Thread(target=send_body)
    sender.start()
    answer = read_all(client)
    sent_when_answered = sent[0]
    sender.join(30)
    client.close()
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"Connection: close" in answer
    # Answered long before the body was sent: the server did not wait for it.
    assert sent_when_answered < size // 4, sent_when_answered
    assert _rss() - rss_before < 16 << 20
    assert probe(ep.port) == 200


def test_a_kept_alive_connection_serves_request_after_request(ep: httpd.Endpoint) -> None:
    """A scraper's connection (Prometheus keeps it alive): the second request on it, sent
    after the first answer, is answered on the same connection."""
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as client:
        for _ in range(3):
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while not got.endswith(b"ok\n"):
                chunk = client.recv(65536)
                assert chunk, "the server closed a kept-alive connection"
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 OK\r\n")
            time.sleep(0.2)  # the connection is back with the I/O thread, waiting
    assert probe(ep.port) == 200


def test_a_client_that_closes_its_side_after_asking_is_answered_and_the_endpoint_goes_on(
    ep: httpd.Endpoint,
) -> None:
    """Request, then FIN at once (curl's --no-keepalive, many probes): the end of the
    client's side is seen while a worker answers; that is the end of the connection, and of
    nothing else."""
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            client.shutdown(socket.SHUT_WR)
            assert read_all(client).startswith(b"HTTP/1.1 200 OK\r\n")
    time.sleep(0.5)  # the I/O thread sees the end of those connections
    assert [probe(ep.port) for _ in range(3)] == [200] * 3


def test_a_chunked_body_is_refused(ep: httpd.Endpoint) -> None:
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as client:
        client.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n"
        )
        assert read_all(client).startswith(b"HTTP/1.1 400 ")


def _rss() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def test_a_full_pool_answers_503_at_once_the_probes_still_200_and_it_serves_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    rendering = threading.Semaphore(0)

    def slow_render(accept: str) -> tuple[bytes, str]:
        rendering.release()
        release.wait(30)
        return b"ok\n", "text/plain"

    monkeypatch.setattr(httpd, "_render_metrics", slow_render)
    ep = start(monkeypatch)
    scrapes: list[int] = []
    try:
        threads = [
            threading.Thread(target=lambda: scrapes.append(probe(ep.port, "/metrics", 30)))
            for _ in range(httpd.LIMITS.workers)
        ]
        for t in threads:
            t.start()
        for _ in threads:
            assert rendering.acquire(timeout=10)  # every worker is busy
        before = refused("busy")
        ep.beat(time.monotonic())
        # Answered while every worker is still held: the 503 did not wait for one, and the
        # probes never need one.
        assert probe(ep.port, "/status") == 503 and not release.is_set()
        assert refused("busy") == before + 1
        assert probe(ep.port) == 200 and probe(ep.port, "/readyz") == 503  # "starting"
        assert probe(ep.port, "/nope") == 404
        assert refused("busy") == before + 1 and not release.is_set()
        release.set()
        for t in threads:
            t.join(30)
        assert scrapes == [200] * httpd.LIMITS.workers
        ep.beat(time.monotonic())  # no event loop here: the beat it would give
        assert probe(ep.port) == 200 and probe(ep.port, "/readyz") == 503  # "starting"
    finally:
        release.set()
        ep.close()


def test_a_flood_of_connections_costs_no_threads_and_probes_get_in(
    ep: httpd.Endpoint,
) -> None:
    threads_before = threading.active_count()
    conns = []
    for i in range(400):
        c = socket.create_connection(("127.0.0.1", ep.port), timeout=10)
        if i % 2:
            c.send(b"GET /healthz HTTP/1.1\r\n")  # half a head
        conns.append(c)
    # 400 open connections against a limit of 64: the oldest were closed to make room,
    # and a new one (a probe) always gets in.
    assert [probe(ep.port) for _ in range(5)] == [200] * 5
    assert threading.active_count() == threads_before
    assert refused("evicted") > 0
    for c in conns:
        c.close()


# -- out of descriptors: the endpoint in a child process with a low RLIMIT_NOFILE ----------

NOFILE_CHILD = """
import os, resource, sys, threading, time
from vipd.endpoint import server
ep = server.Endpoint.bind("127.0.0.1:0")
ep.start()

def beat():
    while True:
        ep.beat(time.monotonic())
        time.sleep(0.2)

threading.Thread(target=beat, daemon=True).start()
time.sleep(0.5)  # every worker started (their selectors and pipes are open)
# Room for 8 more descriptors: the 9th connection finds accept failing with EMFILE.
used = len(os.listdir("/proc/self/fd"))
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, hard))
print(ep.port, flush=True)
sys.stdin.readline()
"""


def test_out_of_descriptors_accepting_backs_off_and_goes_on() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", NOFILE_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
        # EMFILE on accept: the oldest silent connection is closed to free a descriptor and
        # accepting resumes after a short pause, so a probe still gets in.
        assert [probe(port) for _ in range(3)] == [200] * 3
        for c in held:
            c.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        backoffs = float(text.split('vipd_http_backoffs_total{what="accept"} ')[1].split()[0])
        assert backoffs >= 1
    finally:
        proc.kill()
        proc.wait()


# -- a pids limit: the endpoint in a child process, in a pids cgroup ------------------------

CHILD = """
import sys, threading, time
from vipd.endpoint import server
ep = server.Endpoint.bind("127.0.0.1:0")

def beat():  # the event loop's heartbeat, in short
    while True:
        ep.beat(time.monotonic())
        time.sleep(0.2)

threading.Thread(target=beat, daemon=True).start()
print(ep.port, flush=True)
sys.stdin.readline()  # the parent has set the limit
ep.start()
print("started", flush=True)
sys.stdin.readline()
"""


def pids_cgroup_root() -> Path:
    """Where to make a pids cgroup: cgroup v2's root (the controller enabled for its
    children), else the v1 pids hierarchy. No pids controller at all: a skip, also in CI (a
    kernel or container without it cannot run this test); one that is there but unusable:
    `missing` (a failure under CI=true)."""
    v2 = Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "pids" in controllers.read_text().split():
        subtree = v2 / "cgroup.subtree_control"
        if "pids" not in subtree.read_text().split():
            try:
                subtree.write_text("+pids")
            except OSError as exc:
                missing(f"cannot enable the pids controller in {subtree}: {exc}")
        return v2
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists():
        return v1
    reason = "no pids cgroup controller on this machine (neither cgroup v2's nor v1's)"
    print(f"\nskipping: {reason}")
    pytest.skip(reason)


def test_under_a_pids_limit_accepting_goes_on(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        missing("needs root to make a pids cgroup")
    root = pids_cgroup_root()
    group = root / f"vipd-test-{os.getpid()}"
    group.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        (group / "cgroup.procs").write_text(str(proc.pid))
        # Room for the I/O thread and one worker: three of the four workers cannot start.
        current = int((group / "pids.current").read_text())
        (group / "pids.max").write_text(str(current + 2))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "started"
        conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
        # A thread per connection would have hit the limit 300 times over; these are answered.
        assert [probe(port) for _ in range(3)] == [200] * 3
        for c in conns:
            c.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'vipd_http_backoffs_total{what="thread"} ' in text
        backoffs = float(text.split('vipd_http_backoffs_total{what="thread"} ')[1].split()[0])
        assert backoffs >= 1
        # The limit lifted: the missing workers start on the back-off's next try.
        (group / "pids.max").write_text("max")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and int((group / "pids.current").read_text()) < (
            current + 5
        ):
            time.sleep(0.1)
        assert int((group / "pids.current").read_text()) == current + 5  # I/O + 4 workers
        assert probe(port) == 200
    finally:
        proc.kill()
        proc.wait()
        with contextlib.suppress(OSError):
            group.rmdir()
