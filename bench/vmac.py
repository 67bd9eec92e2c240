"""Virtual MAC benchmark: client-seen outage on node death at advert 0.1 s, vmac off vs on.

Run as root from the repository root::

    .venv/bin/python bench/vmac.py [--rounds 20] [--blocks 4] [--out bench/results]

What it does: runs the project's network-namespace lab (``vipd.lab.runner``: 3 vipd nodes on
a Linux bridge, VRRPv3 multicast, advert 0.1 s, a client connecting to VIP:6443 every 2 ms)
with fault ``kill`` (the leader's link goes down and every process in its namespace is
SIGKILLed; then it comes back and preempts), once with ``election.vrrp.vmac`` off and once on,
in ``--blocks`` interleaved runs each, so that load drifting on the shared machine hits both
alike. ``--rounds`` is the total per setting. The outage is the client's: the largest gap
between successful connects around the fault.

What it cannot show: the lab's client is a Linux host that honours gratuitous ARP at once, so
without vmac it re-points the VIP at the first GARP; the virtual MAC's gain is for clients
and routers that ignore or rate-limit GARP, which the lab does not have. It writes
``vmac.json`` (every round, the environment, the command) and ``vmac.md`` (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vipd.lab.runner import Options, execute  # noqa: E402

ADVERT = 0.1


def _outages(report: dict[str, Any]) -> list[float]:
    return [
        float(r["client_outage_ms"])
        for r in report["rounds"]
        if r["ok"] and r["client_outage_ms"] is not None
    ]


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "max": None}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 1),
        "p90": round(p90, 1),
        "max": round(max(values), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/vmac.py", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds per setting (default 20)")
    parser.add_argument("--blocks", type=int, default=4, help="interleaved runs (default 4)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/vmac.py: needs root (network namespaces)", file=sys.stderr)
        return 2
    per_block = max(1, -(-args.rounds // args.blocks))
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    t0 = time.monotonic()
    for block in range(args.blocks):
        for name in ("off", "on"):
            print(f"[block {block + 1}/{args.blocks}] vmac {name}", file=sys.stderr, flush=True)
            opts = Options(advert_interval=ADVERT, fault="kill", rounds=per_block)
            opts.vmac = name == "on"
            runs[name].append(execute(opts))
    outages = {name: [o for rep in reps for o in _outages(rep)] for name, reps in runs.items()}
    failed = {
        name: sum(len(rep["summary"]["failed_rounds"]) for rep in reps)
        for name, reps in runs.items()
    }
    summary = {name: {**_stats(v), "failed_rounds": failed[name]} for name, v in outages.items()}
    on, off = summary["on"]["p50"], summary["off"]["p50"]
    ratio = round(on / off, 3) if isinstance(on, float) and isinstance(off, float) else None
    doc = {
        "environment": {
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "command": shlex.join(["bench/vmac.py", *(sys.argv[1:] if argv is None else argv)]),
        },
        "parameters": {
            "nodes": 3,
            "advert_interval": ADVERT,
            "fault": "kill",
            "rounds_per_setting": per_block * args.blocks,
            "blocks": args.blocks,
        },
        "run_seconds": round(time.monotonic() - t0, 1),
        "summary": summary,
        "ratio_p50_on_off": ratio,
        "outages_ms": outages,
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vmac.json").write_text(json.dumps(doc, indent=2) + "\n")
    env: dict[str, Any] = doc["environment"]  # type: ignore[assignment]
    lines = [
        "# Virtual MAC benchmark",
        "",
        f"{env['date_utc']}, Linux {env['kernel']}, Python {env['python']}, {env['cpus']} CPUs; "
        f"`{env['command']}`",
        "",
        "Node death of the leader (link down + SIGKILL), 3 vipd nodes, VRRPv3 multicast, advert "
        f"{ADVERT:g} s; client-observed outage (largest gap between successful TCP connects to "
        "VIP:6443, one every 2 ms), ms.",
        "",
        "| election.vrrp.vmac | rounds ok | outage p50 | p90 | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("off", "on"):
        s = summary[name]
        total = per_block * args.blocks
        lines.append(
            f"| {name} | {total - int(s['failed_rounds'] or 0)}/{total} | {s['p50']} | "
            f"{s['p90']} | {s['max']} |"
        )
    lines += ["", f"Median ratio on/off: {ratio}.", ""]
    md = "\n".join(lines)
    (args.out / "vmac.md").write_text(md)
    print(md)
    return 0 if not any(failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
