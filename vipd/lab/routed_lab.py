"""``vipd lab --announce routing-table``: a routed fabric, faults, the router's view and the
client's, per fault.

What it is
    The routed counterpart of `vipd.lab.runner`'s VRRP rounds. ``execute(opts)`` builds a
    `vipd.lab.routed.RoutedBed` (Debian's FRR router, N nodes on routed /31 links, BFD 100 ms
    × 3, ECMP, a client behind the router), starts a stand-in API server and ``vipd run``
    (``announce.mode`` from ``--announce``) on every node (`vipd.lab.routed_faults.Fabric`),
    waits until every node is a path in the router's kernel FIB and the client gets answers
    from all of them, then runs ``--rounds`` rounds of each fault (``--fault``, or all of
    `ROUTED_FAULTS`), the victim rotating over the nodes. Per round: inject, wait for the
    fault's effect in the router's FIB (the victim's path leaves; for ``kill`` it must stay;
    for ``bgpreset`` a path drops), hold `HOLD` s, restore, wait until every path is back and
    the client is answered by every node again.

    A thread polls the router's FIB all along (`PathWatch`): the timeline of path sets is
    the router's side. The prober (`vipd.lab.prober`, a connect every 2 ms) is the client's:
    with ECMP most connections keep working while one path is bad, so a round reports the
    connects that failed, the span over which they failed (first to last failed connect
    started, plus one probe interval), and the *full outage*, the longest time in which no
    connect succeeded (`vipd.lab.analysis.measure`), for the fault and for the restore.

Exit status: 0 when every round saw its effect and re-converged, 1 when not, 2 for bad
options or a host that cannot run it, 130 when interrupted (the bed is torn down).

What it must not do: infer anything from vipd's logs (the router's FIB and the client's
connects are the truth), or change the host outside the bed's namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vipd.lab.analysis import Attempt, measure
from vipd.lab.interrupts import Interrupted, signals_ignored, signals_raise
from vipd.lab.interrupts import log as _log
from vipd.lab.prober import Prober
from vipd.lab.routed import RoutedBed, frr_problem
from vipd.lab.routed_faults import (
    ROUTED_FAULTS,
    Fabric,
    NodeSide,
    node_side,
)
from vipd.lab.routed_report import render, report
from vipd.lab.topology import LabError

__all__ = ["EXPECTED", "RoutedOptions", "RoutedRound", "execute", "render", "run"]

HOLD = 1.0  # seconds the fault stays on after its effect (later failures show)
KILL_WATCH = 2.0  # seconds a SIGKILLed vipd is watched: its path must stay
EFFECT_BOUND = 10.0  # seconds for a fault's effect to reach the router's FIB
BACK_BOUND = 30.0  # seconds for every path and the client to be back after a restore
START_BOUND = 40.0
PRE = 0.5
STEADY = 0.5  # seconds of every path and every node answering that count as settled

EXPECTED = {
    "kill": "path stays",
    "term": "path leaves",
    "apidown": "path leaves",
    "linkdown": "path leaves",
    "silent": "path leaves",
    "bgpreset": "a path drops",
}

# Options of the VRRP lab that mean nothing on the routed fabric, and their defaults.
_VRRP_ONLY = {
    "daemon": "vipd",
    "election": "vrrp",
    "family": 4,
    "unicast": False,
    "vmac": False,
    "health": False,
    "kubeadm": False,
    "advert_interval": None,
    "version": 3,
}


@dataclass
class RoutedOptions:
    announce: str = "routing-table"
    nodes: int = 3
    faults: tuple[str, ...] = ROUTED_FAULTS
    rounds: int = 3
    json: bool = False
    keep: bool = False
    prefix: str | None = None
    probe_interval: float = 0.002
    probe_timeout: float = 0.5
    port: int = 6443


class PathWatch:
    """The router's kernel next hops for the VIP, as node names, polled on a thread."""

    def __init__(self, bed: RoutedBed, period: float = 0.005) -> None:
        self.bed = bed
        self.period = period
        self.by_addr = {n.addr: n.name for n in bed.nodes}
        self.changes: list[tuple[float, frozenset[str]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="path-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _poll(self) -> None:
        last: frozenset[str] | None = None
        while not self._stop.is_set():
            try:
                hops = self.bed.kernel_nexthops()
            except (LabError, OSError, ValueError):
                hops = set()  # the bed going away under us: the next poll says
            now = frozenset(self.by_addr.get(h, h) for h in hops)
            if now != last:
                with self._lock:
                    self.changes.append((time.monotonic(), now))
                last = now
            self._stop.wait(self.period)

    def current(self) -> frozenset[str]:
        with self._lock:
            return self.changes[-1][1] if self.changes else frozenset()

    def since(self, t: float) -> list[tuple[float, frozenset[str]]]:
        """The path set at ``t`` (stamped ``t``) and every change after it."""
        with self._lock:
            changes = list(self.changes)
        before = [c for c in changes if c[0] <= t]
        head = [(t, before[-1][1])] if before else []
        return head + [c for c in changes if c[0] > t]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)


@dataclass
class RoutedRound:
    number: int
    fault: str
    node: str
    expected: str
    effect_seen: bool = False
    effect_ms: float | None = None  # fault → the expected change in the router's FIB
    back: bool = False
    back_ms: float | None = None  # restore → every path back and the client answered by all
    left_ms: float | None = None  # fault → the node's path out of the FIB (any fault)
    failed: int = 0  # connects started during the fault that failed
    attempts: int = 0
    failing_ms: float | None = None  # first to last failed connect, plus one probe interval
    first_failed_ms: float | None = None  # fault → the first failed connect started
    full_outage_ms: float | None = None  # longest span of the round with no connect answered
    failure_reasons: dict[str, int] = field(default_factory=dict)
    restore_failed: int = 0
    restore_failing_ms: float | None = None
    restore_full_outage_ms: float | None = None
    timeline: list[tuple[float, str]] = field(default_factory=list)  # (ms from fault, what)
    error: str | None = None
    t_fault: float = 0.0
    t_restore: float | None = None
    t_end: float | None = None

    @property
    def ok(self) -> bool:
        return self.effect_seen and self.back and self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _ms(s: float) -> float:
    return round(s * 1000, 1)


class RoutedSession:
    """One run: the bed, its fabric, the path watch, the prober, the rounds."""

    def __init__(
        self,
        bed: RoutedBed,
        side: NodeSide,
        opts: RoutedOptions,
        fabric: Fabric | None = None,
        effect_bound: float = EFFECT_BOUND,
    ) -> None:
        """``fabric``: what runs on the nodes (default: vipd, `Fabric`); bench/bgp.py passes
        one that runs kube-vip, and a longer ``effect_bound`` for a BGP hold time."""
        self.bed = bed
        self.opts = opts
        self.fabric = fabric or Fabric(bed, side, opts.port)
        self.effect_bound = effect_bound
        self.watch = PathWatch(bed)
        self.names = frozenset(n.name for n in bed.nodes)
        self.prober = Prober(
            bed, bed.vip, opts.port, interval=opts.probe_interval, timeout=opts.probe_timeout
        )

    def wait_for(self, cond: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def client_on_all(self, since: float) -> bool:
        """The connects of a recent half second (old enough to have finished, and started
        after ``since``) all answered, by every node."""
        now = time.monotonic()
        hi = now - self.opts.probe_timeout - 0.05
        if hi - STEADY < since:
            return False
        recent = [a for a in self.prober.attempts(hi - STEADY) if a.start <= hi]
        return (
            bool(recent)
            and all(a.ok for a in recent)
            and {a.name for a in recent} == set(self.names)
        )

    def steady(self, since: float = 0.0) -> bool:
        """Every node a path for the last `STEADY` s, and the client answered by all of them
        in a window after ``since``: a restarted agent that first removes what it finds (and
        announces again later) is not taken for a settled one."""
        changes = self.watch.since(time.monotonic() - STEADY)
        return len(changes) == 1 and changes[0][1] == self.names and self.client_on_all(since)

    def start(self) -> None:
        self.watch.start()
        self.fabric.start_all()
        if not self.wait_for(lambda: self.watch.current() == self.names, START_BOUND):
            raise LabError(
                f"not every node became a path within {START_BOUND:.0f} s (the router has "
                f"{sorted(self.watch.current())})\n{self.fabric.report()}"
            )
        self.prober.start()
        if not self.wait_for(self.steady, 10.0):
            raise LabError(
                "the client is not answered by every node through the VIP "
                f"(paths {sorted(self.watch.current())})\n{self.fabric.report()}"
            )

    def effect(self, rnd: RoutedRound) -> Callable[[], bool]:
        def leaves() -> bool:
            return rnd.node not in self.watch.current()

        def drops() -> bool:
            return any(p != self.names for _, p in self.watch.since(rnd.t_fault))

        return drops if rnd.fault == "bgpreset" else leaves

    def round(self, number: int, fault: str, node: str) -> RoutedRound:
        # A SIGKILLed vipd leaves its kernel routes, so FRR keeps announcing them; in bgp
        # mode the speaker is vipd's child and goes with it (its session closes).
        stays = fault == "kill" and self.opts.announce == "routing-table"
        expected = "path leaves" if fault == "kill" and not stays else EXPECTED[fault]
        rnd = RoutedRound(number, fault, node, expected)
        rnd.t_fault = time.monotonic()
        self.fabric.inject(fault, node)
        _log(f"round {number}: {fault} {node}")
        if stays:
            time.sleep(KILL_WATCH)
            left = [t for t, p in self.watch.since(rnd.t_fault) if node not in p]
            rnd.effect_seen = not left
            if left:
                rnd.error = f"{node}'s path left {(left[0] - rnd.t_fault):.3f} s after SIGKILL"
        else:
            rnd.effect_seen = self.wait_for(self.effect(rnd), self.effect_bound)
            if rnd.effect_seen:
                seen = next(
                    t
                    for t, p in self.watch.since(rnd.t_fault)
                    if t >= rnd.t_fault
                    and (p != self.names if fault == "bgpreset" else node not in p)
                )
                rnd.effect_ms = _ms(seen - rnd.t_fault)
            else:
                rnd.error = f"no {expected} within {self.effect_bound:.0f} s"
            time.sleep(HOLD)
        if fault == "bgpreset":
            # Nothing to undo: the round's fault lasts until the sessions are back.
            self.wait_for(lambda: self.steady(rnd.t_fault), BACK_BOUND)
        rnd.t_restore = time.monotonic()
        self.fabric.restore(fault, node)
        settled = rnd.t_restore
        if fault in ("kill", "term"):
            # The new vipd first removes whatever routes it finds, then announces again:
            # the round ends once that is over and every path is back.
            self.wait_for(lambda: self.fabric.ready(node), BACK_BOUND)
            settled = time.monotonic()
        rnd.back = self.wait_for(lambda: self.steady(settled), BACK_BOUND)
        rnd.t_end = time.monotonic()
        if rnd.back:
            rnd.back_ms = _ms(rnd.t_end - rnd.t_restore)
        else:
            msg = (
                f"not back within {BACK_BOUND:.0f} s (paths {sorted(self.watch.current())})"
                f"\n{self.fabric.report()}"
            )
            rnd.error = f"{rnd.error}; {msg}" if rnd.error else msg
        _log(
            f"round {number}: {expected}: "
            f"{'yes' if rnd.effect_seen else 'NO'}"
            + (f" after {rnd.effect_ms:.0f} ms" if rnd.effect_ms is not None else "")
            + (f"; back {rnd.back_ms:.0f} ms after the restore" if rnd.back else "; NOT back")
        )
        return rnd

    def analyse(self, rounds: Sequence[RoutedRound]) -> None:
        attempts = self.prober.attempts()
        res = self.opts.probe_interval
        for rnd in rounds:
            end = rnd.t_restore if rnd.t_restore is not None else rnd.t_fault
            during = [a for a in attempts if rnd.t_fault <= a.start <= end]
            bad = [a for a in during if not a.ok]
            rnd.attempts, rnd.failed = len(during), len(bad)
            for a in bad:
                rnd.failure_reasons[a.reason or "?"] = (
                    rnd.failure_reasons.get(a.reason or "?", 0) + 1
                )
            rnd.failing_ms = _span(bad, res)
            rnd.first_failed_ms = _ms(bad[0].start - rnd.t_fault) if bad else None
            # Over the whole round: a span with no success may run past the restore.
            whole = rnd.t_end if rnd.t_end is not None else end
            gap = measure(attempts, rnd.t_fault, whole, pre=PRE, resolution=res).outage
            rnd.full_outage_ms = None if gap is None else _ms(gap)
            if rnd.t_restore is not None and rnd.t_end is not None:
                after = [a for a in attempts if rnd.t_restore <= a.start <= rnd.t_end]
                rbad = [a for a in after if not a.ok]
                rnd.restore_failed = len(rbad)
                rnd.restore_failing_ms = _span(rbad, res)
                rgap = measure(attempts, rnd.t_restore, rnd.t_end, pre=PRE, resolution=res)
                rnd.restore_full_outage_ms = None if rgap.outage is None else _ms(rgap.outage)
            left = [t for t, p in self.watch.since(rnd.t_fault) if t <= end and rnd.node not in p]
            rnd.left_ms = _ms(left[0] - rnd.t_fault) if left else None
            rnd.timeline = self._timeline(rnd, bad)

    def _timeline(self, rnd: RoutedRound, bad: list[Attempt]) -> list[tuple[float, str]]:
        t0 = rnd.t_fault
        events: list[tuple[float, str]] = [(0.0, f"{rnd.fault} {rnd.node}")]
        end = rnd.t_end if rnd.t_end is not None else time.monotonic()
        for t, paths in self.watch.since(t0)[1:]:
            if t <= end:
                events.append((_ms(t - t0), f"router paths: {','.join(sorted(paths)) or 'none'}"))
        if bad:
            events.append((_ms(bad[0].start - t0), "first failed connect"))
            why = ", ".join(f"{k} {v}" for k, v in sorted(rnd.failure_reasons.items()))
            events.append((_ms(bad[-1].start - t0), f"last failed connect ({len(bad)}: {why})"))
        if rnd.t_restore is not None:
            events.append((_ms(rnd.t_restore - t0), "restore"))
        if rnd.back and rnd.t_end is not None:
            events.append((_ms(rnd.t_end - t0), "every path back, client answered by all"))
        return sorted(events)


def _span(bad: Sequence[Attempt], resolution: float) -> float | None:
    if not bad:
        return 0.0
    return _ms(bad[-1].start - bad[0].start + resolution)


def execute(opts: RoutedOptions) -> dict[str, Any]:
    """Run the routed lab; the report as plain data (LabError if it cannot start)."""
    side = node_side(opts.announce)
    bed = RoutedBed(
        nodes=opts.nodes,
        prefix=opts.prefix,
        node_frr=side.frr_nodes,
        speaker_bfd=side.speaker_bfd,
    )
    session: RoutedSession | None = None
    rounds: list[RoutedRound] = []
    keep = opts.keep
    try:
        with signals_raise():
            bed.build()
            _log(
                f"routed lab {bed.prefix}: {opts.nodes} nodes, announce {opts.announce}, "
                f"VIP {bed.vip}; FRR router"
                + (", BFD 100 ms x 3" if side.frr_nodes else ", vipd's speaker on the nodes")
                + (" with BFD 100 ms x 3" if side.speaker_bfd else "")
                + f"; logs in {bed.workdir}"
            )
            session = RoutedSession(bed, side, opts)
            session.start()
            _log(f"every node is a path; client answered by {sorted(session.names)}")
            number = 0
            for fault in opts.faults:
                for k in range(opts.rounds):
                    number += 1
                    node = bed.nodes[k % len(bed.nodes)].name
                    rounds.append(session.round(number, fault, node))
                    if not rounds[-1].back:
                        break
                if rounds and not rounds[-1].back:
                    break  # the next round would start from an unknown state
            session.prober.stop()
            session.analyse(rounds)
    except Interrupted:
        keep = False
        raise
    finally:
        with signals_ignored():
            if session is not None:
                session.prober.stop()
                session.watch.stop()
            if keep:
                _log(
                    f"bed {bed.prefix} kept: logs in {bed.workdir}; clean up with "
                    f"python -m vipd.lab.routed clean {bed.prefix}"
                )
            else:
                if session is not None:
                    session.fabric.stop()
                bed.teardown()
    return report(opts, bed, rounds)


def run(args: argparse.Namespace) -> int:
    """``vipd lab --announce routing-table|bgp ...`` (called by `vipd.lab.runner.run`)."""
    for key, default in _VRRP_ONLY.items():
        if getattr(args, key, default) != default:
            flag = "--" + key.replace("_", "-")
            print(f"vipd lab: {flag} is not used with --announce {args.announce}", file=sys.stderr)
            return 2
    fault = getattr(args, "fault", None)
    if fault is not None and fault != "all" and fault not in ROUTED_FAULTS:
        print(
            f"vipd lab: --fault {fault} is not a routed fault (with --announce: "
            f"{', '.join(ROUTED_FAULTS)} or all)",
            file=sys.stderr,
        )
        return 2
    opts = RoutedOptions(
        announce=args.announce,
        nodes=args.nodes,
        faults=ROUTED_FAULTS if fault in (None, "all") else (fault,),
        rounds=args.rounds,
        json=args.json,
        keep=args.keep,
        prefix=args.prefix,
        probe_interval=args.probe_interval,
        probe_timeout=args.probe_timeout,
        port=args.port,
    )
    if opts.rounds < 1 or not 2 <= opts.nodes <= 8:
        print("vipd lab: --rounds must be ≥ 1 and --nodes 2-8", file=sys.stderr)
        return 2
    try:
        node_side(opts.announce)
    except LabError as exc:
        print(f"vipd lab: {exc}", file=sys.stderr)
        return 2
    why = _preflight()
    if why is not None:
        print(f"vipd lab: cannot run here: {why}", file=sys.stderr)
        return 2
    try:
        rep = execute(opts)
    except Interrupted as exc:
        print(f"vipd lab: interrupted ({exc}); bed torn down", file=sys.stderr)
        return 130
    except LabError as exc:
        print(f"vipd lab: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(rep, indent=2) if opts.json else render(rep))
    return 0 if rep["summary"]["ok"] else 1


def _preflight() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces)"
    for tool in ("ip", "nft", "openssl"):
        if shutil.which(tool) is None:
            return f"the {tool} command is not installed"
    return frr_problem()
