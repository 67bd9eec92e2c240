"""The Lease fault table's rendering (bench/lease_faults.py): names from the tests, every
judged scenario a row, a failed one with its problems."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit import benches

bench = benches.load("lease_faults")


def row(test: str, shared: float, unowned: float, problems: list[str]) -> dict[str, object]:
    return {
        "test": test,
        "worst_two_holders_s": shared,
        "worst_no_holder_s": unowned,
        "no_holder_bound_s": 7.5,
        "client_outage_s": None,
        "problems": problems,
    }


def test_fault_names_come_from_the_test_names() -> None:
    assert bench.fault_name("test_2b_leader_apiserver_sigkilled") == "2b leader apiserver sigkilled"
    assert bench.fault_name("test_5_whole_etcd_down[between]") == "5 whole etcd down (between)"


def test_every_row_is_in_the_table_a_failed_one_with_its_problem(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [
        row("test_1_leader_etcd_member_cut_off_from_quorum", 0.0, 0.0, []),
        row("test_6_leader_node_partitioned_then_healed", 0.25, 6.2, ["two holders for 0.250 s"]),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = bench.read_rows(path)
    assert got == rows
    md = bench.table(got).splitlines()
    assert len(md) == 2 + len(rows)
    assert md[2].startswith("| 1 leader etcd member cut off from quorum | 0.000 | 0.000 |")
    assert md[2].endswith("| — | ok |")
    assert md[3].endswith("| two holders for 0.250 s |") and "| 0.250 | 6.200 | 7.500 |" in md[3]


def test_no_rows_file_is_no_rows(tmp_path: Path) -> None:
    assert bench.read_rows(tmp_path / "absent.jsonl") == []
