"""The ``vipd lab`` command: build a lab, run rounds of fault → failover → restore, report.

What it is: ``add_arguments(parser)`` and ``run(args) -> int`` for the CLI (and
``python -m vipd.lab``), plus ``execute(opts)`` that does the work and returns the report as
plain data. The flow:

1. build a ``Lab``; start a responder on every node and the chosen daemon (vipd or
   keepalived, priorities 200, 150, 100, … for n1, n2, n3, …);
2. wait until exactly one node holds the VIP and it is the highest-priority one; start the
   prober in the client namespace and wait until it has seen 200 ms of answers from that node;
3. per round: note the time, inject the fault on the current leader, wait (bounded: 10 ×
   Master_Down_Interval, at least 3 s) until another live node holds the VIP and the client has
   seen 200 ms of answers from it; restore the node; wait until the VIP is back on the
   highest-priority node alone (preemption) and the client sees it; next round;
4. stop the prober and measure, from the client's attempts, the outage of every failover and
   of every preemption (``vipd.lab.analysis``).

Exit status: 0 if every round recovered and converged with the VIP on exactly one node, 1 if
not (a round that never recovers is reported as failed, never hidden; so is a round in which
the client got answers from two nodes interleaved, which means the VIP was on both), 2 for
bad options or a host that cannot run the lab, 130 when interrupted. SIGINT/SIGTERM tear the
lab down.

What it must not do: change the host outside the lab's namespaces, leave namespaces behind
(unless ``--keep``, which says how to clean up), or infer leadership from daemon logs (the VIP
bound on an interface is the truth; the client's view is the measurement).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vipd.lab.analysis import Outage, answered, measure, percentiles, stable_on
from vipd.lab.daemons import (
    KINDS,
    Daemon,
    DaemonKind,
    Fleet,
    HealthSpec,
    LeaseSpec,
    VrrpSpec,
    make_fleet,
)
from vipd.lab.faults import FAULTS, FaultName, NodeRig, inject, restore
from vipd.lab.interrupts import Interrupted as Interrupted
from vipd.lab.interrupts import log, signals_ignored, signals_raise
from vipd.lab.prober import Prober
from vipd.lab.responder import Responder
from vipd.lab.routed_faults import ANNOUNCES, ROUTED_FAULTS
from vipd.lab.topology import Lab, LabError, cleanup, netns_list, vip_for
from vipd.lease.logic import validate_timing

STABLE_SPAN = 0.2  # seconds of uninterrupted answers from one node that count as "serving"
MIN_WAIT = 3.0  # floor for the 10 × Master_Down_Interval bound
START_GRACE = 5.0  # extra time a (re)started daemon gets to come up
PRE_FAULT = 0.5  # how far before a fault the analysis looks for the last success
KUBE_BUILD = "scripts/setup-kube"  # builds the real components the Lease lab runs on

# bench/failover.py drives a session itself with these
_log = log
_signals_raise = signals_raise
_signals_ignored = signals_ignored


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    parser.add_argument(
        "--daemon",
        choices=(*KINDS, "kube-vip"),
        default="vipd",
        help="daemon to run on the nodes (default vipd; kube-vip: with --election lease, "
        "for a comparison on the same control plane)",
    )
    parser.add_argument(
        "--advert-interval",
        type=float,
        default=None,
        metavar="S",
        help="VRRP advertisement interval in seconds "
        "(default 0.1; 1 with --version 2, which needs whole seconds)",
    )
    parser.add_argument(
        "--version", type=int, choices=(2, 3), default=3, help="VRRP version (default 3)"
    )
    parser.add_argument(
        "--family", type=int, choices=(4, 6), default=4, help="VIP address family (default 4)"
    )
    parser.add_argument(
        "--unicast",
        action="store_true",
        help="VRRP to the other nodes' addresses instead of multicast (with --kubeadm: the "
        "first three nodes' as the static start set, the rest followed from the cluster, "
        "election.vrrp.unicast_peers_from)",
    )
    parser.add_argument(
        "--vmac",
        action="store_true",
        help="vipd only: the virtual MAC option (election.vrrp.vmac; IPv4 multicast)",
    )
    parser.add_argument(
        "--fault",
        choices=(*FAULTS, *(f for f in ROUTED_FAULTS if f not in FAULTS), "all"),
        default=None,
        help="kill: node death (link down + SIGKILL all); term: SIGTERM the "
        "daemon; linkdown: eth0 down; apidown: the node's API server dies (turns on "
        "--health); stop: SIGSTOP the daemon until the failover, then SIGCONT "
        "(default kill). With --announce routing-table: kill is SIGKILL to vipd alone, "
        "silent drops every packet of the node, bgpreset runs 'clear bgp *' on the router; "
        "default all of kill, term, apidown, linkdown, silent, bgpreset, in turn",
    )
    parser.add_argument(
        "--announce",
        choices=("arp", *ANNOUNCES),
        default="arp",
        help="arp: the VRRP/Lease lab on a shared LAN (default); routing-table: a routed "
        "fabric (an FRR router, nodes on routed /31 links each with its own FRR exporting "
        "table 198, BFD, ECMP) with vipd's announce.mode routing-table; bgp: the same fabric "
        "with vipd's own BGP speaker (when this vipd has one)",
    )
    parser.add_argument(
        "--health",
        action="store_true",
        help="VRRP: vipd checks each node's stand-in API server (HTTPS /readyz on port "
        "6444, every 0.2 s, rise 2, fall 2) and gates its priority on it (with --election "
        "lease it always checks the real kube-apiservers' /readyz, its own and its peers', "
        "and gives the Lease to a healthy one)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="fault rounds (default 3)")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document instead of the table"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the lab running at the end and say how to clean it up",
    )
    parser.add_argument(
        "--prefix",
        default=None,
        help="name prefix for namespaces (default vl + 4 random hex chars)",
    )
    parser.add_argument(
        "--probe-interval",
        type=float,
        default=0.002,
        metavar="S",
        help="seconds between client connects; the outage resolution (default 0.002)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=0.5,
        metavar="S",
        help="seconds before a client connect counts as failed (default 0.5)",
    )
    parser.add_argument("--port", type=int, default=6443, help="service port (default 6443)")
    parser.add_argument(
        "--election",
        choices=("vrrp", "lease"),
        default="vrrp",
        help="vrrp, or lease: a Kubernetes Lease on a real control plane in the lab "
        "(kube-apiserver and a 3-member etcd per node, vipd.lab.kubebed; needs the binaries "
        f"that {KUBE_BUILD} builds) (default vrrp)",
    )
    parser.add_argument(
        "--lease-timing",
        default="5/3/1",
        metavar="D/R/P",
        help="Lease duration/renew_deadline/retry_period in seconds (default 5/3/1)",
    )
    parser.add_argument(
        "--kubeadm",
        action="store_true",
        help="the cluster's life on real kubelets instead of fault rounds: vipd's static pod, "
        "kubeadm init through the VIP, two control-plane joins, adopt to the DaemonSet node by "
        "node, an image roll, the holder rebooted, the bad-image recovery, a full power loss; "
        "prints the timeline and the client-seen gaps (either --election; needs the binaries "
        f"that {KUBE_BUILD} builds; takes 3-5 minutes)",
    )
    parser.add_argument(
        "--from",
        dest="migrate_from",
        choices=("keepalived", "kube-vip"),
        default=None,
        help="instead of fault rounds: start keepalived (Debian's) on every node, then replace "
        "it node by node, the holder last, by vipd running what `vipd import keepalived` makes "
        "of that node's keepalived.conf; prints each move's client gap and VIP moves, and "
        "fails if the VIP ever had two holders (uses --nodes, --version: 2 with a password as "
        "kubeadm's HA guide, or 3; --unicast; --json). kube-vip, with --kubeadm --election "
        "lease: the cluster bootstrapped through kube-vip's static pod, then moved to vipd's "
        "DaemonSet on kube-vip's Lease (the config `vipd import kube-vip` makes of kube-vip's "
        "manifest) node by node, the holder last",
    )
    parser.add_argument(
        "--at-once",
        action="store_true",
        help="with --kubeadm --from kube-vip: every node moved to vipd at once instead",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="with --kubeadm: after the adopt, the control plane replaced machine by machine "
        "as Cluster API's KubeadmControlPlane does (a new machine joined, then the oldest "
        "drained, kubeadm reset, its Node deleted, powered off; n1-n3 by n4-n6); the run ends "
        "there",
    )
    parser.add_argument(
        "--cleanup",
        metavar="PREFIX",
        default=None,
        help="only remove the namespaces and processes of lab PREFIX, then exit",
    )


@dataclass
class Options:
    nodes: int = 3
    daemon: DaemonKind = "vipd"
    advert_interval: float | None = None
    version: int = 3
    family: int = 4
    unicast: bool = False
    fault: FaultName = "kill"
    rounds: int = 3
    json: bool = False
    keep: bool = False
    prefix: str | None = None
    probe_interval: float = 0.002
    probe_timeout: float = 0.5
    probe_realtime: bool = False  # the client under SCHED_FIFO (vipd.lab.prober --realtime)
    port: int = 6443
    health: bool = False
    election: str = "vrrp"
    lease_timing: str = "5/3/1"
    health_spec: HealthSpec | None = None  # not a CLI option: the benchmark sets its timers
    vmac: bool = False  # vipd only: election.vrrp.vmac

    @property
    def health_on(self) -> bool:
        return self.health or self.fault == "apidown"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in vars(args).items() if k in known})

    def spec(self) -> VrrpSpec:
        interval = self.advert_interval
        if interval is None:
            interval = 1.0 if self.version == 2 else 0.1
        lease = None
        if self.daemon == "kube-vip" and self.election != "lease":
            raise ValueError("--daemon kube-vip runs with --election lease (it has no VRRP)")
        if self.election == "lease":
            if self.daemon not in ("vipd", "kube-vip"):
                raise ValueError("--election lease runs vipd or kube-vip")
            try:
                d, r, p = (float(x) for x in self.lease_timing.split("/"))
            except ValueError:
                raise ValueError(
                    f"--lease-timing must be D/R/P (got {self.lease_timing!r})"
                ) from None
            problem = validate_timing(d, r, p)
            if problem or d != int(d):
                raise ValueError(f"--lease-timing: {problem or 'the duration is whole seconds'}")
            if self.family != 4 or self.nodes != 3:
                raise ValueError("--election lease runs on the 3-node IPv4 Kubernetes bed")
            # Each node's vipd talks to its own kube-apiserver (the bed writes its config).
            lease = LeaseSpec("https://127.0.0.1:6443", int(d), r, p)
        return VrrpSpec(
            vip=vip_for(4 if self.family == 4 else 6),
            advert_interval=interval,
            version=self.version,
            unicast=self.unicast,
            health=(self.health_spec or HealthSpec()) if self.health_on else None,
            lease=lease,
            vmac=self.vmac,
        )


@dataclass
class Round:
    number: int
    fault: str
    old_leader: str
    new_leader: str | None = None
    recovered: bool = False
    takeover_s: float | None = None  # fault → another live node has the VIP (lab's view)
    recovery_s: float | None = None  # fault → the client has 200 ms of answers from it
    holders_after_failover: list[str] = field(default_factory=list)  # faulted node included
    live_holders_after_failover: list[str] = field(default_factory=list)
    reconverged: bool = False
    holders_after_convergence: list[str] = field(default_factory=list)
    failover: Outage | None = None
    preemption: Outage | None = None
    error: str | None = None
    # times on the monotonic clock, for the analysis after the prober stops
    t_fault: float = 0.0
    t_restore: float | None = None
    t_end: float | None = None

    @property
    def ok(self) -> bool:
        """Recovered, re-converged on exactly one node, and never two nodes answering at once.

        Interleaved answers (A, B, A: the client reached two nodes through the VIP in turn)
        fail the round too: they mean the VIP was on two nodes, even if no poll of the
        addresses happened to catch it. A mere three-node hand-off (A, B, C) is only noted.
        """
        return (
            self.recovered
            and self.reconverged
            and len(self.holders_after_convergence) == 1
            and self.failover is not None
            and self.failover.recovered
            and not self.failover.interleaved
            and not (self.preemption is not None and self.preemption.interleaved)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.number,
            "fault": self.fault,
            "old_leader": self.old_leader,
            "new_leader": self.new_leader,
            "ok": self.ok,
            "recovered": self.recovered,
            "client_outage_ms": _ms(self.failover.outage if self.failover else None),
            "preemption_outage_ms": _ms(self.preemption.outage if self.preemption else None),
            "preemption_move_gap_ms": _ms(self.preemption.move_gap if self.preemption else None),
            "preemption_move_failures": self.preemption.move_failures if self.preemption else None,
            "preemption_other_gap_ms": _ms(self.preemption.other_gap if self.preemption else None),
            "takeover_s": self.takeover_s,
            "recovery_s": self.recovery_s,
            "holders_after_failover": self.holders_after_failover,
            "live_holders_after_failover": self.live_holders_after_failover,
            "reconverged": self.reconverged,
            "holders_after_convergence": self.holders_after_convergence,
            "failover": self.failover.to_dict() if self.failover else None,
            "preemption": self.preemption.to_dict() if self.preemption else None,
            "error": self.error,
            # monotonic clock of this run: lines the round up with an observer's samples
            "t_fault": self.t_fault,
            "t_restore": self.t_restore,
            "t_end": self.t_end,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def preflight(opts: Options) -> str | None:
    """Why this host cannot run the lab, or None."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    try:
        netns_list()
    except Exception as exc:
        return f"`ip netns` does not work here: {exc}"
    if opts.daemon == "keepalived" and shutil.which("keepalived") is None:
        return "keepalived is not installed"
    if opts.health_on and shutil.which("openssl") is None:
        return "the openssl command is not installed (it makes the lab's TLS certificates)"
    return None


