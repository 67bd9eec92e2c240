"""The lab's client: opens TCP connections to the VIP at a fixed rate and reports each one.

Run in the client namespace as ``python -m vipd.lab.prober --target 10.77.0.100 --port 6443
--interval 0.002 --timeout 0.5``. Every ``interval`` seconds it starts one non-blocking
connect (so many attempts are in flight at once), reads the responder's name line, and
abandons an attempt after ``timeout``. For every finished attempt it writes one line::

    <start> <end> <ok> <name> [<reason>]

``start``/``end`` are ``time.monotonic()`` seconds; CLOCK_MONOTONIC is one clock for the whole
machine (network namespaces do not change it), so the lab compares them with its own clock.
``ok`` is 1 or 0; ``name`` is the answering node, or ``-`` for a failure, which also carries a
short ``reason`` (``timeout``, ``ECONNREFUSED``, ``eof``, …). Lines arrive in completion order,
not start order. It runs until stdin reaches EOF, SIGTERM/SIGINT, or ``--duration`` elapses.

This module also holds ``Prober``, the lab-side handle that runs it and collects its lines.

With ``--realtime`` it runs under SCHED_FIFO (priority ``REALTIME_PRIORITY``): on a lab whose
nodes share the client's cores with busy API servers, the client would otherwise measure its
own lost time slices as gaps, where a real client sits on another machine. Between connects
it only sleeps (in ``select``, and in ``time.sleep`` for the part of a wait under a millisecond,
which ``select`` would round up), so the class cannot let it take a core from the nodes.

What it must not do: retry (a TCP SYN retransmission would take 1 s and blur the very gap we
measure; a failed attempt is just reported), burst to catch up after a stall (the schedule
skips ahead instead, so the start times stay an honest sample of the service), or leave
TIME_WAIT sockets behind (it closes with RST once it has its line).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import ipaddress
import itertools
import math
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol

from vipd.lab.analysis import Attempt, parse_line
from vipd.lab.topology import python_argv, python_env

REALTIME_PRIORITY = 10  # SCHED_FIFO, low among real-time tasks: above every normal one

# struct linger {int l_onoff; int l_linger;} = {1, 0}: close() sends RST, no TIME_WAIT.
_LINGER_RST = struct.pack("ii", 1, 0)


@dataclass(slots=True)
class _Try:
    sock: socket.socket
    start: float
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    done: bool = False


class _Probe:
    def __init__(
        self, target: str, port: int, interval: float, timeout: float, out: IO[str]
    ) -> None:
        addr = ipaddress.ip_address(target)
        self.family = socket.AF_INET if addr.version == 4 else socket.AF_INET6
        self.dest = (str(addr), port)
        self.interval = interval
        self.timeout = timeout
        self.out = out
        self.sel = selectors.DefaultSelector()
        self.pending: collections.deque[_Try] = collections.deque()  # in start order
        self.lines: list[str] = []

    def launch(self, now: float) -> None:
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.setblocking(False)
        attempt = _Try(sock=sock, start=now, deadline=now + self.timeout)
        err = sock.connect_ex(self.dest)
        if err not in (0, errno.EINPROGRESS):
            self.finish(attempt, None, errno.errorcode.get(err, str(err)))
            return
        self.sel.register(sock, selectors.EVENT_WRITE, attempt)
        self.pending.append(attempt)

    def finish(self, attempt: _Try, name: str | None, reason: str = "") -> None:
        if attempt.done:
            return
        attempt.done = True
        end = time.monotonic()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(attempt.sock)
        with contextlib.suppress(OSError):
            attempt.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        attempt.sock.close()
        if name is not None:
            self.lines.append(f"{attempt.start:.6f} {end:.6f} 1 {name}\n")
        else:
            self.lines.append(f"{attempt.start:.6f} {end:.6f} 0 - {reason}\n")

    def on_event(self, attempt: _Try, mask: int) -> None:
        sock = attempt.sock
        if mask & selectors.EVENT_WRITE:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.finish(attempt, None, errno.errorcode.get(err, str(err)))
                return
            self.sel.modify(sock, selectors.EVENT_READ, attempt)
            return
        try:
            data = sock.recv(256)
        except BlockingIOError:
            return
        except OSError as exc:
            self.finish(attempt, None, errno.errorcode.get(exc.errno or 0, "error"))
            return
        if not data:
            self.finish(attempt, None, "eof")
            return
        attempt.buf += data
        if b"\n" in attempt.buf:
            name = attempt.buf.split(b"\n", 1)[0].decode(errors="replace").strip()
            self.finish(attempt, name or "?")

    def expire(self, now: float) -> None:
        # Deadlines grow with start order, so the oldest pending attempt expires first.
        while self.pending and (self.pending[0].done or self.pending[0].deadline <= now):
            attempt = self.pending.popleft()
            self.finish(attempt, None, "timeout")

    def flush(self) -> None:
        if self.lines:
            self.out.write("".join(self.lines))
            self.out.flush()
            self.lines.clear()

    def close(self) -> None:
        for attempt in self.pending:
            if not attempt.done:
                attempt.done = True
                attempt.sock.close()
        self.pending.clear()
        self.sel.close()


def split_wait(wait: float) -> tuple[float, float]:
    """How to wait ``wait`` seconds for the next start: (a poll's timeout, a sleep before it).

    epoll takes whole milliseconds and Python rounds a shorter timeout up, so a 0.5 ms wait
    in the poll alone lasted 1 ms or more and the starts came in pairs, about 1.1 ms apart:
    the measurement's resolution was that, not the interval. The whole milliseconds are left
    to the poll (answers are read as they come); a remainder under one is slept with
    nanosecond resolution and the ready answers are read after it with a zero timeout
    (their end times are then up to that remainder late; the gaps use the start times).
    """
    if wait <= 0.0:
        return 0.0, 0.0
    if wait >= 0.001:
        return math.floor(wait * 1000.0) / 1000.0, 0.0
    return 0.0, wait


def probe(
    target: str,
    port: int,
    interval: float,
    timeout: float,
    *,
    duration: float | None = None,
    watch_stdin: bool = True,
    out: IO[str] | None = None,
) -> int:
    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    p = _Probe(target, port, interval, timeout, out or sys.stdout)
    stdin_fd = sys.stdin.fileno() if watch_stdin else -1
    if stdin_fd >= 0:
        try:
            p.sel.register(stdin_fd, selectors.EVENT_READ, None)
            os.set_blocking(stdin_fd, False)
        except PermissionError:
            # epoll refuses regular files and /dev/null: nothing to watch, so run until a
            # signal or --duration instead.
            stdin_fd = -1
    began = time.monotonic()
    next_start = began
    try:
        while not stop:
            now = time.monotonic()
            if duration is not None and now - began >= duration:
                break
            if now >= next_start:
                p.launch(now)
                next_start += interval
                if next_start < now - interval:
                    # More than one interval late (a stall): skip ahead, never burst.
                    next_start = now + interval
            p.expire(now)
            wait = next_start - time.monotonic()
            if p.pending:
                wait = min(wait, p.pending[0].deadline - time.monotonic())
            poll_for, sleep_for = split_wait(wait)
            if sleep_for:
                time.sleep(sleep_for)
            for key, mask in p.sel.select(timeout=poll_for):
                if key.data is None:  # stdin: any EOF ends the run
                    try:
                        chunk = os.read(stdin_fd, 4096)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        stop = True
                    continue
                p.on_event(key.data, mask)
            p.flush()
    except BrokenPipeError:
        return 0  # whoever read our lines is gone; nothing left to report to
    finally:
        p.close()
    with contextlib.suppress(BrokenPipeError):
        p.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vipd.lab.prober",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--target", required=True, help="IP address to connect to (the VIP)")
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument(
        "--interval",
        type=float,
        default=0.002,
        help="seconds between connection starts (the measurement resolution)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=0.5,
        help="seconds before an attempt is abandoned as failed",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stop after this many seconds (default: until stdin EOF/SIGTERM)",
    )
    parser.add_argument(
        "--realtime",
        action="store_true",
        help=f"run under SCHED_FIFO priority {REALTIME_PRIORITY} (needs CAP_SYS_NICE)",
    )
    parser.add_argument(
        "--ignore-stdin",
        action="store_true",
        help="do not stop at stdin EOF (for use from a shell with </dev/null)",
    )
    args = parser.parse_args(argv)
    if args.interval <= 0 or args.timeout <= 0:
        parser.error("--interval and --timeout must be positive")
    if args.realtime:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
        except OSError as exc:
            parser.error(f"--realtime: cannot switch to SCHED_FIFO: {exc}")
    return probe(
        args.target,
        args.port,
        args.interval,
        args.timeout,
        duration=args.duration,
        watch_stdin=not args.ignore_stdin,
    )


class ProbeHost(Protocol):
    """Where the prober runs: `vipd.lab.topology.Lab`, or `vipd.lab.routed.RoutedBed`."""

    @property
    def workdir(self) -> Path: ...

    @property
    def client_ns(self) -> str: ...

    def spawn(
        self,
        ns: str,
        argv: Sequence[str],
        *,
        stdin: int | IO[Any] | None = ...,
        stdout: int | IO[Any] | None = ...,
        stderr: int | IO[Any] | None = ...,
        env: Mapping[str, str] | None = ...,
        text: bool = ...,
    ) -> subprocess.Popen[Any]: ...


class Prober:
    """Lab-side handle: runs the prober in the client namespace and collects its attempts.

    A reader thread parses lines as they arrive; ``attempts()`` returns a snapshot sorted by
    start time. Stopping closes the prober's stdin, which is how it is told to finish.
    """

    def __init__(
        self,
        lab: ProbeHost,
        target: str,
        port: int = 6443,
        *,
        interval: float = 0.002,
        timeout: float = 0.5,
        realtime: bool = False,
    ) -> None:
        self.lab = lab
        self.realtime = realtime
        self.target = target
        self.port = port
        self.interval = interval
        self.timeout = timeout
        self.proc: subprocess.Popen[Any] | None = None
        self._attempts: list[Attempt] = []
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._stderr_path = lab.workdir / "prober.log"

    def start(self) -> None:
        with self._stderr_path.open("ab") as err:
            self.proc = self.lab.spawn(
                self.lab.client_ns,
                python_argv(
                    "vipd.lab.prober",
                    "--target",
                    self.target,
                    "--port",
                    str(self.port),
                    "--interval",
                    str(self.interval),
                    "--timeout",
                    str(self.timeout),
                    *(["--realtime"] if self.realtime else []),
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=python_env(),
                text=True,
            )
        self._reader = threading.Thread(target=self._read, name="prober-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            attempt = parse_line(line)
            if attempt is not None:
                with self._lock:
                    self._attempts.append(attempt)

    def attempts(self, since: float | None = None) -> list[Attempt]:
        with self._lock:
            got = list(self._attempts)
        if since is not None:
            got = [a for a in got if a.start >= since]
        got.sort(key=lambda a: a.start)
        return got

    def stop(self, timeout: float = 3.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(timeout=timeout)


if __name__ == "__main__":
    sys.exit(main())


def client_gap(prober: Prober, start: float, end: float) -> tuple[float, int]:
    """Longest span between answered connects with ``start <= attempt <= end`` (monotonic),
    and the number of failed connects; ValueError when none was answered."""
    tries = [a for a in prober.attempts() if start <= a.start <= end]
    ok = [a.start for a in tries if a.ok]
    if not ok:
        raise ValueError("the prober saw no answer through the VIP")
    gap = max((b - a for a, b in itertools.pairwise(ok)), default=0.0)
    return gap, sum(1 for a in tries if not a.ok)
