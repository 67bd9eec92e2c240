"""Unit tests for bench/release_tie.py's arithmetic: a round's numbers from a holder timeline
and the client's attempts, and the summary over rounds (no lab)."""

from __future__ import annotations

import sys
from typing import Any

from tests.unit.benches import ROOT, load
from vipd.lab.analysis import Attempt
from vipd.lab.timeline import Change, Timeline

sys.path.insert(0, str(ROOT / "bench"))  # release_tie.py imports its sibling footprint
release_tie = load("release_tie")


def _attempts(times: list[float], failed: tuple[float, ...] = ()) -> list[Attempt]:
    ok = [Attempt(t, t + 0.0002, True, "n") for t in times]
    return ok + [Attempt(t, t + 0.5, False, None, "timeout") for t in failed]


def test_a_tie_counts_both_backups_and_their_overlap_without_the_stopping_node() -> None:
    # n1 held it and stops at 10.0; n2 and n3 both bind (the tie), n3 lets go 3 ms later;
    # n1 removes it after n3's bind (make-before-break).
    tl = Timeline(
        9.0,
        frozenset({"n1"}),
        [
            Change(10.100, "n2", True),
            Change(10.1005, "n3", True),
            Change(10.102, "n1", False),
            Change(10.1035, "n3", False),
        ],
    )
    row = release_tie.round_row(tl, _attempts([10.0, 10.05, 10.1, 10.104]), "n1", 10.0, 10.5)
    assert row["binds"] == ["n2", "n3"]
    assert abs(row["backups_overlap_ms"] - 3.0) < 1e-6
    assert abs(row["handover_overlap_ms"] - 3.5) < 1e-6  # n1 with n2 (and n3), 10.100-10.1035
    assert abs(row["client_gap_ms"] - 50.0) < 1e-6
    assert row["failed_connects"] == 0


def test_one_successor_is_no_tie_and_failed_connects_are_counted() -> None:
    tl = Timeline(9.0, frozenset({"n2"}), [Change(10.2, "n3", True), Change(10.201, "n2", False)])
    row = release_tie.round_row(tl, _attempts([10.0, 10.2], failed=(10.1,)), "n2", 10.0, 10.5)
    assert row["binds"] == ["n3"]
    assert row["backups_overlap_ms"] == 0.0
    assert abs(row["handover_overlap_ms"] - 1.0) < 1e-6
    assert row["failed_connects"] == 1


def _row(binds: list[str], overlap: float, gap: float) -> dict[str, Any]:
    return {
        "stopped": "n1",
        "binds": binds,
        "backups_overlap_ms": overlap,
        "handover_overlap_ms": 2.0,
        "client_gap_ms": gap,
        "failed_connects": 1 if gap > 10 else 0,
    }


def test_summary_counts_ties_and_takes_medians() -> None:
    rows = [_row(["n2"], 0.0, 2.0), _row(["n2", "n3"], 1.5, 4.0), _row(["n3"], 0.0, 12.0)]
    s = release_tie.summary(rows)
    assert (s["rounds"], s["ties"], s["tie_overlap_ms_max"]) == (3, 1, 1.5)
    assert (s["client_gap_ms_p50"], s["client_gap_ms_max"], s["failed_connects"]) == (4.0, 12.0, 1)
    text = release_tie.render(
        {
            "advert": 0.1,
            "command": "bench/release_tie.py",
            "started": "now",
            "machine": "m",
            "summary": {"vipd": s},
            "blocks": [{"daemon": "vipd", "block": 0, "error": "LabError: x"}],
        }
    )
    assert "| vipd | 3 | 1 | 1.5 | 4.0 / 12.0 | 1 | 2.0 |" in text
    assert "vipd block 0: LabError: x" in text
