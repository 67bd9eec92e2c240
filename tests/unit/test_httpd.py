"""vipd.endpoint.server: the real endpoint on a loopback port, driven by a real asyncio loop.

The loop-blocked test blocks the event loop for longer than HEALTHZ_MAX_AGE and checks that
/healthz and /readyz turn 503 while it is blocked and 200 again after: the server thread
answers by itself, from the heartbeat the loop no longer updates. The only timing these tests
rely on is the documented threshold (2 s), with the block lasting well past it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import re
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator

import pytest

from vipd import metrics
from vipd.endpoint import server as httpd


@pytest.fixture
def endpoint() -> Iterator[httpd.Endpoint]:
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    try:
        yield ep
    finally:
        ep.close()


def get(ep: httpd.Endpoint, path: str) -> tuple[int, str, str]:
    url = f"http://127.0.0.1:{ep.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_metrics_are_served_in_the_text_format(endpoint: httpd.Endpoint) -> None:
    metrics.init_vrrp(node="n1", vips=["10.0.0.100"], interface="eth0", priority=100)
    code, ctype, body = get(endpoint, "/metrics")
    assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert (
        "# HELP vipd_role " in body
        and 'vipd_role{backend="vrrp",role="init",vip="10.0.0.100"} 1.0' in body
    )
    assert "vipd_event_loop_heartbeat_age_seconds " in body
    assert "process_resident_memory_bytes" in body


def test_openmetrics_when_asked(endpoint: httpd.Endpoint) -> None:
    req = urllib.request.Request(
        f"http://127.0.0.1:{endpoint.port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        assert resp.read().decode().rstrip().endswith("# EOF")


def test_readyz_follows_what_the_loop_publishes(endpoint: httpd.Endpoint) -> None:
    assert get(endpoint, "/readyz")[::2] == (503, "starting\n")
    assert get(endpoint, "/healthz")[::2] == (200, "ok\n")
    endpoint.publish({"role": "follower"}, True, "")
    assert get(endpoint, "/readyz")[::2] == (200, "ready\n")
    assert metrics.REGISTRY.get_sample_value("vipd_ready") == 1
    endpoint.publish({"role": "init"}, False, "interface eth0 is down: not in the election")
    assert get(endpoint, "/readyz")[::2] == (503, "interface eth0 is down: not in the election\n")
    assert metrics.REGISTRY.get_sample_value("vipd_ready") == 0


def test_status_is_the_published_document_plus_the_verdicts(endpoint: httpd.Endpoint) -> None:
    endpoint.publish({"role": "leader", "vip": "10.0.0.100", "backends": []}, True, "")
    code, ctype, body = get(endpoint, "/status")
    doc = json.loads(body)
    assert (code, ctype) == (200, "application/json")
    assert doc["role"] == "leader" and doc["backends"] == []
    assert (doc["ready"], doc["ready_reason"], doc["healthy"]) == (True, "ready", True)


def test_unknown_path_is_404(endpoint: httpd.Endpoint) -> None:
    assert get(endpoint, "/nope")[0] == 404


def test_a_taken_port_is_a_one_line_listen_error(endpoint: httpd.Endpoint) -> None:
    listen = f"127.0.0.1:{endpoint.port}"
    with pytest.raises(httpd.ListenError) as info:
        httpd.Endpoint.bind(listen)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"cannot listen on {listen} (metrics.listen): ")
    assert "another vipd" in text


def test_ipv6_listen() -> None:
    ep = httpd.Endpoint.bind("[::1]:0")
    ep.start()
    try:
        with urllib.request.urlopen(f"http://[::1]:{ep.port}/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        ep.close()


def test_healthz_fails_while_the_loop_is_blocked_and_recovers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real loop with the real heartbeat; one callback blocks it for 2 x the limit. The beat
    and the limit are a quarter of the shipped ones, in the same ratio (the limit is 2 beats):
    the same path in 1 s of blocking instead of 4."""
    assert httpd.HEALTHZ_MAX_AGE == 2 * httpd.HEARTBEAT_INTERVAL
    monkeypatch.setattr(httpd, "HEARTBEAT_INTERVAL", httpd.HEARTBEAT_INTERVAL / 4)
    monkeypatch.setattr(httpd, "HEALTHZ_MAX_AGE", httpd.HEALTHZ_MAX_AGE / 4)
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    block_for = 2 * httpd.HEALTHZ_MAX_AGE
    seen: dict[str, list[tuple[float, int, str]]] = {"healthz": [], "readyz": []}
    unblocked_at: list[float] = []
    before: list[tuple[int, str, str]] = []
    after: list[bool] = []
    blocked = threading.Event()
    unblocked = threading.Event()

    def poll_until_healthy() -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if get(ep, "/healthz")[0] == 200 and get(ep, "/readyz")[0] == 200:
                return True
            time.sleep(0.05)
        return False

    async def main() -> None:
        loop = asyncio.get_running_loop()
        beats: list[float] = []

        def on_beat(now: float) -> None:
            beats.append(now)
            ep.publish({"role": "follower"}, True, "")

        heart = loop.create_task(ep.heartbeat(on_beat))
        while len(beats) < 2:  # beating, and published ready
            await asyncio.sleep(0.05)
        before.append(await asyncio.to_thread(get, ep, "/readyz"))

        def block() -> None:
            blocked.set()
            time.sleep(block_for)  # the loop is stuck here, as on a blocking write
            unblocked_at.append(time.monotonic())  # before the loop can beat again
            unblocked.set()

        loop.call_soon(block)
        await asyncio.sleep(0)
        after.append(await asyncio.to_thread(poll_until_healthy))
        heart.cancel()

    def prober() -> None:
        blocked.wait(10)
        while not unblocked.is_set():
            for path in ("healthz", "readyz"):
                code, _, body = get(ep, f"/{path}")
                seen[path].append((time.monotonic(), code, body))
            time.sleep(0.1)

    t = threading.Thread(target=prober)
    t.start()
    try:
        asyncio.run(main())
    finally:
        t.join(15)
        ep.close()
    assert before[0][::2] == (200, "ready\n")
    for path in ("healthz", "readyz"):
        # Answers completed while the loop was blocked (a later one may see it beat again).
        during = [(c, b) for t, c, b in seen[path] if t < unblocked_at[0]]
        codes = [c for c, _ in during]
        # Answered throughout the block, and 503 once the heartbeat is older than the limit.
        assert 503 in codes, seen[path]
        first_bad = codes.index(503)
        assert all(c == 503 for c in codes[first_bad:]), seen[path]
        body = during[first_bad][1]
        assert body.startswith("event loop blocked: last heartbeat "), body
        age = float(body.split("heartbeat ")[1].split(" s ago")[0])
        assert age > httpd.HEALTHZ_MAX_AGE
    assert after == [True], "healthz/readyz did not recover after the loop ran again"


