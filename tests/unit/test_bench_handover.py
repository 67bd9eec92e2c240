"""bench/handover.py's arithmetic: the gap at a move and the per-kind summary."""

from __future__ import annotations

from tests.unit.benches import load
from vipd.lab.analysis import Attempt

handover = load("handover")


def _a(start: float, ok: bool) -> Attempt:
    return Attempt(start, start + 0.001, ok, "n1" if ok else None, "" if ok else "timeout")


def test_gap_at_a_move_spans_the_answers_around_it() -> None:
    attempts = [_a(1.000, True), _a(1.002, False), _a(1.004, False), _a(1.006, True)]
    assert abs(handover.gap_at(attempts, 1.003) - 0.006) < 1e-9
    assert handover.gap_at(attempts, 0.5) is None  # nothing answered before it
    assert handover.gap_at(attempts, 2.0) is None


def test_summary_per_kind() -> None:
    moves = [
        {"kind": "adopt", "gap_at_move_s": 0.004, "step_longest_gap_s": 0.05,
         "failed_connects": 1, "kubectl_failed": 0},
        {"kind": "roll", "gap_at_move_s": 0.002, "step_longest_gap_s": 0.03,
         "failed_connects": 0, "kubectl_failed": 1},
        {"kind": "roll", "gap_at_move_s": 0.008, "step_longest_gap_s": 0.09,
         "failed_connects": 2, "kubectl_failed": 0},
    ]  # fmt: skip
    got = handover.summarise(moves)
    assert got["adopt"] == {
        "moves": 1, "gap_at_move_p50_ms": 4.0, "gap_at_move_max_ms": 4.0,
        "step_longest_gap_max_ms": 50.0, "failed_connects": 1, "kubectl_failed": 0,
    }  # fmt: skip
    assert got["roll"]["moves"] == 2 and got["roll"]["gap_at_move_p50_ms"] == 5.0
    assert got["roll"]["gap_at_move_max_ms"] == 8.0 and got["roll"]["failed_connects"] == 2
    assert "| roll | 2 | 5.0 / 8.0 | 90.0 | 2 | 1 |" in handover.render(
        {"runs": 1, "election": "vrrp", "command": "bench/handover.py", "summary": got}
    )
    client = {"probe_interval_s": 0.002, "sched_fifo": True}
    doc = {"runs": 1, "election": "vrrp", "command": "x", "summary": got, "client": client}
    assert "every 2 ms, under SCHED_FIFO." in handover.render(doc)
