"""bench/footprint_modes.py's and bench/before_after.py's arithmetic: which samples go into
which row, and what the tables say of them."""

from __future__ import annotations

import sys
from typing import Any

from tests.unit.benches import ROOT, load

sys.path.insert(0, str(ROOT / "bench"))  # footprint_modes.py imports its sibling footprint

modes = load("footprint_modes")
before_after = load("before_after")


def _node(role: str, cpu: float, rss: float, hwm: float, threads: int) -> dict[str, Any]:
    return {"role": role, "processes": 1, "cpu_ms_per_min": cpu, "rss_mib": rss,
            "hwm_mib": hwm, "threads": threads}  # fmt: skip


def test_footprint_rows_split_holder_from_standby_and_drop_failed_blocks() -> None:
    runs = [
        {"mode": "lease", "daemon": "kube-vip", "block": 0, "error": None,
         "steady": {"nodes": {"n1": _node("holder", 60.0, 45.0, 46.0, 10),
                              "n2": _node("standby", 20.0, 44.0, 45.0, 8)}}},
        {"mode": "vrrp", "advert": 1.0, "daemon": "vipd", "block": 0, "error": None,
         "steady": {"nodes": {"n1": _node("holder", 30.0, 28.0, 29.0, 4),
                              "n2": _node("standby", 10.0, 27.0, 31.0, 3),
                              "n3": _node("standby", 12.0, 27.0, 28.0, 3)}}},
        {"mode": "vrrp", "advert": 1.0, "daemon": "vipd", "block": 1, "error": "no converge"},
    ]  # fmt: skip
    rows = modes.summarise(runs)
    assert [(r["mode"], r["daemon"]) for r in rows] == [("vrrp", "vipd"), ("lease", "kube-vip")]
    vipd = rows[0]
    assert vipd["blocks"] == 1
    assert vipd["holder_cpu_ms_per_min"] == 30.0
    assert vipd["standby_cpu_ms_per_min"] == 11.0
    assert vipd["rss_mib"] == 27.0
    assert vipd["rss_peak_mib"] == 31.0  # the largest high-water mark of any node
    assert (vipd["threads_holder"], vipd["threads_standby"]) == (4, 3)
    doc = {
        "environment": {"command": "c", "date": "d", "cpus": 2, "cpu_model": "x", "kernel": "k",
                        "python": "3", "keepalived": "k", "vipd_commit": "abc",
                        "vipd_tree_dirty": False, "loadavg_start": ["1", "1", "1"]},
        "loadavg_end": ["1", "1", "1"], "blocks": 2, "seconds": 30.0, "timing": "5/3/1",
        "summary": rows, "runs": runs,
    }  # fmt: skip
    md = modes.render(doc)
    assert "| VRRP | 1 s | vipd | 30.0 | 11.0 |" in md
    assert "| Lease | – | kube-vip | 60.0 | 20.0 |" in md
    assert "1 block(s) failed: no converge" in md


def _config(daemon: str, advert: float, fault: str, outages: list[float]) -> dict[str, Any]:
    rounds = [{"ok": o >= 0, "client_outage_ms": o, "preemption_move_gap_ms": 0.5} for o in outages]
    return {"daemon": daemon, "advert_interval": advert, "fault": fault,
            "rounds_requested": len(outages) + 1, "report": {"rounds": rounds},
            "takeovers": [{"phase": "failover", "decision_to_garp_ms": 0.4},
                          {"phase": "startup", "decision_to_garp_ms": 9.0}]}  # fmt: skip


def test_failover_rounds_pool_per_tree_and_count_missing_or_failed_rounds() -> None:
    run_a = {"configurations": [_config("vipd", 1.0, "kill", [3000.0, 2800.0, -1.0])]}
    run_b = {"configurations": [_config("vipd", 1.0, "kill", [2900.0])]}
    rows = before_after.pool_failover({"before": [run_a, run_b], "after": []})
    kill_1s = next(r for r in rows if (r["advert"], r["fault"]) == (1.0, "kill"))
    vb = kill_1s["before/vipd"]
    assert vb["outage_ms"] == {"n": 3, "p50": 2900.0, "p90": 3000.0, "max": 3000.0}
    # one round not ok in run_a, one missing from each run
    assert vb["failed_rounds"] == 3
    assert vb["decision_to_garp_ms"]["p50"] == 0.4  # the failovers' only, not the start-up's
    assert kill_1s["after/vipd"]["outage_ms"] is None
    assert kill_1s["before/keepalived"]["decision_to_garp_ms"] is None
