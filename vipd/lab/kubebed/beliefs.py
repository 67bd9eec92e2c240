"""What each vipd believes, over time: its ``/status`` role, polled from the client namespace.

Run as ``python -m vipd.lab.kubebed.beliefs --target n1=10.77.0.11:2112 … --interval 0.1``.
Each target gets its own thread that GETs ``/status`` every ``interval`` and prints one line
when the answer changes::

    <monotonic> <node> <role> <vip_bound> <holder>

``role`` is ``leader``/``follower`` from the document, or ``unreachable``; ``holder`` is the
Lease holder the node last read (``-`` for none). CLOCK_MONOTONIC is one clock for the whole
machine, so the bed compares these times with ``ip monitor``'s and the prober's.

This module also holds ``Beliefs``, the bed-side handle that runs it and collects the lines
into ``Belief`` records.

What it must not do: decide who holds the VIP (the address watch is the truth for that; this
is each daemon's own story), or poll so often that it disturbs what it watches.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vipd.lab.topology import Lab, python_argv, python_env


@dataclass(frozen=True, slots=True)
class Belief:
    t: float
    node: str
    role: str  # leader | follower | unreachable
    vip_bound: bool
    holder: str | None


def parse(line: str) -> Belief | None:
    parts = line.split()
    if len(parts) != 5:
        return None
    try:
        t = float(parts[0])
    except ValueError:
        return None
    return Belief(t, parts[1], parts[2], parts[3] == "1", None if parts[4] == "-" else parts[4])


def _poll(node: str, url: str, interval: float, lock: threading.Lock) -> None:
    last: tuple[str, bool, str] | None = None
    while True:
        began = time.monotonic()
        try:
            # Generous: a client giving up mid-answer only makes vipd log a broken pipe.
            with urllib.request.urlopen(url, timeout=max(1.0, interval * 5)) as resp:
                doc: dict[str, Any] = json.loads(resp.read())
            lease = doc.get("lease") or {}
            now = (str(doc.get("role", "?")), bool(doc.get("vip_bound")),
                   str(lease.get("holder") or "-"))  # fmt: skip
        except (OSError, ValueError):
            now = ("unreachable", False, "-")
        if now != last:
            with lock:
                sys.stdout.write(f"{began:.6f} {node} {now[0]} {int(now[1])} {now[2]}\n")
                sys.stdout.flush()
            last = now
        time.sleep(max(0.0, interval - (time.monotonic() - began)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vipd.lab.kubebed.beliefs")
    parser.add_argument("--target", action="append", required=True, help="NODE=HOST:PORT")
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args(argv)
    lock = threading.Lock()
    for target in args.target:
        node, _, where = target.partition("=")
        url = f"http://{where}/status"
        threading.Thread(target=_poll, args=(node, url, args.interval, lock), daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        sys.stdin.read()  # until the bed closes our stdin
    return 0


class Beliefs:
    """Bed-side handle: runs the poller in the client namespace, collects its lines."""

    def __init__(self, lab: Lab, nodes: Mapping[str, str], port: int, interval: float = 0.1):
        self.lab = lab
        self.targets = [f"{n}={addr}:{port}" for n, addr in nodes.items()]
        self.interval = interval
        self.records: list[Belief] = []
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[Any] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        argv = python_argv("vipd.lab.kubebed.beliefs", "--interval", str(self.interval))
        for t in self.targets:
            argv += ["--target", t]
        self.proc = self.lab.spawn(
            self.lab.client_ns, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=python_env(), text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name="beliefs", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            b = parse(line)
            if b is not None:
                with self._lock:
                    self.records.append(b)

    def since(self, t: float) -> list[Belief]:
        with self._lock:
            return [b for b in self.records if b.t >= t]

    def leaders_at(self, t: float) -> list[str]:
        """Nodes whose last answer at or before ``t`` said ``leader``."""
        last: dict[str, Belief] = {}
        with self._lock:
            for b in self.records:
                if b.t <= t:
                    last[b.node] = b
        return sorted(n for n, b in last.items() if b.role == "leader")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=3)
        if self._reader is not None:
            self._reader.join(timeout=3)


if __name__ == "__main__":
    sys.exit(main())
