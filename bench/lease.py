"""Lease backend benchmark on the real control plane: client-seen outage for node death and
SIGTERM, 15/10/2 and 5/3/1, and the requests each vipd puts on its API server.

Run as root from the repository root, with the binaries built (``scripts/setup-kube``)::

    .venv/bin/python bench/lease.py [--rounds N] [--profiles 5/3/1,15/10/2]
                                    [--faults kill,term] [--daemons vipd,kube-vip]
                                    [--quick] [--out bench/results] [--name lease]

What it does: for each Lease timing profile (client-go's defaults 15/10/2 s and the fast
profile 5/3/1 s) and each fault (``kill``: node death, link down and every process of the node
— vipd, kube-apiserver, etcd — SIGKILLed; ``term``: SIGTERM to vipd), one run of
``vipd lab --election lease`` (``vipd.lab.runner``), which runs on the Kubernetes bed
(``vipd.lab.kubebed``: three nodes, each an etcd member of one 3-member cluster and a
kube-apiserver, vipd on each talking to its own API server as a ServiceAccount), ``--rounds``
rounds each (default 10; ``--quick``: 3 rounds, 5/3/1 only). Three things are measured:

- the TCP outage: the largest gap between successful TCP connects from the client namespace
  to the VIP (one every 2 ms; the lab's prober, answered by a responder on every node);
- the kubectl outage: ``kubectl get --raw /readyz`` through the VIP in a loop (a new process
  and TLS connection each time, 1 s request timeout, 0.25 s pause): the largest gap between
  successive successful answers from the fault until the node is restored. Its resolution is
  one attempt (the median time between two answers is reported as well), and a request that
  went to a dead holder waits out its timeout, so it reads high by up to about 1 s;
- the request rate: each vipd's ``vipd_lease_requests_total`` (all purposes and results)
  scraped from its ``/metrics`` every second over a quiet window of 30 s before the first
  round (one leader, two followers, no fault): the increase between two successful scrapes,
  summed, over the time those scrapes span.

kube-vip (v1.0.0, from ``scripts/setup-kube``, where its module verified and built) runs
the same rounds on the same kind of bed, one run beside each of vipd's (``--daemons``;
default both where it is built, else vipd alone and a note why): its control-plane VIP in ARP
mode with client-go's leader election on the Lease ``plndr-cp-lock`` (a follower acquires
once ``leaseDuration`` has passed without a renewal, retrying every ``retryPeriod`` with
jitter 1.2), the profile's timing as its flags (``--leaseDuration``, ``--leaseRenewDuration``,
``--leaseRetry``; its defaults are 5/3/1), talking to its own API server with the bed's admin
credentials. It has no request counter, so its request rate is not measured. The targets are
vipd's: kube-vip's rows are measured beside them, not judged.

It writes ``<name>.json`` (every round, the environment, the command) and ``<name>.md`` (the
table); ``--name`` is ``lease`` by default. Numbers come from a shared 2-core machine that
runs three kube-apiservers and three etcd members besides the daemons, so the maxima carry
scheduling noise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vipd.lab.runner import Options, execute  # noqa: E402

PROFILES = {"15/10/2": (15.0, 10.0, 2.0), "5/3/1": (5.0, 3.0, 1.0)}
STATUS_PORT = 2112  # vipd.lab.kubebed.bed.STATUS_PORT: each vipd's /metrics
SCRAPE_EVERY = 1.0
STEADY_S = 30.0  # the quiet window before the first round: the request rate is measured there
KUBECTL_PAUSE = 0.25
KUBECTL_TIMEOUT = 2.0  # kubectl's --request-timeout is this minus 1 s (bed.kubectl)
SERIES = re.compile(r"^vipd_lease_requests_total\{([^}]*)\}\s+([0-9.eE+-]+)$")


def target(profile: str, fault: str) -> float:
    d, _, p = PROFILES[profile]
    return d + p if fault == "kill" else p + 0.1


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q * (len(s) - 1))))
    return s[k]


def stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    v = list(values)
    return {
        "min": min(v),
        "p50": statistics.median(v),
        "p90": pct(v, 0.9),
        "max": max(v),
    }


# -- what the observer records (pure: samples in, numbers out) --------------------------------


def parse_requests(text: str) -> dict[str, float]:
    """``vipd_lease_requests_total`` series of a /metrics page, by label set."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = SERIES.match(line.strip())
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def request_rate(samples: Sequence[tuple[float, dict[str, float] | None]]) -> dict[str, Any]:
    """Requests per second from one vipd's scrapes (time, series or None for a failed one):
    the increase between two consecutive successful scrapes (a drop is a restart: the new
    value is the increase), over the time such pairs span."""
    total = 0.0
    span = 0.0
    by_purpose: dict[str, float] = {}
    for (t0, a), (t1, b) in itertools.pairwise(samples):
        if a is None or b is None:
            continue
        span += t1 - t0
        for key, v in b.items():
            prev = a.get(key, 0.0)
            inc = v - prev if v >= prev else v
            total += inc
            purpose = _label(key, "purpose")
            by_purpose[purpose] = by_purpose.get(purpose, 0.0) + inc
    return {
        "requests": total,
        "seconds": round(span, 1),
        "per_s": total / span if span > 0 else None,
        "by_purpose_per_s": {k: v / span for k, v in sorted(by_purpose.items())} if span else {},
    }