def test_close_releases_the_port() -> None:
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    port = ep.port
    ep.close()
    again = httpd.Endpoint.bind(f"127.0.0.1:{port}")
    again.close()


# A process that binds the endpoint, stops serving with keep_lock, then spends a while on its
# way out (a non-daemon thread, as an API call in flight on a pool is): the port stays taken
# until the process has ended.
LINGERING = """
import sys, threading, time
from vipd.endpoint import server
ep = server.Endpoint.bind("127.0.0.1:0")
ep.start()
port = ep.port
ep.close(keep_lock=True)
threading.Thread(target=time.sleep, args=(1.0,)).start()
print(port, flush=True)
"""


def test_keep_lock_holds_the_port_until_the_process_ends() -> None:
    import subprocess
    import sys

    from vipd.deploy.adopt import port_free

    proc = subprocess.Popen([sys.executable, "-c", LINGERING], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        assert not port_free("127.0.0.1", port), "released before the process ended"
        assert proc.wait(timeout=30) == 0
        assert port_free("127.0.0.1", port)
    finally:
        proc.kill()
        proc.wait()


def test_a_client_that_hangs_up_mid_answer_is_not_a_traceback(
    endpoint: httpd.Endpoint, capfd: pytest.CaptureFixture[str]
) -> None:
    # A body far larger than the socket buffers, so the server is still writing when the
    # client's reset arrives.
    endpoint.publish({"backends": ["x" * 64] * 100_000}, True, "")
    for _ in range(3):
        client = socket.create_connection(("127.0.0.1", endpoint.port), timeout=5)
        client.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        client.recv(1)  # the answer has started
        # Close with a reset rather than a FIN: the server's next write fails at once.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
    time.sleep(0.5)  # let the handler threads hit the reset
    assert get(endpoint, "/healthz")[0] in (200, 503)  # still serving
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Broken pipe" not in err and "reset" not in err, err


def test_status_is_built_on_the_loop_for_each_request() -> None:
    """Attached, /status is no copy published on a timer: each request has the loop build it."""
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    built_on: list[threading.Thread] = []
    docs: list[dict[str, object]] = []

    async def main() -> None:
        def build() -> dict[str, object]:
            built_on.append(threading.current_thread())
            return {"role": "leader", "builds": len(built_on)}

        ep.attach(asyncio.get_running_loop(), build)
        ep.set_ready(True, "")
        for _ in range(2):
            docs.append(json.loads((await asyncio.to_thread(get, ep, "/status"))[2]))

    try:
        asyncio.run(main())
    finally:
        ep.close()
    assert [d["builds"] for d in docs] == [1, 2]
    assert built_on == [threading.main_thread()] * 2  # on the loop's thread, not the server's
    assert docs[1]["ready"] is True and docs[1]["role"] == "leader"


def test_status_of_a_busy_loop_is_the_last_document(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that cannot build the document in time: the last one built, with fresh verdicts."""
    monkeypatch.setattr(httpd, "STATUS_WAIT", 0.1)
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    got: list[dict[str, object]] = []
    builds: list[int] = []

    async def main() -> None:
        def build() -> dict[str, object]:
            builds.append(1)
            return {"builds": len(builds)}

        ep.attach(asyncio.get_running_loop(), build)
        got.append(json.loads((await asyncio.to_thread(get, ep, "/status"))[2]))
        asked = threading.Event()

        def blocked_get() -> None:
            asked.set()
            got.append(json.loads(get(ep, "/status")[2]))

        t = threading.Thread(target=blocked_get)
        t.start()
        asked.wait(5)
        t.join(10)  # the loop is busy here (this call blocks it) until the request is answered
        await asyncio.sleep(0)

    try:
        asyncio.run(main())
    finally:
        ep.close()
    assert [d["builds"] for d in got] == [1, 1]
    assert builds == [1]  # the request that timed out was not built later for nobody


def test_close_ends_the_server_thread() -> None:
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    thread = ep._thread
    assert thread is not None and thread.is_alive()
    ep.close()
    assert not thread.is_alive()


# -- the HTTP/1.1 server itself (RFC 9112) ------------------------------------------------


def raw(ep: httpd.Endpoint, data: bytes, timeout: float = 5) -> bytes:
    """Send ``data`` on one connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", ep.port), timeout=timeout) as client:
        client.sendall(data)
        out = b""
        while chunk := client.recv(65536):
            out += chunk
    return out


def split_responses(data: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """(status line, headers, body) of each response in ``data`` (Content-Length framed)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        n = int(headers["content-length"])
        out.append((lines[0], headers, rest[:n]))
        data = rest[n:]
    return out


def test_persistent_connection_answers_pipelined_requests_in_order(
    endpoint: httpd.Endpoint,
) -> None:
    got = split_responses(
        raw(
            endpoint,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            b"\r\n"  # a stray empty line between requests is allowed
            b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
    )
    assert [(s, b) for s, _, b in got] == [
        ("HTTP/1.1 200 OK", b"ok\n"),
        ("HTTP/1.1 404 Not Found", b"not found: try /metrics, /healthz, /readyz or /status\n"),
        ("HTTP/1.1 503 Service Unavailable", b"starting\n"),
    ]
    _, headers, _ = got[0]
    assert headers["server"] == "vipd" and headers["cache-control"] == "no-store"
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert re.fullmatch(
        r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT", headers["date"]
    )
    assert "connection" not in headers and got[2][1]["connection"] == "close"


def test_http10_gets_one_answer_and_a_close(endpoint: httpd.Endpoint) -> None:
    (got,) = split_responses(raw(endpoint, b"GET /healthz HTTP/1.0\r\n\r\n"))
    assert got[0] == "HTTP/1.1 200 OK" and got[1]["connection"] == "close" and got[2] == b"ok\n"


def test_head_has_the_headers_of_get_and_no_body(endpoint: httpd.Endpoint) -> None:
    data = raw(endpoint, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: 3\r\n" in head
    assert body == b""


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 501 Not Implemented"),
        (
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
            "HTTP/1.1 413 Request Entity Too Large",
        ),
        (
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
        ),
        (b"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),  # no Host: RFC 9112 3.2
        (b"GARBAGE\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET / HTTP/2.0\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported"),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * (httpd.LIMITS.max_head + 10) + b"\r\n\r\n",
            "HTTP/1.1 431 Request Header Fields Too Large",
        ),
    ],
)
def test_bad_requests_get_an_error_and_a_close(
    endpoint: httpd.Endpoint, request_bytes: bytes, status: str
) -> None:
    (got,) = split_responses(raw(endpoint, request_bytes))
    assert got[0] == status and got[1]["connection"] == "close"
    assert get(endpoint, "/healthz")[0] == 200  # and the server goes on


def test_a_quiet_connection_is_closed_after_the_idle_timeout(
    monkeypatch: pytest.MonkeyPatch, endpoint: httpd.Endpoint
) -> None:
    endpoint.close()
    monkeypatch.setattr(httpd, "LIMITS", dataclasses.replace(httpd.LIMITS, idle_timeout=0.3))
    endpoint = httpd.Endpoint.bind("127.0.0.1:0")
    endpoint.start()
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=10) as client:
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = client.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 OK")
        assert client.recv(65536) == b""  # closed by the server, well before our 10 s
    endpoint.close()


# -- the heartbeat and the beats other timers give ------------------------------------------


def _lag() -> tuple[float, float]:
    get = metrics.REGISTRY.get_sample_value
    return (
        get("vipd_event_loop_lag_seconds_count") or 0.0,
        get("vipd_event_loop_lag_seconds_sum") or 0.0,
    )


def _run_heart(
    ep: httpd.Endpoint,
    body: Callable[[list[float], list[float]], Awaitable[None]],
) -> tuple[list[float], list[float]]:
    """Run the heartbeat while ``body(beats, fired)`` runs: every beat's time, and the times
    the heartbeat's own timer fired."""
    beats: list[float] = []
    fired: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        own = ep._heart_fired

        def counted() -> None:
            fired.append(time.monotonic())
            own()

        ep._heart_fired = counted  # type: ignore[method-assign]
        heart = loop.create_task(ep.heartbeat(beats.append))
        await asyncio.sleep(0)  # the heartbeat arms its timer
        try:
            await body(beats, fired)
        finally:
            heart.cancel()
            with pytest.raises(asyncio.CancelledError):
                await heart

    asyncio.run(main())
    return beats, fired


def test_the_heartbeat_beats_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpd, "HEARTBEAT_INTERVAL", 0.05)
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    try:
        before = _lag()

        async def idle(beats: list[float], fired: list[float]) -> None:
            while len(beats) < 4:
                await asyncio.sleep(0.01)

        beats, fired = _run_heart(ep, idle)
    finally:
        ep.close()
    assert len(fired) >= 4 and beats[:4] == pytest.approx(fired[:4], abs=0.001)
    assert all(b - a >= 0.05 - 0.002 for a, b in itertools.pairwise(beats))
    assert _lag()[0] - before[0] >= 4


def test_a_timer_near_the_beat_beats_for_it_and_the_heartbeat_stays_asleep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loop timer every 0.6 interval (as a VRRP backup's down timer is, against the 0.5 s
    heartbeat): every second one beats, with the lag it was offered, and the heartbeat's own
    timer never fires; the beat's age stays under one interval. At the 0.5 s interval a timer
    must be 0.2 s late for the heartbeat to fire: a loaded 2-core machine running the unit
    suite on two workers delayed a 0.06 s sleep past the 0.04 s a 0.1 s interval leaves."""
    interval = 0.5
    monkeypatch.setattr(httpd, "HEARTBEAT_INTERVAL", interval)
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ages: list[float] = []
    try:
        before = _lag()

        async def timers(beats: list[float], fired: list[float]) -> None:
            for _ in range(12):
                await asyncio.sleep(0.6 * interval)
                ages.append(ep.heartbeat_age())
                ep.offer_beat(0.003)

        beats, fired = _run_heart(ep, timers)
    finally:
        ep.close()
    assert fired == []
    assert len(beats) >= 5
    assert max(ages) < interval
    count, total = _lag()
    assert count - before[0] == len(beats)
    assert total - before[1] == pytest.approx(0.003 * len(beats))


def test_a_timer_far_from_the_beat_leaves_it_to_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(httpd, "HEARTBEAT_INTERVAL", 0.2)
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    try:
        ep.offer_beat(0.0)  # no heartbeat yet: nothing to stand in for

        async def early(beats: list[float], fired: list[float]) -> None:
            ep.offer_beat(0.0)  # just armed: 0.2 s away, more than half an interval
            assert beats == []
            while not fired:
                await asyncio.sleep(0.01)

        beats, fired = _run_heart(ep, early)
    finally:
        ep.close()
    assert beats[0] == pytest.approx(fired[0], abs=0.001)
