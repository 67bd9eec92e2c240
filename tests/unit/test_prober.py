"""Unit tests for the lab client's options (vipd.lab.prober): the real-time class is asked
for, and a refusal is an error that names the option, not a silently slower client."""

from __future__ import annotations

import os
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
