"""Advert gaps benchmark: how steady a Master's 0.01 s adverts are on a busy machine while its
endpoint is read.

Run as root from the repository root::

    .venv/bin/python bench/advert_gaps.py [--base PATH] [--seconds 30] [--rounds 2]
                                          [--load 4] [--scrape-hz 100] [--advert 0.01]
                                          [--out bench/results] [--name advert_gaps]

What it does: a 3-node lab (VRRPv3 multicast, advert ``--advert``, 0.01 s by default,
priorities 200/150/100) runs the daemon until n1 leads; then ``--load`` busy loops at
ordinary priority keep the cores busy and a client reads n1's ``/metrics`` and ``/status``
(vipd only) up to ``--scrape-hz`` times a second, while a raw socket in n3's namespace
records every VRRP advert with its kernel receive time (``SO_TIMESTAMPNS``) for
``--seconds``. From n1's adverts it takes the gaps between consecutive ones; an advert from
any other node means a backup took over.

Why: below 0.1 s vipd runs SCHED_RR, so busy loops at ordinary priority cannot delay its
adverts, unless a thread of vipd's that is not real-time holds what the real-time ones need:
the GIL, or the driver's lock (a connection thread rendering a scrape). A gap of three
intervals and a skew lets a backup take the VIP.

Variants, interleaved ``--rounds`` times so drift hits all alike: ``base`` (another checkout,
``--base``, if given), ``vipd`` (this tree), and ``keepalived`` (Debian's, same load, nothing
to read: its one thread is real-time). It writes ``advert_gaps.json`` (every round) and
``advert_gaps.md`` (medians over rounds) into ``--out`` (``--name`` names them). No
thresholds: the numbers go to docs/benchmarks.md.

What it must not do: leave a busy loop, a lab or a daemon behind, or judge.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import select
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from vipd.lab.nsthread import join_netns

ROOT = Path(__file__).resolve().parents[1]
INTERVAL = 0.01  # the default advert interval (--advert)
VRRP_GROUP = "224.0.0.18"
VRRP_PROTO = 112
SO_TIMESTAMPNS = 35
HOG = "while True: pass"


def _listen(ns: str, addr: str, stop: threading.Event, out: list[tuple[float, str]]) -> None:
    """Every VRRP advert seen in ``ns`` (joined on ``addr``'s interface): (kernel receive
    time, source)."""
    join_netns(ns)
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, VRRP_PROTO)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        mreq = socket.inet_aton(VRRP_GROUP) + socket.inet_aton(addr)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        while not stop.is_set():
            ready, _, _ = select.select([sock], [], [], 0.2)
            if not ready:
                continue
            _data, anc, _flags, src = sock.recvmsg(2048, socket.CMSG_SPACE(16))
            at = None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("@qq", payload[:16])
                    at = sec + nsec / 1e9
            out.append((at if at is not None else time.time(), src[0]))
    finally:
        sock.close()


def _scrape(ns: str, hz: float, stop: threading.Event, counts: list[int]) -> None:
    """GET /metrics then /status on the node of ``ns``, ``hz`` times a second at most."""
    join_netns(ns)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    period = 1.0 / hz
    due = time.monotonic()
    while not stop.is_set():
        for path in ("/metrics", "/status"):
            try:
                with opener.open(f"http://127.0.0.1:2112{path}", timeout=2) as r:
                    r.read()
                counts[0] += 1
            except OSError:
                counts[1] += 1
        due += period
        stop.wait(max(0.0, due - time.monotonic()))


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def measure(
    kind: str, seconds: float, load: int, scrape_hz: float, interval: float = INTERVAL
) -> dict[str, Any]:
    """One lab run of ``kind`` (vipd: the one importable here, PYTHONPATH decides)."""
    from vipd.lab.daemons import VrrpSpec, make_fleet
    from vipd.lab.topology import VIP4, Lab

    with Lab(nodes=3) as lab:
        fleet = make_fleet(
            "vipd" if kind == "vipd" else "keepalived",
            lab,
            VrrpSpec(vip=VIP4, advert_interval=interval),
        )
        fleet.start_all()
        hogs: list[subprocess.Popen[bytes]] = []
        try:
            deadline = time.monotonic() + 20 + 4 * interval
            while lab.holders(VIP4) != ["n1"] and time.monotonic() < deadline:
                time.sleep(0.05)
            if lab.holders(VIP4) != ["n1"]:
                raise SystemExit(f"did not converge: {lab.holders(VIP4)}")
            time.sleep(3.0)  # past the start-up work
            n1, n3 = lab.node("n1"), lab.node("n3")
            stop = threading.Event()
            seen: list[tuple[float, str]] = []
            counts = [0, 0]
            threads = [
                threading.Thread(target=_listen, args=(n3.ns, n3.ipv4, stop, seen), daemon=True)
            ]
            if kind == "vipd" and scrape_hz > 0:
                threads.append(
                    threading.Thread(
                        target=_scrape, args=(n1.ns, scrape_hz, stop, counts), daemon=True
                    )
                )
            for t in threads:
                t.start()
            hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(load)]
            time.sleep(seconds)
            stop.set()
            for t in threads:
                t.join(5)
            holders = lab.holders(VIP4)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
            fleet.stop_all()
    from_n1 = [at for at, src in seen if src == n1.ipv4]
    gaps_ms = [1000 * (b - a) for a, b in itertools.pairwise(from_n1)]
    if not gaps_ms:
        raise SystemExit(f"{kind}: no adverts from n1 were seen")
    return {
        "kind": kind,
        "adverts": len(from_n1),
        "others": sum(1 for _, src in seen if src != n1.ipv4),
        "gap_p50_ms": round(statistics.median(gaps_ms), 3),
        "gap_p99_ms": round(_percentile(gaps_ms, 0.99), 3),
        "gap_p999_ms": round(_percentile(gaps_ms, 0.999), 3),
        "gap_max_ms": round(max(gaps_ms), 3),
        "advert": interval,
        "gaps_over_2_intervals": sum(1 for g in gaps_ms if g > 2000 * interval),
        "gaps_over_3_intervals": sum(1 for g in gaps_ms if g > 3000 * interval),
        "scrapes_per_s": round(counts[0] / seconds, 1),
        "scrape_errors": counts[1],
        "holders_after": holders,
    }


def run_variant(
    kind: str, tree: Path, seconds: float, load: int, scrape_hz: float, interval: float = INTERVAL
) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, __file__, "--measure", kind, "--seconds", str(seconds)]
    cmd += ["--load", str(load), "--scrape-hz", str(scrape_hz), "--advert", str(interval)]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{kind} in {tree} failed:\n{out.stdout}\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    keys = ("gap_p50_ms", "gap_p99_ms", "gap_p999_ms", "gap_max_ms")
    lines = [
        "| variant | rounds | gap p50 ms | p99 | p99.9 | max | gaps > 2 intervals | "
        "gaps > 3 intervals | adverts from a backup | reads/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        med = [statistics.median(r[k] for r in runs) for k in keys]
        lines.append(
            f"| {name} | {len(runs)} | "
            + " | ".join(f"{m:.2f}" for m in med)
            + f" | {sum(r['gaps_over_2_intervals'] for r in runs)}"
            f" | {sum(r['gaps_over_3_intervals'] for r in runs)}"
            f" | {sum(r['others'] for r in runs)}"
            f" | {statistics.median(r['scrapes_per_s'] for r in runs):.0f} |"
        )
    return "\n".join(lines) + "\n"


def _head(tree: Path) -> str:
    out = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="another checkout to measure as 'base'")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--load", type=int, default=4, help="busy loops at ordinary priority")
    p.add_argument("--scrape-hz", type=float, default=100.0)
    p.add_argument("--advert", type=float, default=INTERVAL, help="advert interval s (0.01)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--name", default="advert_gaps", help="output file stem (advert_gaps)")
    p.add_argument("--measure", choices=("vipd", "keepalived"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.seconds <= 0 or args.rounds < 1 or args.load < 0 or args.scrape_hz < 0:
        p.error("--seconds and --rounds must be positive, --load and --scrape-hz ≥ 0")
    if args.measure is not None:
        print(
            json.dumps(measure(args.measure, args.seconds, args.load, args.scrape_hz, args.advert))
        )
        return 0
    variants: list[tuple[str, str, Path]] = []
    if args.base is not None:
        variants.append(("base", "vipd", args.base.resolve()))
    variants += [("vipd", "vipd", ROOT), ("keepalived", "keepalived", ROOT)]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    for i in range(args.rounds):
        for name, kind, tree in variants:
            r = run_variant(kind, tree, args.seconds, args.load, args.scrape_hz, args.advert)
            results[name].append(r)
            print(f"round {i + 1} {name}: {r}", file=sys.stderr)
    head = _head(ROOT)
    base_head = _head(args.base) if args.base is not None else ""
    doc = {
        "command": sys.argv,
        "head": head,
        "base_head": base_head,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "seconds": args.seconds,
        "advert": args.advert,
        "load": args.load,
        "scrape_hz": args.scrape_hz,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = (
        f"Master's adverts at {args.advert:g} s seen from n3, 3 nodes, {args.load} busy loops "
        f"at ordinary priority on {os.cpu_count()} CPUs, n1's /metrics and /status read up to "
        f"{args.scrape_hz:g} times a second (vipd), {args.seconds:g} s per round, "
        f"{args.rounds} interleaved rounds; medians over rounds, counts summed "
        f"(HEAD {head[:10]}"
        + (f", base {base_head[:10]}" if base_head else "")
        + ")\n\n"
        + table(results)
    )
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
