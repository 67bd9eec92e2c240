"""Runs vipd's HealthChecker alone in a namespace and reports what it sees, one JSON line each.

Run as ``python -m vipd.lab.healthwatch --local 10.77.0.11 --port 6444 --interval 0.2
--timeout 0.15 --rise 2 --fall 2 [--target ADDR …] [--ca-file F] [--lag]``. Lines (``t`` is
``time.monotonic()``, one clock for the whole machine):

- ``{"event": "check", "t", "addr", "ok", "status", "error", "duration"}`` per finished check;
- ``{"event": "change", "t", "addr", "healthy", "status", "error"}`` per transition;
- with ``--lag``, ``{"event": "lag", "t", "max_ms"}`` once a second: the worst lateness of a
  10 ms ticker on the same loop, i.e. how long the checks kept the loop from other work;
- at the end ``{"event": "end", "cpu_s", "wall_s", "checks"}`` (CPU of this process).

It runs on uvloop (as the daemon does) unless ``--loop asyncio``, until stdin closes,
SIGTERM/SIGINT, or ``--duration`` elapses. The netns tests and ``bench/health.py`` use it
through ``HealthWatch``, the lab-side handle in this module.

What it must not do: judge anything (the tests do); it only reports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import subprocess
import sys
import threading
import time
from ipaddress import ip_address
from typing import Any

from vipd.config import Health
from vipd.health.checker import Address, HealthChecker
from vipd.health.tracker import BackendHealth, Outcome
from vipd.lab.topology import Lab, Node, python_argv, python_env


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


async def _watch(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.read(1) else None)
    params = Health(
        path=args.path,
        port=args.port,
        local=ip_address(args.local),
        interval=args.interval,
        timeout=args.timeout,
        rise=args.rise,
        fall=args.fall,
        ca_file=args.ca_file,
    )
    checks = 0

    def on_check(addr: Address, o: Outcome) -> None:
        nonlocal checks
        checks += 1
        if not args.quiet:
            _emit(
                {"event": "check", "t": time.monotonic(), "addr": addr, "ok": o.ok,
                 "status": o.status, "error": o.error, "duration": o.duration}
            )  # fmt: skip

    def on_change(addr: Address, s: BackendHealth) -> None:
        _emit(
            {"event": "change", "t": time.monotonic(), "addr": addr, "healthy": s.healthy,
             "status": s.status, "error": s.error}
        )  # fmt: skip

    targets = [ip_address(t) for t in args.target]
    checker = HealthChecker(targets, params, on_change, on_check=on_check)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.monotonic()
    _emit({"event": "start", "t": wall0, "targets": [str(a) for a in checker.targets()]})
    checker.start()
    lagger = loop.create_task(_lag(0.01)) if args.lag else None
    try:
        if args.duration:
            await asyncio.wait_for(stop.wait(), args.duration)
        else:
            await stop.wait()
    except TimeoutError:
        pass
    checker.stop()
    await checker.closed()
    if lagger is not None:
        lagger.cancel()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    _emit(
        {"event": "end", "t": time.monotonic(), "cpu_s": cpu,
         "wall_s": time.monotonic() - wall0, "checks": checks}
    )  # fmt: skip


async def _lag(tick: float) -> None:
    worst = 0.0
    window = time.monotonic() + 1.0
    while True:
        before = time.monotonic()
        await asyncio.sleep(tick)
        now = time.monotonic()
        worst = max(worst, now - before - tick)
        if now >= window:
            _emit({"event": "lag", "t": now, "max_ms": round(worst * 1e3, 3)})
            worst = 0.0
            window = now + 1.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m vipd.lab.healthwatch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--local", required=True)
    p.add_argument("--target", action="append", default=[])
    p.add_argument("--port", type=int, default=6443)
    p.add_argument("--path", default="/readyz", choices=("/readyz", "/healthz", "/livez"))
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=0.8)
    p.add_argument("--rise", type=int, default=2)
    p.add_argument("--fall", type=int, default=3)
    p.add_argument("--ca-file", default=None)
    p.add_argument("--duration", type=float, default=0.0)
    p.add_argument("--lag", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no per-check lines")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = p.parse_args(argv)
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(_watch(args))
    else:
        asyncio.run(_watch(args))
    return 0


class HealthWatch:
    """Lab-side handle: runs the watcher in a namespace and collects its lines."""

    def __init__(self, lab: Lab, ns: str, local: str, *args: str) -> None:
        self.lab = lab
        self.ns = ns
        self.argv = python_argv("vipd.lab.healthwatch", "--local", local, *args)
        self.events: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def on(cls, lab: Lab, node: Node | None, local: str, *args: str) -> HealthWatch:
        """In ``node``'s namespace, or the client's for None."""
        return cls(lab, node.ns if node is not None else lab.client_ns, local, *args)

    def start(self) -> HealthWatch:
        self.proc = self.lab.spawn(
            self.ns,
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=python_env(),
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "output", "line": line.rstrip()}
            with self._lock:
                self.events.append(event)

    def seen(self, event: str | None = None, since: float = 0.0) -> list[dict[str, Any]]:
        with self._lock:
            return [
                e
                for e in self.events
                if (event is None or e.get("event") == event) and e.get("t", since) >= since
            ]

    def stop(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: the watcher stops and prints "end"
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return self.seen()


if __name__ == "__main__":
    sys.exit(main())