def _label(key: str, name: str) -> str:
    m = re.search(rf'{name}="([^"]*)"', key)
    return m.group(1) if m else "?"


def kubectl_outage(
    attempts: Sequence[tuple[float, float, bool]], start: float, end: float
) -> float | None:
    """Largest gap between successive successful answers (by completion time) from the last
    answer before ``start`` to the first after it, and on until ``end``; None without both."""
    done = sorted(t1 for _, t1, ok in attempts if ok)
    before = [t for t in done if t <= start]
    after = [t for t in done if start < t <= end]
    if not before or not after:
        return None
    seq = [before[-1], *after]
    return max(b - a for a, b in itertools.pairwise(seq))


def answer_period(attempts: Sequence[tuple[float, float, bool]]) -> float | None:
    done = sorted(t1 for _, t1, ok in attempts if ok)
    gaps = [b - a for a, b in itertools.pairwise(done)]
    return statistics.median(gaps) if gaps else None


# -- the observer (shell: runs kubectl and curl in the bed's client namespace) ---------------


class Observer:
    """kubectl through the VIP and the vipd request counters, on threads, over one run."""

    def __init__(self, bed: Any) -> None:
        self.bed = bed
        self.holder = ",".join(bed.holders())
        self.steady: tuple[float, float] | None = None
        self.stopping = threading.Event()
        self.attempts: list[tuple[float, float, bool]] = []
        self.scrapes: dict[str, list[tuple[float, dict[str, float] | None]]] = {
            n.name: [] for n in bed.nodes
        }
        self.threads = [
            threading.Thread(target=self._kubectl, daemon=True, name="bench-kubectl"),
            threading.Thread(target=self._scrape, daemon=True, name="bench-scrape"),
        ]
        for t in self.threads:
            t.start()

    def _kubectl(self) -> None:
        while not self.stopping.is_set():
            t0 = time.monotonic()
            try:
                p = self.bed.kubectl(
                    "get", "--raw", "/readyz", via="vip", check=False, timeout=KUBECTL_TIMEOUT
                )
                ok = p.returncode == 0 and p.stdout.strip() == "ok"
            except Exception:
                ok = False
            self.attempts.append((t0, time.monotonic(), ok))
            self.stopping.wait(KUBECTL_PAUSE)

    def _scrape(self) -> None:
        lab = self.bed.lab
        while not self.stopping.is_set():
            for node in self.bed.nodes:
                t = time.monotonic()
                try:
                    p = lab.exec(
                        lab.client_ns,
                        ["curl", "-s", "--max-time", "1",
                         f"http://{node.ipv4}:{STATUS_PORT}/metrics"],
                        check=False,
                        timeout=3,
                    )  # fmt: skip
                    series = parse_requests(p.stdout) if p.returncode == 0 else None
                except Exception:
                    series = None
                self.scrapes[node.name].append((t, series or None))
            self.stopping.wait(SCRAPE_EVERY)

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=10)
        return {
            "kubectl": self.attempts,
            "scrapes": self.scrapes,
            "steady": self.steady,
            "holder": self.holder,
        }


