"""Unit tests for bench/wake_floor.py: its medians and ratios, and one real child (no root)."""

from __future__ import annotations

from typing import Any

from tests.unit.benches import load

wake_floor = load("wake_floor")


def _sample(shape: str, period: float, us: float, block: int = 0) -> dict[str, Any]:
    return {"shape": shape, "period": period, "block": block, "us_per_wake": us}


def test_each_shape_is_its_median_and_its_ratio_to_the_c_loop() -> None:
    samples = [
        _sample("c-epoll", 0.1, 50.0),
        _sample("c-epoll", 0.1, 70.0, 1),
        _sample("c-epoll", 0.1, 60.0, 2),
        _sample("uvloop", 0.1, 300.0),
        _sample("uvloop", 0.1, 240.0, 1),
        _sample("python-epoll", 0.1, 120.0),
        _sample("uvloop", 0.3, 999.0),  # another period's: not in this row
    ]
    (row,) = wake_floor.summarise(samples, [0.1])
    assert row["c-epoll"] == 60.0
    assert row["uvloop"] == 270.0
    assert row["uvloop_vs_c"] == 4.5
    assert row["python-epoll_vs_c"] == 2.0
    assert row["asyncio"] is None and row["asyncio_vs_c"] is None


def test_without_a_c_compiler_the_ratios_are_left_out_not_invented() -> None:
    (row,) = wake_floor.summarise([_sample("uvloop", 0.01, 200.0)], [0.01])
    assert row["c-epoll"] is None and row["uvloop_vs_c"] is None
    text = wake_floor.render([row], {"date": "d", "host": "h", "python": "3", "wakes": 1,
                                     "blocks": 1})  # fmt: skip
    assert "| 0.01 | – | – | – | 200.0 | – | – | – |" in text


def test_a_child_measures_a_positive_cpu_time_per_wake_up() -> None:
    us = wake_floor.child("python-epoll", 0.001, 5, settle=0.0)
    assert 0.0 < us < 1e6
