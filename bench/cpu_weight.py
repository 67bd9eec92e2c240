"""CPU weight benchmark: how late an advert tick comes when the node's CPUs are saturated, by
the CPU request the pod spec gives vipd.

Run from the repository root, as root (it makes cgroups)::

    .venv/bin/python bench/cpu_weight.py [--requests none 10m 100m 250m host] [--seconds 20]
                                         [--burst-ms 20] [--blocks 3] [--out bench/results]

Why: in a pod the CPU request is not only what the scheduler reserves; the kubelet turns it
into the container's CPU weight (cgroup v1 ``cpu.shares`` = millicores * 1024 / 1000, at
least 2; cgroup v2 ``cpu.weight`` converted from that), and that weight is all the CPU the
container gets while the node is saturated. kube-apiserver asks for 250m (weight 256); a
daemon that must send an advert every 0.1 s and keeps a peer's Master_Down_Interval of
0.36 s needs its occasional bursts (a state change, a log line, the garbage collector) to
finish within a fraction of that.

What it runs, per block and per request:

- a *hog* group with kube-apiserver's weight (250m) holding two busy loops per CPU, so the
  machine is saturated for the whole measurement;
- a sibling *probe* group with the weight of the request (``none``: a BestEffort pod, weight
  2; ``host``: a process outside any pod, weight 1024 as a systemd service's default) running
  one CPython loop shaped like a Master's advert tick: wake every 0.1 s, 0.2 ms of CPU, and
  every tenth tick a burst of ``--burst-ms`` of CPU.

It records every tick's lateness (start minus its due time) and the largest gap between two
tick starts, writes ``cpu-weight.json`` (every block's numbers) and ``cpu-weight.md``
(medians over blocks of each block's p50, p99, max lateness and max gap) into ``--out``. The
probe is a stand-in for vipd's tick, not vipd: the point is the scheduler's arithmetic,
which is the same for any process in the group. No thresholds.

What it must not do: leave a cgroup or a busy loop behind, or judge.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GROUP = "vipd-bench-cpu-weight"
HOG_REQUEST = "250m"  # kube-apiserver's

PROBE = r"""
import json, sys, time
seconds, burst = float(sys.argv[1]), float(sys.argv[2]) / 1000
late, starts = [], []
due = time.monotonic() + 0.1
end = due + seconds
while due < end:
    time.sleep(max(0.0, due - time.monotonic()))
    now = time.monotonic()
    late.append(now - due)
    starts.append(now)
    work = burst if len(late) % 10 == 0 else 0.0002
    t = time.thread_time()
    while time.thread_time() - t < work:
        pass
    due += 0.1
