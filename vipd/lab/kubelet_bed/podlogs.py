"""Every vipd container's log on every node of the kubelet bed, kept past its pod's deletion.

What it is: a lab-side reader for a post-mortem. The kubelet writes each container's output to
``/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log`` (CRI format: an RFC 3339
time, the stream, a tag, the line) and deletes the directory with the pod, which for a
replaced vipd pod is moments after its last line: the lines that matter when two nodes held
the VIP at once. A thread looks every ``interval`` s for vipd log files under each node's disk
(``Machine.root``), opens each new one and keeps it open, and reads what was added; a file
the kubelet has deleted is still read to its end through the open descriptor, then closed.
``around(nodes, start, end)`` gives the kept lines of those nodes in a time window.

What it must not do: write to a node's disk, hold a file open after it has been read to the
end of a deletion, or outlive ``stop()``.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# The DaemonSet's pods (vipd-<hash>) and the static ones (vipd-<node>), container ``vipd``.
PATTERN = "var/log/pods/kube-system_vipd-*/vipd/*.log"


@dataclass(frozen=True, slots=True)
class LogLine:
    node: str
    pod: str  # the pod's log directory: kube-system_<pod>_<uid>
    at: float  # POSIX seconds, from the CRI time stamp
    text: str  # the line as vipd wrote it


def cri_time(stamp: str) -> float | None:
    """POSIX seconds of a CRI log line's time stamp (RFC 3339, nanoseconds); None if it is
    not one."""
    main, _, frac = stamp.rstrip("Z").partition(".")
    try:
        base = dt.datetime.fromisoformat(main).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None
    return base + (int(frac.ljust(9, "0")[:9]) / 1e9 if frac.isdigit() else 0.0)


def parse(node: str, pod: str, raw: str) -> LogLine | None:
    """One CRI log line (``TIME STREAM TAG TEXT``) as a LogLine; None if it is not one."""
    parts = raw.rstrip("\n").split(" ", 3)
    if len(parts) < 4:
        return None
    at = cri_time(parts[0])
    return None if at is None else LogLine(node, pod, at, parts[3])


class PodLogKeeper:
    """The vipd containers' logs of ``roots`` (node name → the node's disk), kept in memory."""

    def __init__(self, roots: Mapping[str, Path], interval: float = 0.2) -> None:
        self.roots = dict(roots)
        self.interval = interval
        self._open: dict[Path, tuple[str, str, BinaryIO, bytearray]] = {}
        self._lines: list[LogLine] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-logs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=10)
        self.poll()  # the last lines
        for _, _, f, _ in self._open.values():
            f.close()
        self._open.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        """Open the vipd log files not seen yet, read what every open one gained."""
        for node, root in self.roots.items():
            try:
                # A pod's directory the kubelet removes mid-listing ends the walk with
                # FileNotFoundError: its log is already open, or gone; the next poll lists again.
                listed = list(root.glob(PATTERN))
            except FileNotFoundError:
                continue
            for path in listed:
                if path not in self._open:
                    try:
                        opened: BinaryIO = path.open("rb")
                    except OSError:
                        continue  # deleted between the listing and the open
                    self._open[path] = (node, path.parent.parent.name, opened, bytearray())
        for path, (node, pod, f, partial) in list(self._open.items()):
            try:
                # Looked at before the read: what was written before the deletion is read now.
                gone = os.fstat(f.fileno()).st_nlink == 0
                partial += f.read()
            except OSError:
                gone = True
            *complete, rest = partial.split(b"\n")
            partial[:] = rest
            found = [parse(node, pod, line.decode(errors="replace")) for line in complete]
            with self._lock:
                self._lines.extend(line for line in found if line is not None)
            if gone:  # deleted and read to its end: nothing more can come
                f.close()
                del self._open[path]

    def around(self, nodes: Iterable[str], start: float, end: float) -> list[LogLine]:
        """The kept lines of ``nodes`` from ``start`` to ``end`` (POSIX seconds), in time
        order."""
        want = set(nodes)
        with self._lock:
            lines = [ln for ln in self._lines if ln.node in want and start <= ln.at <= end]
        return sorted(lines, key=lambda ln: ln.at)
