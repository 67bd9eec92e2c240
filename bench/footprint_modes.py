"""Footprint in both election modes, one run: vipd, keepalived and kube-vip side by side.

Run as root from the repository root, with the Kubernetes binaries built (``$VIPD_KUBE_BIN``)::

    .venv/bin/python bench/footprint_modes.py [--adverts 1 0.1 0.01] [--blocks 2]
                                              [--seconds 30] [--timing 5/3/1]
                                              [--out bench/results] [--name footprint-modes]

What it does, in one process and one run, so that both tables come from the same machine
state:

- **VRRP mode**: for each advert interval, a 3-node network-namespace lab (VRRPv3
  multicast, priorities 200/150/100, ``vipd.lab``) runs vipd or keepalived (Debian's) on
  every node, in blocks interleaved vipd, keepalived, keepalived, vipd. kube-vip has no
  VRRP: its only leader election is a Kubernetes Lease, so it appears in the Lease part.
- **Lease mode**: one Kubernetes bed (``vipd.lab.kubebed``: three nodes, each a member of a
  3-member etcd over TLS and a real kube-apiserver on it), on which vipd (Lease mode) and
  kube-vip (its control-plane VIP, ARP mode, client-go leader election; the bed's
  ``BedKubeVip``) take turns on all three nodes, in blocks interleaved vipd, kube-vip,
  kube-vip, vipd, both with the same Lease timing (``--timing``, default kube-vip's own
  5/3/1 s), each talking to its node's own API server, metrics endpoint on. vipd runs
  without health checks here (kube-vip has none; the bed's vipd checks three ``/readyz``
  every 0.5 s otherwise, a cost of its own: ``bench/health.py``). The bed's observer of
  each vipd's ``/status`` (``vipd.lab.kubebed.beliefs``, ~10 reads a second) is stopped
  first: until 2026-12-05 12:20 it ran, and its reads were most of vipd's Lease-mode CPU.

In every block, once there is exactly one holder and ``SETTLE`` seconds have passed, over a
``--seconds`` window, per node (the daemon's whole process tree):

- **CPU**: ns on CPU from ``/proc/PID/task/*/schedstat`` (every thread), given as ms of CPU
  per minute of wall time, and per advert for the VRRP master (its link's sent frames);
- **RSS**: the median of one ``VmRSS`` sample a second (*steady*), and ``VmHWM`` (the
  kernel's high-water mark since the process started, start-up included: *peak*), both
  summed over the tree;
- **threads**: the tree's ``/proc/PID/task`` entries (the median over the samples).

vipd runs from a byte-compiled snapshot of the working tree on a venv laid out as an
installed vipd's (``bench/footprint.py``'s ``snapshot`` and ``installed_python``). It writes
``<name>.json`` (every sample, the environment) and ``<name>.md`` (the table). No thresholds.

What it must not do: touch anything outside its labs' namespaces, or judge.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import footprint as fp

from vipd.lab.daemons import Daemon, Fleet, VrrpSpec, make_fleet
from vipd.lab.faults import drop_address
from vipd.lab.kubebed import binaries
from vipd.lab.kubebed.bed import BedKubeVip, BedVipd, KubeBed, Timing
from vipd.lab.topology import VIP4, Lab, LabError, new_prefix, vip_for

SETTLE = 5.0  # s after there is one holder before the window opens (start-up work is over)
HOLDER_TIMEOUT = 60.0


def _log(msg: str) -> None:
    print(f"[footprint-modes {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def threads(pid: int) -> int:
    try:
        return sum(1 for _ in Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0


def hwm_kib(pid: int) -> int:
    """``VmHWM``: the process's peak RSS since it started."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def sample(
    daemons: dict[str, Daemon], holder: str, seconds: float, tx: Any = None
) -> dict[str, Any]:
    """CPU over ``seconds``, RSS and threads once a second, per node (each daemon's tree).
    ``tx``: a callable giving the holder's sent frames (VRRP: its adverts), or None."""
    trees: dict[str, list[int]] = {}
    for name, daemon in daemons.items():
        if daemon.pid is None or not daemon.running():
            raise LabError(f"{daemon.kind} on {name} is not running for the sample")
        trees[name] = fp.tree(daemon.pid)
    tx0 = tx() if tx is not None else None
    ns0 = {n: [fp.run_ns(p) for p in pids] for n, pids in trees.items()}
    t0 = time.monotonic()
    rss: dict[str, list[int]] = {n: [] for n in trees}
    nthreads: dict[str, list[int]] = {n: [] for n in trees}
    end = t0 + seconds
    while True:
        for n, pids in trees.items():
            rss[n].append(sum(m["rss"] for p in pids if (m := fp.memory_kib(p)) is not None))
            nthreads[n].append(sum(threads(p) for p in pids))
        now = time.monotonic()
        if now >= end:
            break
        time.sleep(min(1.0, end - now))
    ns1 = {n: [fp.run_ns(p) for p in pids] for n, pids in trees.items()}
    elapsed = time.monotonic() - t0
    sent = tx() - tx0 if tx is not None and tx0 is not None else None
    nodes: dict[str, Any] = {}
    for n, pids in trees.items():
        used = sum(
            b - a for a, b in zip(ns0[n], ns1[n], strict=True) if a is not None and b is not None
        )
        nodes[n] = {
            "role": "holder" if n == holder else "standby",
            "processes": len(pids),
            "run_ns": used,
            "cpu_ms_per_min": round(used / 1e6 / elapsed * 60, 2),
            "rss_mib": round(statistics.median(rss[n]) / 1024, 2),
            "rss_max_sampled_mib": round(max(rss[n]) / 1024, 2),
            "hwm_mib": round(sum(hwm_kib(p) for p in pids) / 1024, 2),
            "threads": int(statistics.median(nthreads[n])),
            "samples": len(rss[n]),
        }
        if n == holder and sent is not None:
            nodes[n]["sent"] = sent
            nodes[n]["us_per_advert"] = round(used / 1e3 / sent, 2) if sent > 0 else None
    return {"seconds": round(elapsed, 3), "nodes": nodes}