gaps = [b - a for a, b in zip(starts, starts[1:])]
print(json.dumps({"late": late, "max_gap": max(gaps)}))
"""


def shares(request: str) -> int:
    """cgroup v1 cpu.shares for a request, as the kubelet computes it (MilliCPUToShares)."""
    if request == "none":
        return 2
    if request == "host":
        return 1024
    milli = int(request.removesuffix("m"))
    return max(2, milli * 1024 // 1000)


def weight_v2(cpu_shares: int) -> int:
    """cgroup v2 cpu.weight from shares (the OCI runtime's conversion)."""
    return 1 + ((cpu_shares - 2) * 9999) // 262142


class Cgroups:
    """Two sibling groups under one parent, on cgroup v1's cpu controller or on v2."""

    def __init__(self) -> None:
        v1 = Path("/sys/fs/cgroup/cpu")
        self.v2 = not (v1 / "cpu.shares").exists()
        self.parent = (Path("/sys/fs/cgroup") if self.v2 else v1) / GROUP
        if self.v2:
            subtree = Path("/sys/fs/cgroup/cgroup.subtree_control")
            if "cpu" not in subtree.read_text().split():
                subtree.write_text("+cpu")
        self.parent.mkdir(exist_ok=True)
        if self.v2:
            (self.parent / "cgroup.subtree_control").write_text("+cpu")

    def group(self, name: str, cpu_shares: int) -> Path:
        path = self.parent / name
        path.mkdir(exist_ok=True)
        if self.v2:
            (path / "cpu.weight").write_text(str(weight_v2(cpu_shares)))
        else:
            (path / "cpu.shares").write_text(str(cpu_shares))
        return path

    def enter(self, path: Path, pid: int) -> None:
        (path / ("cgroup.procs" if self.v2 else "tasks")).write_text(str(pid))

    def remove(self) -> None:
        for child in ("probe", "hog"):
            if (self.parent / child).exists():
                (self.parent / child).rmdir()
        if self.parent.exists():
            self.parent.rmdir()


def run_one(cg: Cgroups, request: str, seconds: float, burst_ms: float) -> dict[str, Any]:
    hog = cg.group("hog", shares(HOG_REQUEST))
    probe = cg.group("probe", shares(request))
    loops = []
    try:
        for _ in range(2 * (os.cpu_count() or 1)):
            p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            cg.enter(hog, p.pid)
            loops.append(p)
        time.sleep(0.5)
        # The probe enters its group before it starts measuring: a stopped child, moved,
        # then continued.
        child = subprocess.Popen(
            [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)\n"
             + PROBE, str(seconds), str(burst_ms)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        while Path(f"/proc/{child.pid}/stat").read_text().split()[2] != "T":
            time.sleep(0.01)
        cg.enter(probe, child.pid)
        os.kill(child.pid, 18)  # SIGCONT
        out, _ = child.communicate(timeout=seconds + 60)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    data = json.loads(out)
    late = sorted(data["late"])
    n = len(late)
    return {
        "request": request,
        "shares": shares(request),
        "ticks": n,
        "p50_ms": round(late[n // 2] * 1e3, 3),
        "p99_ms": round(late[min(n - 1, int(n * 0.99))] * 1e3, 3),
        "max_ms": round(late[-1] * 1e3, 3),
        "max_gap_ms": round(data["max_gap"] * 1e3, 3),
    }


def table(rows: list[dict[str, Any]], requests: list[str]) -> str:
    out = [
        "| request | weight (v1 shares) | tick lateness p50 ms | p99 ms | max ms "
        "| max gap between ticks ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for req in requests:
        mine = [r for r in rows if r["request"] == req]
        med = {
            k: statistics.median(r[k] for r in mine)
            for k in ("p50_ms", "p99_ms", "max_ms", "max_gap_ms")
        }
        out.append(
            f"| {req} | {shares(req)} | {med['p50_ms']:.2f} | {med['p99_ms']:.2f} | "
            f"{med['max_ms']:.1f} | {med['max_gap_ms']:.1f} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", nargs="+", default=["none", "10m", "100m", "250m", "host"])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--burst-ms", type=float, default=20.0)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default="cpu-weight")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/cpu_weight.py: needs root (it makes cgroups)", file=sys.stderr)
        return 2
    for req in args.requests:
        if req not in ("none", "host") and not (req.endswith("m") and req[:-1].isdigit()):
            print(f"bench/cpu_weight.py: --requests: {req!r} is not none, host or <n>m",
                  file=sys.stderr)  # fmt: skip
            return 2
    cg = Cgroups()
    rows: list[dict[str, Any]] = []
    try:
        for block in range(args.blocks):
            for req in args.requests:
                row = run_one(cg, req, args.seconds, args.burst_ms)
                row["block"] = block
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    finally:
        cg.remove()
    load = os.getloadavg()[0]
    meta = {
        "date": dt.date.today().isoformat(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "cgroup": "v2" if cg.v2 else "v1",
        "hog": f"{2 * (os.cpu_count() or 1)} busy loops at {HOG_REQUEST} ({shares(HOG_REQUEST)})",
        "burst_ms": args.burst_ms,
        "seconds": args.seconds,
        "blocks": args.blocks,
        "load_average_end": round(load, 2),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    md = (
        f"# CPU weight: advert-tick lateness on a saturated machine\n\n"
        f"{meta['date']}, {meta['cpus']} CPUs, cgroup {meta['cgroup']}, kernel {meta['kernel']}; "
        f"hog: {meta['hog']}; probe: a 0.1 s tick with 0.2 ms of CPU and a {args.burst_ms:g} ms "
        f"burst every tenth tick; {args.seconds:g} s per run, medians over {args.blocks} "
        "blocks.\n\n" + table(rows, args.requests) + "\n"
    )
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
