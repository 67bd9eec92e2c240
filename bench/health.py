"""Health benchmark: how fast the VIP leaves a leader whose API server dies, and what the
checker costs.

Run as root from the repository root::

    .venv/bin/python bench/health.py [--rounds N] [--cpu-seconds S] [--quick] [--out bench/results]

What it measures:

1. **API server death → VIP answering from a healthy node.** The network-namespace lab
   (``vipd.lab.runner``, 3 vipd nodes, priorities 200/150/100, VRRPv3 multicast) with health
   gating on and the ``apidown`` fault: the leader's stand-in API server (its TCP port and its
   HTTPS ``/readyz``) is SIGKILLed at a random point of the advert cycle; the client in its
   own namespace connects to VIP:6443 every 2 ms. The outage is what that client saw (the
   largest gap between successful connects around the fault). Two timer sets: a fast one
   (advert 0.1 s; checks every 0.2 s, timeout 0.15 s, rise 2, fall 2) and vipd's defaults
   (advert 1 s; checks every 1 s, timeout 0.8 s, rise 2, fall 3). The expected bound is
   ``fall × interval`` (a killed server refuses at once: each check fails immediately, the
   first within one interval of the death) plus the backup's Master_Down_Interval (3 × Adv +
   Skew_Time at priority 150), counted from the leader's last full-priority advert.
2. **CPU of the checker.** ``vipd.lab.healthwatch`` (the real ``HealthChecker`` on uvloop, as
   in the daemon) in the client namespace checks 7 backends (7 lab nodes, each serving the
   stand-in's HTTPS ``/readyz``) every 1 s, for ``--cpu-seconds``; its CPU (getrusage, user +
   system) minus that of the same process checking one target every 300 s (an idle loop),
   in % of one core and in ms per check; with and without verifying the chain against a CA
   file. A separate run with a 10 ms ticker on the same loop reports the longest time the
   checks held the loop (the ticker's worst lateness).

It writes ``health.json`` (every round, every sample) and ``health.md`` (the tables) into
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
from vipd.lab.healthwatch import HealthWatch
from vipd.lab.pki import make_ca, make_cert
from vipd.lab.topology import Lab, python_argv, python_env
from vipd.vrrp import state

CONFIGS = [
    ("fast", 0.1, HealthSpec(port=6444, interval=0.2, timeout=0.15, rise=2, fall=2)),
    ("defaults", 1.0, HealthSpec(port=6444, interval=1.0, timeout=0.8, rise=2, fall=3)),
]


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def failover(name: str, advert: float, health: HealthSpec, rounds: int) -> dict[str, Any]:
    opts = runner.Options(
        fault="apidown", rounds=rounds, advert_interval=advert, health_spec=health
    )
    t = time.monotonic()
    report = runner.execute(opts)
    mdi = state.master_down_interval(3, 150, round(advert * 100))
    bound = health.fall * health.interval + mdi
    outages = [
        r["client_outage_ms"] / 1e3
        for r in report["rounds"]
        if r["recovered"] and r["client_outage_ms"] is not None
    ]
    takeovers = [r["takeover_s"] for r in report["rounds"] if r["takeover_s"] is not None]
    p = percentiles(outages)
    q = percentiles(takeovers)
    return {
        "name": name,
        "advert_interval": advert,
        "health": health.section(),
        "rounds": rounds,
        "ok": report["summary"]["ok"],
        "bound_s": bound,
        "bound_hung_s": bound + health.timeout,
        "mdi_150_s": mdi,
        "detection_s": health.fall * health.interval,
        "client_outage_s": outages,
        "takeover_s": takeovers,
        "outage": None if p is None else {"p50": p.p50, "p90": p.p90, "max": p.max, "n": p.n},
        "takeover": None if q is None else {"p50": q.p50, "p90": q.p90, "max": q.max, "n": q.n},
        "within_bound": sum(1 for o in outages if o <= bound),
        "elapsed_s": time.monotonic() - t,
        "report": report,
    }


def _servers(lab: Lab, cert: tuple[Path, Path]) -> list[Any]:
    procs = []
    for node in lab.nodes:
        proc = lab.spawn(
            node.ns,
            python_argv(
                "vipd.lab.fakes.apiserver", "--port", "6443", "--cert", str(cert[0]),
                "--key", str(cert[1]),
            ),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=python_env(), text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening"):
            raise RuntimeError(f"health server on {node.name} did not start: {line!r}")
        procs.append(proc)
    return procs


def _watch(lab: Lab, seconds: float, *extra: str) -> dict[str, Any]:
    first, *rest = [n.ipv4 for n in lab.nodes]
    targets = [a for ip in rest for a in ("--target", ip)]
    w = HealthWatch.on(lab, None, first, *targets, "--quiet", *extra)
    w.start()
    time.sleep(seconds)
    events = w.stop()
    end = next(e for e in events if e["event"] == "end")
    changes = [e for e in events if e["event"] == "change"]
    lags = [e["max_ms"] for e in events if e["event"] == "lag"]
    return {
        "args": list(extra),
        "cpu_s": end["cpu_s"],
        "wall_s": end["wall_s"],
        "checks": end["checks"],
        "healthy_targets": len({e["addr"] for e in changes if e["healthy"]}),
        "lag_max_ms": lags,
    }


def cpu(seconds: float) -> dict[str, Any]:
    lab = Lab(nodes=7)
    try:
        lab.build()
        ca = make_ca(lab.workdir)
        cert = make_cert(lab.workdir, "apiserver", ca=ca)
        procs = _servers(lab, cert)
        common = ("--port", "6443", "--rise", "2", "--fall", "3")
        runs = {
            "idle": _watch(lab, seconds, *common, "--interval", "300", "--timeout", "1"),
            "no_verify": _watch(lab, seconds, *common, "--interval", "1", "--timeout", "0.8"),
            "verify": _watch(
                lab,
                seconds,
                *common,
                "--interval",
                "1",
                "--timeout",
                "0.8",
                "--ca-file",
                str(ca[0]),
            ),
            "idle_lag": _watch(
                lab, min(seconds, 30.0), *common, "--interval", "300", "--timeout", "1", "--lag"
            ),
            "lag": _watch(
                lab, min(seconds, 30.0), *common, "--interval", "1", "--timeout", "0.8", "--lag"
            ),
        }
        for p in procs:
            p.kill()
    finally:
        lab.teardown()
    idle = runs["idle"]["cpu_s"] / runs["idle"]["wall_s"]
    out: dict[str, Any] = {"seconds": seconds, "targets": 7, "runs": runs}
    for key in ("no_verify", "verify"):
        r = runs[key]
        share = r["cpu_s"] / r["wall_s"]
        out[key] = {
            "cpu_pct": 100 * share,
            "cpu_pct_over_idle": 100 * (share - idle),
            "ms_per_check": 1e3 * (r["cpu_s"] - idle * r["wall_s"]) / max(1, r["checks"]),
            "checks_per_s": r["checks"] / r["wall_s"],
        }
    out["idle_cpu_pct"] = 100 * idle
    return out


def render(res: dict[str, Any]) -> str:
    lines = [
        "# Health benchmark",
        "",
        f"{res['started']}, {res['host']}; `{res['command']}`",
        "",
        "## Leader's API server killed → VIP answering from a healthy node",
        "",
        "Client-observed outage (largest gap between successful TCP connects to VIP:6443, one "
        "every 2 ms). Bound = fall × interval + Master_Down_Interval of the priority-150 "
        "backup (3 × Adv + Skew_Time); a hung (not killed) server adds one timeout.",
        "",
        "| timers | advert s | checks: interval / timeout / rise / fall | bound s | "
        "outage p50 / p90 / max s | VIP seen moved p50 / max s | rounds within bound | ok |",
        "|---|---:|---|---:|---:|---:|---:|:---:|",
    ]
    for f in res["failover"]:
        h = f["health"]
        o, t = f["outage"], f["takeover"]
        lines.append(
            f"| {f['name']} | {f['advert_interval']:g} | {h['interval']:g} / {h['timeout']:g}"
            f" / {h['rise']} / {h['fall']} | {f['bound_s']:.3f} | "
            + (f"{o['p50']:.3f} / {o['p90']:.3f} / {o['max']:.3f}" if o else "-")
            + " | "
            + (f"{t['p50']:.3f} / {t['max']:.3f}" if t else "-")
            + f" | {f['within_bound']}/{len(f['client_outage_s'])} | "
            + ("yes" if f["ok"] else "NO")
            + " |"
        )
    c = res["cpu"]
    lines += [
        "",
        f"## Checker CPU: 7 backends, every 1 s, {c['seconds']:g} s per sample",
        "",
        "uvloop, one TLS connection per check (EC P-256 certificates); CPU from getrusage of "
        "the checker process, minus the idle process (one target every 300 s: "
        f"{c['idle_cpu_pct']:.3f} % of a core).",
        "",
        "| TLS | checks/s | CPU % of one core | over idle % | CPU ms per check |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, label in (("no_verify", "not verified (default)"), ("verify", "chain verified")):
        r = c[key]
        lines.append(
            f"| {label} | {r['checks_per_s']:.2f} | {r['cpu_pct']:.2f} | "
            f"{r['cpu_pct_over_idle']:.2f} | {r['ms_per_check']:.2f} |"
        )
    lags = c["runs"]["lag"]["lag_max_ms"]
    idle = c["runs"]["idle_lag"]["lag_max_ms"]
    if lags and idle:
        lines += [
            "",
            "How long the loop was held: a 10 ms ticker on the checker's loop, its worst "
            "lateness in each second (the machine's own noise shows in the idle row):",
            "",
            "| loop | seconds | median of the per-second worst, ms | max ms |",
            "|---|---:|---:|---:|",
            f"| 7 backends every 1 s | {len(lags)} | {sorted(lags)[len(lags) // 2]:.1f} | "
            f"{max(lags):.1f} |",
            f"| idle (one target every 300 s) | {len(idle)} | "
            f"{sorted(idle)[len(idle) // 2]:.1f} | {max(idle):.1f} |",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="fault rounds per timer set")
    parser.add_argument("--cpu-seconds", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="3 rounds, fast timers, 10 s CPU")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/health.py: needs root (network namespaces)", file=sys.stderr)
        return 2
    configs = CONFIGS[:1] if args.quick else CONFIGS
    rounds = 3 if args.quick else args.rounds
    seconds = 10.0 if args.quick else args.cpu_seconds
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    res: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"Linux {platform.release()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs",
        "command": " ".join(["bench/health.py", *(argv if argv is not None else sys.argv[1:])]),
        "git_head": head,
        "failover": [],
    }
    ok = True
    for name, advert, health in configs:
        _log(f"failover {name}: advert {advert:g} s, {rounds} rounds")
        f = failover(name, advert, health, rounds)
        ok = ok and f["ok"]
        res["failover"].append(f)
        _log(f"failover {name}: outage {f['outage']}, bound {f['bound_s']:.3f} s")
    _log(f"checker CPU: 7 backends, {seconds:g} s per sample")
    res["cpu"] = cpu(seconds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "health.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    md = render(res)
    (args.out / "health.md").write_text(md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
