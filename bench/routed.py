"""Routed-fabric benchmark: how fast the router's forwarding follows routing-table mode.

Run from the repository root, as root (network namespaces), with Debian's FRR installed::

    sudo .venv/bin/python bench/routed.py [--rounds 10] [--out bench/results]

Why: in routing-table mode vipd writes one kernel route and the node's own FRR announces it;
what a client sees is the router's FIB. This measures, on the bed of `vipd.lab.routed` (one
FRR 8.4 router, three FRR nodes, BFD 100 ms × 3, ECMP), per round:

- ``announce``: n1's actuator converges to ANNOUNCED (n2, n3 announcing all along) → n1's
  next hop is in the router's kernel FIB;
- ``withdraw``: n1's actuator converges to DRAINING (its table route deleted) → n1's next hop
  is out of the FIB;
- ``silent-death``: every packet into n1 dropped (nftables on n1's ``eth0``: the node is up
  to the link but answers nothing, a hung or partitioned node) → out of the FIB (BFD's
  detection time, then BGP's withdraw); the rule is then removed and the round waits for n1
  to be back, which is not timed.

Times are taken from just before the step to the first poll of ``ip -j route show`` that
sees the change; polls run back to back (about 5-15 ms apart, the resolution). It writes
``routed.json`` (every sample) and ``routed.md`` (median, p90, max) into ``--out``. No
thresholds.

What it must not do: judge, or leave anything behind: the bed is torn down on every exit.
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
from collections.abc import Callable
from ipaddress import ip_address
from pathlib import Path

from vipd.lab.routed import RoutedBed, frr_problem
from vipd.routed.actuator import RouteActuator
from vipd.routed.plan import Phase

STEPS = ("announce", "withdraw", "silent-death")
DROP_ALL = """table inet vipdbench {
    chain in {
        type filter hook input priority 0; policy drop;
    }
}
"""


def _until(check: Callable[[], bool], timeout: float = 30.0) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise TimeoutError("the router did not follow within 30 s")
    return time.monotonic() - start


def _nft(bed: RoutedBed, ns: str, script: str) -> None:
    subprocess.run(
        ["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script, text=True, check=True
    )


def run(rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {step: [] for step in STEPS}
    vip = ip_address("10.79.0.100")
    with RoutedBed(nodes=3) as bed:
        acts = {n.name: RouteActuator(netns=n.ns) for n in bed.nodes}
        try:
            everyone = {n.addr for n in bed.nodes}
            n1 = bed.node("n1")
            rest = everyone - {n1.addr}
            for name in ("n2", "n3"):
                acts[name].converge({vip: Phase.ANNOUNCED})
            _until(lambda: bed.kernel_nexthops() == rest)
            for _ in range(rounds):
                start = time.monotonic()
                acts["n1"].converge({vip: Phase.ANNOUNCED})
                _until(lambda: bed.kernel_nexthops() == everyone)
                samples["announce"].append(time.monotonic() - start)

                start = time.monotonic()
                acts["n1"].converge({vip: Phase.DRAINING})
                _until(lambda: bed.kernel_nexthops() == rest)
                samples["withdraw"].append(time.monotonic() - start)

                acts["n1"].converge({vip: Phase.ANNOUNCED})
                _until(lambda: bed.kernel_nexthops() == everyone)
                time.sleep(0.5)
                start = time.monotonic()
                _nft(bed, n1.ns, DROP_ALL)
                _until(lambda: bed.kernel_nexthops() == rest)
                samples["silent-death"].append(time.monotonic() - start)
                _nft(bed, n1.ns, "delete table inet vipdbench\n")
                _until(lambda: bed.kernel_nexthops() == everyone, timeout=60.0)
                acts["n1"].converge({})
                _until(lambda: bed.kernel_nexthops() == rest)
        finally:
            for act in acts.values():
                act.converge({})
                act.close()
    return samples


def summary(samples: dict[str, list[float]]) -> str:
    lines = [
        "| step | n | median | p90 | max |",
        "|---|---|---|---|---|",
    ]
    for step, values in samples.items():
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        lines.append(
            f"| {step} | {len(values)} | {statistics.median(values) * 1000:.0f} ms "
            f"| {p90 * 1000:.0f} ms | {max(values) * 1000:.0f} ms |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    problem = frr_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    load = os.getloadavg()
    samples = run(args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "kernel": platform.release(),
        "rounds": args.rounds,
        "loadavg_before": list(load),  # the machine is shared: the 1/5/15-minute load
    }
    (args.out / "routed.json").write_text(json.dumps({**meta, "samples": samples}, indent=1))
    table = summary(samples)
    (args.out / "routed.md").write_text(
        f"# Routed fabric: the router's FIB after routing-table mode's steps\n\n"
        f"`bench/routed.py --rounds {args.rounds}`, {meta['date']}, kernel {meta['kernel']}, "
        f"FRR 8.4 (Debian), BFD 100 ms x 3, load average before {load[0]:.1f} "
        f"({os.cpu_count()} CPUs).\n\n" + table
    )
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
