"""Failover benchmark: vipd against keepalived, same lab, same timers, one command.

Run as root from the repository root::

    .venv/bin/python bench/failover.py [--rounds N] [--quick] [--out bench/results]

What it does, per configuration (3 nodes, VRRPv3 multicast, advert 1 s, 0.1 s and 0.01 s;
faults ``kill`` = node death, ``term`` = SIGTERM of the daemon, ``stop`` = SIGSTOP of the
leader's daemon until the failover, then SIGCONT, ``linkdown`` = the leader's link down until
the failover, then up): lab runs of the network-namespace lab (``vipd.lab.runner``'s session
and round logic, unchanged) for vipd and for keepalived, interleaved: each daemon's rounds
(20 by default) are split over ``--blocks`` lab runs (2), in the order vipd, keepalived,
keepalived, vipd (mirrored for the next configuration), so that drift in the load of this
shared machine hits both daemons alike. ``--quick`` is a smoke test: 3 rounds, adverts 0.1 s
and 0.01 s, a short steady-state sample.

What it reports:

- client-observed outage per (daemon, advert, fault): p50/p90/max in ms, the vipd/keepalived
  ratio of the medians and of the p90s, and the theoretical bound 3×Adv + Skew_Time of the
  backup that takes over (priority 150); for node death, whether vipd's max is within that
  bound + 15 ms;
- the same rounds from the wire (``bench/failover_wire.py``: tcpdump on the lab's bridge from
  before the daemons start until the last round ends): for node death, the dead master's
  last advert → the new master's first advert and first gratuitous ARP, the **takeover
  lateness** (first GARP − last advert − Master_Down_Interval: what the daemon adds to the
  RFC timer, free of the random strike phase that spreads the client outage uniformly over
  one advert interval) and the **phase-corrected outage** (client outage + the time from
  the last advert to the start of the outage); for SIGTERM, SIGTERM → priority-0 advert →
  the new master's first advert and first GARP (lateness against Skew_Time); vipd/keepalived
  ratio and difference of the medians;
- vipd's takeover actuation latency as vipd itself measures it: every ``msg="VIP bound and
  announced"`` line of every node's vipd log carries ``decision_to_bound_ms`` and
  ``decision_to_garp_ms``; p50/p99/max over all of them;
- the client-observed outage of the second move, when the faulted node comes back and
  preempts (for ``stop``: the resumed node, VIP still bound, wins the client back);
  and of that move alone, the **move gap** (the last connect answered by the holder → the first
  answered by the returning node, with the connects that failed inside it), beside the
  largest gap between two answers of one node in the same window, where nothing moved (the
  client's own floor); ``--probe-interval`` sets the client's rate (2 ms by default: finer
  shows a sub-millisecond move), ``--load N`` keeps N busy loops on the cores for the run,
  ``--client-realtime`` runs the client under SCHED_FIFO (``vipd.lab.prober --realtime``);
- steady-state cost at every advert interval (after the first ``kill`` block of each daemon),
  sampled after the rounds with the prober stopped and the cluster converged: CPU (utime +
  stime from /proc/PID/stat over the window, and the same at ns resolution from
  /proc/PID/task/*/schedstat, every thread of the daemon's whole process tree, in % of one
  core) and VmRSS
  (summed over the tree), master and backups separately.

It writes ``failover.json`` (every round's raw numbers, every takeover line, every sample,
the environment and the command line, every round's wire timeline and the capture's clock
offsets), ``failover.md`` (the tables of docs/benchmarks.md) and ``failover.png`` (outage per fault
and advert, both daemons side by side, phase-corrected outage overlaid for node death, and
the takeover lateness from the wire) into ``--out``.

Which vipd it measures: by default, a copy of the working tree's ``vipd/`` taken at the start
(under ``<out>/tmp/``, removed at the end): the script re-executes itself with PYTHONPATH
naming the copy, so every daemon the lab (re)starts runs the same code even if the tree is
edited meanwhile. The JSON records HEAD, uncommitted files and a hash of the code the lab
ran, at the start and end of the run and of each configuration. ``--no-snapshot`` runs the
working tree live.

What it must not do: judge. There are no wall-clock assertions; the only failure is a lab
failure (a round that did not recover or re-converge, two nodes answering at once, a lab that
did not start), which is recorded in the JSON and makes the exit status 1. Lab logs of a
failed configuration are kept under ``<out>/tmp/`` for the post-mortem.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import failover_wire as wire

import vipd
from vipd.lab import runner
from vipd.lab.analysis import percentile
from vipd.lab.daemons import DaemonKind, descendants
from vipd.lab.faults import FaultName
from vipd.lab.runner import Options, Round
from vipd.lab.topology import Lab, LabError, new_prefix

ADVERTS_FULL: tuple[float, ...] = (1.0, 0.1, 0.01)
ADVERTS_QUICK: tuple[float, ...] = (0.1, 0.01)
FAULTS: tuple[FaultName, ...] = ("kill", "term", "stop", "linkdown")
# Faults after which the leader just goes silent: the backup waits Master_Down_Interval.
SILENT_FAULTS = ("kill", "stop", "linkdown")
FAULT_TITLES = {
    "kill": "node death (kill)",
    "term": "SIGTERM (term)",
    "stop": "SIGSTOP, then SIGCONT (stop)",
    "linkdown": "link down, then up (linkdown)",
}
BLOCKS = 2  # each daemon's rounds per configuration, in this many interleaved lab runs
DAEMONS: tuple[DaemonKind, ...] = ("vipd", "keepalived")
TAKEOVER_PRIORITY = 150  # n2, the backup that takes over from n1 (200)
BOUND_SLACK_MS = 15.0
GARP_TARGET_P99_MS = 2.0
# Wire cross-check: the dead master's last advert precedes its link going down, which comes
# before the first failed connect after the client's last success ends: at most a probe
# interval (2 ms) plus a connect's round trip after that success started.
PHASE_TOLERANCE_MS = 3.0
REPO = Path(__file__).resolve().parent.parent
SNAPSHOT_ENV = "VIPD_BENCH_SNAPSHOT"  # set in the re-executed process: where its vipd/ is
STEADY_SETTLE = 5.0  # seconds after re-convergence before the CPU window opens

TAKEOVER_MSG = "VIP bound and announced"
_LOGFMT_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')
_START_RE = re.compile(r"^=== start (\d+) ")


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# -- logs -----------------------------------------------------------------------------------


def parse_logfmt(line: str) -> dict[str, str]:
    """``k=v k="quoted v"`` → dict (values unquoted); unparseable pairs are skipped."""
    out: dict[str, str] = {}
    for key, raw in _LOGFMT_PAIR.findall(line):
        if raw.startswith('"'):
            try:
                out[key] = str(json.loads(raw))
            except ValueError:
                out[key] = raw.strip('"')
        else:
            out[key] = raw
    return out


def takeover_lines(text: str, node: str) -> list[dict[str, Any]]:
    """Every takeover line (with its latency fields) in one node's vipd log."""
    found: list[dict[str, Any]] = []
    start = 0
    for line in text.splitlines():
        m = _START_RE.match(line)
        if m:
            start = int(m.group(1))
            continue
        if TAKEOVER_MSG not in line:
            continue
        fields = parse_logfmt(line)
        if fields.get("msg") != TAKEOVER_MSG or "decision_to_garp_ms" not in fields:
            continue  # a resync re-add carries no decision time
        try:
            found.append(
                {
                    "node": node,
                    "start": start,
                    "ts": fields.get("ts"),
                    "decision_to_bound_ms": float(fields["decision_to_bound_ms"]),
                    "decision_to_garp_ms": float(fields["decision_to_garp_ms"]),
                }
            )
        except (KeyError, ValueError):
            continue
    return found


