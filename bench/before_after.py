"""Before and after a change, same machine, same run: failover, footprint and advert gaps of
two vipd trees, with keepalived beside both.

Run as root from the repository root, with the older tree checked out and set up::

    git worktree add /tmp/before f36db3d && (cd /tmp/before && scripts/setup)
    .venv/bin/python bench/before_after.py --before /tmp/before [--rounds 4] [--blocks 2]
                                           [--parts failover footprint gaps]
                                           [--adverts 1 0.1 0.01] [--faults kill term]
                                           [--out bench/results] [--name before-after]

What it does, one part after the other:

- ``failover``: ``bench/failover.py`` of each tree, run from that tree with its own venv (so
  each runs its own vipd and lab code), ``--blocks`` times each, interleaved before, after,
  after, before, …, each time ``--rounds`` rounds per daemon (vipd, keepalived), advert
  interval (1, 0.1, 0.01 s) and fault (``kill``: node death; ``term``: SIGTERM), the client
  connecting every 0.5 ms under SCHED_FIFO. The rounds of a tree's runs are pooled:
  client-observed outage and the return move's gap (p50/p90/max ms), and vipd's own
  decision → first gratuitous ARP of its failovers. keepalived runs in both trees' runs:
  its two sets of rows show what the load did to each.
- ``footprint``: ``bench/footprint.py --base BEFORE`` (vipd, vipd-base and keepalived in
  interleaved blocks, adverts 1, 0.1 and 0.01 s): master and backup CPU, RSS, start to
  Backup.
- ``gaps``: ``bench/advert_gaps.py --base BEFORE`` at each advert interval (1, 0.1, 0.01 s):
  the gaps between a master's adverts with busy loops on the cores and its endpoint read
  100 times a second, interleaved base, vipd, keepalived per round.

It writes ``<name>.json`` (the pooled failover numbers and the other parts' summaries) and
``<name>.md`` (the tables); the parts' own files go to ``<out>/<name>-footprint.*`` and
``<out>/<name>-gaps-<advert>.*``; the failover runs' raw files to a temporary directory
(removed unless ``--keep``). No thresholds.

What it must not do: change either tree, or judge.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ADVERTS = (1.0, 0.1, 0.01)
FAULTS = ("kill", "term")


def _log(msg: str) -> None:
    print(f"[before-after {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _head(tree: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=False
    ).stdout.strip()


def _stats(xs: Sequence[float]) -> dict[str, float] | None:
    if not xs:
        return None
    s = sorted(xs)
    return {
        "n": len(s),
        "p50": round(statistics.median(s), 3),
        "p90": round(s[min(len(s) - 1, round(0.9 * (len(s) - 1)))], 3),
        "max": round(s[-1], 3),
    }


# -- failover -----------------------------------------------------------------------------------


def failover_run(
    tree: Path, out: Path, rounds: int, adverts: Sequence[float], faults: Sequence[str]
) -> dict[str, Any]:
    argv = [
        str(tree / ".venv" / "bin" / "python"), "bench/failover.py",
        "--rounds", str(rounds), "--blocks", "1",
        "--adverts", *(f"{a:g}" for a in adverts), "--faults", *faults,
        "--probe-interval", "0.0005", "--client-realtime", "--steady-seconds", "0",
        "--out", str(out),
    ]  # fmt: skip
    began = time.monotonic()
    proc = subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False)
    (out / "stderr.log").parent.mkdir(parents=True, exist_ok=True)
    (out / "stderr.log").write_text(proc.stderr)
    doc: dict[str, Any] = json.loads((out / "failover.json").read_text())
    doc["_exit"] = proc.returncode
    doc["_seconds"] = round(time.monotonic() - began, 1)
    return doc


def pool_failover(
    docs: dict[str, list[dict[str, Any]]],
    adverts: Sequence[float] = ADVERTS,
    faults: Sequence[str] = FAULTS,
) -> list[dict[str, Any]]:
    """Rounds of every run of a tree pooled per (daemon, advert, fault)."""
    rows: list[dict[str, Any]] = []
    for advert in adverts:
        for fault in faults:
            row: dict[str, Any] = {"advert": advert, "fault": fault}
            for label, runs in docs.items():
                for daemon in ("vipd", "keepalived"):
                    outage: list[float] = []
                    move: list[float] = []
                    garp: list[float] = []
                    failed = 0
                    for doc in runs:
                        for c in doc["configurations"]:
                            if (c["daemon"], c["advert_interval"], c["fault"]) != (
                                daemon,
                                advert,
                                fault,
                            ):
                                continue
                            rounds = (c.get("report") or {}).get("rounds") or []
                            failed += sum(1 for r in rounds if not r.get("ok"))
                            failed += max(0, c["rounds_requested"] - len(rounds))
                            for r in rounds:
                                if not r.get("ok"):
                                    continue
                                if r.get("client_outage_ms") is not None:
                                    outage.append(r["client_outage_ms"])
                                if r.get("preemption_move_gap_ms") is not None:
                                    move.append(r["preemption_move_gap_ms"])
                            garp += [
                                t["decision_to_garp_ms"]
                                for t in c.get("takeovers") or []
                                if t.get("phase") == "failover"
                            ]
                    row[f"{label}/{daemon}"] = {
                        "outage_ms": _stats(outage),
                        "return_move_gap_ms": _stats(move),
                        "decision_to_garp_ms": _stats(garp) if daemon == "vipd" else None,
                        "failed_rounds": failed,
                    }
            rows.append(row)
    return rows


# -- the other parts ----------------------------------------------------------------------------


def footprint_part(before: Path, out: Path, name: str, blocks: int) -> dict[str, Any]:
    argv = [
        sys.executable, "bench/footprint.py", "--base", str(before),
        "--adverts", *(f"{a:g}" for a in ADVERTS), "--blocks", str(blocks),
        "--seconds", "20", "--restarts", "2", "--out", str(out), "--name", f"{name}-footprint",
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, check=False)
    doc: dict[str, Any] = json.loads((out / f"{name}-footprint.json").read_text())
    return {"exit": proc.returncode, "summary": doc["summary"], "command": argv[1:]}


def gaps_part(before: Path, out: Path, name: str, rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for advert in ADVERTS:
        stem = f"{name}-gaps-{advert:g}"
        argv = [
            sys.executable, "bench/advert_gaps.py", "--base", str(before),
            "--advert", f"{advert:g}", "--rounds", str(rounds), "--seconds", "30",
            "--out", str(out), "--name", stem,
        ]  # fmt: skip
        proc = subprocess.run(argv, cwd=ROOT, check=False)
        if proc.returncode != 0:
            result[f"{advert:g}"] = {"exit": proc.returncode}
            continue
        doc = json.loads((out / f"{stem}.json").read_text())
        per: dict[str, Any] = {}
        for variant, runs in doc["results"].items():
            per[variant] = {
                k: statistics.median(r[k] for r in runs)
                for k in ("gap_p50_ms", "gap_p99_ms", "gap_p999_ms", "gap_max_ms")
            }
            per[variant]["over_3_intervals"] = sum(r["gaps_over_3_intervals"] for r in runs)
            per[variant]["adverts_from_backup"] = sum(r["others"] for r in runs)
        result[f"{advert:g}"] = {"exit": 0, "variants": per, "command": argv[1:]}
    return result


# -- report -------------------------------------------------------------------------------------


def _p(s: dict[str, float] | None, key: str = "p50") -> str:
    return "–" if s is None else f"{s[key]:.1f}"


def _ratio(a: dict[str, float] | None, b: dict[str, float] | None) -> str:
    if a is None or b is None or not b["p50"]:
        return "–"
    return f"{a['p50'] / b['p50']:.2f}"


def render(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = [
        "### Before and after the driver rebuild",
        "",
        f"`{env['command']}` on {env['date']} (load {' '.join(env['loadavg_start'])} at the "
        f"start, {' '.join(doc['loadavg_end'])} at the end; a machine shared with other "
        f"work: runs interleaved). before = {env['before_head'][:10]}, after = "
        f"{env['after_head'][:10]}.",
    ]
    if doc.get("failover"):
        lines += [
            "",
            f"Failover ({doc['rounds']} rounds × {doc['blocks']} interleaved runs per tree, "
            "daemon, advert and fault; keepalived in every run): client outage p50 / p90 / "
            "max ms, the return move's gap p50 ms, vipd's decision → first GARP p50 ms.",
            "",
            "| advert | fault | vipd before | vipd after | after/before p50 | keepalived "
            "(before's runs) | keepalived (after's runs) | move gap before / after "
            "| decision → GARP before / after | failed rounds |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in doc["failover"]:
            vb, va = r["before/vipd"], r["after/vipd"]
            kb, ka = r["before/keepalived"], r["after/keepalived"]

            def trio(x: dict[str, Any]) -> str:
                s = x["outage_ms"]
                return "–" if s is None else f"{s['p50']:.1f} / {s['p90']:.1f} / {s['max']:.1f}"

            failed = sum(x["failed_rounds"] for x in (vb, va, kb, ka))
            lines.append(
                f"| {r['advert']:g} s | {r['fault']} | {trio(vb)} | {trio(va)} "
                f"| {_ratio(va['outage_ms'], vb['outage_ms'])} | {trio(kb)} | {trio(ka)} "
                f"| {_p(vb['return_move_gap_ms'])} / {_p(va['return_move_gap_ms'])} "
                f"| {_p(vb['decision_to_garp_ms'], 'p50')} / "
                f"{_p(va['decision_to_garp_ms'], 'p50')} | {failed} |"
            )
    fpt = doc.get("footprint")
    if fpt:
        lines += [
            "",
            "Footprint (`bench/footprint.py --base`, medians over nodes and interleaved "
            "blocks; CPU % of one core):",
            "",
            "| advert | daemon | master CPU % | backup CPU % | RSS MiB | start → Backup s |",
            "|---|---|---:|---:|---:|---:|",
        ]
        names = {"vipd-base": "vipd before", "vipd": "vipd after", "keepalived": "keepalived"}
        for row in fpt["summary"]:
            for kind in ("vipd-base", "vipd", "keepalived"):
                d = row[kind]

                def f(x: float | None, n: int = 3) -> str:
                    return "–" if x is None else f"{x:.{n}f}"

                lines.append(
                    f"| {row['advert']:g} s | {names[kind]} | {f(d['master_cpu_pct'])} "
                    f"| {f(d['backup_cpu_pct'])} | {f(d['rss_mib'], 1)} "
                    f"| {f(d['start_to_backup_s'])} |"
                )
    gaps = doc.get("gaps")
    if gaps:
        lines += [
            "",
            "Advert gaps (`bench/advert_gaps.py --base`: busy loops on both cores, the "
            "endpoint read 100 times a second; medians over rounds, ms):",
            "",
            "| advert | variant | p50 | p99 | p99.9 | max | gaps > 3 intervals "
            "| adverts from a backup |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for advert, part in gaps.items():
            if part.get("exit"):
                lines.append(f"| {advert} s | (failed, exit {part['exit']}) |||||||")
                continue
            for variant, v in part["variants"].items():
                label = {"base": "vipd before", "vipd": "vipd after"}.get(variant, variant)
                lines.append(
                    f"| {advert} s | {label} | {v['gap_p50_ms']:.2f} | {v['gap_p99_ms']:.2f} "
                    f"| {v['gap_p999_ms']:.2f} | {v['gap_max_ms']:.2f} "
                    f"| {v['over_3_intervals']} | {v['adverts_from_backup']} |"
                )
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--before", type=Path, required=True, help="the older tree, set up")
    ap.add_argument("--rounds", type=int, default=4, help="failover rounds per run (4)")
    ap.add_argument("--blocks", type=int, default=2, help="runs per tree, interleaved (2)")
    ap.add_argument(
        "--parts", nargs="+", choices=("failover", "footprint", "gaps"),
        default=["failover", "footprint", "gaps"],
    )  # fmt: skip
    ap.add_argument("--adverts", type=float, nargs="+", default=list(ADVERTS))
    ap.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--name", default="before-after")
    ap.add_argument("--keep", action="store_true", help="keep the failover runs' raw files")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("before_after: run as root (network namespaces)", file=sys.stderr)
        return 2
    before = args.before.resolve()
    if not (before / ".venv" / "bin" / "python").exists():
        print(f"before_after: {before} has no .venv (run its scripts/setup)", file=sys.stderr)
        return 2
    doc: dict[str, Any] = {
        "environment": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": "bench/before_after.py " + " ".join(sys.argv[1:]),
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "before_tree": str(before),
            "before_head": _head(before),
            "after_head": _head(ROOT),
            "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
        },
        "rounds": args.rounds,
        "blocks": args.blocks,
    }
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        doc["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
        (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
        (args.out / f"{args.name}.md").write_text(render(doc))

    if "failover" in args.parts:
        tmp = Path(tempfile.mkdtemp(prefix="vipd-before-after-"))
        trees = {"before": before, "after": ROOT}
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        exits: list[dict[str, Any]] = []
        for b in range(args.blocks):
            order = ("before", "after") if b % 2 == 0 else ("after", "before")
            for label in order:
                _log(f"failover, {label}, run {b + 1}/{args.blocks}")
                out = tmp / f"{label}-{b}"
                d = failover_run(trees[label], out, args.rounds, args.adverts, args.faults)
                runs[label].append(d)
                exits.append({"tree": label, "run": b, "exit": d["_exit"], "s": d["_seconds"]})
        doc["failover"] = pool_failover(runs, args.adverts, args.faults)
        doc["failover_runs"] = exits
        save()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if "footprint" in args.parts:
        _log("footprint")
        doc["footprint"] = footprint_part(before, args.out, args.name, args.blocks)
        save()
    if "gaps" in args.parts:
        _log("advert gaps")
        doc["gaps"] = gaps_part(before, args.out, args.name, args.blocks)
        save()
    save()
    print(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
