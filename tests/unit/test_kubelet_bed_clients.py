"""The kubelet bed's kubectl wrappers, on a fake lab: what counts as /readyz answered, what
a failed try is reported as, and when ``rollout status`` is run again.

What it tests: ``KubeletBed.readyz_error`` on kube-apiserver's ``/readyz?verbose`` answers (the
check list ending in ``readyz check passed``, a failing check, a refused connection, a
kubectl that did not end) and ``KubeletBed.rollout_status`` run again after a connection
reset at a VIP move, but not after any other failure; ``ReadyzLoop.tries`` waits for a try
still in flight at a step's end, and ``ReadyzLoop.in_flight_at`` names one in flight across a
step's start.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from vipd.lab.kubelet_bed.bed import KubeletBed
from vipd.lab.kubelet_bed.clients import ReadyzLoop
from vipd.lab.kubelet_bed.node import MachineError

PASSED = "[+]ping ok\n[+]log ok\n[+]etcd ok\nreadyz check passed\n"
FAILED = "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\nreadyz check failed\n"
RESET = (
    'E1202 01:42:15.478268   12681 request.go:1198] "Unexpected error when reading response '
    'body" err="read tcp 10.77.0.2:55626->10.77.0.100:6443: read: connection reset by peer"\n'
    "error: unexpected error when reading response body. Please retry. Original error: read "
    "tcp 10.77.0.2:55626->10.77.0.100:6443: read: connection reset by peer\n"
)


class FakeLab:
    client_ns = "client"

    def __init__(self, answers: list[subprocess.CompletedProcess[str] | Exception]) -> None:
        self.answers = answers
        self.argvs: list[list[str]] = []

    def exec(self, ns: str, argv: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.argvs.append(list(argv))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def done(code: int, out: str = "", err: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, out, err)


def bed(answers: list[subprocess.CompletedProcess[str] | Exception]) -> KubeletBed:
    b = KubeletBed.__new__(KubeletBed)
    b.lab = FakeLab(answers)  # type: ignore[assignment]
    b.events = []
    b.kubectl_argv = lambda *args, server=None, timeout=30.0: ["kubectl", *args]  # type: ignore[method-assign]
    return b


def test_readyz_is_answered_only_by_the_passed_line() -> None:
    assert bed([done(0, PASSED)]).readyz_error(5.0) == ""
    assert bed([done(0, PASSED)]).readyz()
    assert bed([done(1, FAILED)]).readyz_error(5.0) == "exit 1: [-]etcd failed: reason withheld"
    assert not bed([done(0, "ok")]).readyz()  # not the verbose answer


def test_a_failed_readyz_says_what_kubectl_said() -> None:
    refused = done(1, "", "The connection to the server 10.77.0.100:6443 was refused\n")
    assert bed([refused]).readyz_error(5.0) == (
        "exit 1: The connection to the server 10.77.0.100:6443 was refused"
    )
    hung = subprocess.TimeoutExpired(["kubectl"], 10.0)
    assert bed([hung]).readyz_error(5.0) == "kubectl did not end within 10 s"
    assert bed([done(1)]).readyz_error(5.0) == "exit 1: (no output)"


def test_rollout_status_is_run_again_after_a_reset_at_a_move() -> None:
    b = bed([done(1, "", RESET), done(0, 'daemon set "vipd" successfully rolled out\n')])
    assert "successfully rolled out" in b.rollout_status(60.0)
    assert len(b.lab.argvs) == 2  # type: ignore[attr-defined]
    (note,) = [what for _, what in b.events]
    assert note.startswith("rollout status: connection lost")


def test_rollout_status_raises_any_other_failure() -> None:
    b = bed([done(1, "", 'error: daemonsets.apps "vipd" not found\n')])
    with pytest.raises(MachineError, match="not found"):
        b.rollout_status(60.0)
    assert len(b.lab.argvs) == 1  # type: ignore[attr-defined]


def hanging_first_try(error: str) -> tuple[ReadyzLoop, threading.Event, list[float]]:
    """A ReadyzLoop (not started) whose first try hangs until the event is set, then fails
    with ``error``; every later try answers ok. The list gets each try's timeout."""
    release = threading.Event()
    calls: list[float] = []

    def readyz(timeout: float) -> str:
        calls.append(timeout)
        if len(calls) == 1:
            release.wait(5.0)
            return error
        return ""

    return ReadyzLoop(readyz, interval=0.01, timeout=1.0), release, calls


def test_a_kubectl_try_in_flight_at_the_steps_end_is_waited_for_and_counted() -> None:
    """A try that hangs across a VIP move and ends after its step must not vanish from it."""
    loop, release, calls = hanging_first_try("exit 1: the connection was reset")
    start = time.monotonic()
    loop.start()
    while not calls:
        time.sleep(0.001)
    end = time.monotonic()  # the step ends with the first try still in flight
    threading.Timer(0.2, release.set).start()
    try:
        (tried,) = loop.tries(start, end)
        assert not tried.ok and "reset" in tried.error
        assert tried.end - tried.start >= 0.15  # it was waited for, not dropped
    finally:
        release.set()
        loop.stop()


def test_readyz_loop_names_the_try_in_flight_across_a_steps_start() -> None:
    """A try that began before a short step and hung across its start is that step's only
    kubectl: ``in_flight_at`` names it (it is counted in the step it began in)."""
    loop, release, calls = hanging_first_try("exit 1: timed out")
    before = time.monotonic()
    loop.start()
    while not calls:
        time.sleep(0.001)
    time.sleep(0.02)
    start = time.monotonic()  # the step begins while the first try hangs
    end = start + 0.01
    threading.Timer(0.1, release.set).start()
    try:
        assert loop.tries(start, end) == []  # none began in the step
        (hung,) = loop.in_flight_at(start)
        assert before <= hung.start < start < hung.end and "timed out" in hung.error
        assert loop.in_flight_at(before) == []
    finally:
        release.set()
        loop.stop()
