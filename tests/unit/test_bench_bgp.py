"""bench/bgp.py's summary: p50/max per configuration and fault, rounds whose path never left,
and the row of a configuration that did not run."""

from __future__ import annotations

from typing import Any

from tests.unit.benches import load

bgp = load("bgp")


def rnd(fault: str, failed: int, left: float | None) -> dict[str, Any]:
    return {
        "fault": fault,
        "failed": failed,
        "failing_ms": failed * 2.0,
        "full_outage_ms": 10.0,
        "left_ms": left,
    }


def test_summary_and_table() -> None:
    ran = {
        "config": "kube-vip-bgp",
        "ran": True,
        "rounds": [
            rnd("apidown", 100, None),
            rnd("apidown", 300, None),
            rnd("term", 0, 90.0),
            rnd("term", 2, 110.0),
        ],
    }
    skipped = {"config": "vipd-bgp", "ran": False, "why": "no speaker", "rounds": []}
    summary = bgp.summarise(ran, ("term", "apidown"))
    assert summary["apidown"]["never_left"] == 2 and summary["apidown"]["left_ms"] is None
    assert summary["apidown"]["failed"] == {"p50": 200.0, "max": 300.0, "n": 2}
    assert summary["term"]["left_ms"] == {"p50": 100.0, "max": 110.0, "n": 2}
    text = bgp.table([ran, skipped], ("term", "apidown"))
    assert (
        "| kube-vip-bgp | apidown | 2 | 200 / 300 | 400 / 600 | 10 / 10 | - (stayed in 2 of 2) |"
        in text
    )
    assert "| kube-vip-bgp | term | 2 | 1 / 2 | 2 / 4 | 10 / 10 | 100 / 110 |" in text
    assert "| vipd-bgp | not run: no speaker |" in text
