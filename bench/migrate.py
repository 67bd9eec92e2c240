"""keepalived → vipd node by node: the client-seen gap of each step, over several runs.

Run as root from the repository root::

    .venv/bin/python bench/migrate.py [--runs 5] [--out bench/results] [--name migrate-keepalived]

What it does: ``vipd.lab.migrate`` (what ``vipd lab --from keepalived`` runs) ``--runs`` times
in each of three set-ups, interleaved: VRRPv2 multicast with a password (kubeadm's HA guide),
VRRPv2 unicast with a password, VRRPv3 multicast; three nodes at priorities 200/150/100, 1 s
adverts, Debian's keepalived, each node's vipd config made by ``vipd import keepalived`` of
its own keepalived.conf. Per set-up and step (a backup replaced, the other backup, the holder
last) it reports the client's longest gap between answered connects (median and max), the
VIP moves, the longest span with no holder and the longest overlap of two holders (the
make-before-break handover). It writes ``<name>.json`` (every run) and ``<name>.md`` (the
table in docs/benchmarks.md).

What it must not do: judge. A run whose lab failed is recorded with its error and the exit
status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from vipd.lab import migrate
from vipd.lab.topology import LabError

REPO = Path(__file__).resolve().parents[1]
SETUPS: tuple[tuple[str, int, bool], ...] = (
    ("VRRPv2 multicast, password", 2, False),
    ("VRRPv2 unicast, password", 2, True),
    ("VRRPv3 multicast", 3, False),
)
STEPS = ("backup (n3)", "backup (n2)", "holder (n1)")


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, name in enumerate(STEPS):
        steps = [r["steps"][i] for r in runs]
        if not steps:
            continue
        gaps = [s["client_gap_ms"] for s in steps]
        out.append(
            {
                "step": name,
                "gap_p50_ms": round(statistics.median(gaps), 1),
                "gap_max_ms": max(gaps),
                "moves": sorted({s["moves"] for s in steps}),
                "no_holder_max_ms": max(s["no_holder_ms"] for s in steps),
                "overlap_max_ms": max(s["overlap_ms"] for s in steps),
                "two_holders": sum(1 for s in steps if s["two_holders"]),
            }
        )
    return out


def render(result: dict[str, Any]) -> str:
    lines = [
        f"`{result['command']}` ({result['started']}; {result['machine']}; "
        f"{result['runs']} runs per set-up)",
        "",
        "| set-up | step | client gap p50 ms | max ms | VIP moves | no holder max ms "
        "| overlap max ms | runs with two holders |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for setup, rows in result["summary"].items():
        for row in rows:
            lines.append(
                f"| {setup} | {row['step']} | {row['gap_p50_ms']} | {row['gap_max_ms']} | "
                f"{'/'.join(map(str, row['moves']))} | {row['no_holder_max_ms']} | "
                f"{row['overlap_max_ms']} | {row['two_holders']} |"
            )
    errors = [r for r in result["runs_done"] if r.get("error")]
    if errors:
        lines += ["", f"{len(errors)} runs failed: " + "; ".join(r["error"] for r in errors)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5, help="migrations per set-up (5)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default="migrate-keepalived", help="output file stem")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("migrate: run as root (network namespaces)", file=sys.stderr)
        return 2
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    result: dict[str, Any] = {
        "command": ("bench/migrate.py " + " ".join(sys.argv[1:])).strip(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "runs": args.runs,
        "runs_done": [],
    }
    for run in range(args.runs):
        for name, version, unicast in SETUPS:
            print(f"migrate: {name}, run {run + 1}/{args.runs}", file=sys.stderr)
            try:
                report = migrate.run(3, version, unicast)
            except LabError as exc:
                report = {"error": str(exc).splitlines()[0], "steps": []}
            result["runs_done"].append({"setup": name, **report})
    result["summary"] = {
        name: summary([r for r in result["runs_done"] if r["setup"] == name and r["steps"]])
        for name, _, _ in SETUPS
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(render(result))
    print(render(result))
    return 1 if any(r.get("error") for r in result["runs_done"]) else 0


if __name__ == "__main__":
    sys.exit(main())
