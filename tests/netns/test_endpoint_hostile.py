"""A hostile neighbour against a live vipd's endpoint, while a real Prometheus scrapes it.

On 3 vipd nodes in network namespaces (tests/netns/test_metrics.py's cluster and Prometheus),
a client in the client namespace attacks the leader's :2112, one attack after the other:
300 idle connections held open, 20 connections trickling their request heads a byte at a
time (slowloris), a GET with a 64 MB body, and a flood of pipelined probe-like requests from 4
threads (a flood of /metrics requests can take the four workers and make a scrape get 503:
docs/reference/metrics.md says so). Throughout,
/healthz is probed the way the kubelet does, and Prometheus scrapes every 0.5 s.

What must hold: every probe during every attack is answered 200;
Prometheus saw the leader ``up`` in every scrape; the 413 came while most of the body was still
unsent; and Prometheus's own view of ``vipd_http_refused_total`` shows the head timeouts and
the refused body.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
import time
from collections.abc import Callable

from tests.netns.test_metrics import (
    SCRAPE_INTERVAL,
    Cluster,
    Prometheus,
    http_get,
    wait_for,
)
from tests.netns.test_metrics import cluster as cluster  # the fixture
from tests.prereq import missing
from vipd.lab.nsthread import in_netns

PORT = 2112
BODY = 64 << 20


def in_background(ns: str, fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=in_netns, args=(ns, fn), daemon=True)
    t.start()
    return t


def test_the_endpoint_stands_a_hostile_neighbour_while_prometheus_scrapes(
    cluster: Cluster,
) -> None:
    if shutil.which("prometheus") is None:
        missing("needs prometheus (apt-get install prometheus; scripts/setup does it)")
    lab = cluster.lab
    target = lab.node("n1").ipv4
    url = f"http://{target}:{PORT}/healthz"
    prom = Prometheus(lab)
    prom.start()
    stop = threading.Event()
    held: list[socket.socket] = []
    body_answer: list[bytes] = []
    body_sent_when_answered: list[int] = []
    try:
        assert wait_for(lambda: prom.instances("up == 1") == {f"{target}:{PORT}"} | {
            f"{n.ipv4}:{PORT}" for n in lab.nodes
        }, 30.0), prom.query("up")  # fmt: skip
        t0 = time.time()

        def hold() -> None:
            for _ in range(300):
                with contextlib.suppress(OSError):
                    held.append(socket.create_connection((target, PORT), timeout=5))

        def slowloris() -> None:
            conns = [socket.create_connection((target, PORT), timeout=5) for _ in range(20)]
            head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
            for i in range(len(head)):
                if stop.is_set() or not conns:
                    break
                for c in list(conns):
                    try:
                        c.send(head[i : i + 1])
                    except OSError:
                        conns.remove(c)
                time.sleep(0.2)
            for c in conns:
                c.close()

        def big_body() -> None:
            c = socket.create_connection((target, PORT), timeout=30)
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % BODY)
            sent = [0]
            chunk = memoryview(b"x" * (1 << 20))

            def send() -> None:
                with contextlib.suppress(OSError):
                    while sent[0] < BODY:
                        sent[0] += c.send(chunk)

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            with contextlib.suppress(OSError):
                body_answer.append(c.recv(4096))
            body_sent_when_answered.append(sent[0])
            sender.join(30)
            c.close()

        probes: dict[str, list[int]] = {}
        failures: list[str] = []
        # One attack after the other: the held connections would otherwise push the
        # slowloris ones out (the oldest connection goes at the limit) before their deadline.
        for name, attack, seconds in (
            ("held", hold, 3.0),
            ("slowloris", slowloris, 12.0),  # past the 10 s head deadline
            ("body", big_body, 3.0),
        ):
            t = in_background(lab.client_ns, attack)
            codes = probes.setdefault(name, [])
            end = time.monotonic() + seconds
            while time.monotonic() < end or (t.is_alive() and name != "slowloris"):
                code, text = http_get(lab.client_ns, url)
                codes.append(code)
                if code != 200:
                    failures.append(f"{name}: {code} {text[:120]}")
                time.sleep(0.2)
            if name == "slowloris":
                stop.set()
            t.join(60)
            if name == "held":
                for c in held:
                    c.close()

        flood_until = time.monotonic() + 30  # bounded, whatever the endpoint does

        def flood() -> None:
            for _ in range(300):
                if time.monotonic() > flood_until:
                    break
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection((target, PORT), timeout=5) as c,
                ):
                    # Kept alive: several requests per connection, then a new connection.
                    c.sendall(
                        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    )
                    while c.recv(65536):
                        pass

        floods = [in_background(lab.client_ns, flood) for _ in range(4)]
        during_flood = []
        while any(t.is_alive() for t in floods):
            during_flood.append(http_get(lab.client_ns, url)[0])
            time.sleep(0.1)
        after = [http_get(lab.client_ns, url)[0] for _ in range(5)]
        t1 = time.time()
        # Let Prometheus take the scrapes that cover the end of the window.
        time.sleep(4 * SCRAPE_INTERVAL)

        assert all(set(codes) == {200} for codes in probes.values()), failures
        assert during_flood and set(during_flood) == {200}, during_flood
        assert after == [200] * 5
        assert body_answer and body_answer[0].startswith(b"HTTP/1.1 413 "), body_answer
        assert body_sent_when_answered[0] < BODY // 4, body_sent_when_answered
        window = f"{int(t1 - t0) + 2}s"
        up = prom.query(f'min_over_time(up{{instance="{target}:{PORT}"}}[{window}])')
        assert up and float(up[0]["value"][1]) == 1.0, up
        scrapes = prom.query(f'count_over_time(up{{instance="{target}:{PORT}"}}[{window}])')
        assert scrapes and float(scrapes[0]["value"][1]) >= (t1 - t0) / SCRAPE_INTERVAL / 2

        def refused(reason: str) -> float:
            got = prom.query(
                f'vipd_http_refused_total{{instance="{target}:{PORT}",reason="{reason}"}}'
            )
            return float(got[0]["value"][1]) if got else 0.0

        assert refused("head-timeout") >= 20
        assert refused("body") >= 1
    finally:
        stop.set()
        for c in held:
            c.close()
        prom.stop()