def classify_takeovers(
    takeovers: list[dict[str, Any]], rounds: Sequence[Round], wall_offset: float
) -> None:
    """Tag each takeover line with the phase it fell in: startup, failover or preemption.

    vipd stamps its lines in UTC with ms resolution; ``wall_offset`` maps them onto the
    monotonic clock the rounds are timed on (to within a few ms, plenty between phases).
    """
    for t in takeovers:
        t["phase"], t["round"] = "other", None
        try:
            stamp = dt.datetime.fromisoformat(str(t["ts"]).replace("Z", "+00:00"))
        except ValueError:
            continue
        mono = stamp.timestamp() - wall_offset
        if not rounds or mono < rounds[0].t_fault:
            t["phase"] = "startup"
            continue
        for rnd in rounds:
            end = rnd.t_end if rnd.t_end is not None else float("inf")
            if rnd.t_fault <= mono < (rnd.t_restore or end):
                t["phase"], t["round"] = "failover", rnd.number
            elif rnd.t_restore is not None and rnd.t_restore <= mono < end:
                t["phase"], t["round"] = "preemption", rnd.number


# -- steady state ---------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    """utime + stime of one process, in clock ticks; None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the ")": field 3 (state) is index 0, so utime (14) and stime (15) are 11 and 12.
    return int(fields[11]) + int(fields[12])


def _run_ns(pid: int) -> int | None:
    """Time on CPU in ns of all of a process's live threads (each
    /proc/PID/task/TID/schedstat: /proc/PID/schedstat is the main thread's alone, which misses
    vipd's advert pacer): the same quantity at full resolution."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return 0  # a zombie has no VmRSS line


def sample_steady(session: runner._Session, seconds: float) -> dict[str, Any]:
    """CPU % of one core and RSS of each node's daemon tree over ``seconds``, converged."""
    vip = session.vip
    top = session.fleet.top()
    if not session.wait_for(lambda: session.lab.holders(vip) == [top], session.bound):
        raise LabError(f"not converged on {top} for the steady-state sample")
    time.sleep(STEADY_SETTLE)
    trees: dict[str, list[int]] = {}
    for name, daemon in session.fleet.daemons.items():
        pid = daemon.pid
        if pid is None or not daemon.running():
            raise LabError(f"{daemon.kind} on {name} is not running for the steady sample")
        trees[name] = [pid, *descendants(pid)]
    holders_before = session.lab.holders(vip)
    t0 = time.monotonic()
    ticks0 = {n: {p: _cpu_ticks(p) for p in pids} for n, pids in trees.items()}
    ns0 = {n: {p: _run_ns(p) for p in pids} for n, pids in trees.items()}
    rss: dict[str, list[int]] = {n: [] for n in trees}
    end = t0 + seconds
    while True:
        for n, pids in trees.items():
            rss[n].append(sum(_rss_kib(p) or 0 for p in pids))
        now = time.monotonic()
        if now >= end:
            break
        time.sleep(min(1.0, end - now))
    ticks1 = {n: {p: _cpu_ticks(p) for p in pids} for n, pids in trees.items()}
    ns1 = {n: {p: _run_ns(p) for p in pids} for n, pids in trees.items()}
    elapsed = time.monotonic() - t0
    holders_after = session.lab.holders(vip)
    nodes: dict[str, Any] = {}
    for n, pids in trees.items():
        used = run_ns = 0
        for p in pids:
            a, b = ticks0[n][p], ticks1[n][p]
            if a is not None and b is not None:
                used += b - a
            c, d = ns0[n][p], ns1[n][p]
            if c is not None and d is not None:
                run_ns += d - c
        nodes[n] = {
            "role": "master" if n == top else "backup",
            "pids": pids,
            "processes": len(pids),
            "cpu_ticks": used,
            "cpu_pct": round(100.0 * used / _CLK_TCK / elapsed, 3),
            "run_ns": run_ns,
            "cpu_pct_schedstat": round(100.0 * run_ns / 1e9 / elapsed, 4),
            "rss_mib": round(sum(rss[n]) / len(rss[n]) / 1024, 2),
            "rss_mib_max": round(max(rss[n]) / 1024, 2),
        }
    return {
        "seconds": round(elapsed, 3),
        "clk_tck": _CLK_TCK,
        "master": top,
        "holders_before": holders_before,
        "holders_after": holders_after,
        "converged_throughout": holders_before == holders_after == [top],
        "nodes": nodes,
    }


# -- one configuration ----------------------------------------------------------------------


@dataclass
class ConfigRun:
    daemon: DaemonKind
    advert: float
    fault: FaultName
    rounds: int
    order: int
    block: int = 1
    probe_interval: float = Options.probe_interval
    probe_realtime: bool = False
    report: dict[str, Any] | None = None
    takeovers: list[dict[str, Any]] = field(default_factory=list)
    steady: dict[str, Any] | None = None
    error: str | None = None
    workdir: str | None = None
    kept_logs: bool = False
    wire: dict[str, Any] | None = None
    started: str = ""
    seconds: float = 0.0
    vipd_code: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.report is not None and bool(self.report["summary"]["ok"])

    def outages_ms(self) -> list[float]:
        """Client outage of every round that recovered (failed rounds are reported apart)."""
        if self.report is None:
            return []
        return [
            float(r["client_outage_ms"])
            for r in self.report["rounds"]
            if r["recovered"] and r["client_outage_ms"] is not None
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "daemon": self.daemon,
            "advert_interval": self.advert,
            "fault": self.fault,
            "rounds_requested": self.rounds,
            "order": self.order,
            "block": self.block,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "ok": self.ok,
            "error": self.error,
            "workdir": self.workdir,
            "logs_kept": self.kept_logs,
            "report": self.report,
            "takeovers": self.takeovers,
            "steady_state": self.steady,
            "wire": self.wire,
            "vipd_code": self.vipd_code,
        }


def run_config(cfg: ConfigRun, tmp: Path, steady_seconds: float | None) -> None:
    """One lab run: the runner's ``execute`` flow, plus log collection and a steady sample."""
    opts = Options(
        nodes=3,
        daemon=cfg.daemon,
        advert_interval=cfg.advert,
        version=3,
        fault=cfg.fault,
        rounds=cfg.rounds,
        probe_interval=cfg.probe_interval,
        probe_realtime=cfg.probe_realtime,
    )
    spec = opts.spec()
    prefix = new_prefix()
    workdir = tmp / f"{prefix}-{cfg.daemon}-{cfg.advert:g}-{cfg.fault}-{cfg.block}"
    lab = Lab(nodes=opts.nodes, prefix=prefix, workdir=workdir)
    cfg.workdir = str(workdir)
    cfg.started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    cfg.vipd_code = {"start": code_state()}
    t0 = time.monotonic()
    wall_offset = time.time() - time.monotonic()  # to place vipd's UTC log stamps in rounds
    rounds: list[Round] = []
    session: runner._Session | None = None
    capture: wire.BridgeCapture | None = None
    failed = True
    try:
        with runner._signals_raise():
            lab.build()
            session = runner._Session(lab, opts, spec)
            _log(
                f"lab {prefix}: {cfg.daemon}, advert {cfg.advert:g} s, fault {cfg.fault}, "
                f"{cfg.rounds} rounds; logs in {workdir}"
            )
            # From before the daemons start: round 1's window needs the adverts before it.
            by_ip, by_mac = wire.node_addresses(lab)
            capture = wire.BridgeCapture(lab, workdir / "bridge.pcap")
            capture.start()
            capture_since = time.monotonic()
            session.start()
            for number in range(1, opts.rounds + 1):
                rnd = session.round(number)
                rounds.append(rnd)
                if not rnd.reconverged:
                    break
            capture.stop()
            session.prober.stop()
            session.analyse(rounds)
            cfg.wire = wire_rounds(session, capture, capture_since, rounds, by_ip, by_mac)
            failed = not all(r.ok for r in rounds) or len(rounds) < opts.rounds
            if steady_seconds and not failed:
                _log(f"steady state: {steady_seconds:g} s sample of {cfg.daemon}")
                cfg.steady = sample_steady(session, steady_seconds)
    except LabError as exc:
        cfg.error = str(exc)
        failed = True
        _log(f"{cfg.daemon} {cfg.advert:g} s {cfg.fault}: lab error: {exc}")
    except runner.Interrupted:
        failed = False
        raise
    except Exception as exc:  # a lab bug must not lose the other configurations' numbers
        cfg.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        failed = True
        _log(f"{cfg.daemon} {cfg.advert:g} s {cfg.fault}: unexpected error: {exc!r}")
    finally:
        with runner._signals_ignored():
            if capture is not None:
                capture.stop()
            if session is not None:
                session.prober.stop()
                if cfg.daemon == "vipd":
                    for name, daemon in session.fleet.daemons.items():
                        try:
                            text = daemon.log_path.read_text(errors="replace")
                        except OSError:
                            continue
                        cfg.takeovers += takeover_lines(text, name)
                classify_takeovers(cfg.takeovers, rounds, wall_offset)
            lab.teardown()
            cfg.kept_logs = failed
            if not failed:
                shutil.rmtree(workdir, ignore_errors=True)
            cfg.seconds = time.monotonic() - t0
            cfg.vipd_code["end"] = code_state()
    cfg.report = runner._report(opts, spec, lab, rounds)
    if failed:
        _log(f"{cfg.daemon} {cfg.advert:g} s {cfg.fault}: FAILED; logs kept in {workdir}")


