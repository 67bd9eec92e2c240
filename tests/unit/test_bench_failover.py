"""Unit tests for bench/failover.py's summary of the second move and its options (no lab)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.unit.benches import ROOT, load

sys.path.insert(0, str(ROOT / "bench"))  # failover.py imports its sibling failover_wire
failover = load("failover")


def _round(n: int, outage: float, move: float | None, failed: int, floor: float) -> dict[str, Any]:
    return {
        "round": n,
        "ok": True,
        "recovered": True,
        "reconverged": True,
        "client_outage_ms": 300.0,
        "preemption_outage_ms": outage,
        "preemption_move_gap_ms": move,
        "preemption_move_failures": None if move is None else failed,
        "preemption_other_gap_ms": floor,
    }


def _run(daemon: str, rounds: list[dict[str, Any]]) -> Any:
    cfg = failover.ConfigRun(daemon=daemon, advert=0.1, fault="kill", rounds=len(rounds), order=1)
    cfg.report = {"rounds": rounds, "summary": {"ok": True}}
    return cfg


def test_the_second_move_is_summarised_by_its_move_gap_apart_from_the_window() -> None:
    vipd = _run(
        "vipd",
        [
            # A stall elsewhere in the window (8 ms) makes the outage; the move cost 0.5 ms.
            _round(1, 8.0, 0.5, 0, 8.0),
            _round(2, 1.0, 1.0, 1, 0.6),
            _round(3, 0.6, 0.6, 0, 0.5),
            _round(4, 0.7, None, 0, 0.7),  # the answering node never changed
        ],
    )
    keepalived = _run("keepalived", [_round(1, 5.0, 5.0, 9, 0.6), _round(2, 6.0, 6.0, 11, 0.6)])
    out = failover.summarise([vipd, keepalived], [0.1])
    row = next(o for o in out["outage"] if o["fault"] == "kill")
    v, k = row["vipd"], row["keepalived"]
    assert v["after_restore_outage_ms"]["n"] == 4
    assert v["after_restore_move_gap_ms"]["n"] == 3
    assert v["after_restore_move_gap_ms"]["p50"] == pytest.approx(0.6)
    assert v["after_restore_move_gap_ms"]["max"] == pytest.approx(1.0)
    assert v["after_restore_move_failures"] == 1
    assert v["after_restore_rounds_without_move"] == 1
    assert v["after_restore_other_gap_ms"]["max"] == pytest.approx(8.0)
    assert k["after_restore_move_gap_ms"]["p50"] == pytest.approx(5.5)
    assert k["after_restore_move_failures"] == 20


@pytest.mark.parametrize(
    "argv",
    [["--probe-interval", "0"], ["--probe-interval", "1"], ["--load", "-1"]],
)
def test_bad_client_options_are_refused_by_name(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        failover.main(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err
