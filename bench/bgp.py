"""Routed announcement benchmark: what a client behind the router sees when a node fails,
for vipd's routing-table mode and kube-vip's BGP and routing-table modes.

Run from the repository root, as root, with Debian's FRR and the Kubernetes binaries
(``VIPD_KUBE_BIN``, with kube-vip in it)::

    .venv/bin/python bench/bgp.py [--rounds 10] [--configs vipd-routing-table,kube-vip-bgp,...]
                                  [--faults term,kill,silent,apidown] [--out bench/results]

Each configuration runs on a fresh bed of `vipd.lab.routed` (Debian's FRR 8.4 router, three
nodes on routed /31 links, ECMP over the announcing nodes, a client behind the router) with a
stand-in API server on every node (`vipd.lab.responder`: port 6443 answers the node's name,
6444 its HTTPS health and ``/version``), driven by `vipd.lab.routed_lab.RoutedSession`: per
round one fault on one node (rotating), held until its effect reaches the router's FIB (or
for at most the configuration's bound), then 1 s more, then restored; then every path must
be back and the client answered by every node. Faults: ``term`` (SIGTERM to the agent: the
graceful stop), ``kill`` (SIGKILL to the agent alone), ``silent`` (every packet of the node
dropped: a hung or cut-off node), ``apidown`` (the node's stand-in API server killed: port
6443 and its health together). Per round: the client's failed connects (a connect every 2
ms, 0.5 s timeout), the span over which they failed, the longest span with none answered,
and the time from the fault to the node's path leaving the router's FIB (for ``apidown``,
the time from the API server failing to the route leaving the router).

Configurations:

- ``vipd-routing-table``: vipd, ``announce.mode: routing-table``, the nodes' FRR exporting
  table 198 with BFD 100 ms × 3 to the router; health checks of its own and its peers' API
  servers every 0.2 s, rise 2, fall 3; drain 1 s (the lab's settings).
- ``vipd-bgp``: vipd's own BGP speaker (``announce.mode: bgp``, ExaBGP as its child) on
  nodes without FRR, peering with the router (`vipd.lab.routed_faults.node_side`,
  ``RoutedBed.bgp_yaml``, hold time 9 s, BFD 100 ms × 3 between its ``announce.bgp.bfd``
  and the router's bfdd); the same health checks and drain. Reported as not run, with the
  reason, on a vipd without the speaker.
- ``kube-vip-bgp``: kube-vip v1.0.0 with its embedded GoBGP peering with the router, every
  node advertising (``cp_enable`` without leader election); no BFD (GoBGP has none): the
  router's hold time (FRR's datacenter default 9 s, lower than kube-vip's 30 s) is what
  notices a silent node; no API server health check (v1.0.0 has none in this mode).
- ``kube-vip-routing-table`` / ``kube-vip-routing-table-5s``: kube-vip's
  ``vip_routingtable`` (table 198, protocol 248; the nodes' FRR with BFD as for vipd) with
  its own check, ``GET /version`` of the local API server every 1 s (its smallest whole
  second) / 5 s (its default); it cannot be turned off. kube-vip also puts the VIP on
  ``lo`` as an address, whose connected route FRR 8.4's zebra prefers to the table's, so the
  nodes' FRR here also redistributes connected /32s matching the VIP (the same route-map):
  with ``redistribute table 198`` alone nothing is announced (docs/design/routed.md).

kube-vip needs a Kubernetes API server to start: a real etcd and kube-apiserver
(``VIPD_KUBE_BIN``) run in the router's namespace (`vipd.lab.routed_kube.ControlPlane`).

It writes ``bgp.json`` (every round) and ``bgp.md`` (p50/max per configuration and fault)
into ``--out``. No thresholds. Numbers come from a shared 2-core machine.

What it must not do: judge, or leave anything behind: each bed is torn down on every exit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vipd.lab.analysis import percentiles
from vipd.lab.kubebed import binaries
from vipd.lab.routed import RoutedBed, frr_problem
from vipd.lab.routed_faults import Fabric, NodeSide, node_side
from vipd.lab.routed_kube import ControlPlane, kube_vip_argv
from vipd.lab.routed_lab import RoutedOptions, RoutedRound, RoutedSession
from vipd.lab.topology import LabError

FAULTS = ("term", "kill", "silent", "apidown")
CONFIGS = (
    "vipd-routing-table",
    "vipd-bgp",
    "kube-vip-bgp",
    "kube-vip-routing-table",
    "kube-vip-routing-table-5s",
)
# A path that must wait for a BGP hold time (9 s) to leave, with room for a loaded machine.
EFFECT_BOUND = 15.0


@dataclass(frozen=True)
class Config:
    name: str
    daemon: str  # vipd or kube-vip
    announce: str  # routing-table or bgp
    check_interval: int = 1  # kube-vip routing-table only


CONFIG = {
    "vipd-routing-table": Config("vipd-routing-table", "vipd", "routing-table"),
    "vipd-bgp": Config("vipd-bgp", "vipd", "bgp"),
    "kube-vip-bgp": Config("kube-vip-bgp", "kube-vip", "bgp"),
    "kube-vip-routing-table": Config("kube-vip-routing-table", "kube-vip", "routing-table", 1),
    "kube-vip-routing-table-5s": Config(
        "kube-vip-routing-table-5s", "kube-vip", "routing-table", 5
    ),
}


class KubeVipFabric(Fabric):
    """The fabric with kube-vip as the agent on every node."""

    def __init__(
        self, bed: RoutedBed, side: NodeSide, plane: ControlPlane, cfg: Config, binary: Path
    ) -> None:
        pair = plane.standin_pair()
        super().__init__(bed, side, cert=(pair.cert, pair.key))
        self.plane = plane
        self.cfg = cfg
        self.binary = binary

    def start_vipd(self, name: str) -> None:
        node = self.bed.node(name)
        home = self.dir / f"{name}-kube-vip"
        home.mkdir(exist_ok=True)
        kubeconfig = home / "admin.conf"
        kubeconfig.write_bytes(self.plane.admin_kubeconfig.read_bytes())
        kubeconfig.chmod(0o600)
        argv, env = kube_vip_argv(
            self.binary,
            self.cfg.announce,
            node,
            self.bed.vip,
            kubeconfig,
            check_port=6444,
            check_interval=self.cfg.check_interval,
        )
        self.vipd[name] = self.bed.spawn(
            node.ns, argv, stdout=self._log(name, "vipd"), stderr=subprocess.STDOUT, env=env
        )

    def ready(self, name: str) -> bool:
        return self.running(name)


def _kube_vip_side(cfg: Config) -> NodeSide:
    # kube-vip's own speaker in bgp mode: no FRR on the nodes; in routing-table mode the
    # nodes' FRR exports what it writes (and its VIP address, see the module docstring).
    return NodeSide(cfg.announce, cfg.announce == "routing-table", lambda bed, node: "")


def run_config(cfg: Config, faults: tuple[str, ...], rounds: int) -> dict[str, Any]:
    """One configuration on a fresh bed; its rounds as plain data, or why it did not run."""
    try:
        side = node_side(cfg.announce) if cfg.daemon == "vipd" else _kube_vip_side(cfg)
    except LabError as exc:
        return {"config": cfg.name, "ran": False, "why": str(exc), "rounds": []}
    bins: Path | None = None
    if cfg.daemon == "kube-vip":
        try:
            bins = binaries.find()
        except binaries.Missing as exc:
            return {"config": cfg.name, "ran": False, "why": str(exc), "rounds": []}
        if binaries.kube_vip(bins) is None:
            return {"config": cfg.name, "ran": False, "why": f"no kube-vip in {bins}", "rounds": []}
    opts = RoutedOptions(announce=cfg.announce, faults=faults, rounds=rounds)
    bed = RoutedBed(nodes=3, node_frr=side.frr_nodes, speaker_bfd=side.speaker_bfd)
    plane: ControlPlane | None = None
    session: RoutedSession | None = None
    done: list[RoutedRound] = []
    try:
        bed.build()
        if cfg.daemon == "kube-vip" and cfg.announce == "routing-table":
            for node in bed.nodes:
                bed.vtysh(
                    node.ns, "-c", "configure terminal", "-c", "router bgp 65100",
                    "-c", "address-family ipv4 unicast",
                    "-c", "redistribute connected route-map VIP",
                )  # fmt: skip
        fabric: Fabric | None = None
        if bins is not None:
            plane = ControlPlane(bed, bins)
            plane.start()
            binary = binaries.kube_vip(bins)
            assert binary is not None
            fabric = KubeVipFabric(bed, side, plane, cfg, binary)
        session = RoutedSession(bed, side, opts, fabric, effect_bound=EFFECT_BOUND)
        session.start()
        number = 0
        for fault in faults:
            for k in range(rounds):
                number += 1
                victim = bed.nodes[k % len(bed.nodes)].name
                rnd = session.round(number, fault, victim)
                done.append(rnd)
                if not rnd.back:
                    break
            if done and not done[-1].back:
                break
        session.prober.stop()
        session.analyse(done)
    except LabError as exc:
        return {"config": cfg.name, "ran": False, "why": str(exc).splitlines()[0],
                "rounds": [r.to_dict() for r in done]}  # fmt: skip
    finally:
        if session is not None:
            session.prober.stop()
            session.watch.stop()
            session.fabric.stop()
        if plane is not None:
            plane.stop()
        bed.teardown()
    return {"config": cfg.name, "ran": True, "rounds": [r.to_dict() for r in done]}


KEYS = ("failed", "failing_ms", "full_outage_ms", "left_ms")


def summarise(result: dict[str, Any], faults: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fault in faults:
        mine = [r for r in result["rounds"] if r["fault"] == fault]
        row: dict[str, Any] = {
            "n": len(mine),
            "never_left": sum(r["left_ms"] is None for r in mine),
        }
        for key in KEYS:
            p = percentiles([float(r[key]) for r in mine if r[key] is not None])
            row[key] = None if p is None else {"p50": p.p50, "max": p.max, "n": p.n}
        out[fault] = row
    return out


def _cell(p: dict[str, Any] | None, unit: str = "") -> str:
    return "-" if p is None else f"{p['p50']:.0f} / {p['max']:.0f}{unit}"


def table(results: list[dict[str, Any]], faults: tuple[str, ...]) -> str:
    lines = [
        "| configuration | fault | rounds | failed connects | failing (ms) "
        "| longest none answered (ms) | fault → path out of the router's FIB (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for res in results:
        if not res["ran"]:
            lines.append(f"| {res['config']} | not run: {res['why']} | | | | | |")
            continue
        for fault, row in summarise(res, faults).items():
            left = _cell(row["left_ms"])
            if row["never_left"]:
                left += f" (stayed in {row['never_left']} of {row['n']})"
            lines.append(
                f"| {res['config']} | {fault} | {row['n']} | {_cell(row['failed'])} | "
                f"{_cell(row['failing_ms'])} | {_cell(row['full_outage_ms'])} | {left} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--name", default="bgp")
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    faults = tuple(f for f in args.faults.split(",") if f)
    bad = [c for c in configs if c not in CONFIG] + [f for f in faults if f not in FAULTS]
    if bad or args.rounds < 1:
        parser.error(f"unknown configurations or faults: {bad} (or --rounds < 1)")
    problem = frr_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    started = time.monotonic()
    load = os.getloadavg()
    results = []
    for name in configs:
        print(f"[bench] {name}", file=sys.stderr, flush=True)
        results.append(run_config(CONFIG[name], faults, args.rounds))
    command = "bench/bgp.py " + " ".join(sys.argv[1:] if argv is None else argv)
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command.strip(),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "loadavg_before": list(load),
        "rounds": args.rounds,
        "faults": list(faults),
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {**meta, "results": results,
           "summary": {r["config"]: summarise(r, faults) for r in results if r["ran"]}}  # fmt: skip
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1))
    text = table(results, faults)
    (args.out / f"{args.name}.md").write_text(
        "# Routed announcement: client-seen outage per fault, vipd and kube-vip\n\n"
        f"`{meta['command']}`, {meta['date']}, kernel {meta['kernel']}, FRR 8.4 (Debian), "
        f"{meta['cpus']} CPUs shared, load average before {load[0]:.1f}; "
        f"{meta['minutes']} min. Cells: p50 / max over the rounds.\n\n" + text
    )
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
