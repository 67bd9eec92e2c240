"""Who holds the VIP, event by event: ``ip -ts -o monitor address`` in every node.

What it is: a recorder of the kernel's address notifications (RTM_NEWADDR / RTM_DELADDR)
for one address in each lab node's namespace, with the kernel event's wall-clock timestamp
as ``ip -ts`` prints it (microseconds). From the events it rebuilds the holder set over
time, so a test can ask exactly when and for how long the VIP was bound on two nodes at
once, which polling ``ip addr`` every few milliseconds would miss.

What it must not do: judge anything (the caller decides what overlap is acceptable), or
change the namespaces it watches.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import math
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from vipd.lab.topology import Lab


@dataclass(frozen=True, slots=True)
class AddrEvent:
    at: float  # POSIX seconds, from the monitor's timestamp
    node: str
    added: bool
    # time.time() - time.monotonic() when the line was read (None: not read from a monitor):
    # the wall clock may be stepped or slewed during a long run, so each event is put on the
    # monotonic clock with the offset of its own moment, not one taken at the start.
    clock_offset: float | None = None


@dataclass(frozen=True, slots=True)
class Overlap:
    start: float
    end: float
    nodes: frozenset[str]

    @property
    def duration(self) -> float:
        return self.end - self.start


def parse(line: str, node: str, vip: str) -> AddrEvent | None:
    """One ``ip -ts -o monitor address`` line → an event for ``vip``, or None."""
    if not line.startswith("[") or "]" not in line:
        return None
    stamp, rest = line[1:].split("]", 1)
    words = rest.split()
    added = not (words and words[0] == "Deleted")
    if not added:
        words = words[1:]
    try:
        i = next(i for i, w in enumerate(words) if w in ("inet", "inet6"))
        addr = ipaddress.ip_address(words[i + 1].split("/")[0])
    except (StopIteration, IndexError, ValueError):
        return None
    if addr != ipaddress.ip_address(vip):
        return None
    at = dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.UTC).timestamp()
    return AddrEvent(at, node, added)


class AddressWatch:
    """Start before the scenario, ``stop()`` after; then ``events`` and ``overlaps()``."""

    def __init__(self, lab: Lab, vip: str) -> None:
        self.lab = lab
        self.vip = vip
        self.events: list[AddrEvent] = []
        self.initial: frozenset[str] = frozenset()
        self._procs: list[subprocess.Popen[Any]] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        for node in self.lab.nodes:
            proc = self.lab.spawn(
                node.ns,
                ["ip", "-ts", "-o", "monitor", "address"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self._procs.append(proc)
            t = threading.Thread(target=self._read, args=(proc, node.name), daemon=True)
            t.start()
            self._threads.append(t)
        # After the monitors are up, so no change falls between the snapshot and them.
        self.initial = frozenset(self.lab.holders(self.vip))

    def _read(self, proc: subprocess.Popen[Any], node: str) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = parse(line, node, self.vip)
            if event is not None:
                event = dataclasses.replace(event, clock_offset=time.time() - time.monotonic())
                with self._lock:
                    self.events.append(event)

    def stop(self) -> None:
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            proc.wait(timeout=5)
        for t in self._threads:
            t.join(timeout=5)

    def overlaps(self) -> list[Overlap]:
        """Every interval in which two or more nodes held the VIP."""
        with self._lock:
            events = sorted(self.events, key=lambda e: e.at)
        holders = set(self.initial)
        out: list[Overlap] = []
        since: float | None = None
        for e in events:
            before = frozenset(holders)
            if e.added:
                holders.add(e.node)
            else:
                holders.discard(e.node)
            if len(holders) >= 2 and since is None:
                since = e.at
            elif len(holders) < 2 and since is not None:
                out.append(Overlap(since, e.at, before))
                since = None
        if since is not None:  # still on two nodes when the watch stopped
            out.append(Overlap(since, math.inf, frozenset(holders)))
        return out