def wire_rounds(
    session: runner._Session,
    capture: wire.BridgeCapture,
    since: float,
    rounds: Sequence[Round],
    by_ip: dict[wire.IPAddress, str],
    by_mac: dict[str, str],
) -> dict[str, Any]:
    """The capture's bookkeeping and every round's wire timeline (``analyse_round``)."""
    info = capture.info()
    info["nodes"] = {"by_ip": {str(k): v for k, v in by_ip.items()}, "by_mac": by_mac}
    info["rounds"] = []
    if capture.offset_start is None:
        info["error"] = "the capture never started"
        return info
    try:
        adverts, announces, other = wire.read_capture(capture.path, by_ip, by_mac)
        info["frames"] = {"adverts": len(adverts), "announcements": len(announces), "other": other}
        spec = session.spec
        start = since
        for rnd in rounds:
            prio = session.fleet[rnd.new_leader].priority if rnd.new_leader else 0
            mdi = spec.master_down_interval(prio) if prio else 0.0
            info["rounds"].append(
                wire.analyse_round(
                    rnd,
                    since=start,
                    offset=capture.offset_start["offset_s"],
                    adverts=adverts,
                    announces=announces,
                    vip=spec.vip,
                    vrid=spec.vrid,
                    mdi=mdi,
                    skew=max(0.0, mdi - 3 * spec.advert_interval),
                )
            )
            # The next round's window opens when this one's faulted node comes back: from
            # then on its adverts (as the restored master) are the next round's.
            if rnd.t_restore is not None:
                start = rnd.t_restore
    except Exception as exc:  # the wire numbers are extra: their failure must not lose the rest
        info["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        _log(f"wire analysis failed: {exc!r}")
    return info


# -- summary --------------------------------------------------------------------------------


def bound_ms(advert: float) -> float:
    """3 × Advert_Interval + Skew_Time of the priority-150 backup (VRRPv3), in ms."""
    skew = (256 - TAKEOVER_PRIORITY) * advert / 256
    return round((3 * advert + skew) * 1000, 1)


def skew_ms(advert: float) -> float:
    return round((256 - TAKEOVER_PRIORITY) * advert / 256 * 1000, 1)


def pct(values: Sequence[float]) -> dict[str, float | int] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 3),
        "p90": round(percentile(values, 90), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
        "min": round(min(values), 3),
    }


