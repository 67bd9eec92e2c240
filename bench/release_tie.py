"""A holder's stop with backups of one priority: how often both backups bind the VIP.

Run as root from the repository root::

    .venv/bin/python bench/release_tie.py [--rounds 12] [--blocks 2] [--advert 0.1]
        [--fault term|kill] [--base OTHER_TREE] [--out bench/results] [--name release-tie]

What it does: a 3-node lab (VRRPv3, IPv4 multicast) with every node at priority 100, the
one config a DaemonSet gives. Each round stops the VIP's holder (``term``: SIGTERM to its
daemon, the graceful stop; ``kill``: node death, ``vipd.lab.faults.kill``), waits for one
new holder, then brings the node back (it rejoins as a backup). The kernel's address
notifications (``ip monitor``, ``vipd.lab.watch``) show every node that added the VIP in the
round; the client in the lab's client namespace (``vipd.lab.prober``, a connect to VIP:6443
every 2 ms under SCHED_FIFO) shows what a client saw. Daemons: vipd from this tree, vipd
from ``--base`` (another checkout, e.g. the commit before a change) and keepalived (Debian's),
in interleaved blocks (vipd, base, keepalived, then mirrored), so that drift in this shared
machine's load hits them alike.

Per round it records: the backups that added the VIP (``binds``: 1 is right, 2 is the tie),
how long two backups held it at once (the stopping node left out), how long the old holder
and its successor overlapped (make-before-break, by design), the client's longest gap between
two answered connects and its failed connects. It writes ``<name>.json`` (every round, the
environment and the command) and ``<name>.md`` (the table).

What it must not do: judge. A block whose lab failed (no single holder after a stop) is
recorded with its error and the exit status is 1; nothing is asserted about durations.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import footprint

from vipd.lab import faults
from vipd.lab.analysis import Attempt, percentile
from vipd.lab.daemons import Daemon, Fleet, VrrpSpec
from vipd.lab.prober import Prober
from vipd.lab.responder import Responder
from vipd.lab.timeline import Timeline, acquisitions, longest, shared
from vipd.lab.topology import Lab, LabError, new_prefix, vip_for
from vipd.lab.watch import HolderWatch

REPO = Path(__file__).resolve().parents[1]
Kind = Literal["vipd", "vipd-base", "keepalived"]
PRIORITY = 100
SETTLE = 0.3  # after the new holder is alone: late binds and removals land in the window
REJOIN = 1.5  # after the stopped node starts again: it is a backup before the next stop
FAULT_TITLE = {"term": "graceful stop (SIGTERM)", "kill": "death"}


def round_row(
    tl: Timeline, attempts: Sequence[Attempt], stopped: str, since: float, until: float
) -> dict[str, Any]:
    """One round's numbers from the holder timeline and the client's attempts in it."""
    backups = sorted(n for n in {c.node for c in tl.changes} | set(tl.initial) if n != stopped)
    binds = [n for n in backups if acquisitions(tl, n, since, until) > 0]
    without_stopped = {stopped: [(since, None)]}
    both = shared(tl, since, until, without_stopped)
    handover = shared(tl, since, until)
    ok = sorted(a.end for a in attempts if a.ok and since <= a.start <= until)
    gaps = [b - a for a, b in itertools.pairwise(ok)]
    return {
        "stopped": stopped,
        "binds": binds,
        "backups_overlap_ms": round(longest(both) * 1e3, 3),
        "handover_overlap_ms": round(longest(handover) * 1e3, 3),
        "client_gap_ms": round(max(gaps, default=0.0) * 1e3, 3),
        "failed_connects": sum(1 for a in attempts if not a.ok and since <= a.start <= until),
    }


def summary(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts and medians over one daemon's rounds (all its blocks)."""
    ties = [r for r in rounds if len(r["binds"]) > 1]
    gaps = [r["client_gap_ms"] for r in rounds]
    hand = [r["handover_overlap_ms"] for r in rounds]
    return {
        "rounds": len(rounds),
        "ties": len(ties),
        "tie_overlap_ms_max": max((r["backups_overlap_ms"] for r in ties), default=0.0),
        "client_gap_ms_p50": round(percentile(gaps, 50), 3) if gaps else None,
        "client_gap_ms_max": max(gaps, default=None),
        "failed_connects": sum(r["failed_connects"] for r in rounds),
        "handover_overlap_ms_p50": round(percentile(hand, 50), 3) if hand else None,
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"# The holder's {FAULT_TITLE[result.get('fault', 'term')]}, backups of one priority "
        f"({result['advert']:g} s adverts)",
        "",
        f"`{result['command']}`, {result['started']}, {result['machine']}",
        "",
        "| daemon | rounds | both backups bound | longest such overlap ms "
        "| client gap p50 / max ms | failed connects | old + new holder overlap p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, s in result["summary"].items():
        p50, mx = s["client_gap_ms_p50"], s["client_gap_ms_max"]
        lines.append(
            f"| {kind} | {s['rounds']} | {s['ties']} | {s['tie_overlap_ms_max']:g} | "
            f"{p50 if p50 is not None else '-'} / {mx if mx is not None else '-'} | "
            f"{s['failed_connects']} | {s['handover_overlap_ms_p50']} |"
        )
    errors = [b for b in result["blocks"] if b["error"]]
    if errors:
        lines += ["", "Failed blocks:", ""]
        lines += [f"- {b['daemon']} block {b['block']}: {b['error']}" for b in errors]
    return "\n".join(lines) + "\n"


def _one_holder(lab: Lab, vip: str, not_on: str | None, timeout: float) -> str:
    """The one node other than ``not_on`` that holds the VIP (a dead node's copy, left on
    its downed link until it is restored, does not count)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        holders = [n for n in lab.holders(vip) if n != not_on]
        if len(holders) == 1:
            return holders[0]
        time.sleep(0.005)
    raise LabError(f"no single holder (other than {not_on}) within {timeout} s: {holders}")


def run_block(
    kind: Kind, advert: float, fault: str, block: int, rounds: int, tmp: Path
) -> dict[str, Any]:
    prefix = new_prefix()
    lab = Lab(nodes=3, prefix=prefix, workdir=tmp / f"{prefix}-{kind}-{block}")
    spec = VrrpSpec(vip=vip_for(4), advert_interval=advert, version=3)
    out: dict[str, Any] = {"daemon": kind, "block": block, "error": None, "rounds": []}
    fleet: Fleet | None = None
    responders: list[Responder] = []
    prober: Prober | None = None
    try:
        lab.build()
        fleet = footprint.make_kind_fleet(kind, lab, spec)
        responders = [Responder(lab, n) for n in lab.nodes]
        for r in responders:
            r.start()
        daemons: dict[str, Daemon] = fleet.daemons
        rigs = {
            n.name: faults.NodeRig(n, daemons[n.name], r)
            for n, r in zip(lab.nodes, responders, strict=True)
        }
        for d in daemons.values():
            d.start(priority=PRIORITY)
        _one_holder(lab, spec.vip, None, 10.0)
        time.sleep(REJOIN)
        prober = Prober(lab, spec.vip, realtime=True)
        prober.start()
        with HolderWatch(lab, spec.vip) as watch:
            for _ in range(rounds):
                holder = _one_holder(lab, spec.vip, None, 5.0)
                since = time.monotonic()
                if fault == "term":
                    daemons[holder].stop(signal.SIGTERM, timeout=10.0)
                else:
                    faults.kill(lab, rigs[holder])
                _one_holder(lab, spec.vip, holder, 5.0)
                time.sleep(SETTLE)
                until = time.monotonic()
                row = round_row(watch.timeline(), prober.attempts(since), holder, since, until)
                out["rounds"].append(row)
                if fault == "kill":
                    faults.restore(lab, rigs[holder])  # the same priority: start() keeps it
                else:
                    daemons[holder].start(priority=PRIORITY)
                time.sleep(REJOIN)
    except (LabError, OSError, subprocess.SubprocessError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if prober is not None:
            prober.stop()
        if fleet is not None:
            for d in fleet.daemons.values():
                d.stop(signal.SIGKILL, timeout=5.0)
        for r in responders:
            r.stop()
        lab.teardown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=12, help="SIGTERMs per block (12)")
    ap.add_argument("--blocks", type=int, default=2, help="blocks per daemon (2)")
    ap.add_argument("--advert", type=float, default=0.1, help="advert interval, s (0.1)")
    ap.add_argument("--fault", choices=("term", "kill"), default="term", help="(term)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default="release-tie", help="output file stem (release-tie)")
    ap.add_argument("--base", type=Path, help="another tree whose vipd/ runs too, as vipd-base")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("release_tie: run as root (network namespaces)", file=sys.stderr)
        return 2
    if args.rounds < 1 or args.blocks < 1:
        ap.error("--rounds and --blocks must be at least 1")
    snapshot_dir = os.environ.get(footprint.SNAPSHOT_ENV)
    if snapshot_dir is None:
        footprint.reexec_from_snapshot(
            Path(tempfile.mkdtemp(prefix="vipd-release-tie-")), REPO, args.base
        )
    kinds: tuple[Kind, ...] = ("vipd", "keepalived")
    if args.base is not None:
        footprint.BaseVipd.root = str(Path(snapshot_dir).parent / "base")
        kinds = ("vipd", "vipd-base", "keepalived")
    command = "bench/release_tie.py " + " ".join(sys.argv[1:])
    result: dict[str, Any] = {
        "command": command.strip(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "advert": args.advert,
        "fault": args.fault,
        "base_tree": str(args.base.resolve()) if args.base else None,
        "blocks": [],
    }
    tmp = Path(tempfile.mkdtemp(prefix="vipd-release-tie-labs-"))
    for block in range(args.blocks):
        order = kinds if block % 2 == 0 else tuple(reversed(kinds))
        for kind in order:
            print(f"release_tie: {kind}, block {block + 1}/{args.blocks}", file=sys.stderr)
            result["blocks"].append(
                run_block(kind, args.advert, args.fault, block, args.rounds, tmp)
            )
    result["summary"] = {
        kind: summary([r for b in result["blocks"] if b["daemon"] == kind for r in b["rounds"]])
        for kind in kinds
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(render(result))
    print(render(result))
    return 1 if any(b["error"] for b in result["blocks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
