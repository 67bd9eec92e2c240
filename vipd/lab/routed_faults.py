"""The routed lab's nodes and faults: a vipd and a stand-in API server per node of a
`vipd.lab.routed.RoutedBed`, and the faults ``vipd lab --announce routing-table`` injects.

What it is
    ``NodeSide``: what the announcement mode puts on a node: whether the node runs FRR (the
    routing-table mode: FRR exports kernel table 198) or not (``bgp``: the agent's own BGP
    speaker peers with the router), and vipd's ``announce`` section. `node_side(announce)`
    returns it, or raises `LabError` saying why that mode cannot run here (``bgp`` without
    vipd's BGP speaker in this tree).

    ``Fabric``: per node, the responder (`vipd.lab.responder`: port 6443 answers the node's
    name, 6444 is the stand-in API server's HTTPS ``/readyz``) and ``vipd run`` with the
    mode's ``announce`` section and a ``health`` section that checks its own API server and
    its peers'. ``Fabric.inject(fault, node)`` and ``Fabric.restore(fault, node)``:

    - ``kill``: SIGKILL to vipd alone (the node, its FRR and its API server live on; vipd's
      routes stay, so the path stays; in bgp mode the speaker goes with vipd, and the path
      with it). Restore: vipd started again.
    - ``term``: SIGTERM to vipd (the withdrawal: route off, drain, binding off). Restore:
      started again.
    - ``apidown``: the node's API server dies (the responder gets SIGKILL: port 6443 and its
      health endpoint together). Restore: started again.
    - ``linkdown``: the node's ``eth0`` down (the router sees the carrier go). Restore: up.
    - ``silent``: every packet into and out of the node dropped by nftables in its namespace
      (a hung or partitioned node: the link stays up, BFD notices). Restore: the rules gone.
    - ``bgpreset``: ``clear bgp *`` on the router: every session reset at once (not a node
      fault: ``node`` only names the round). Restore: nothing (the sessions come back).

What it must not do: judge what happened (`vipd.lab.routed_lab` does), or touch anything
outside the bed's namespaces and directory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from vipd.lab.nsthread import in_netns
from vipd.lab.pki import make_cert
from vipd.lab.responder import READY_LINE
from vipd.lab.routed import RoutedBed, RoutedNode
from vipd.lab.topology import LabError, python_argv, python_env

__all__ = [
    "ANNOUNCES",
    "DRAIN",
    "FALL",
    "HEALTH_PORT",
    "INTERVAL",
    "RISE",
    "ROUTED_FAULTS",
    "Fabric",
    "NodeSide",
    "node_side",
]

ANNOUNCES = ("routing-table", "bgp")
ROUTED_FAULTS = ("kill", "term", "apidown", "linkdown", "silent", "bgpreset")
HEALTH_PORT = 6444
METRICS_PORT = 2112  # metrics.listen's default
INTERVAL = 0.2  # health checks: fast enough for a lab round, as in tests/netns
TIMEOUT = 0.15
RISE = 2
FALL = 3
DRAIN = 1.0
NFT_TABLE = "vipdlab"
DROP_ALL = f"""table inet {NFT_TABLE} {{
    chain in {{ type filter hook input priority 0; policy drop; }}
    chain out {{ type filter hook output priority 0; policy drop; }}
}}
"""


@dataclass(frozen=True, slots=True)
class NodeSide:
    """What an announcement mode runs on a node."""

    announce: str  # announce.mode
    frr_nodes: bool  # the node's FRR does the BGP (routing-table), or vipd itself does
    announce_yaml: Callable[[RoutedBed, RoutedNode], str]  # vipd's `announce:` line
    speaker_bfd: bool = False  # the router runs BFD toward the node's own speaker


def _routing_table(bed: RoutedBed, node: RoutedNode) -> str:
    return f"announce: {{mode: routing-table, drain: {DRAIN}}}\n"


def _bgp(bed: RoutedBed, node: RoutedNode) -> str:
    return bed.bgp_yaml(node) + f"  drain: {DRAIN}\n"


def node_side(announce: str) -> NodeSide:
    """The node side of ``announce``; LabError when it cannot run with this tree."""
    if announce == "routing-table":
        return NodeSide(announce, True, _routing_table)
    if announce == "bgp":
        if importlib.util.find_spec("vipd.routed.speaker") is None:
            raise LabError(
                "--announce bgp needs vipd's own BGP speaker (announce.mode: bgp, "
                "vipd/routed/speaker.py), which this vipd does not have; "
                "--announce routing-table runs the same fabric with FRR on the nodes"
            )
        # No FRR on the nodes: vipd's speaker peers with the router, each end with BFD.
        return NodeSide(announce, False, _bgp, speaker_bfd=True)
    raise LabError(f"--announce must be one of {', '.join(ANNOUNCES)} (got {announce!r})")


class Fabric:
    """The bed's nodes with their responders and vipd processes."""

    def __init__(
        self,
        bed: RoutedBed,
        side: NodeSide,
        port: int = 6443,
        *,
        cert: tuple[Path, Path] | None = None,
    ) -> None:
        """``cert``: the stand-in API servers' certificate and key (default: self-signed)."""
        self.bed = bed
        self.side = side
        self.port = port
        self.dir = bed.workdir / "agents"
        self.dir.mkdir(exist_ok=True)
        self.dir.chmod(0o755)
        self.cert, self.key = cert or make_cert(self.dir)
        self.vipd: dict[str, subprocess.Popen[Any]] = {}
        self.responders: dict[str, subprocess.Popen[Any]] = {}
        self._logs: list[IO[bytes]] = []
        peers = ", ".join(n.addr for n in bed.nodes)
        for node in bed.nodes:
            self.mode_file(node.name).write_text("ok\n")
            self.config(node.name).write_text(
                f"node: {node.name}\n"
                f"vip: {bed.vip}\n"
                "interface: eth0\n"
                + side.announce_yaml(bed, node)
                + f"health: {{port: {HEALTH_PORT}, interval: {INTERVAL}, timeout: {TIMEOUT}, "
                f"rise: {RISE}, fall: {FALL}, peers: [{peers}]}}\n"
            )

    def mode_file(self, name: str) -> Path:
        return self.dir / f"{name}-api.mode"

    def config(self, name: str) -> Path:
        return self.dir / f"{name}.yaml"

    def log_path(self, name: str, what: str) -> Path:
        return self.dir / f"{name}-{what}.log"

    def _log(self, name: str, what: str) -> IO[bytes]:
        f = self.log_path(name, what).open("ab")
        self._logs.append(f)
        return f

    # -- processes -----------------------------------------------------------------------

    def start_responder(self, name: str, timeout: float = 10.0) -> None:
        node = self.bed.node(name)
        path = self.log_path(name, "responder")
        offset = path.stat().st_size if path.exists() else 0
        argv = ["--name", name, "--port", str(self.port), "--health-port", str(HEALTH_PORT)]
        argv += ["--cert", str(self.cert), "--key", str(self.key)]
        argv += ["--mode-file", str(self.mode_file(name))]
        proc = self.bed.spawn(
            node.ns,
            python_argv("vipd.lab.responder", *argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log(name, "responder"),
            stderr=subprocess.STDOUT,
            env=python_env(),
        )
        self.responders[name] = proc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with path.open("rb") as f:
                f.seek(offset)
                if READY_LINE.encode() in f.read():
                    return
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        raise LabError(f"the responder on {name} did not start; see {path}")

    def start_vipd(self, name: str) -> None:
        node = self.bed.node(name)
        self.vipd[name] = self.bed.spawn(
            node.ns,
            python_argv("vipd", "run", "--config", str(self.config(name))),
            stdin=subprocess.DEVNULL,
            stdout=self._log(name, "vipd"),
            stderr=subprocess.STDOUT,
            env=python_env(),
        )

    def start_all(self) -> None:
        for node in self.bed.nodes:
            self.start_responder(node.name)
        for node in self.bed.nodes:
            self.start_vipd(node.name)

    def ready(self, name: str) -> bool:
        """vipd's ``/readyz`` (on its metrics port in the node) answers 200: its start-up,
        with the removal of whatever a killed predecessor left, is over."""

        def get() -> int:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{METRICS_PORT}/readyz", timeout=0.5
            ) as r:
                return int(r.status)

        try:
            return in_netns(self.bed.node(name).ns, get) == 200
        except (OSError, ValueError):
            return False

    def running(self, name: str) -> bool:
        proc = self.vipd.get(name)
        return proc is not None and proc.poll() is None

    def log_tail(self, name: str, lines: int = 8) -> str:
        path = self.log_path(name, "vipd")
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def report(self) -> str:
        return "\n".join(
            f"{n.name}: vipd {'running' if self.running(n.name) else 'exited'}; log "
            f"{self.log_path(n.name, 'vipd')}\n"
            + "\n".join("    " + ln for ln in self.log_tail(n.name).splitlines())
            for n in self.bed.nodes
        )

    def stop(self) -> None:
        """vipd stopped gracefully (SIGTERM: its routes withdrawn), then the responders."""
        for proc in self.vipd.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.vipd.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for proc in self.responders.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        for f in self._logs:
            f.close()
        self._logs.clear()

    # -- faults --------------------------------------------------------------------------

    def inject(self, fault: str, name: str) -> None:
        node = self.bed.node(name)
        if fault == "kill":
            self.vipd[name].kill()
            self.vipd[name].wait(timeout=5)
        elif fault == "term":
            self.vipd[name].send_signal(signal.SIGTERM)
        elif fault == "apidown":
            self.responders[name].kill()
            self.responders[name].wait(timeout=5)
        elif fault == "linkdown":
            self.bed.exec(node.ns, ["ip", "link", "set", "eth0", "down"])
        elif fault == "silent":
            self.bed.exec(node.ns, ["nft", "-f", "-"], input_text=DROP_ALL)
        elif fault == "bgpreset":
            self.bed.vtysh(self.bed.router, "-c", "clear bgp *")
        else:
            raise ValueError(f"unknown routed fault {fault!r}")

    def restore(self, fault: str, name: str) -> None:
        node = self.bed.node(name)
        if fault in ("kill", "term"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.vipd[name].wait(timeout=15)
            if not self.running(name):
                self.start_vipd(name)
        elif fault == "apidown":
            self.start_responder(name)
        elif fault == "linkdown":
            self.bed.exec(node.ns, ["ip", "link", "set", "eth0", "up"])
            # a link brought up again loses the default route through it
            self.bed.exec(node.ns, ["ip", "route", "replace", "default", "via", node.router_addr])
        elif fault == "silent":
            self.bed.exec(node.ns, ["nft", "delete", "table", "inet", NFT_TABLE], check=False)