def observe(bed: Any) -> Callable[[], Any]:
    """Start observing, then hold the run for the quiet window the request rate is read in."""
    obs = Observer(bed)
    t0 = time.monotonic()
    time.sleep(STEADY_S)
    obs.steady = (t0, time.monotonic())
    return obs.stop


# -- one run, the table ----------------------------------------------------------------------


def run_one(profile: str, fault: str, rounds: int, daemon: str = "vipd") -> dict[str, Any]:
    opts = Options(
        daemon=daemon,  # type: ignore[arg-type]
        election="lease",
        lease_timing=profile,
        fault=fault,  # type: ignore[arg-type]
        rounds=rounds,
    )
    started = time.monotonic()
    report = execute(opts, observe)
    observed = report.pop("observed", None) or {"kubectl": [], "scrapes": {}}
    attempts: list[tuple[float, float, bool]] = [
        (float(a), float(b), bool(ok)) for a, b, ok in observed["kubectl"]
    ]
    tcp: list[float] = []
    kubectl: list[float] = []
    for r in report["rounds"]:
        if r["ok"] and r["client_outage_ms"] is not None:
            tcp.append(r["client_outage_ms"] / 1000)
        # Until the round is over (re-converged): the first kubectl answer from the new
        # holder may come after the lab saw the client served again.
        end = r["t_end"] if r["t_end"] is not None else r["t_fault"] + 120
        k = kubectl_outage(attempts, r["t_fault"], end)
        r["kubectl_outage_s"] = k
        if r["ok"] and k is not None:
            kubectl.append(k)
    lo, hi = observed.get("steady") or (0.0, 0.0)
    rates = {
        n: request_rate([x for x in s if lo <= x[0] <= hi]) for n, s in observed["scrapes"].items()
    }
    t = target(profile, fault)
    return {
        "daemon": daemon,
        "profile": profile,
        "fault": fault,
        "rounds_asked": rounds,
        "rounds_ok": len(tcp),
        "rounds_failed": [r["round"] for r in report["rounds"] if not r["ok"]],
        "outage_s": tcp,
        "tcp": stats(tcp),
        "kubectl_outage_s": kubectl,
        "kubectl": stats(kubectl),
        "kubectl_answer_period_s": answer_period(attempts),
        "target_s": t,
        "within_target": bool(tcp) and max(tcp) <= t and len(tcp) == rounds,
        "requests": rates,
        "requests_leader": observed.get("holder"),
        "seconds": round(time.monotonic() - started, 1),
        "lab": report["lab"],
        "rounds": report["rounds"],
    }


def _fmt(s: dict[str, float] | None) -> str:
    if s is None:
        return "-"
    return " / ".join(f"{s[k]:.3f}" for k in ("min", "p50", "p90", "max"))


