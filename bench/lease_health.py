"""Lease mode, API server death: how fast the VIP leaves a Lease leader whose API server dies.

Run as root from the repository root::

    .venv/bin/python bench/lease_health.py [--rounds N] [--quick] [--out bench/results]

What it measures: ``vipd lab --election lease --fault apidown`` (3 vipd nodes, the Lease API
emulator, each node checking its own stand-in API server and its 2 peers'): the leader's
stand-in (its TCP port and its HTTPS ``/readyz``) is SIGKILLed; the client in its own
namespace connects to VIP:6443 every 2 ms, and the outage is the largest gap between
successful connects around the fault. Two settings: the fast profile (Lease 5/3/1 s, checks
every 0.2 s, timeout 0.15 s, rise 2, fall 2) and client-go's timing with vipd's default checks
(Lease 15/10/2 s, checks every 1 s, timeout 0.8 s, rise 2, fall 3).

The bound (docs/design/lease.md, "giving way"): ``fall ×
interval`` to notice (a killed server refuses at once; the first failing check starts within
one interval of the death) + 0.25 s (the driver's loop looks at health at least that often) +
``retry_period`` (the healthy peer's next read of the released Lease) — round trips to the
emulator on top, a few ms.

It writes ``lease_health.json`` (every round) and ``lease_health.md`` (the table) into
``--out``. What it must not do: judge (no assertions; a lab failure makes the exit status 1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vipd.lab import runner
from vipd.lab.analysis import percentiles
from vipd.lab.daemons import HealthSpec

CONFIGS = [
    ("5/3/1", HealthSpec(port=6444, interval=0.2, timeout=0.15, rise=2, fall=2)),
    ("15/10/2", HealthSpec(port=6444, interval=1.0, timeout=0.8, rise=2, fall=3)),
]


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def failover(timing: str, health: HealthSpec, rounds: int) -> dict[str, Any]:
    opts = runner.Options(
        fault="apidown", rounds=rounds, election="lease", lease_timing=timing, health_spec=health
    )
    t = time.monotonic()
    report = runner.execute(opts)
    retry = float(timing.split("/")[2])
    # Health changes reach the Lease core at once (pushed by the agent), then one retry.
    bound = health.fall * health.interval + retry
    outages = [
        r["client_outage_ms"] / 1e3
        for r in report["rounds"]
        if r["recovered"] and r["client_outage_ms"] is not None
    ]
    p = percentiles(outages)
    return {
        "timing": timing,
        "health": health.section(),
        "rounds": rounds,
        "ok": report["summary"]["ok"],
        "bound_s": bound,
        "client_outage_s": outages,
        "outage": None if p is None else {"p50": p.p50, "p90": p.p90, "max": p.max, "n": p.n},
        "within_bound": sum(1 for o in outages if o <= bound),
        "moved_back": sum(
            1 for r in report["rounds"] if r["holders_after_convergence"] == [r["old_leader"]]
        ),
        "elapsed_s": time.monotonic() - t,
        "report": report,
    }


def render(res: dict[str, Any]) -> str:
    lines = [
        f"# Lease mode: API server death → VIP on a healthy node ({res['started']})",
        "",
        f"`{res['command']}` on {res['host']}, git {res['git_head'][:12]}.",
        "",
        "| Lease D/R/P s | checks: interval / timeout / rise / fall | bound s | "
        "client outage p50 / p90 / max s | rounds within bound | VIP moved back on recovery |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for f in res["failover"]:
        h, o = f["health"], f["outage"]
        out = "–" if o is None else f"{o['p50']:.3f} / {o['p90']:.3f} / {o['max']:.3f}"
        lines.append(
            f"| {f['timing']} | {h['interval']:g} / {h['timeout']:g} / {h['rise']} / "
            f"{h['fall']} | {f['bound_s']:.2f} | {out} | {f['within_bound']}/{f['rounds']} | "
            f"{f['moved_back']}/{f['rounds']} |"
        )
    lines += [
        "",
        "Bound = fall × interval + 0.25 s (the driver's poll) + retry_period; client-seen "
        "outage = the largest gap between successful TCP connects to VIP:6443 (one every "
        "2 ms) around the SIGKILL of the leader's stand-in API server.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="fault rounds per setting")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 5/3/1 only")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/lease_health.py: needs root (network namespaces)", file=sys.stderr)
        return 2
    configs = CONFIGS[:1] if args.quick else CONFIGS
    rounds = 3 if args.quick else args.rounds
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    res: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"Linux {platform.release()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs",
        "command": " ".join(
            ["bench/lease_health.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "git_head": head,
        "failover": [],
    }
    ok = True
    for timing, health in configs:
        _log(f"lease {timing}: {rounds} rounds")
        f = failover(timing, health, rounds)
        ok = ok and f["ok"]
        res["failover"].append(f)
        _log(f"lease {timing}: outage {f['outage']}, bound {f['bound_s']:.3f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lease_health.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    md = render(res)
    (args.out / "lease_health.md").write_text(md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