def interleave(kinds: tuple[str, str], blocks: int) -> Iterator[tuple[str, int]]:
    for b in range(blocks):
        for kind in kinds if b % 2 == 0 else tuple(reversed(kinds)):
            yield kind, b


# -- VRRP mode ----------------------------------------------------------------------------------


def vrrp_block(kind: str, advert: float, block: int, seconds: float, tmp: Path) -> dict[str, Any]:
    prefix = new_prefix()
    workdir = tmp / f"{prefix}-{kind}-{advert:g}-{block}"
    lab = Lab(nodes=3, prefix=prefix, workdir=workdir)
    spec = VrrpSpec(vip=vip_for(4), advert_interval=advert, version=3)
    out: dict[str, Any] = {"mode": "vrrp", "daemon": kind, "advert": advert, "block": block}
    out["error"] = None
    fleet: Fleet | None = None
    try:
        lab.build()
        fleet = make_fleet("vipd" if kind == "vipd" else "keepalived", lab, spec)
        fleet.start_all()
        top = fp.converge(lab, fleet, spec.vip)
        time.sleep(SETTLE)
        out["steady"] = sample(
            fleet.daemons, top, seconds, lambda: fp.tx_packets(lab, top, spec.interface)
        )
    except LabError as exc:
        out["error"] = str(exc)
        _log(f"VRRP {kind} {advert:g} s block {block}: {exc}; logs in {workdir}")
    finally:
        if fleet is not None:
            fleet.stop_all()
        lab.teardown()
    if out["error"] is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


# -- Lease mode ---------------------------------------------------------------------------------


class LeanBedVipd(BedVipd):
    """The bed's vipd without health checks: kube-vip, beside it, checks nothing."""

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg.pop("health", None)
        return cfg