def render(results: list[dict[str, Any]]) -> str:
    apiserver = next((r["lab"].get("apiserver") for r in results), None) or "?"
    lines = [
        "| profile D/R/P s | fault | daemon | rounds ok | TCP outage min / p50 / p90 / max s | "
        "kubectl /readyz outage min / p50 / p90 / max s | target | within target | "
        "requests/s per vipd |",
        "|---|---|---|---:|---:|---:|---:|:---:|---:|",
    ]
    for r in results:
        what = "≤ D + P" if r["fault"] == "kill" else "≤ P + 0.1"
        rps = ", ".join(
            f"{n}{' (leader)' if n == r['requests_leader'] else ''} {v['per_s']:.2f}"
            for n, v in r["requests"].items()
            if v["per_s"] is not None
        )
        lines.append(
            f"| {r['profile']} | {'node death' if r['fault'] == 'kill' else 'SIGTERM'} | "
            f"{r.get('daemon', 'vipd')} | "
            f"{r['rounds_ok']}/{r['rounds_asked']} | {_fmt(r['tcp'])} | {_fmt(r['kubectl'])} | "
            f"{what} = {r['target_s']:g} | {'yes' if r['within_target'] else 'NO'} | "
            f"{rps or '-'} |"
        )
    periods = [r["kubectl_answer_period_s"] for r in results if r["kubectl_answer_period_s"]]
    lines.append("")
    lines.append(
        f"3 nodes on {apiserver} with a 3-member etcd (stacked), the daemon on each talking to "
        "its own API server (kube-vip v1.0.0 with the bed's admin credentials, its flags' "
        "Lease timing set to the profile's; it has no request counter, so '-' there). TCP: "
        "largest gap between successful connects to the VIP, one every "
        "2 ms. kubectl: largest gap between successful `kubectl get --raw /readyz` answers "
        "through the VIP (a new process each time; median time between two answers "
        + (f"{statistics.median(periods):.2f} s" if periods else "?")
        + ", the resolution; up to ~1 s high where a request met the dead holder). Requests "
        "per second: the increase of each vipd's `vipd_lease_requests_total` (every purpose "
        "and result) over a 30 s quiet window before the first round."
    )
    return "\n".join(lines) + "\n"


def default_daemons() -> list[str]:
    """vipd, and kube-vip where scripts/setup-kube built it."""
    from vipd.lab.kubebed import binaries

    try:
        built = binaries.kube_vip(binaries.find()) is not None
    except binaries.Missing:
        built = False
    if not built:
        print(
            "[bench] kube-vip is not built here (scripts/setup-kube says why): vipd only",
            file=sys.stderr,
        )
    return ["vipd", "kube-vip"] if built else ["vipd"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--profiles", default="15/10/2,5/3/1")
    ap.add_argument("--faults", default="kill,term")
    ap.add_argument("--quick", action="store_true", help="3 rounds, 5/3/1 only")
    ap.add_argument(
        "--daemons",
        default=None,
        help="vipd,kube-vip (default: both where kube-vip is built, else vipd and a note why)",
    )
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--name", default="lease", help="output file stem (lease)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/lease.py: needs root (network namespaces)", file=sys.stderr)
        return 2
    rounds = 3 if args.quick else args.rounds
    profiles = ["5/3/1"] if args.quick else args.profiles.split(",")
    faults = args.faults.split(",")
    for p in profiles:
        if p not in PROFILES:
            ap.error(f"--profiles: {p!r} is not one of {', '.join(PROFILES)}")
    daemons = args.daemons.split(",") if args.daemons else default_daemons()
    for d in daemons:
        if d not in ("vipd", "kube-vip"):
            ap.error(f"--daemons: {d!r} is not vipd or kube-vip")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for profile in profiles:
        for fault in faults:
            for daemon in daemons:
                print(
                    f"[bench] {profile} {fault} {daemon}: {rounds} rounds",
                    file=sys.stderr,
                    flush=True,
                )
                results.append(run_one(profile, fault, rounds, daemon))
                # Written after every run: a long benchmark interrupted keeps what it measured.
                doc = {
                    "command": " ".join(sys.argv),
                    "rounds": rounds,
                    "python": platform.python_version(),
                    "kernel": platform.release(),
                    "cpus": os.cpu_count(),
                    "results": results,
                }
                (out / f"{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
                (out / f"{args.name}.md").write_text(render(results))
    table = render(results)
    print(table)
    # The targets are vipd's: kube-vip is measured beside it, not judged.
    ours = [r for r in results if r["daemon"] == "vipd"]
    return 0 if all(r["within_target"] and not r["rounds_failed"] for r in ours) else 1


if __name__ == "__main__":
    sys.exit(main())
