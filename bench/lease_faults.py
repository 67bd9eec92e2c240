"""The Lease backend's fault table on the real control plane: for each injected fault, the
worst two-holder span and the worst no-holder span of the VIP, and what a client saw.

Run as root from the repository root, with the binaries built (``scripts/setup-kube``)::

    .venv/bin/python bench/lease_faults.py [--out bench/results] [-k EXPR]

What it does: runs the fault scenarios of ``tests/kube/test_faults.py`` as they are (one bed
of three etcd members and three kube-apiservers, vipd in Lease mode at 5/3/1 on each), with
``$VIPD_FAULT_TABLE`` set so that each scenario's judged window (``Window.check`` in
``tests/kube/conftest.py``) appends its verdict as one JSON line: the longest span with two
nodes holding the VIP and the longest span with none, both read off the ``ip monitor
address`` timeline of every node, plus the longest gap between successful TCP connects
through the VIP (a 2 ms prober in the client namespace). The scenarios are the tests' own
code, so the table and the tests cannot describe different faults; a scenario whose test
failed is in the table with its problems, not left out.

Goals: two holders never beyond a graceful stop's overlap (0.1 s); no holder never beyond the
bound each scenario states (duration + retry period + slack for a fault that takes the holder
away; the retry period + slack for a graceful stop).

It writes ``lease_faults.json`` (every row, the environment, the command) and
``lease_faults.md`` (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TEST_FILE = "tests/kube/test_faults.py"


def fault_name(test: str) -> str:
    """``test_2a_leader_apiserver_sigkilled[x]`` → ``2a leader apiserver sigkilled (x)``."""
    base, _, param = test.partition("[")
    words = re.sub(r"^test_", "", base).replace("_", " ")
    return f"{words} ({param.rstrip(']')})" if param else words


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        "| fault | worst two-holder span s (goal ≤ 0.1) | worst no-holder span s | "
        "no-holder bound s | client longest gap s | verdict |\n"
        "|---|---:|---:|---:|---:|---|\n"
    )
    lines = []
    for r in rows:
        verdict = "ok" if not r["problems"] else "; ".join(r["problems"])
        lines.append(
            f"| {fault_name(r['test'])} | {_s(r['worst_two_holders_s'])} | "
            f"{_s(r['worst_no_holder_s'])} | {_s(r['no_holder_bound_s'])} | "
            f"{_s(r['client_outage_s'])} | {verdict} |"
        )
    return head + "\n".join(lines) + "\n"


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("-k", dest="select", default="", help="pytest -k expression (a subset)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vipd-fault-table-") as tmp:
        rows_path = Path(tmp) / "rows.jsonl"
        env = {**os.environ, "VIPD_FAULT_TABLE": str(rows_path)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST_FILE]
        if args.select:
            cmd += ["-k", args.select]
        started = time.time()
        run = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        rows = read_rows(rows_path)
    if not rows:
        print(f"bench/lease_faults.py: no scenario was judged (pytest exit {run.returncode})")
        return 1
    doc = {
        "command": " ".join(["bench/lease_faults.py", *(argv or sys.argv[1:])]),
        "started": started,
        "duration_s": round(time.time() - started, 1),
        "pytest_exit": run.returncode,
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lease_faults.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = table(rows)
    (args.out / "lease_faults.md").write_text(md)
    print(md)
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