class _Session:
    """One lab run: the lab, what runs on each node, the prober, and the rounds so far."""

    def __init__(self, lab: Lab, opts: Options, spec: VrrpSpec) -> None:
        self.lab = lab
        self.opts = opts
        self.spec = spec
        self.vip = spec.vip
        self.fleet: Fleet = make_fleet(opts.daemon, lab, spec)
        health_port = spec.health.port if spec.health is not None else None
        self.rigs = {
            n.name: NodeRig(n, self.fleet[n.name], Responder(lab, n, opts.port, health_port))
            for n in lab.nodes
        }
        self.prober = Prober(
            lab,
            self.vip,
            opts.port,
            interval=opts.probe_interval,
            timeout=opts.probe_timeout,
            realtime=opts.probe_realtime,
        )
        lowest = min(d.priority for d in self.fleet.daemons.values())
        self.bound = max(MIN_WAIT, 10 * spec.master_down_interval(lowest))
        if spec.health is not None:
            # Noticing a dead API server (or a recovered one) comes before the election.
            self.bound += spec.health.detection_bound() + spec.health.rise * spec.health.interval
        if spec.lease is not None:
            # No priorities: whoever acquires leads, and a restored node does not preempt.
            self.bound = 2 * (spec.lease.duration + spec.lease.retry_period) + MIN_WAIT

    def inject(self, rig: NodeRig, fault: FaultName) -> None:
        inject(self.lab, rig, fault)

    def restore(self, rig: NodeRig) -> None:
        restore(self.lab, rig)

    def top(self, among: list[str] | None = None) -> str | None:
        """The node that should hold the VIP; None in Lease mode (any one node)."""
        return None if self.spec.lease is not None else self.fleet.top(among)

    def live(self) -> list[str]:
        """Nodes whose daemon is running on a working link: they must hold the VIP correctly.
        A node whose API server died (``apidown``) counts: its daemon must let the VIP go."""
        return [name for name, rig in self.rigs.items() if rig.fault in (None, "apidown")]

    def wait_for(self, cond: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if cond():
                return True
            if time.monotonic() >= deadline:
                return False
            if not any(d.running() for d in self.fleet.daemons.values()):
                return cond()  # every daemon has exited: nothing will change any more
            time.sleep(0.01)

    def daemon_report(self) -> str:
        parts = []
        for name, d in self.fleet.daemons.items():
            state = d.state()
            parts.append(
                f"{name}: {'running' if d.running() else 'exited'}"
                f"{f' state={state}' if state else ''}; log {d.log_path}\n"
                + "\n".join("    " + ln for ln in d.log_tail(8).splitlines())
            )
        return "\n".join(parts)

    def converged_on(self, node: str | None, since: float | None, client: bool) -> bool:
        holders = self.lab.holders(self.vip)
        if len(holders) != 1 or (node is not None and holders != [node]):
            return False
        node = holders[0]
        return not client or stable_on(self.prober.attempts(since), node, STABLE_SPAN, since)

    def start(self) -> str:
        for rig in self.rigs.values():
            assert rig.responder is not None
            rig.responder.start()
        self.fleet.start_all()
        top = self.top()
        if not self.wait_for(
            lambda: self.converged_on(top, None, client=False), self.bound + START_GRACE
        ):
            raise LabError(
                f"the daemons did not converge on {top} within "
                f"{self.bound + START_GRACE:.1f} s (holders: "
                f"{self.lab.holders(self.vip)})\n{self.daemon_report()}"
            )
        t = time.monotonic()
        self.prober.start()
        if not self.wait_for(lambda: self.converged_on(top, t, client=True), START_GRACE):
            seen = answered(self.prober.attempts(t), t, time.monotonic())
            raise LabError(
                f"the client never got {STABLE_SPAN * 1000:.0f} ms of answers from only "
                f"{top} at {self.vip}:{self.opts.port} (holders now: "
                f"{self.lab.holders(self.vip)}; answers by node: {seen})\n"
                f"{self.daemon_report()}"
            )
        return top or self.lab.holders(self.vip)[0]

    def round(self, number: int) -> Round:
        holders = self.lab.holders(self.vip)
        leader = holders[0] if len(holders) == 1 else self.fleet.top()  # VRRP fallback
        rig = self.rigs[leader]
        rnd = Round(number=number, fault=self.opts.fault, old_leader=leader)
        # Strike at a random point of the advert cycle: otherwise every round would hit the
        # same phase (restore → converge → fault takes about the same time each round) and
        # the rounds would sample one point of the outage distribution instead of its range.
        time.sleep(random.uniform(0, self.spec.advert_interval))
        rnd.t_fault = time.monotonic()
        self.inject(rig, self.opts.fault)
        _log(f"round {number}: {self.opts.fault} {leader}")

        seen: dict[str, float] = {}  # node → when the lab first saw it alone with the VIP
        winner: list[str] = []  # the node that satisfied the condition

        def failed_over() -> bool:
            live = [h for h in self.lab.holders(self.vip) if h in self.live()]
            if len(live) != 1 or live[0] == leader:
                return False
            seen.setdefault(live[0], time.monotonic())
            if stable_on(self.prober.attempts(rnd.t_fault), live[0], STABLE_SPAN, rnd.t_fault):
                winner.append(live[0])
                return True
            return False

        rnd.recovered = self.wait_for(failed_over, self.bound)
        now = time.monotonic()
        rnd.holders_after_failover = self.lab.holders(self.vip)
        live_holders = [h for h in rnd.holders_after_failover if h in self.live()]
        rnd.live_holders_after_failover = live_holders
        if rnd.recovered:
            rnd.new_leader = winner[-1]
            rnd.recovery_s = now - rnd.t_fault
            rnd.takeover_s = seen[rnd.new_leader] - rnd.t_fault
            _log(
                f"round {number}: VIP on {rnd.new_leader} after {rnd.takeover_s:.3f} s, "
                f"client served after {rnd.recovery_s:.3f} s"
            )
        else:
            rnd.new_leader = live_holders[0] if len(live_holders) == 1 else None
            rnd.error = (
                f"no failover within {self.bound:.1f} s (live holders: "
                f"{live_holders})\n{self.daemon_report()}"
            )
            _log(f"round {number}: FAILED to recover: {rnd.error}")

        rnd.t_restore = time.monotonic()
        self.restore(rig)
        top = self.top()
        t_restore = rnd.t_restore
        rnd.reconverged = self.wait_for(
            lambda: self.converged_on(top, t_restore, True), self.bound + START_GRACE
        )
        if self.spec.lease is not None and rig.daemon is not None:
            # A restarted vipd imports the kubernetes client before it can take part; the next
            # round must not start before it does (a failover with no candidate is not one).
            d = rig.daemon
            self.wait_for(d.election_started, 4 * START_GRACE)
        rnd.t_end = time.monotonic()
        rnd.holders_after_convergence = self.lab.holders(self.vip)
        if rnd.reconverged:
            _log(
                f"round {number}: restored {leader}; VIP on {top or 'one node'} after "
                f"{rnd.t_end - t_restore:.3f} s"
            )
        else:
            msg = (
                f"no re-convergence on {top} within {self.bound + START_GRACE:.1f} s "
                f"(holders: {rnd.holders_after_convergence})\n{self.daemon_report()}"
            )
            rnd.error = f"{rnd.error}\n{msg}" if rnd.error else msg
            _log(f"round {number}: FAILED to re-converge: {msg}")
        return rnd

    def analyse(self, rounds: list[Round]) -> None:
        attempts = self.prober.attempts()
        res = self.opts.probe_interval
        for rnd in rounds:
            end = rnd.t_restore if rnd.t_restore is not None else time.monotonic()
            rnd.failover = measure(attempts, rnd.t_fault, end, pre=PRE_FAULT, resolution=res)
            if rnd.t_restore is not None and rnd.t_end is not None:
                rnd.preemption = measure(
                    attempts, rnd.t_restore, rnd.t_end, pre=PRE_FAULT, resolution=res
                )


class _KubeSession(_Session):
    """A Lease lab on the real control plane (``vipd.lab.kubebed.KubeBed``): its vipd, its
    responders and the prober on the responders' port, so the client sees who answers.

    Node death also kills the node's etcd member and kube-apiserver, and restoring a node
    starts them again; ``apidown`` kills the node's kube-apiserver itself.
    """

    def __init__(self, bed: Any, opts: Options, spec: VrrpSpec) -> None:
        from vipd.lab.kubebed import binaries
        from vipd.lab.kubebed.bed import WHO_PORT, BedKubeVip

        self.bed = bed
        self.lab = bed.lab
        self.opts = opts
        self.spec = spec
        self.vip = spec.vip
        daemons: dict[str, Daemon] = {n: p.vipd for n, p in bed.procs.items()}
        if opts.daemon == "kube-vip":
            if binaries.kube_vip(bed.bins) is None:
                raise LabError(
                    f"kube-vip is not built in {bed.bins}: scripts/setup-kube builds it when "
                    "its module verifies (it says why it did not)"
                )
            daemons = {n.name: BedKubeVip(bed, n) for n in bed.nodes}
        self.fleet = Fleet(opts.daemon, spec, daemons)
        self.rigs = {
            n.name: NodeRig(n, daemons[n.name], bed.procs[n.name].responder) for n in bed.nodes
        }
        self.prober = Prober(
            self.lab,
            self.vip,
            WHO_PORT,
            interval=opts.probe_interval,
            timeout=opts.probe_timeout,
            realtime=opts.probe_realtime,
        )
        assert spec.lease is not None
        self.bound = 2 * (spec.lease.duration + spec.lease.retry_period) + MIN_WAIT

    def inject(self, rig: NodeRig, fault: FaultName) -> None:
        if fault == "apidown":
            self.bed.procs[rig.node.name].apiserver.kill()
            rig.fault = "apidown"
            return
        inject(self.lab, rig, fault)

    def restore(self, rig: NodeRig) -> None:
        from vipd.lab.kubebed.bed import READY_TIMEOUT

        name = rig.node.name
        if rig.fault in ("kill", "apidown"):
            self.lab.set_link(rig.node, True)
            procs = self.bed.procs[name]
            procs.etcd.start()
            procs.apiserver.start()
            self.bed.wait_ready([name], READY_TIMEOUT)
        restore(self.lab, rig)


def _start_bed(opts: Options, spec: VrrpSpec) -> Any:
    """The Kubernetes bed, control plane up, vipd not yet started (the session does)."""
    from vipd.lab.kubebed.bed import KubeBed, Timing

    assert spec.lease is not None
    timing = Timing(spec.lease.duration, spec.lease.renew_deadline, spec.lease.retry_period)
    bed = KubeBed(
        timing=timing,
        prefix=opts.prefix,
        keep_workdir=opts.keep,
        start_vipd=False,
        start_prober=False,
    )
    try:
        bed.start()
    except BaseException:
        bed.teardown()
        raise
    _log(
        f"Lease on {bed.apiserver_version} with {bed.etcd_version} (stacked: one member and "
        f"one API server per node, {opts.daemon} on each talking to its own) in "
        f"{bed.startup_s:.1f} s"
    )
    return bed


# An observer of a Lease run: called with the bed once the VIP is up, it returns the function
# that stops it and gives what it saw (the report's "observed").
Observer = Callable[[Any], Callable[[], Any]]


def execute(opts: Options, observe: Observer | None = None) -> dict[str, Any]:
    """Run the lab and return the report (raises LabError if the lab cannot even start).

    ``observe`` (Lease mode only) watches the bed over the rounds (bench/lease.py's kubectl
    through the VIP and the request counters)."""
    spec = opts.spec()
    bed: Any = None
    stop_observer: Callable[[], Any] | None = None
    observed: Any = None
    lab = Lab(nodes=opts.nodes, prefix=opts.prefix, keep_workdir=opts.keep)
    rounds: list[Round] = []
    session: _Session | None = None
    keep = opts.keep  # also after a failure: that is when one most wants to look inside
    failed = True  # until proven otherwise: a failed run keeps its logs for the post-mortem
    try:
        with _signals_raise():
            if spec.lease is not None:
                bed = _start_bed(opts, spec)
                lab = bed.lab
                session = _KubeSession(bed, opts, spec)
            else:
                lab.build()
                session = _Session(lab, opts, spec)
            election = (
                f"Lease {opts.lease_timing} s"
                if spec.lease is not None
                else f"VRRPv{spec.version} {'unicast' if spec.unicast else 'multicast'}, "
                f"advert {spec.advert_interval:g} s"
            )
            _log(
                f"lab {lab.prefix}: {opts.nodes} nodes, {opts.daemon}, {election}, "
                f"VIP {spec.vip}; logs in {lab.workdir}"
            )
            top = session.start()
            _log(f"VIP {spec.vip} is on {top}; client sees it")
            if observe is not None and bed is not None:
                stop_observer = observe(bed)
            for number in range(1, opts.rounds + 1):
                rnd = session.round(number)
                rounds.append(rnd)
                if not rnd.reconverged:
                    break  # the next round would start from an unknown state
            session.prober.stop()
            if stop_observer is not None:
                observed, stop_observer = stop_observer(), None
            session.analyse(rounds)
            failed = not all(r.ok for r in rounds)
    except Interrupted:
        keep = failed = False  # Ctrl-C means "stop and clean up", --keep or not
        raise
    finally:
        with _signals_ignored():
            if stop_observer is not None:
                with contextlib.suppress(Exception):
                    stop_observer()
            if session is not None:
                session.prober.stop()
            if keep:
                _print_keep(lab)
            else:
                lab.keep_workdir = lab.keep_workdir or failed
                if bed is not None:
                    bed.teardown()
                else:
                    lab.teardown()
                if failed:
                    _log(f"logs kept in {lab.workdir}")
    report = _report(opts, spec, lab, rounds, bed.apiserver_version if bed is not None else None)
    if observed is not None:
        report["observed"] = observed
    return report


def _report(
    opts: Options, spec: VrrpSpec, lab: Lab, rounds: list[Round], apiserver: str | None = None
) -> dict[str, Any]:
    outages = [
        r.failover.outage
        for r in rounds
        if r.failover is not None
        and r.failover.recovered
        and r.recovered
        and r.failover.outage is not None
    ]
    preempts = [
        r.preemption.outage
        for r in rounds
        if r.preemption is not None and r.preemption.recovered and r.preemption.outage is not None
    ]
    p_out = percentiles(outages)
    p_pre = percentiles(preempts)
    failed = [r.number for r in rounds if not r.ok]
    missing = opts.rounds - len(rounds)
    return {
        "lab": {
            "prefix": lab.prefix,
            "workdir": str(lab.workdir),
            "nodes": opts.nodes,
            "daemon": opts.daemon,
            "vip": spec.vip,
            "version": spec.version,
            "advert_interval": spec.advert_interval,
            "unicast": spec.unicast,
            "vmac": spec.vmac,
            "fault": opts.fault,
            "election": opts.election,
            "lease_timing": opts.lease_timing if opts.election == "lease" else None,
            # The Lease's API server: the real one the bed runs (None in VRRP mode).
            "apiserver": apiserver,
            "rounds": opts.rounds,
            "probe_interval": opts.probe_interval,
            "probe_timeout": opts.probe_timeout,
            "probe_realtime": opts.probe_realtime,
            "health": spec.health.section() if spec.health is not None else None,
        },
        "rounds": [r.to_dict() for r in rounds],
        "summary": {
            "ok": not failed and missing == 0,
            "failed_rounds": failed,
            "rounds_not_run": missing,
            "client_outage_ms": _pct_ms(p_out),
            "preemption_outage_ms": _pct_ms(p_pre),
            "flaps": sum(
                1 for r in rounds for o in (r.failover, r.preemption) if o is not None and o.flap
            ),
            "resolution_ms": opts.probe_interval * 1000,
        },
    }


def _pct_ms(p: Any) -> dict[str, float] | None:
    if p is None:
        return None
    return {"n": p.n, "p50": _ms(p.p50), "p90": _ms(p.p90), "p99": _ms(p.p99), "max": _ms(p.max)}


def render_table(report: dict[str, Any]) -> str:
    """The human-readable form of a report."""
    head = [
        "round",
        "fault",
        "old leader",
        "new leader",
        "client outage ms",
        "preempt ms",
        "VIP holders after convergence",
        "notes",
    ]
    rows = [head]
    for r in report["rounds"]:
        notes = []
        if not r["recovered"]:
            notes.append("NO FAILOVER")
        if not r["reconverged"]:
            notes.append("NO RE-CONVERGENCE")
        for key in ("failover", "preemption"):
            o = r[key]
            if o and o["flap"]:
                notes.append(
                    f"{key} flap ({o['switches']} switches"
                    f"{', interleaved' if o['interleaved'] else ''})"
                )
        rows.append(
            [
                str(r["round"]),
                r["fault"],
                r["old_leader"],
                r["new_leader"] or "-",
                _fmt(r["client_outage_ms"]),
                _fmt(r["preemption_outage_ms"]),
                ",".join(r["holders_after_convergence"]) or "-",
                "; ".join(notes) or ("ok" if r["ok"] else "FAILED"),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    s = report["summary"]
    lab = report["lab"]
    lines.append("")
    election = (
        f"Lease {lab['lease_timing']} s on {lab.get('apiserver') or '?'}"
        if lab.get("election") == "lease"
        else f"VRRPv{lab['version']} {'unicast' if lab['unicast'] else 'multicast'}, advert "
        f"{lab['advert_interval']:g} s"
    )
    lines.append(
        f"{lab['daemon']} {election}, {lab['nodes']} nodes, VIP {lab['vip']}, "
        f"fault {lab['fault']}; outage resolution {s['resolution_ms']:g} ms"
    )
    for label, key in (
        ("client outage", "client_outage_ms"),
        ("preemption outage", "preemption_outage_ms"),
    ):
        p = s[key]
        if p:
            lines.append(
                f"{label}: p50 {p['p50']} ms, p90 {p['p90']} ms, max {p['max']} ms (n={p['n']})"
            )
    if s["failed_rounds"]:
        lines.append(f"FAILED rounds: {s['failed_rounds']}")
    if s["rounds_not_run"]:
        lines.append(f"rounds not run (stopped after a failure): {s['rounds_not_run']}")
    if s["flaps"]:
        lines.append(f"flaps (the answering node changed more than once): {s['flaps']}")
    lines.append("result: " + ("ok" if s["ok"] else "FAILED"))
    return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _print_keep(lab: Lab) -> None:
    p = lab.prefix
    nodes = " ".join(n.ns for n in lab.nodes)
    lines = [
        "",
        f"lab {p} kept running: namespaces {', '.join(lab.namespaces)}",
        f"  logs and configs:  {lab.workdir}",
        f"  who has the VIP:   for n in {nodes}; do ip -n $n -br addr show dev eth0; done",
        f"  a shell on n1:     ip netns exec {lab.nodes[0].ns} bash",
        f"  VRRP on the wire:  ip netns exec {lab.lan_ns} tcpdump -ni br0 "
        "'ip proto 112 or ip6 proto 112 or arp'",
        f"  clean up:          python -m vipd.lab --cleanup {p}",
        f"     (or by hand:    for ns in $(ip netns list | awk '/^{p}-/{{print $1}}'); do "
        "ip netns pids $ns | xargs -r kill -9; ip netns del $ns; done)",
    ]
    print("\n".join(lines), file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "cleanup", None):
        try:
            removed = cleanup(args.cleanup)
        except ValueError as exc:
            print(f"vipd lab: {exc}", file=sys.stderr)
            return 2
        print(f"removed {len(removed)} namespaces: {' '.join(removed) or '-'}")
        return 0
    if getattr(args, "kubeadm", False):
        if args.migrate_from == "keepalived" or (
            args.migrate_from == "kube-vip" and args.election != "lease"
        ):
            print(
                "vipd lab --kubeadm: --from kube-vip (with --election lease) is the one "
                "migration on real kubelets",
                file=sys.stderr,
            )
            return 2
        if args.unicast and args.election != "vrrp":
            print("vipd lab --kubeadm: --unicast is a VRRP mode", file=sys.stderr)
            return 2
        if args.replace and args.migrate_from is not None:
            print("vipd lab --kubeadm: --replace starts from vipd's bootstrap", file=sys.stderr)
            return 2
        from vipd.lab import kubeadm_flow, replace_flow
        from vipd.lab.kubelet_bed.node import MachineError

        try:
            return kubeadm_flow.run(
                as_json=args.json,
                keep=args.keep,
                election="lease" if args.election == "lease" else "vrrp",
                bootstrap="kube-vip" if args.migrate_from == "kube-vip" else "vipd",
                at_once=args.at_once,
                replace=replace_flow.run if args.replace else None,
                unicast=args.unicast,
            )
        except (LabError, MachineError) as exc:
            print(f"vipd lab --kubeadm: {exc}", file=sys.stderr)
            return 1
    if getattr(args, "migrate_from", None) == "keepalived":
        return _run_migration(args)
    if (
        getattr(args, "migrate_from", None) is not None
        or getattr(args, "at_once", False)
        or getattr(args, "replace", False)
    ):
        print("vipd lab: --from kube-vip, --at-once and --replace need --kubeadm", file=sys.stderr)
        return 2
    if getattr(args, "announce", "arp") != "arp":
        from vipd.lab import routed_lab

        return routed_lab.run(args)
    if args.fault is None:
        args.fault = "kill"
    if args.fault not in FAULTS:
        print(f"vipd lab: --fault {args.fault} needs --announce routing-table", file=sys.stderr)
        return 2
    opts = Options.from_args(args)
    if opts.rounds < 1 or opts.nodes < 2:
        print("vipd lab: --rounds must be ≥ 1 and --nodes ≥ 2", file=sys.stderr)
        return 2
    if opts.health_on and opts.daemon != "vipd":
        print("vipd lab: --health and --fault apidown need --daemon vipd", file=sys.stderr)
        return 2
    try:
        opts.spec()
    except ValueError as exc:
        print(f"vipd lab: {exc}", file=sys.stderr)
        return 2
    why = preflight(opts)
    if why is not None:
        print(f"vipd lab: cannot run here: {why}", file=sys.stderr)
        return 2
    if opts.election == "lease":
        from vipd.lab.kubebed import binaries

        try:
            found = binaries.find()
        except binaries.Missing as exc:
            print(
                f"vipd lab: --election lease runs on a real kube-apiserver and etcd: {exc}.\n"
                f"Build them once (as root, a few minutes): {KUBE_BUILD}",
                file=sys.stderr,
            )
            return 2
        _log(f"Kubernetes binaries from {found}")
    try:
        report = execute(opts)
    except Interrupted as exc:
        print(f"vipd lab: interrupted ({exc}); lab torn down", file=sys.stderr)
        return 130
    except LabError as exc:
        print(f"vipd lab: {exc}", file=sys.stderr)
        return 1
    if opts.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_table(report))
    return 0 if report["summary"]["ok"] else 1


def _run_migration(args: argparse.Namespace) -> int:
    from vipd.lab import migrate

    why = preflight(Options(daemon="keepalived"))
    if why is not None:
        print(f"vipd lab: cannot run here: {why}", file=sys.stderr)
        return 2
    if args.nodes < 2 or args.family != 4:
        print("vipd lab --from keepalived: --nodes must be ≥ 2, IPv4 only", file=sys.stderr)
        return 2
    try:
        report = migrate.run(args.nodes, args.version, args.unicast, args.prefix)
    except LabError as exc:
        print(f"vipd lab --from keepalived: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else migrate.render(report))
    return 0 if report["ok"] else 1
