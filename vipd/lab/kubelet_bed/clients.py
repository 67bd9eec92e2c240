"""The kubelet bed's API clients: kubectl through the VIP in a loop, and a watch on vipd's pods.

What it is: two lab-side instruments that run kubectl in the client namespace.

- ``ReadyzLoop``: ``kubectl get --raw /readyz`` through the VIP every ``interval`` seconds,
  each with a ``--request-timeout`` of 5 s, one at a time (a user's kubectl, not a load test;
  on two cores shared with three API servers and etcd a kubectl run can take seconds, and
  the VIP's own gaps are the 2 ms TCP prober's to measure);
  every attempt is recorded as ``KubectlTry(start, end, error)`` on the monotonic clock the
  2 ms TCP prober also uses, so a step's window selects both; ``error`` is empty for an
  answered ``ok`` and otherwise says what kubectl printed (or that it timed out), so a failed
  attempt in a report can be told apart: the VIP unreachable, or the API server's answer.
- ``PodWatch``: ``kubectl get pods -w`` on the DaemonSet's pods against one node's own API
  server (a watch through the VIP breaks at every move, which is what is being measured);
  each line it prints becomes a ``PodSeen`` (when it was read, node, pod UID, terminating,
  all containers ready, image), restarted if the watch ends. An image roll's steps are cut
  from it (``vipd.lab.kubeadm_flow.roll_windows``).

What it must not do: retry a failed attempt (the failure is the datum), or outlive ``stop()``.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vipd.lab.topology import Lab


@dataclass(frozen=True, slots=True)
class KubectlTry:
    start: float  # time.monotonic()
    end: float
    error: str = ""  # empty: /readyz answered ok

    @property
    def ok(self) -> bool:
        return not self.error


class ReadyzLoop:
    """kubectl through the VIP, one request at a time, every ``interval`` seconds."""

    def __init__(
        self, readyz: Callable[[float], str], *, interval: float = 0.3, timeout: float = 5.0
    ) -> None:
        self._readyz = readyz
        self.interval = interval
        self.timeout = timeout
        self._tries: list[KubectlTry] = []
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._running_since: float | None = None  # the attempt in flight, if any
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubectl-readyz", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            start = time.monotonic()
            with self._lock:
                self._running_since = start
            error = self._readyz(self.timeout)
            with self._lock:
                self._tries.append(KubectlTry(start, time.monotonic(), error))
                self._running_since = None
                self._done.notify_all()
            # No catching up after a slow attempt: the samples stay evenly spread.
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def tries(self, start: float, end: float) -> list[KubectlTry]:
        """The attempts that started within ``[start, end]`` (monotonic). One still in flight
        that started by ``end`` is waited for (bounded: its own timeout and the exec's), so
        a step's window holds every attempt begun in it: a try that hangs across a VIP move
        and ends after the step would otherwise vanish from it, failure and all."""
        bound = time.monotonic() + self.timeout + 10
        with self._lock:
            while self._running_since is not None and self._running_since <= end:
                left = bound - time.monotonic()
                if left <= 0:
                    break
                self._done.wait(left)
            return [t for t in self._tries if start <= t.start <= end]

    def in_flight_at(self, at: float) -> list[KubectlTry]:
        """The finished attempts that started before ``at`` and ended after it: one that hung
        across a whole short step is the step's only attempt, though it began before it."""
        with self._lock:
            return [t for t in self._tries if t.start < at < t.end]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 10)


@dataclass(frozen=True, slots=True)
class PodSeen:
    at: float  # time.monotonic() when the watch printed it
    node: str
    uid: str
    terminating: bool
    ready: bool
    image: str


COLUMNS = (
    "NODE:.spec.nodeName,UID:.metadata.uid,DEL:.metadata.deletionTimestamp,"
    "READY:.status.containerStatuses[*].ready,IMAGE:.spec.containers[0].image"
)


def parse_pod_line(line: str, at: float) -> PodSeen | None:
    """One line of ``kubectl get pods -w -o custom-columns=COLUMNS --no-headers``."""
    fields = line.split()
    if len(fields) != 5:
        return None
    node, uid, deleted, ready, image = fields
    return PodSeen(
        at=at,
        node=node,
        uid=uid,
        terminating=deleted != "<none>",
        ready=ready != "<none>" and all(r == "true" for r in ready.split(",")),
        image=image,
    )


class PodWatch:
    """``kubectl get pods -w`` on the DaemonSet's pods, each line kept with its time."""

    def __init__(self, lab: Lab, argv: Sequence[str]) -> None:
        self.lab = lab
        self.argv = list(argv)
        self._seen: list[PodSeen] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._proc: subprocess.Popen[Any] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            proc = self.lab.spawn(
                self.lab.client_ns,
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self._proc = proc
            assert proc.stdout is not None
            for line in proc.stdout:
                seen = parse_pod_line(line, time.monotonic())
                if seen is not None:
                    with self._lock:
                        self._seen.append(seen)
            proc.wait()
            self._stop.wait(0.5)

    def seen(self, since: float | None = None) -> list[PodSeen]:
        with self._lock:
            got = list(self._seen)
        return [s for s in got if since is None or s.at >= since]

    def stop(self) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=10)