def lease_block(bed: KubeBed, kind: str, block: int, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": "lease", "daemon": kind, "block": block, "error": None}
    daemons: dict[str, Daemon] = {
        n.name: (LeanBedVipd(bed, n) if kind == "vipd" else BedKubeVip(bed, n)) for n in bed.nodes
    }
    try:
        for d in daemons.values():
            d.start()
        t = bed.timing
        holder = bed.wait_one_holder(2 * t.takeover_bound() + HOLDER_TIMEOUT)
        # Every daemon campaigns (vipd: its Kubernetes client imported), start-up is over.
        if not fp.wait_for(lambda: all(d.election_started() for d in daemons.values()), 60):
            raise LabError(f"{kind}: not every node joined the election within 60 s")
        time.sleep(SETTLE)
        if bed.holders() != [holder]:
            raise LabError(f"{kind}: the VIP moved during the settle ({bed.holders()})")
        out["steady"] = sample(daemons, holder, seconds)
    except LabError as exc:
        out["error"] = str(exc)
        _log(f"Lease {kind} block {block}: {exc}")
    finally:
        for d in daemons.values():
            with contextlib.suppress(Exception):
                d.stop(signal.SIGTERM, timeout=10)
        # The next block starts from no holder (a daemon that left the VIP behind is noted).
        left = bed.holders()
        if left:
            out["vip_left_by"] = left
            for node in bed.nodes:
                if node.name in left:
                    drop_address(bed.lab, node, VIP4)
    return out


# -- summary ------------------------------------------------------------------------------------


def _med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    keys = sorted({(r["mode"], r.get("advert"), r["daemon"]) for r in runs}, key=_order)
    for mode, advert, kind in keys:
        ok = [
            r
            for r in runs
            if (r["mode"], r.get("advert"), r["daemon"]) == (mode, advert, kind) and not r["error"]
        ]
        nodes = [n for r in ok for n in r["steady"]["nodes"].values()]
        holder = [n for n in nodes if n["role"] == "holder"]
        standby = [n for n in nodes if n["role"] == "standby"]
        rows.append(
            {
                "mode": mode,
                "advert": advert,
                "daemon": kind,
                "blocks": len(ok),
                "holder_cpu_ms_per_min": _med([n["cpu_ms_per_min"] for n in holder]),
                "standby_cpu_ms_per_min": _med([n["cpu_ms_per_min"] for n in standby]),
                "holder_us_per_advert": _med(
                    [n["us_per_advert"] for n in holder if n.get("us_per_advert") is not None]
                ),
                "rss_mib": _med([n["rss_mib"] for n in nodes]),
                "rss_peak_mib": max((n["hwm_mib"] for n in nodes), default=None),
                "hwm_median_mib": _med([n["hwm_mib"] for n in nodes]),
                "threads_holder": _med([n["threads"] for n in holder]),
                "threads_standby": _med([n["threads"] for n in standby]),
                "processes": max((n["processes"] for n in nodes), default=None),
            }
        )
    return rows


def _order(key: tuple[str, float | None, str]) -> tuple[int, float, int]:
    mode, advert, kind = key
    rank = {"vipd": 0, "keepalived": 1, "kube-vip": 2}.get(kind, 3)
    return (0 if mode == "vrrp" else 1, -(advert or 0.0), rank)


def _advert(x: float | None) -> str:
    return "–" if x is None else f"{x:g} s"


def _f(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def render(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = [
        "### Footprint in both election modes",
        "",
        f"`{env['command']}` on {env['date']} ({env['cpus']}× {env['cpu_model']}, Linux "
        f"{env['kernel']}, Python {env['python']}, {env['keepalived']}, "
        f"{env.get('kube_vip', 'kube-vip')}, {env.get('apiserver', '')}; vipd "
        f"{(env['vipd_commit'] or '?')[:12]}{' (dirty)' if env['vipd_tree_dirty'] else ''}; "
        f"load {' '.join(env['loadavg_start'])} at the start, "
        f"{' '.join(doc['loadavg_end'])} at the end). {doc['blocks']} interleaved blocks per "
        f"daemon and mode, {doc['seconds']:g} s window; Lease timing {doc['timing']} s. "
        "Medians over nodes and blocks; CPU from schedstat (every thread of the process "
        "tree) in ms of CPU per minute; RSS summed over the tree: steady = median of 1 Hz "
        "VmRSS, peak = the largest VmHWM (start-up included); threads of the tree.",
        "",
        "| mode | advert | daemon | holder CPU ms/min | standby CPU ms/min | µs per advert "
        "| RSS steady MiB | RSS peak MiB | threads holder / standby | processes |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in doc["summary"]:
        lines.append(
            f"| {'VRRP' if r['mode'] == 'vrrp' else 'Lease'} "
            f"| {_advert(r['advert'])} | {r['daemon']} "
            f"| {_f(r['holder_cpu_ms_per_min'])} | {_f(r['standby_cpu_ms_per_min'])} "
            f"| {_f(r['holder_us_per_advert'])} | {_f(r['rss_mib'])} "
            f"| {_f(r['rss_peak_mib'])} "
            f"| {_f(r['threads_holder'], 0)} / {_f(r['threads_standby'], 0)} "
            f"| {r['processes']} |"
        )
    errors = [r for r in doc["runs"] if r["error"]]
    if errors:
        lines += ["", f"{len(errors)} block(s) failed: " + "; ".join(r["error"] for r in errors)]
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------------


def kube_vip_version(path: Path) -> str:
    """``kube-vip v1.0.0`` from its ``version`` command's ``Version:`` line."""
    proc = subprocess.run(
        [str(path), "version"], capture_output=True, text=True, timeout=20, check=False
    )
    for line in proc.stdout.splitlines():
        if line.startswith("Version:"):
            return f"kube-vip {line.split(':', 1)[1].strip()}"
    return "kube-vip ?"


def _timing(text: str) -> Timing:
    d, r, p = (float(x) for x in text.split("/"))
    return Timing(int(d), r, p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--adverts", type=float, nargs="+", default=[1.0, 0.1, 0.01])
    ap.add_argument("--blocks", type=int, default=2, help="blocks per daemon and mode (2)")
    ap.add_argument("--seconds", type=float, default=30.0, help="window per block (30)")
    ap.add_argument("--timing", default="5/3/1", help="Lease duration/renew/retry s (5/3/1)")
    ap.add_argument("--modes", nargs="+", choices=("vrrp", "lease"), default=["vrrp", "lease"])
    ap.add_argument("--out", type=Path, default=fp.REPO / "bench" / "results")
    ap.add_argument("--name", default="footprint-modes")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("footprint_modes: run as root (network namespaces)", file=sys.stderr)
        return 2
    if shutil.which("keepalived") is None:
        print("footprint_modes: keepalived is not installed", file=sys.stderr)
        return 2
    if "lease" in args.modes:
        try:
            bins = binaries.find()
        except binaries.Missing as exc:
            print(f"footprint_modes: {exc}", file=sys.stderr)
            return 2
        if binaries.kube_vip(bins) is None:
            print(f"footprint_modes: no kube-vip in {bins}", file=sys.stderr)
            return 2
    snapshot_dir = os.environ.get(fp.SNAPSHOT_ENV)
    if snapshot_dir is None:
        fp.reexec_from_snapshot(Path(tempfile.mkdtemp(prefix="vipd-fpmodes-")), fp.REPO, None)
    env = fp.environment(("bench/footprint_modes.py " + " ".join(sys.argv[1:])).strip())
    tmp = Path(tempfile.mkdtemp(prefix="vipd-fpmodes-labs-"))
    runs: list[dict[str, Any]] = []
    if "vrrp" in args.modes:
        for advert in args.adverts:
            for kind, b in interleave(("vipd", "keepalived"), args.blocks):
                _log(f"VRRP {kind}, advert {advert:g} s, block {b + 1}/{args.blocks}")
                runs.append(vrrp_block(kind, advert, b, args.seconds, tmp))
    if "lease" in args.modes:
        timing = _timing(args.timing)
        with KubeBed(timing=timing, start_vipd=False, start_prober=False) as bed:
            # The bed reads every vipd's /status ~10 times a second (its beliefs observer):
            # work done for the observer, not the daemon's own, and kube-vip is not read.
            if bed.beliefs is not None:
                bed.beliefs.stop()
                bed.beliefs = None
            env["apiserver"] = bed.apiserver_version
            env["etcd"] = bed.etcd_version
            env["kube_vip"] = kube_vip_version(bed.bins / binaries.KUBE_VIP)
            for kind, b in interleave(("vipd", "kube-vip"), args.blocks):
                _log(f"Lease {kind}, block {b + 1}/{args.blocks}")
                runs.append(lease_block(bed, kind, b, args.seconds))
    doc = {
        "environment": env,
        "blocks": args.blocks,
        "seconds": args.seconds,
        "timing": args.timing,
        "adverts": args.adverts,
        "summary": summarise(runs),
        "runs": runs,
        "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = render(doc)
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    shutil.rmtree(Path(snapshot_dir).parent, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if any(r["error"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
