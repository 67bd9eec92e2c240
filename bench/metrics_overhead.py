"""What the metrics endpoint costs: vipd's steady-state CPU and memory with and without it.

Run as root from the repository root::

    .venv/bin/python bench/metrics_overhead.py [--base PATH] [--seconds 20] [--rounds 2]
                                               [--out bench/results]

What it does: a 3-node lab (VRRPv3 multicast, advert 0.1 s, priorities 200/150/100) runs
vipd until converged, then samples each daemon's CPU (ns from /proc/PID/schedstat, in % of
one core) and VmRSS over ``--seconds``, for these variants, interleaved ``--rounds`` times
(A B C A B C …) so drift in this shared machine's load hits all alike:

- ``base``: the vipd of another checkout (``--base``, e.g. a worktree of the commit before
  the metrics landed), if given: no endpoint, no metrics;
- ``idle``: this tree, endpoint up, nobody scraping;
- ``scraped``: this tree, every node's /metrics and /status read once a second (a Prometheus
  scraping 15-60 times more often than usual).

It writes ``metrics_overhead.json`` (every sample) and ``metrics_overhead.md`` (the table)
into ``--out``. No judgement and no thresholds: the numbers go to docs/benchmarks.md.

What it must not do: touch anything outside its lab's namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from vipd.lab.nsthread import join_netns

ROOT = Path(__file__).resolve().parents[1]


def _schedstat_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _scraper(ns_paths: list[str], stop: threading.Event, counts: list[int]) -> None:
    """GET /metrics and /status of every node once a second, from inside each namespace."""

    def one(ns_path: str) -> None:
        join_netns(ns_path)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while not stop.is_set():
            for path in ("/metrics", "/status"):
                try:
                    with opener.open(f"http://127.0.0.1:2112{path}", timeout=2) as r:
                        r.read()
                    counts[0] += 1
                except OSError:
                    pass
            stop.wait(1.0)

    threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in ns_paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def measure(seconds: float, scrape: bool) -> dict[str, Any]:
    """One lab run of the vipd importable here (PYTHONPATH decides which checkout)."""
    from vipd.lab.daemons import VrrpSpec, make_fleet
    from vipd.lab.topology import VIP4, Lab

    with Lab(nodes=3) as lab:
        fleet = make_fleet("vipd", lab, VrrpSpec(vip=VIP4, advert_interval=0.1))
        fleet.start_all()
        deadline = time.monotonic() + 20
        while lab.holders(VIP4) != ["n1"] and time.monotonic() < deadline:
            time.sleep(0.05)
        if lab.holders(VIP4) != ["n1"]:
            raise SystemExit(f"did not converge: {lab.holders(VIP4)}")
        time.sleep(3.0)  # past the start-up work and the second GARP burst's timer
        stop = threading.Event()
        counts = [0]
        scraper = None
        if scrape:
            paths = [f"/run/netns/{n.ns}" for n in lab.nodes]
            scraper = threading.Thread(target=_scraper, args=(paths, stop, counts), daemon=True)
            scraper.start()
            time.sleep(1.0)
        pids = {name: d.pid for name, d in fleet.daemons.items()}
        t0 = time.monotonic()
        cpu0 = {n: _schedstat_ns(p) for n, p in pids.items() if p}
        time.sleep(seconds)
        cpu1 = {n: _schedstat_ns(p) for n, p in pids.items() if p}
        elapsed = time.monotonic() - t0
        rss = {n: _rss_kib(p) for n, p in pids.items() if p}
        stop.set()
        if scraper is not None:
            scraper.join(5)
        holders = lab.holders(VIP4)
        fleet.stop_all()
    nodes = {
        n: {
            "cpu_pct": round(100.0 * (cpu1[n] - cpu0[n]) / 1e9 / elapsed, 4),
            "rss_mib": round(rss[n] / 1024, 2),
        }
        for n in cpu0
    }
    return {"nodes": nodes, "elapsed_s": elapsed, "requests": counts[0], "holders": holders}


def run_variant(tree: Path, seconds: float, scrape: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(seconds), *(["--scrape"] if scrape else [])],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"measurement in {tree} failed:\n{out.stdout}\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| variant | runs | leader CPU % | follower CPU % | leader RSS MiB | follower RSS MiB |"
        " requests/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        leader = [r["nodes"]["n1"] for r in runs]
        followers = [r["nodes"][n] for r in runs for n in ("n2", "n3")]
        req = statistics.mean(r["requests"] / r["elapsed_s"] for r in runs)
        lines.append(
            f"| {name} | {len(runs)} "
            f"| {statistics.mean(x['cpu_pct'] for x in leader):.3f} "
            f"| {statistics.mean(x['cpu_pct'] for x in followers):.3f} "
            f"| {statistics.mean(x['rss_mib'] for x in leader):.1f} "
            f"| {statistics.mean(x['rss_mib'] for x in followers):.1f} "
            f"| {req:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="another checkout to measure as 'base'")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--measure", type=float, help=argparse.SUPPRESS)
    p.add_argument("--scrape", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.scrape)))
        return 0
    variants: list[tuple[str, Path, bool]] = []
    if args.base is not None:
        variants.append(("base (no endpoint)", args.base.resolve(), False))
    variants += [("idle (endpoint up)", ROOT, False), ("scraped every 1 s", ROOT, True)]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    for i in range(args.rounds):
        for name, tree, scrape in variants:
            r = run_variant(tree, args.seconds, scrape)
            results[name].append(r)
            print(f"round {i + 1} {name}: {r['nodes']}", file=sys.stderr)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    base_head = ""
    if args.base is not None:
        base_head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=args.base, capture_output=True, text=True
        ).stdout.strip()
    doc = {
        "command": sys.argv,
        "head": head,
        "base_head": base_head,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "seconds": args.seconds,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "metrics_overhead.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = (
        f"vipd steady state, 3 nodes, advert 0.1 s, {args.seconds:g} s samples, "
        f"{args.rounds} interleaved rounds (HEAD {head[:10]}"
        + (f", base {base_head[:10]}" if base_head else "")
        + ")\n\n"
        + table(results)
    )
    (args.out / "metrics_overhead.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
