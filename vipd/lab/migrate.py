"""``vipd lab --from keepalived``: a keepalived cluster replaced by vipd node by node.

What it is: the migration docs/operations.md ("Replacing keepalived") describes, run on the
lab's nodes with Debian's keepalived: every node starts with keepalived (VRRPv2 with a
password by default, like kubeadm's HA guide; ``--version 3``; ``--unicast``), a client
connects to the VIP every few milliseconds, then node by node (the backups first, the holder
last) keepalived is stopped with SIGTERM and vipd is started with the config that ``vipd
import keepalived`` made of *that node's* keepalived.conf. Each move is judged on the holder
timeline (``ip monitor`` in every node) and the client's connects: the longest client gap,
the VIP moves, and any span with two holders, which must never happen.

What it must not do: change the imported config (a migration that works only with an edited
import is no migration: the import is used as ``vipd import`` prints it), or judge by
reading the daemons' logs (the logs are printed on failure only).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from vipd.importers import EXIT_IMPORT_ERROR, keepalived
from vipd.importers.kaconf import Files
from vipd.lab.daemons import KeepalivedDaemon, VipdDaemon, VrrpSpec
from vipd.lab.prober import Prober, client_gap
from vipd.lab.responder import Responder
from vipd.lab.timeline import (
    OVERLAP_LIMIT,
    OVERLAP_NOISE,
    acquisitions,
    longest,
    shared,
    unowned,
)
from vipd.lab.topology import Lab, LabError, Node, vip_for
from vipd.lab.watch import HolderWatch

PASSWORD = "42"  # kubeadm's HA guide's auth_pass
SETTLE = 2.0  # s of one holder, seen by the client too, before a step counts as done
STARTUP = 5.0  # s for a vipd to start (Python, preflight, the start-up probe)
LEAD = 0.1  # s before a step's first action that its client window opens (settled: answered)


class ImportedVipd(VipdDaemon):
    """vipd run with a config as ``vipd import`` printed it."""

    def __init__(self, lab: Lab, node: Node, spec: VrrpSpec, imported: dict[str, Any]) -> None:
        super().__init__(lab, node, spec, [])
        self.imported = imported

    def config(self) -> dict[str, Any]:
        return self.imported


@dataclass(frozen=True)
class Step:
    node: str
    was_holder: bool
    dropped: tuple[str, ...]  # what the import left out, as `vipd import` says it
    client_gap_ms: float
    failed_connects: int
    moves: int  # VIP acquisitions during the step
    no_holder_ms: float
    overlap_ms: float  # the longest span with two holders: a make-before-break handover's
    holder_after: str

    @property
    def two_holders(self) -> bool:
        """Two holders for longer than a make-before-break handover (the new master binds,
        then advertises; the old one lets go when it hears it) is a split: never allowed."""
        return self.overlap_ms > (OVERLAP_LIMIT + OVERLAP_NOISE) * 1000


def import_config(text: str, name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """keepalived.conf text → (the vipd config as a mapping, the dropped lines)."""
    result = keepalived.convert(text, name, Files(lambda p: "", lambda p: []))
    if result.exit_code == EXIT_IMPORT_ERROR:
        raise LabError(f"vipd import keepalived refused {name}: {'; '.join(result.errors)}")
    doc = yaml.safe_load(result.yaml)
    if not isinstance(doc, dict):
        raise LabError(f"vipd import keepalived printed no config for {name}")
    return doc, tuple(d.line() for d in result.dropped)


def spec_for(version: int, unicast: bool) -> VrrpSpec:
    # keepalived's advert_int default (1 s), which VRRPv2 needs in whole seconds anyway
    return VrrpSpec(
        vip=vip_for(4),
        version=version,
        advert_interval=1.0,
        unicast=unicast,
        auth_pass=PASSWORD if version == 2 else None,
    )


def _until(cond: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


class Migration:
    """The lab, keepalived on every node, the client, and the steps so far."""

    def __init__(self, lab: Lab, spec: VrrpSpec) -> None:
        self.lab = lab
        self.spec = spec
        self.vip = spec.vip
        self.keepalived = {n.name: KeepalivedDaemon(lab, n, spec, lab.nodes) for n in lab.nodes}
        self.vipd: dict[str, ImportedVipd] = {}
        self.responders = [Responder(lab, n, 6443, None) for n in lab.nodes]
        self.prober = Prober(lab, self.vip, 6443)
        self.watch = HolderWatch(lab, self.vip)
        self.top = lab.nodes[0].name  # the highest priority (n1 200, n2 150, ...)
        # the lowest node's Master_Down_Interval, plus start-up: every step's wait
        lowest = min(d.priority for d in self.keepalived.values())
        self.bound = STARTUP + spec.master_down_interval(lowest) + 3 * spec.advert_interval

    def report(self) -> str:
        daemons = [*self.keepalived.values(), *self.vipd.values()]
        return "\n".join(f"--- {d.node.name} {d.kind}\n{d.log_tail(30)}" for d in daemons)

    def settled(self, since: float) -> bool:
        """One holder, the top node, and the client answered only by it for SETTLE."""
        if self.lab.holders(self.vip) != [self.top]:
            return False
        now = time.monotonic()
        if now - since < SETTLE:
            return False
        tries = self.prober.attempts(now - SETTLE)
        return bool(tries) and all(a.ok and a.name == self.top for a in tries)

    def start(self) -> None:
        for r in self.responders:
            r.start()
        self.watch.start()
        for d in self.keepalived.values():
            d.start()
        if not _until(lambda: self.lab.holders(self.vip) == [self.top], self.bound + 5):
            raise LabError(f"keepalived did not elect {self.top}\n{self.report()}")
        self.prober.start()
        t = time.monotonic()
        if not _until(lambda: self.settled(t), self.bound + 5):
            raise LabError(f"the client never settled on {self.top}\n{self.report()}")

    def replace(self, node: Node) -> Step:
        was_holder = self.lab.holders(self.vip) == [node.name]
        ka = self.keepalived[node.name]
        imported, dropped = import_config(ka.config(), f"{node.name}:keepalived.conf")
        t0 = time.monotonic()
        ka.stop(signal.SIGTERM)
        vd = ImportedVipd(self.lab, node, self.spec, imported)
        vd.priority = ka.priority
        self.vipd[node.name] = vd
        vd.start()
        if not _until(lambda: vd.running() and vd.state() is not None, STARTUP):
            raise LabError(f"vipd did not start on {node.name}\n{self.report()}")
        # vipd must sit out its start-up and, when it is the top node, take the VIP back
        if not _until(lambda: self.settled(t0), 2 * self.bound + SETTLE):
            raise LabError(f"no settled holder after replacing {node.name}\n{self.report()}")
        t1 = time.monotonic()
        tl = self.watch.timeline()
        # from a little before the stop: client_gap measures between answered connects, and
        # the outage begins at the last answer before t0, not at the first one after it
        gap, failed = client_gap(self.prober, t0 - LEAD, t1)
        return Step(
            node=node.name,
            was_holder=was_holder,
            dropped=dropped,
            client_gap_ms=round(gap * 1000, 1),
            failed_connects=failed,
            moves=sum(acquisitions(tl, n.name, t0, t1) for n in self.lab.nodes),
            no_holder_ms=round(longest(unowned(tl, t0, t1)) * 1000, 1),
            overlap_ms=round(longest(shared(tl, t0, t1)) * 1000, 1),
            holder_after=self.lab.holders(self.vip)[0],
        )

    def stop(self) -> None:
        self.prober.stop()
        for d in [*self.vipd.values(), *self.keepalived.values()]:
            d.stop(signal.SIGKILL)
        self.watch.stop()


def run(nodes: int, version: int, unicast: bool, prefix: str | None = None) -> dict[str, Any]:
    """The whole migration; the report as a JSON-able mapping (``ok``: no two holders beyond
    a make-before-break handover's overlap)."""
    spec = spec_for(version, unicast)
    with Lab(nodes=nodes, prefix=prefix) as lab:
        m = Migration(lab, spec)
        try:
            m.start()
            # the backups first, the holder last: one VIP move (and one back) in all
            order = [n for n in reversed(lab.nodes) if n.name != m.top] + [lab.node(m.top)]
            steps = [m.replace(n) for n in order]
        finally:
            m.stop()
    return {
        "from": "keepalived",
        "nodes": nodes,
        "version": version,
        "mode": "unicast" if unicast else "multicast",
        "auth_pass": spec.auth_pass is not None,
        "steps": [{**asdict(s), "two_holders": s.two_holders} for s in steps],
        "ok": not any(s.two_holders for s in steps),
    }


def render(report: dict[str, Any]) -> str:
    mode = f"VRRPv{report['version']} {report['mode']}"
    if report["auth_pass"]:
        mode += " with a password"
    lines = [
        f"keepalived → vipd, node by node ({report['nodes']} nodes, {mode}), the holder last",
        "",
        "| step | node | was holder | client gap ms | failed connects | VIP moves "
        "| no holder ms | overlap ms | holder after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, s in enumerate(report["steps"], 1):
        lines.append(
            f"| {i} | {s['node']} | {'yes' if s['was_holder'] else 'no'} | "
            f"{s['client_gap_ms']} | {s['failed_connects']} | {s['moves']} | "
            f"{s['no_holder_ms']} | {s['overlap_ms']} | {s['holder_after']} |"
        )
    dropped = sorted({d for s in report["steps"] for d in s["dropped"]})
    if dropped:
        lines += ["", "what the import left out (as `vipd import keepalived` said it):"]
        lines += [f"  {d}" for d in dropped]
    limit = (OVERLAP_LIMIT + OVERLAP_NOISE) * 1000
    lines += [
        "",
        f"overlap: two holders during a make-before-break handover (allowed up to {limit:.0f} ms)",
        "never two holders beyond a handover: " + ("yes" if report["ok"] else "NO"),
    ]
    return "\n".join(lines)
