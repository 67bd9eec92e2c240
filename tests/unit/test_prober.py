"""Unit tests for the lab client's options (vipd.lab.prober): the real-time class is asked
for, and a refusal is an error that names the option, not a silently slower client."""

from __future__ import annotations

import io
import os
import selectors
import time
from typing import Any

import pytest

from vipd.lab import prober


def test_realtime_switches_to_sched_fifo_before_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    order: list[str] = []

    def fake_setscheduler(pid: int, policy: int, param: os.sched_param) -> None:
        calls.append((policy, param.sched_priority))
        order.append("sched")

    def fake_probe(*args: Any, **kwargs: Any) -> int:
        order.append("probe")
        return 0

    monkeypatch.setattr(os, "sched_setscheduler", fake_setscheduler)
    monkeypatch.setattr(prober, "probe", fake_probe)
    assert prober.main(["--target", "127.0.0.1", "--realtime"]) == 0
    assert calls == [(os.SCHED_FIFO, prober.REALTIME_PRIORITY)]
    assert order == ["sched", "probe"]


def test_realtime_refused_is_an_error_naming_the_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(pid: int, policy: int, param: os.sched_param) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    monkeypatch.setattr(prober, "probe", lambda *a, **k: pytest.fail("probed anyway"))
    with pytest.raises(SystemExit) as exc:
        prober.main(["--target", "127.0.0.1", "--realtime"])
    assert exc.value.code == 2
    assert "--realtime" in capsys.readouterr().err


def test_without_realtime_the_class_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_setscheduler", lambda *a: pytest.fail("switched class"))
    monkeypatch.setattr(prober, "probe", lambda *a, **k: 0)
    assert prober.main(["--target", "127.0.0.1"]) == 0


@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        (-0.001, (0.0, 0.0)),
        (0.0, (0.0, 0.0)),
        (0.0004, (0.0, 0.0004)),
        (0.000999, (0.0, 0.000999)),
        (0.001, (0.001, 0.0)),
        (0.0027, (0.002, 0.0)),
        (0.5, (0.5, 0.0)),
    ],
)
def test_split_wait_leaves_the_poll_whole_milliseconds(
    wait: float, expected: tuple[float, float]
) -> None:
    poll_for, sleep_for = prober.split_wait(wait)
    assert (poll_for, sleep_for) == pytest.approx(expected)
    assert poll_for * 1000.0 == pytest.approx(round(poll_for * 1000.0))
    assert poll_for + sleep_for <= max(wait, 0.0) + 1e-12


def test_the_probe_loop_never_hands_epoll_a_fraction_of_a_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # epoll rounds a fractional-millisecond timeout up to the next millisecond, which made
    # a 0.5 ms client start its connects in pairs about 1.1 ms apart.
    timeouts: list[float | None] = []
    real = selectors.DefaultSelector

    class Recording(real):  # type: ignore[valid-type,misc]
        def select(self, timeout: float | None = None) -> Any:
            timeouts.append(timeout)
            return super().select(timeout)

    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(selectors, "DefaultSelector", Recording)
    monkeypatch.setattr(time, "sleep", sleep)
    out = io.StringIO()
    # Port 9 on loopback: nothing listens, every connect is refused at once.
    prober.probe("127.0.0.1", 9, 0.0005, 0.05, duration=0.2, watch_stdin=False, out=out)
    assert timeouts and all(
        t is not None and t * 1000.0 == pytest.approx(round(t * 1000.0)) for t in timeouts
    )
    assert slept and all(0.0 < s < 0.001 for s in slept)
    assert len(out.getvalue().splitlines()) >= 10
