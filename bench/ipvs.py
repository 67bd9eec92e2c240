"""IPVS benchmark: time from a backend's API server failing to its removal from vipd's IPVS
table, and from its recovery to its re-add, in a real kernel (a qemu guest booting Debian's
linux-image-amd64, as tests/vm does), with the real HTTPS health checker and reconciler.

Targets: removal within fall x interval + one interval, re-add within
rise x interval + one interval. A failure starts at a random phase of the check schedule,
so the expected spread is one interval below the target's first term.

    .venv/bin/python bench/ipvs.py              # 10 rounds at interval 1 s, rise 2, fall 3
    .venv/bin/python bench/ipvs.py --rounds 3   # quicker

Writes bench/results/ipvs.json (every round) and bench/results/ipvs.md (the table).
Inside the guest it runs itself with --guest and prints one JSON line back.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MARK = "IPVS_BENCH_JSON="


def guest(rounds: int, interval: float, rise: int, fall: int) -> dict[str, Any]:
    from tests.vm.guest.ipvs_net import BACKENDS, PORT, VIP, Director, Net
    from vipd.config import Health
    from vipd.ipvs.actuator import IpvsActuator
    from vipd.ipvs.plan import ServiceKey

    net = Net().build()
    params = Health(interval=interval, timeout=0.8 * interval, rise=rise, fall=fall)
    director = Director(params, resync=1.0)
    director.set_leader(True)
    probe = IpvsActuator(ServiceKey(VIP, PORT), "nat")
    victim = BACKENDS["b2"]

    def present() -> bool:
        table = probe.observe()
        return table is not None and any(s.addr == victim for s in table.servers)

    def until(want: bool, start: float, limit: float = 60) -> float | None:
        # 20 ms polls: resolution enough against seconds, and little CPU taken from the
        # daemon's threads (the guest is emulated)
        while time.monotonic() - start < limit:
            if present() == want:
                return time.monotonic() - start
            time.sleep(0.02)
        return None

    def transition(healthy: bool, start: float) -> float | None:
        hits = [t for t, a, h in director.transitions if a == victim and h == healthy]
        return hits[-1] - start if hits and hits[-1] >= start else None

    until(True, time.monotonic())
    out: list[dict[str, float | None]] = []
    for _ in range(rounds):
        time.sleep(random.uniform(0, interval))  # a random phase against the check schedule
        t0 = time.monotonic()
        net.backends["b2"].failing = True
        removed = until(False, t0)
        detected = transition(False, t0)
        time.sleep(random.uniform(0, interval))
        t1 = time.monotonic()
        net.backends["b2"].failing = False
        added = until(True, t1)
        recovered = transition(True, t1)
        out.append(
            {
                "removed_s": removed,
                "unhealthy_s": detected,
                "readded_s": added,
                "healthy_s": recovered,
            }
        )
    director.stop()
    return {"interval_s": interval, "rise": rise, "fall": fall, "rounds": out}


def summary(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    return f"{statistics.median(values):.3f} / {qs[8]:.3f} / {max(values):.3f}"


def host(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT / "tests" / "vm"))
    from tests.vm.test_vm import run_in_guest, vm_problem

    problem = vm_problem()
    if problem:
        print(f"bench/ipvs.py: {problem}", file=sys.stderr)
        return 2
    started = time.time()
    done = run_in_guest(
        f"exec {sys.executable} bench/ipvs.py --guest --rounds {args.rounds} "
        f"--interval {args.interval} --rise {args.rise} --fall {args.fall}",
        timeout=900,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith(MARK)), None)
    if done.returncode != 0 or line is None:
        print(done.stdout[-5000:], done.stderr[-2000:], file=sys.stderr)
        return 1
    data = json.loads(line[len(MARK) :])
    data["wall_s"] = round(time.time() - started, 1)
    i, r, f = data["interval_s"], data["rise"], data["fall"]

    def col(name: str) -> list[float]:
        return [x[name] for x in data["rounds"] if x[name] is not None]

    removed, added = col("removed_s"), col("readded_s")
    act_rm = [x["removed_s"] - x["unhealthy_s"] for x in data["rounds"]
              if x["removed_s"] is not None and x["unhealthy_s"] is not None]  # fmt: skip
    act_add = [x["readded_s"] - x["healthy_s"] for x in data["rounds"]
               if x["readded_s"] is not None and x["healthy_s"] is not None]  # fmt: skip
    t_rm, t_add = f * i + i, r * i + i
    data["targets_s"] = {"removed": t_rm, "readded": t_add}
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ipvs.json").write_text(json.dumps(data, indent=1) + "\n")
    n = len(data["rounds"])
    md = [
        "# IPVS: backend failure → removal, recovery → re-add",
        "",
        f"Real kernel (qemu TCG guest, Debian linux-image-amd64), real HTTPS checks; "
        f"interval {i} s, timeout {0.8 * i:g} s, rise {r}, fall {f}, {n} rounds, "
        f"`python bench/ipvs.py --rounds {n}` ({data['wall_s']} s wall).",
        "",
        "| event | target s | p50 / p90 / max s | within target |",
        "|---|---:|---:|:---:|",
        f"| API server fails → removed from IPVS | {t_rm:g} (fall×interval + interval) | "
        f"{summary(removed)} | {sum(x <= t_rm for x in removed)}/{n} |",
        f"| API server recovers → re-added | {t_add:g} (rise×interval + interval) | "
        f"{summary(added)} | {sum(x <= t_add for x in added)}/{n} |",
        f"| of which: checker transition → table changed (removal) | — | {summary(act_rm)} | — |",
        f"| of which: checker transition → table changed (re-add) | — | {summary(act_add)} | — |",
        f"| API server fails → checker says unhealthy | {f * i:g} (fall×interval) | "
        f"{summary(col('unhealthy_s'))} | {sum(x <= f * i for x in col('unhealthy_s'))}/{n} |",
        f"| API server recovers → checker says healthy | {r * i:g} (rise×interval) | "
        f"{summary(col('healthy_s'))} | {sum(x <= r * i for x in col('healthy_s'))}/{n} |",
        "",
        "The guest is emulated (TCG, no KVM) on a shared 2-core machine: the actuation rows "
        "(a pass: one IPVS dump and one netlink change, in Python under emulation) are far "
        "slower than on real hardware; the checker rows are the protocol.",
        "",
    ]
    (out / "ipvs.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--rise", type=int, default=2)
    p.add_argument("--fall", type=int, default=3)
    p.add_argument("--guest", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.guest:
        print(MARK + json.dumps(guest(args.rounds, args.interval, args.rise, args.fall)))
        return 0
    return host(args)


if __name__ == "__main__":
    sys.exit(main())