def _ratio(a: float | int | None, b: float | int | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(float(a) / float(b), 3)


def summarise(runs: list[ConfigRun], adverts: Sequence[float]) -> dict[str, Any]:
    outage: list[dict[str, Any]] = []
    for advert in adverts:
        for fault in FAULTS:
            by: dict[str, Any] = {}
            for daemon in DAEMONS:
                cr = [r for r in runs if (r.daemon, r.advert, r.fault) == (daemon, advert, fault)]
                values = [v for r in cr for v in r.outages_ms()]
                failed = [
                    rd["round"]
                    for r in cr
                    if r.report is not None
                    for rd in r.report["rounds"]
                    if not rd["ok"]
                ]
                returned = [
                    rd
                    for r in cr
                    if r.report is not None
                    for rd in r.report["rounds"]
                    if rd["reconverged"] and rd["preemption_outage_ms"] is not None
                ]
                after = [float(rd["preemption_outage_ms"]) for rd in returned]
                moved = [rd for rd in returned if rd.get("preemption_move_gap_ms") is not None]
                by[daemon] = {
                    "outage_ms": pct(values),
                    "after_restore_outage_ms": pct(after),
                    # The same second move, only the gap where the answering node changed,
                    # and what else the window held (see vipd.lab.analysis).
                    "after_restore_move_gap_ms": pct(
                        [float(rd["preemption_move_gap_ms"]) for rd in moved]
                    ),
                    "after_restore_move_failures": sum(
                        int(rd["preemption_move_failures"] or 0) for rd in moved
                    ),
                    "after_restore_rounds_without_move": len(returned) - len(moved),
                    "after_restore_other_gap_ms": pct(
                        [
                            float(rd["preemption_other_gap_ms"])
                            for rd in returned
                            if rd.get("preemption_other_gap_ms") is not None
                        ]
                    ),
                    "lab_runs": len(cr),
                    "rounds_run": sum(len(r.report["rounds"]) for r in cr if r.report),
                    "failed_rounds": failed,
                    "errors": [r.error for r in cr if r.error],
                }
            v, k = by["vipd"]["outage_ms"], by["keepalived"]["outage_ms"]
            bound = bound_ms(advert)
            outage.append(
                {
                    "advert_interval": advert,
                    "fault": fault,
                    "bound_ms": bound,
                    "skew_ms": skew_ms(advert),
                    "vipd": by["vipd"],
                    "keepalived": by["keepalived"],
                    "ratio_p50": _ratio(v and v["p50"], k and k["p50"]),
                    "ratio_p90": _ratio(v and v["p90"], k and k["p90"]),
                    "vipd_max_within_bound_plus_15ms": (
                        None
                        if fault not in ("kill", "linkdown") or v is None
                        else v["max"] <= bound + BOUND_SLACK_MS
                    ),
                }
            )
    takeovers = [t for r in runs for t in r.takeovers]
    failovers = [t for t in takeovers if t.get("phase") == "failover"]
    actuation = {
        "lines": len(takeovers),
        "by_phase": {
            ph: sum(1 for t in takeovers if t.get("phase") == ph)
            for ph in ("startup", "failover", "preemption", "other")
        },
        "decision_to_garp_ms": pct([t["decision_to_garp_ms"] for t in takeovers]),
        "decision_to_bound_ms": pct([t["decision_to_bound_ms"] for t in takeovers]),
        "failover_decision_to_garp_ms": pct([t["decision_to_garp_ms"] for t in failovers]),
        "target_p99_ms": GARP_TARGET_P99_MS,
    }
    steady: dict[str, Any] = {}
    for advert, daemon in ((a, d) for a in adverts for d in DAEMONS):
        samples = [
            r.steady
            for r in runs
            if r.daemon == daemon and r.advert == advert and r.steady is not None
        ]
        if not samples:
            continue
        master = [n for s in samples for n in s["nodes"].values() if n["role"] == "master"]
        backup = [n for s in samples for n in s["nodes"].values() if n["role"] == "backup"]

        def mean(xs: list[float]) -> float:
            return round(sum(xs) / len(xs), 4) if xs else float("nan")

        steady.setdefault(f"{advert:g}", {})[daemon] = {
            "advert_interval": advert,
            "samples": len(samples),
            "seconds_each": [s["seconds"] for s in samples],
            "processes_per_node": sorted(
                {n["processes"] for s in samples for n in s["nodes"].values()}
            ),
            "master_cpu_pct": mean([n["cpu_pct"] for n in master]),
            "backup_cpu_pct": mean([n["cpu_pct"] for n in backup]),
            "master_cpu_pct_schedstat": mean([n["cpu_pct_schedstat"] for n in master]),
            "backup_cpu_pct_schedstat": mean([n["cpu_pct_schedstat"] for n in backup]),
            "master_rss_mib": mean([n["rss_mib"] for n in master]),
            "backup_rss_mib": mean([n["rss_mib"] for n in backup]),
        }
    return {
        "ok": all(r.ok for r in runs),
        "failed_configurations": [
            f"{r.daemon} advert {r.advert:g} s {r.fault}" for r in runs if not r.ok
        ],
        "outage": outage,
        "actuation": actuation,
        "steady_state": steady,
        "wire": summarise_wire(runs, adverts),
        "wire_capture": summarise_capture(runs),
    }


# Per fault, the wire metrics the summary keeps (each: JSON key, what it is, its reference:
# "mdi" = Master_Down_Interval of the new master, "skew" = its Skew_Time, "zero", or None).
# The markdown shows the ones with a label; the rest are in the JSON only.
WIRE_METRICS: dict[str, tuple[tuple[str, str | None, str | None], ...]] = {
    "kill": (
        ("to_first_advert_ms", "dead master's last advert → new master's first advert", "mdi"),
        ("to_first_garp_ms", "dead master's last advert → new master's first GARP", "mdi"),
        (
            "takeover_lateness_ms",
            "**takeover lateness** = last advert → first GARP − MDI",
            "zero",
        ),
        ("client_outage_ms", "client outage (as above)", "mdi"),
        (
            "phase_corrected_outage_ms",
            "**phase-corrected outage** = client outage + (outage start − last advert)",
            "mdi",
        ),
        ("advert_lateness_ms", None, "zero"),
        ("first_advert_to_first_garp_ms", None, None),
        ("outage_start_minus_last_advert_ms", None, None),
        ("fault_minus_last_advert_ms", None, None),
        ("phase_corrected_outage_lab_fault_ms", None, "mdi"),
    ),
    "stop": (
        ("to_first_advert_ms", "stopped master's last advert → new master's first advert", "mdi"),
        ("to_first_garp_ms", "stopped master's last advert → new master's first GARP", "mdi"),
        (
            "takeover_lateness_ms",
            "**takeover lateness** = last advert → first GARP − MDI",
            "zero",
        ),
        ("advert_lateness_ms", None, "zero"),
        ("first_advert_to_first_garp_ms", None, None),
    ),
    "term": (
        ("sigterm_to_priority0_ms", "SIGTERM → old master's priority-0 advert", None),
        ("to_first_advert_ms", "priority-0 advert → new master's first advert", "skew"),
        ("to_first_garp_ms", "priority-0 advert → new master's first GARP", "skew"),
        (
            "takeover_lateness_ms",
            "**takeover lateness** = priority-0 advert → first GARP − Skew_Time",
            "zero",
        ),
        ("client_outage_ms", "client outage (as above)", None),
        ("advert_lateness_ms", None, "zero"),
        ("first_advert_to_first_garp_ms", None, None),
    ),
}


# Link down silences the master as node death does (the daemon lives on, off the wire).
WIRE_METRICS["linkdown"] = WIRE_METRICS["kill"]


def _wire_rounds_ok(r: ConfigRun) -> list[dict[str, Any]]:
    """The wire timelines of the rounds the lab counted as ok."""
    if r.wire is None or r.report is None:
        return []
    ok = {rd["round"] for rd in r.report["rounds"] if rd["ok"]}
    return [w for w in r.wire.get("rounds", []) if w["round"] in ok]


def summarise_wire(runs: list[ConfigRun], adverts: Sequence[float]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for advert in adverts:
        for fault in FAULTS:
            cr = {
                d: [r for r in runs if (r.daemon, r.advert, r.fault) == (d, advert, fault)]
                for d in DAEMONS
            }
            timelines = {d: [w for r in cr[d] for w in _wire_rounds_ok(r)] for d in DAEMONS}
            metrics: dict[str, Any] = {}
            for key, _label, _ref in WIRE_METRICS[fault]:
                by = {
                    d: pct([float(w[key]) for w in timelines[d] if w.get(key) is not None])
                    for d in DAEMONS
                }
                v, k = by["vipd"], by["keepalived"]
                metrics[key] = {
                    **by,
                    "ratio_p50": _ratio(v["p50"] if v else None, k["p50"] if k else None),
                    "diff_p50_ms": (
                        round(float(v["p50"]) - float(k["p50"]), 3) if v and k else None
                    ),
                }
            out.append(
                {
                    "advert_interval": advert,
                    "fault": fault,
                    "mdi_ms": bound_ms(advert),
                    "skew_ms": skew_ms(advert),
                    "rounds_timed": {d: len(timelines[d]) for d in DAEMONS},
                    "metrics": metrics,
                    "notes": {
                        d: [
                            f"round {w['round']}: {n}"
                            for r in cr[d]
                            if r.wire
                            for w in r.wire.get("rounds", [])
                            for n in w["notes"]
                        ]
                        for d in DAEMONS
                    },
                }
            )
    return out


def summarise_capture(runs: list[ConfigRun]) -> dict[str, Any]:
    """How far the wire clock can be trusted, over every configuration's capture."""
    caps = [r.wire for r in runs if r.wire is not None]
    unc = [c["offset_start"]["uncertainty_s"] for c in caps if c.get("offset_start")]
    drift = [abs(c["offset_drift_s"]) for c in caps if c.get("offset_drift_s") is not None]
    drops = [c["tcpdump"].get("dropped_by_kernel") for c in caps]
    return {
        "captures": len(caps),
        "configurations": len(runs),
        "errors": [
            f"{r.daemon} {r.advert:g} s {r.fault}: {r.wire['error'].splitlines()[0]}"
            for r in runs
            if r.wire is not None and r.wire.get("error")
        ],
        "offset_uncertainty_us_max": round(max(unc) * 1e6, 3) if unc else None,
        "offset_drift_us_max": round(max(drift) * 1e6, 3) if drift else None,
        "dropped_by_kernel": sum(d for d in drops if d is not None),
        "drop_counts_missing": sum(1 for d in drops if d is None),
    }


# -- environment ----------------------------------------------------------------------------


def _first_line(argv: list[str]) -> str | None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (p.stdout or p.stderr).strip()
    return text.splitlines()[0] if text else None


def fingerprint(pkg: Path) -> str:
    """sha256 over every ``*.py`` of a vipd package directory (names and contents)."""
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        h.update(str(f.relative_to(pkg)).encode() + b"\0")
        with contextlib.suppress(OSError):
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def lab_vipd_dir() -> Path:
    """The vipd package this process imports, and so the one every lab daemon runs."""
    return Path(vipd.__file__).resolve().parent


def code_state() -> dict[str, Any]:
    """Which vipd the lab runs (``fingerprint``) and the repository's state right now."""
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "vipd"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    return {
        "head": _first_line(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        "dirty": [ln.strip() for ln in dirty if ln.strip()],
        "fingerprint": fingerprint(lab_vipd_dir()),
        "working_tree_fingerprint": fingerprint(REPO / "vipd"),
    }


def reexec_from_snapshot(tmp: Path, argv: list[str]) -> NoReturn:
    """Copy the working tree's vipd/ under ``tmp`` and re-run this script on the copy.

    The lab starts ``python -m vipd`` afresh on every (re)start from the package the runner
    itself was imported from; run from the working tree, an edit made during the run would
    reach some daemons and not others. With PYTHONPATH naming the copy, this process, the
    lab, and every daemon, prober and responder it starts import the copy.
    """
    root = tmp / f"src-{os.getpid()}"
    shutil.copytree(
        REPO / "vipd", root / "vipd", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    # Byte-compiled as an install is: with PYTHONDONTWRITEBYTECODE=1 and no .pyc files every
    # daemon start would compile vipd again (~0.1 s and ~2 MiB of RSS that users never see).
    compileall.compile_dir(str(root / "vipd"), quiet=1)
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(root) + (os.pathsep + old if old else "")
    env[SNAPSHOT_ENV] = str(root)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, sys.argv[0], *argv], env)


def environment(command: str) -> dict[str, Any]:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    code = code_state()
    snap = os.environ.get(SNAPSHOT_ENV)
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "cpu_model": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "keepalived": _first_line(["keepalived", "--version"]),
        "vipd_commit": code["head"],
        "vipd_tree_dirty": code["dirty"],
        "vipd_snapshot": snap,
        "vipd_fingerprint_start": code["fingerprint"],
        "working_tree_fingerprint_start": code["working_tree_fingerprint"],
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }


# -- output ---------------------------------------------------------------------------------


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    return f"{float(v):.{digits}f}"


def _triple(p: dict[str, Any] | None) -> str:
    if p is None:
        return "–"
    return f"{_f(p['p50'])} / {_f(p['p90'])} / {_f(p['max'])}"


def render_markdown(doc: dict[str, Any]) -> str:
    env, s = doc["environment"], doc["summary"]
    par = doc["parameters"]
    every = _probe_every(doc)
    client = every + (", the client under SCHED_FIFO" if par.get("probe_realtime") else "")
    load = (
        f" {par['load_processes']} busy loop(s) on the cores." if par.get("load_processes") else ""
    )
    lines = [
        "### Failover: vipd vs keepalived",
        "",
        f"3 nodes, VRRPv3 multicast, same timers, same run; each daemon's "
        f"{doc['parameters']['rounds']} rounds per configuration run in "
        f"{doc['parameters'].get('blocks', 1)} lab runs interleaved with the other "
        "daemon's (vipd, keepalived, keepalived, vipd, then mirrored), so changes in the "
        "machine's load hit both. "
        "Client-observed outage = largest gap between successful TCP connects to the VIP "
        f"(one every {client}) around the fault. Bound = 3×Adv + Skew_Time of the "
        "priority-150 backup that takes over (for `term` the RFC bound is Skew_Time alone: "
        f"the master sends priority 0).{load}",
        "",
        "| advert | fault | bound ms | vipd p50 / p90 / max ms | keepalived p50 / p90 / max ms "
        "| vipd/keepalived p50 | vipd/keepalived p90 | vipd max ≤ bound + 15 ms | rounds ok |",
        "|---|---|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for o in s["outage"]:
        v, k = o["vipd"], o["keepalived"]

        def ok_count(d: dict[str, Any]) -> str:
            return f"{d['rounds_run'] - len(d['failed_rounds'])}/{d['rounds_run']}"

        within = o["vipd_max_within_bound_plus_15ms"]
        lines.append(
            f"| {o['advert_interval']:g} s | {o['fault']} | {_f(o['bound_ms'])} "
            f"(skew {_f(o['skew_ms'])}) "
            f"| {_triple(v['outage_ms'])} | {_triple(k['outage_ms'])} "
            f"| {_f(o['ratio_p50'], 2)} | {_f(o['ratio_p90'], 2)} "
            f"| {'n/a' if within is None and o['fault'] != 'kill' else _f(within)} "
            f"| vipd {ok_count(v)}, keepalived {ok_count(k)} |"
        )
    lines += [
        "",
        "After the faulted node comes back (restarted after `kill`/`term`, SIGCONT after "
        "`stop`, link up after `linkdown`) it preempts, being priority 200: client-observed "
        "outage of that second move (for `stop` the resumed node still has the VIP bound "
        "and must win back the client from the backup that took over):",
        "",
        "| advert | fault | vipd p50 / p90 / max ms | keepalived p50 / p90 / max ms "
        "| vipd/keepalived p50 |",
        "|---|---|---:|---:|---:|",
    ]
    for o in s["outage"]:
        va = o["vipd"]["after_restore_outage_ms"]
        ka = o["keepalived"]["after_restore_outage_ms"]
        lines.append(
            f"| {o['advert_interval']:g} s | {o['fault']} | {_triple(va)} | {_triple(ka)} "
            f"| {_f(_ratio(va and va['p50'], ka and ka['p50']), 2)} |"
        )
    lines += [
        "",
        "The same second move, only the gap at the move: between the last connect answered by "
        "the node that had the VIP and the first answered by the returning node (connects "
        f"start every {every}, so that is the resolution), with the connects that "
        "failed inside it; and the largest gap between two answers of the same node in the "
        "window (where nothing moved: the client's and the machine's own floor):",
        "",
        "| advert | fault | vipd move gap p50 / p90 / max ms | failed | keepalived move gap "
        "p50 / p90 / max ms | failed | vipd/keepalived p50 | floor vipd / keepalived p50 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for o in s["outage"]:
        v, k = o["vipd"], o["keepalived"]
        vm, km = v.get("after_restore_move_gap_ms"), k.get("after_restore_move_gap_ms")
        vf, kf = v.get("after_restore_other_gap_ms"), k.get("after_restore_other_gap_ms")
        lines.append(
            f"| {o['advert_interval']:g} s | {o['fault']} | {_triple(vm)} "
            f"| {v.get('after_restore_move_failures', '–')} | {_triple(km)} "
            f"| {k.get('after_restore_move_failures', '–')} "
            f"| {_f(_ratio(vm and vm['p50'], km and km['p50']), 2)} "
            f"| {_f(vf and vf['p50'])} / {_f(kf and kf['p50'])} |"
        )
    lines += render_wire(doc)
    a = s["actuation"]
    g, b = a["decision_to_garp_ms"], a["decision_to_bound_ms"]
    ph = a["by_phase"]
    lines += [
        "",
        "vipd takeover actuation, measured inside vipd: every `VIP bound and announced` log "
        f"line of the run ({a['lines']}: {ph['failover']} failovers, {ph['preemption']} "
        f"preemptions, {ph['startup']} at start-up, {ph['other']} other):",
        "",
        "| | n | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, p in (
        ("decision → VIP bound, all", b),
        ("decision → first GARP sent, all", g),
        ("decision → first GARP sent, failovers only", a["failover_decision_to_garp_ms"]),
    ):
        if p is None:
            lines.append(f"| {label} | 0 | – | – | – |")
        else:
            lines.append(
                f"| {label} | {p['n']} | {_f(p['p50'], 3)} | {_f(p['p99'], 3)} "
                f"| {_f(p['max'], 3)} |"
            )
    if g is not None:
        lines.append("")
        lines.append(
            f"Target p99 decision → GARP (all) ≤ {a['target_p99_ms']:g} ms: "
            f"{'met' if g['p99'] <= a['target_p99_ms'] else '**not met**'} "
            f"(p99 {g['p99']:.3f} ms)."
        )
    if s["steady_state"]:
        lines += [
            "",
            "Steady state at each advert interval, cluster converged, no client load "
            "(utime + stime from /proc/PID/stat, in brackets the same from "
            "/proc/PID/schedstat at ns resolution, and VmRSS, each summed over the daemon's "
            "process tree; CPU in % of one core; backup = mean per backup node):",
            "",
            "| advert | daemon | processes/node | master CPU % | backup CPU % "
            "| master RSS MiB | backup RSS MiB | samples |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for daemon, st in ((d, st) for per in s["steady_state"].values() for d, st in per.items()):
            lines.append(
                f"| {st['advert_interval']:g} s | {daemon} "
                f"| {','.join(map(str, st['processes_per_node']))} "
                f"| {_f(st['master_cpu_pct'], 2)} ({_f(st['master_cpu_pct_schedstat'], 3)}) "
                f"| {_f(st['backup_cpu_pct'], 2)} ({_f(st['backup_cpu_pct_schedstat'], 3)}) "
                f"| {_f(st['master_rss_mib'])} | {_f(st['backup_rss_mib'])} "
                f"| {st['samples']} × {_f(min(st['seconds_each']), 0)} s |"
            )
    dirty = " + uncommitted changes in vipd/" if env["vipd_tree_dirty"] else ""
    changed = ""
    if env.get("vipd_fingerprint_end") != env["vipd_fingerprint_start"]:
        changed = ", **the vipd code under test changed during the run**"
    elif env["vipd_snapshot"]:
        changed = ", run from a snapshot of vipd/ taken at the start"
    if env.get("vipd_commit_end") and env["vipd_commit_end"] != env["vipd_commit"]:
        same = env.get("working_tree_fingerprint_end") == env["working_tree_fingerprint_start"]
        changed += f"; HEAD moved to {env['vipd_commit_end'][:10]} during the run" + (
            ", vipd/ unchanged" if same else ", its vipd/ changes not measured"
        )
    versions: dict[tuple[str, str], list[str]] = {}
    for c in doc["configurations"]:
        if c["daemon"] != "vipd":
            continue
        for when in ("start", "end"):
            st = c["vipd_code"].get(when)
            if st:
                head = (st["head"] or "?")[:10] + (" + uncommitted" if st["dirty"] else "")
                label = f"{c['advert_interval']:g} s {c['fault']}"
                got = versions.setdefault((head, st["fingerprint"]), [])
                if label not in got:
                    got.append(label)
    if not s["ok"]:
        lines += ["", "**Failed configurations:** " + "; ".join(s["failed_configurations"])]
    lines += [
        "",
        f"Produced by `{env['command']}` on {env['date']} ({env['cpus']}× {env['cpu_model']}, "
        f"Linux {env['kernel']}, Python {env['python']}, {env['keepalived']}, vipd "
        f"{(env['vipd_commit'] or '?')[:10]}{dirty}{changed}); "
        f"run time {doc['run_seconds'] / 60:.1f} min.",
    ]
    if len({fp for _, fp in versions}) > 1:  # the code under test itself differed
        lines.append(
            "vipd code per vipd configuration (at its start and end; the lab starts vipd "
            "afresh from the working tree on every restart): "
            + "; ".join(
                f"{head} (tree {fp}): {', '.join(cfgs)}" for (head, fp), cfgs in versions.items()
            )
            + "."
        )
    return "\n".join(lines) + "\n"


def _spread(p: dict[str, Any] | None) -> str:
    return "–" if p is None else f"{float(p['max']) - float(p['min']):.1f}"


def _probe_every(doc: dict[str, Any]) -> str:
    """The client's connect interval, as the tables' text says it ("2 ms")."""
    return f"{doc['parameters'].get('probe_interval_s', Options.probe_interval) * 1000:g} ms"


def render_wire(doc: dict[str, Any]) -> list[str]:
    """The wire-timing table and what to know about its clock."""
    s = doc["summary"]
    rows = s.get("wire") or []
    if not rows:
        return []
    every = _probe_every(doc)
    lines = [
        "",
        "From the wire (tcpdump on the lab's bridge during the same rounds; "
        "bench/failover_wire.py): per round, the dead "
        "master's last advert (`kill`) or the old master's priority-0 advert (`term`), then "
        "the new master's first advert and its first gratuitous ARP for the VIP. **Takeover "
        "lateness** is what the new master adds to the RFC wait (MDI = Master_Down_Interval "
        "= 3×Adv + Skew_Time for `kill`, Skew_Time for `term`, both of the priority-150 "
        "node): timer slack, scheduling, binding the address and sending. The random strike "
        "phase cancels out of it; it does not cancel out of the client outage, which is "
        "uniform over one advert interval for `kill`. **Phase-corrected outage** adds the "
        "time from the dead master's last advert to the start of the client's outage (its "
        "last successful connect before the fault) back in.",
        "",
        "| advert | fault | from the wire | reference ms | vipd p50 / p90 / max ms "
        "| keepalived p50 / p90 / max ms | vipd/keepalived p50 | vipd − keepalived p50 ms "
        "| rounds (vipd, keepalived) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ref_ms = {"mdi": row["mdi_ms"], "skew": row["skew_ms"], "zero": 0.0}
        for key, label, ref in WIRE_METRICS[row["fault"]]:
            if label is None:
                continue
            m = row["metrics"][key]
            v, k = m["vipd"], m["keepalived"]
            ref_s = "–" if ref is None else _f(ref_ms[ref])
            if ref == "mdi":
                ref_s = f"MDI {ref_s}"
            elif ref == "skew":
                ref_s = f"Skew {ref_s}"
            diff = m["diff_p50_ms"]
            lines.append(
                f"| {row['advert_interval']:g} s | {row['fault']} | {label} | {ref_s} "
                f"| {_triple(v)} | {_triple(k)} | {_f(m['ratio_p50'], 2)} "
                f"| {'–' if diff is None else f'{diff:+.1f}'} "
                f"| {v['n'] if v else 0}, {k['n'] if k else 0} |"
            )
    notes: list[str] = []
    for row in rows:
        if row["fault"] != "kill":
            continue
        m = row["metrics"]
        raw, corr = m["client_outage_ms"], m["phase_corrected_outage_ms"]
        phase = m["outage_start_minus_last_advert_ms"]
        lab_fault = m["phase_corrected_outage_lab_fault_ms"]
        per = []
        for d in DAEMONS:
            ph = phase[d]
            per.append(
                f"{d} {_spread(raw[d])} → {_spread(corr[d])} ms"
                + (
                    f" (strike phase {_f(ph['min'])}…{_f(ph['max'])} ms after the last advert)"
                    if ph
                    else ""
                )
            )
        alt = ", ".join(
            f"{d} p50 {_f(lab_fault[d]['p50'])} ms" for d in DAEMONS if lab_fault[d] is not None
        )
        notes.append(
            f"at {row['advert_interval']:g} s, max − min of the `kill` outage, client → "
            f"phase-corrected: {'; '.join(per)}; with the lab's fault time instead of the "
            f"client's outage start: {alt or '–'}"
        )
    cap = s.get("wire_capture") or {}
    phases = [
        float(p["min"])
        for row in rows
        if row["fault"] == "kill"
        for p in row["metrics"]["outage_start_minus_last_advert_ms"].values()
        if isinstance(p, dict)
    ]
    phase_min = min(phases) if phases else None
    clock = (
        "Clocks: tcpdump stamps frames with CLOCK_REALTIME, the lab and its prober use "
        "CLOCK_MONOTONIC; the offset between them was read when each capture started "
        "(tightest of 9 bracketed reads: within "
        f"±{_f(cap.get('offset_uncertainty_us_max'), 2)} µs) and again when it stopped "
        f"(changed by at most {_f(cap.get('offset_drift_us_max'), 2)} µs over a "
        "configuration), so the conversion adds no error beyond microseconds; a frame's "
        "stamp is taken when the bridge hands it to the capture, microseconds after the "
        "sender's write unless a softirq is delayed on this shared machine. Outage start "
        f"and end come from the prober, which connects every {every}: that, not the clock, "
        f"bounds the phase-corrected outage's accuracy (±{every}). Cross-check: for `kill` the "
        "dead master's last advert must precede the start of the client's outage (to within "
        "one probe interval plus a connect's round trip: the link went down before the "
        "first failed connect completed); "
        + (
            "no round had both"
            if phase_min is None
            else f"the smallest gap between them was {phase_min:+.1f} ms"
            + (
                " (consistent)"
                if phase_min >= -PHASE_TOLERANCE_MS
                else f" (**inconsistent** beyond {PHASE_TOLERANCE_MS:g} ms: check the clocks)"
            )
        )
        + ". "
        f"Frames dropped by the kernel during the captures: {cap.get('dropped_by_kernel')}"
        + (
            f" ({cap['drop_counts_missing']} captures without a count)"
            if cap.get("drop_counts_missing")
            else ""
        )
        + "."
    )
    lines += ["", clock]
    if notes:
        lines += ["", "Phase correction: " + "; ".join(notes) + "."]
    anomalies = [
        f"{d} {row['advert_interval']:g} s {row['fault']} {n}"
        for row in rows
        for d in DAEMONS
        for n in row["notes"][d]
    ]
    if cap.get("errors"):
        anomalies += [f"wire analysis failed: {e}" for e in cap["errors"]]
    if anomalies:
        lines += ["", "Wire notes: " + "; ".join(anomalies) + "."]
    return lines


def _boxes(ax: Any, positions: list[int], data: list[list[float]]) -> None:
    """Box plots at ``positions`` for the non-empty series of ``data`` (one per position)."""
    nonempty = [(p, d) for p, d in zip(positions, data, strict=True) if d]
    if nonempty:
        ax.boxplot(
            [d for _, d in nonempty],
            positions=[p for p, _ in nonempty],
            widths=0.5,
            showfliers=False,
            medianprops={"color": "black"},
        )


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = doc["configurations"]
    adverts = doc["parameters"]["adverts"]
    colors = {"vipd": "#1f77b4", "keepalived": "#d62728"}
    cols = len(FAULTS) + 1  # + the wire: takeover lateness per daemon and fault
    fig, axes = plt.subplots(
        len(adverts), cols, figsize=(4.2 * cols, 3.6 * len(adverts)), squeeze=False
    )
    for i, advert in enumerate(adverts):
        for j, fault in enumerate(FAULTS):
            ax = axes[i][j]
            data: list[list[float]] = []
            for daemon in DAEMONS:
                vals: list[float] = []
                for r in runs:
                    if (r["daemon"], r["advert_interval"], r["fault"]) != (daemon, advert, fault):
                        continue
                    if r["report"] is None:
                        continue
                    vals += [
                        float(rd["client_outage_ms"])
                        for rd in r["report"]["rounds"]
                        if rd["recovered"] and rd["client_outage_ms"] is not None
                    ]
                data.append(vals)
            positions = list(range(1, len(DAEMONS) + 1))
            extra: list[float] = []  # phase-corrected outages, drawn beside the boxes
            _boxes(ax, positions, data)
            for k, (daemon, vals) in enumerate(zip(DAEMONS, data, strict=True)):
                n = len(vals)
                xs = [positions[k] + 0.3 * ((m / max(n - 1, 1)) - 0.5) for m in range(n)]
                ax.scatter(xs, vals, s=14, alpha=0.75, color=colors[daemon], zorder=3)
            if fault == "kill":
                # The same rounds with the strike phase taken out (from the wire).
                for k, daemon in enumerate(DAEMONS):
                    corr = _wire_values(runs, daemon, advert, fault, "phase_corrected_outage_ms")
                    extra += corr
                    ax.scatter(
                        [positions[k] + 0.38] * len(corr),
                        corr,
                        s=18,
                        marker="D",
                        facecolors="none",
                        edgecolors=colors[daemon],
                        linewidths=0.8,
                        zorder=3,
                        label="phase-corrected (wire)" if k == 0 else None,
                    )
                ax.legend(loc="lower right", fontsize=7, frameon=False)
            # node death: the backup waits Master_Down_Interval = 3×Adv + Skew at most;
            # SIGTERM: the master says goodbye (priority 0), so the backup waits Skew_Time.
            # The label goes on the side of the line away from the data.
            if fault in SILENT_FAULTS:
                ref, label, va = bound_ms(advert), "3×Adv+Skew", "bottom"
            else:
                ref, label, va = skew_ms(advert), "Skew_Time", "top"
            ax.axhline(ref, color="grey", linestyle="--", linewidth=1)
            ax.annotate(
                f"{label} {ref:g} ms",
                xy=(0.02, ref),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                color="grey",
                va=va,
            )
            ax.set_xticks(
                positions, [f"{d}\n(n={len(v)})" for d, v in zip(DAEMONS, data, strict=True)]
            )
            ax.set_xlim(0.4, len(DAEMONS) + 0.6)
            ax.set_ylim(bottom=0, top=max([ref, *extra, *[v for d in data for v in d]]) * 1.15)
            ax.set_ylabel("client outage (ms)")
            ax.set_title(f"advert {advert:g} s — {FAULT_TITLES[fault]}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
        plot_lateness(axes[i][len(FAULTS)], runs, advert, colors)
    fig.suptitle(
        "Failover, 3 nodes, VRRPv3: client-observed outage per fault (left) and takeover "
        "lateness on the wire (right)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _wire_values(
    runs: list[dict[str, Any]], daemon: str, advert: float, fault: str, key: str
) -> list[float]:
    """One wire metric over the rounds the lab counted ok, from the JSON document."""
    vals: list[float] = []
    for r in runs:
        if (r["daemon"], r["advert_interval"], r["fault"]) != (daemon, advert, fault):
            continue
        if not r.get("wire") or r["report"] is None:
            continue
        ok = {rd["round"] for rd in r["report"]["rounds"] if rd["ok"]}
        vals += [
            float(w[key])
            for w in r["wire"].get("rounds", [])
            if w["round"] in ok and w.get(key) is not None
        ]
    return vals


def plot_lateness(
    ax: Any, runs: list[dict[str, Any]], advert: float, colors: dict[str, str]
) -> None:
    """Takeover lateness from the wire, per fault and daemon (rounds the lab counted ok)."""
    groups = [
        (fault, daemon, _wire_values(runs, daemon, advert, fault, "takeover_lateness_ms"))
        for fault in FAULTS
        for daemon in DAEMONS
    ]
    positions = list(range(1, len(groups) + 1))
    _boxes(ax, positions, [g[2] for g in groups])
    for pos, (_fault, who, vals) in zip(positions, groups, strict=True):
        n = len(vals)
        xs = [pos + 0.3 * ((m / max(n - 1, 1)) - 0.5) for m in range(n)]
        ax.scatter(xs, vals, s=14, alpha=0.75, color=colors[who], zorder=3)
    ax.axhline(0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(positions, [f"{d}\n{f} (n={len(v)})" for f, d, v in groups], fontsize=7)
    ax.set_xlim(0.4, len(groups) + 0.6)
    allv = [v for g in groups for v in g[2]]
    if allv:
        lo, hi = min(0.0, *allv), max(0.0, *allv)
        pad = max(1.0, (hi - lo) * 0.1)
        ax.set_ylim(lo - pad, hi + pad)
    ax.set_ylabel("takeover lateness (ms)")
    ax.set_title(
        f"advert {advert:g} s — wire: first GARP − RFC wait\n"
        "(term: priority 0 + Skew; others: last advert + MDI)",
        fontsize=9,
    )
    ax.grid(axis="y", alpha=0.3)


# -- main -----------------------------------------------------------------------------------


def split_rounds(rounds: int, blocks: int) -> list[int]:
    """``rounds`` as ``blocks`` near-equal positive parts (fewer blocks if rounds < blocks)."""
    blocks = max(1, min(blocks, rounds))
    return [rounds // blocks + (1 if b < rounds % blocks else 0) for b in range(blocks)]


def schedule(adverts: Sequence[float], rounds: int, blocks: int = BLOCKS) -> Iterator[ConfigRun]:
    """Every (advert, fault) for both daemons, interleaved: each daemon's rounds run in
    ``blocks`` lab runs, and the order flips every block (vipd, keepalived, keepalived,
    vipd, … and the mirror image for the next configuration), so drift in the machine's
    load over a configuration hits both daemons alike."""
    order = 0
    for c, (advert, fault) in enumerate((a, f) for a in adverts for f in FAULTS):
        for b, n in enumerate(split_rounds(rounds, blocks)):
            pair = DAEMONS if (c + b) % 2 == 0 else DAEMONS[::-1]
            for daemon in pair:
                order += 1
                yield ConfigRun(
                    daemon=daemon,
                    advert=advert,
                    fault=fault,
                    rounds=n,
                    order=order,
                    block=b + 1,
                )


def main(argv: list[str] | None = None) -> int:
    global FAULTS  # --faults narrows the module's list, which the summaries iterate
    parser = argparse.ArgumentParser(
        prog="bench/failover.py",
        description="Failover benchmark: vipd vs keepalived in the network-namespace lab.",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds per run (default 20)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: 3 rounds, adverts 0.1 s and 0.01 s"
    )
    parser.add_argument(
        "--adverts",
        type=float,
        nargs="+",
        default=None,
        metavar="S",
        help="advert intervals to run (default 1 0.1 0.01)",
    )
    parser.add_argument(
        "--faults",
        choices=FAULTS,
        nargs="+",
        default=None,
        help=f"faults to run (default: {' '.join(FAULTS)})",
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=BLOCKS,
        help=f"interleaved lab runs per daemon and configuration (default {BLOCKS})",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="output dir")
    parser.add_argument(
        "--probe-interval",
        type=float,
        default=Options.probe_interval,
        metavar="S",
        help=f"the client's connect interval (default {Options.probe_interval:g})",
    )
    parser.add_argument(
        "--client-realtime",
        action="store_true",
        help="run the client under SCHED_FIFO, so its own lost slices are not counted as gaps",
    )
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="N busy loops on the machine's cores for the whole run (default 0)",
    )
    parser.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run vipd from the working tree itself, not from a copy of vipd/ taken at the "
        "start (edits made during the run then reach daemons at their next restart)",
    )
    parser.add_argument(
        "--steady-seconds",
        type=float,
        default=None,
        metavar="S",
        help="steady-state CPU/RSS window at advert 0.1 s (default 20; 5 with --quick; 0: skip)",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 20)
    steady = args.steady_seconds
    if steady is None:
        steady = 5.0 if args.quick else 20.0
    adverts = tuple(args.adverts) if args.adverts else ADVERTS_QUICK if args.quick else ADVERTS_FULL
    if args.faults:
        FAULTS = tuple(f for f in FAULTS if f in args.faults)
    if rounds < 1 or steady < 0 or args.blocks < 1:
        parser.error("--rounds and --blocks must be ≥ 1 and --steady-seconds ≥ 0")
    if not 0.0001 <= args.probe_interval <= 0.1 or args.load < 0:
        parser.error("--probe-interval must be within 0.0001–0.1 s and --load ≥ 0")
    why = runner.preflight(Options(daemon="keepalived"))
    if why is None and shutil.which("tcpdump") is None:
        why = "tcpdump is not installed (the wire timings need it)"
    if why is not None:
        print(f"bench/failover.py: cannot run here: {why}", file=sys.stderr)
        return 2

    out: Path = args.out
    tmp = out.resolve() / "tmp"  # absolute: daemons get config paths under it
    tmp.mkdir(parents=True, exist_ok=True)
    snap = os.environ.get(SNAPSHOT_ENV)
    if snap is None and not args.no_snapshot:
        return reexec_from_snapshot(tmp, sys.argv[1:] if argv is None else argv)
    if snap is not None and lab_vipd_dir() != (Path(snap) / "vipd").resolve():
        print(
            f"bench/failover.py: vipd imported from {lab_vipd_dir()}, not the snapshot {snap}",
            file=sys.stderr,
        )
        return 2
    try:
        return measure_all(args, out, tmp, rounds, steady, adverts)
    finally:
        if snap is not None:
            shutil.rmtree(snap, ignore_errors=True)
        with contextlib.suppress(OSError):
            tmp.rmdir()  # only if empty: no failed configuration left its logs there


def measure_all(
    args: argparse.Namespace,
    out: Path,
    tmp: Path,
    rounds: int,
    steady: float,
    adverts: Sequence[float],
) -> int:
    command = shlex.join([os.path.relpath(sys.executable), *sys.argv])
    env = environment(command)
    t0 = time.monotonic()
    runs: list[ConfigRun] = []
    interrupted = False
    plan = list(schedule(adverts, rounds, args.blocks))
    for cfg in plan:
        cfg.probe_interval = args.probe_interval
        cfg.probe_realtime = args.client_realtime
    hogs = [
        # Other work on the cores, as a shared control-plane node has: a busy loop each.
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(args.load)
    ]
    if hogs:
        _log(f"load: {len(hogs)} busy loop(s) for the whole run")
    try:
        for i, cfg in enumerate(plan, 1):
            _log(f"[{i}/{len(plan)}] {cfg.daemon}, advert {cfg.advert:g} s, fault {cfg.fault}")
            runs.append(cfg)
            sample = cfg.fault == "kill" and cfg.block == 1
            run_config(cfg, tmp, steady if sample else None)
    except KeyboardInterrupt:
        interrupted = True
        _log("interrupted: writing what was measured so far")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    env["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    end = code_state()
    env["vipd_fingerprint_end"] = end["fingerprint"]
    env["working_tree_fingerprint_end"] = end["working_tree_fingerprint"]
    env["vipd_commit_end"] = end["head"]
    if env["vipd_fingerprint_end"] != env["vipd_fingerprint_start"]:
        _log("NOTE: the vipd code the lab runs changed during the run (see the JSON)")
    elif env["working_tree_fingerprint_end"] != env["working_tree_fingerprint_start"]:
        _log("note: vipd/ changed in the working tree during the run; the run used its snapshot")
    doc: dict[str, Any] = {
        "environment": env,
        "parameters": {
            "nodes": 3,
            "version": 3,
            "adverts": list(adverts),
            "faults": list(FAULTS),
            "rounds": rounds,
            "blocks": args.blocks,
            "quick": args.quick,
            "steady_seconds": steady,
            "steady_settle_seconds": STEADY_SETTLE,
            "takeover_priority": TAKEOVER_PRIORITY,
            "probe_interval_s": args.probe_interval,
            "load_processes": args.load,
            "probe_realtime": args.client_realtime,
            "wire_capture": {"interface": "br0", "filter": wire.CAPTURE_FILTER},
        },
        "interrupted": interrupted,
        "run_seconds": round(time.monotonic() - t0, 1),
        "summary": summarise(runs, adverts),
        "configurations": [r.to_dict() for r in runs],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "failover.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = render_markdown(doc)
    (out / "failover.md").write_text(md)
    plot(doc, out / "failover.png")
    print(md)
    _log(f"wrote {out / 'failover.json'}, {out / 'failover.md'}, {out / 'failover.png'}")
    if interrupted:
        return 130
    return 0 if doc["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
