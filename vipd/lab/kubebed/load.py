"""A load generator for one API server: many concurrent authorised LISTs, counted by status.

Run as ``python -m vipd.lab.kubebed.load --url https://10.77.0.11:6443/api/v1/configmaps
--token-file F --ca CA --threads 48``. Each thread keeps one HTTPS connection and sends GETs
back to back until SIGTERM; every 2 s, and at the end, it prints the counts by status, e.g.
``200=812 429=9120``. The bed points it at the node whose API Priority and Fairness level it
wants full, so that the requests of everyone else in that level are rejected with 429.

What it must not do: retry, back off or honour ``Retry-After`` (it exists to keep the seats
busy), or write anything.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import signal
import ssl
import sys
import threading
import time
import urllib.parse
from types import FrameType


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vipd.lab.kubebed.load")
    parser.add_argument("--url", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--threads", type=int, default=48)
    args = parser.parse_args(argv)
    url = urllib.parse.urlsplit(args.url)
    token = open(args.token_file).read().strip()  # noqa: SIM115 - read once at start
    ctx = ssl.create_default_context(cafile=args.ca)
    stop = threading.Event()
    counts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def worker() -> None:
        conn: http.client.HTTPSConnection | None = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPSConnection(
                        url.hostname or "", url.port or 443, context=ctx, timeout=5
                    )
                conn.request("GET", url.path, headers={"Authorization": f"Bearer {token}"})
                resp = conn.getresponse()
                resp.read()
                key = str(resp.status)
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                key = type(exc).__name__
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            with lock:
                counts[key] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.threads)]
    for t in threads:
        t.start()
    while not stop.wait(2.0):
        with lock:
            print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())), flush=True)
    with lock:
        print("final " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
