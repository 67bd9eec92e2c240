"""Record who holds the VIP, event by event: ``ip monitor address`` in every node namespace.

What it is: ``HolderWatch(lab, vip)``, a context manager. ``start()`` runs ``ip -o monitor
address`` inside each node's namespace (one small process per node, no polling) with a reader
thread that stamps every add/delete of the VIP with ``time.monotonic()`` as it arrives, then
takes a snapshot of the current holders as the timeline's start. ``timeline()`` returns
what was recorded so far as a ``vipd.lab.timeline.Timeline``. Event latency is that of a
netlink multicast plus a pipe read: well under a millisecond on an idle host, a few on a
busy one; the invariants' margins are far larger.

What it must not do: judge (``vipd.lab.timeline`` and the tests do), or poll: a poll every
10 ms would spawn 300 ``ip`` processes a second on a 2-core machine and disturb the very
timing it watches.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import threading
import time
from types import TracebackType
from typing import Any

from vipd.lab.timeline import Change, Timeline
from vipd.lab.topology import Lab, LabError

SUBSCRIBE_GRACE = 0.3  # seconds for `ip monitor` to subscribe before the snapshot


class HolderWatch:
    def __init__(self, lab: Lab, vip: str) -> None:
        self.lab = lab
        self.vip = ipaddress.ip_address(vip)
        plen = 32 if self.vip.version == 4 else 128
        self._needle = f"{'inet' if self.vip.version == 4 else 'inet6'} {self.vip}/{plen} "
        self._procs: list[subprocess.Popen[Any]] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._changes: list[Change] = []
        self._start: float | None = None
        self._initial: frozenset[str] = frozenset()

    def __enter__(self) -> HolderWatch:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        for node in self.lab.nodes:
            proc = self.lab.spawn(
                node.ns,
                ["ip", "-o", "monitor", "address"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self._procs.append(proc)
            t = threading.Thread(
                target=self._read, args=(node.name, proc), name=f"watch-{node.name}", daemon=True
            )
            t.start()
            self._threads.append(t)
        time.sleep(SUBSCRIBE_GRACE)
        for proc in self._procs:
            if proc.poll() is not None:
                raise LabError("`ip monitor address` exited at once")
        self._start = time.monotonic()
        self._initial = frozenset(self.lab.holders(str(self.vip)))

    def _read(self, node: str, proc: subprocess.Popen[Any]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic()
            if self._needle not in line + " ":
                continue
            held = not line.startswith("Deleted")
            with self._lock:
                self._changes.append(Change(now, node, held))

    def timeline(self) -> Timeline:
        if self._start is None:
            raise LabError("HolderWatch.timeline() before start()")
        with self._lock:
            changes = [c for c in self._changes if c.t > self._start]
        return Timeline(self._start, self._initial, changes)

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        for t in self._threads:
            t.join(timeout=2)
