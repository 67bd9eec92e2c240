"""A routed fabric in network namespaces: one FRR router, N FRR nodes, one client.

What it is: ``RoutedBed`` builds, per run, namespaces that all carry one name prefix (``vr`` +
4 random hex chars unless given), so several beds share a machine:

- ``<prefix>-r``: the top-of-rack router. Debian's FRR (zebra, bgpd, bfdd), AS 65000, one
  routed /31 per node (``n1`` … ``nN``: 10.78.i.0/31) and the client's LAN (``c``:
  10.78.0.1/24). BGP multipath (``maximum-paths 8``) with BFD 100 ms × 3 on every session.
  ``net.ipv4.fib_multipath_hash_policy=1`` hashes flows on L4 ports (with the default L3 hash
  every connection of one client goes to one node); ``no zebra nexthop kernel enable``
  because FRR 8.4's kernel nexthop groups went out of step with BGP's paths after a link flap.
- ``<prefix>-n1`` … ``<prefix>-nN``: the nodes, AS 65100 each, ``eth0`` 10.78.i.1/31, default
  route to the router. Each runs zebra, bgpd and bfdd (BFD needs both ends of a session) and
  announces what kernel table 198 holds, filtered by a route-map to the VIP: zebra's
  ``ip import-table 198`` brings the table into its RIB and bgpd's ``redistribute table 198``
  exports it. This is the routing-table mode the node's route actuator
  (``vipd.routed.actuator``) feeds.
- ``<prefix>-c``: the client, 10.78.0.2/24 behind the router.
- ``<prefix>-l`` (``lan=True`` only): a bridge joining the nodes' ``lan0`` (10.78.100.i/24),
  for an election that needs a shared segment (``announce.pool: leader`` with VRRP).

With ``ipv6=True`` every link also gets IPv6 (router ``fd00:78:i::/127``, node
``fd00:78:i::1``, client LAN ``fd00:78::/64``) and the router an IPv6 session per node
(``address-family ipv6 unicast``, ``maximum-paths 8``): for a dual-stack speaker on the nodes.

With ``node_frr=False`` the nodes run no FRR at all (``announce.mode: bgp``: vipd's own
speaker opens the session, `bgp_yaml` writes its config) and the build does not wait for
their sessions (they come up once vipd runs). With ``speaker_bfd=True`` as well the router
runs BFD 100 ms × 3 toward each node and ties its BGP neighbours to it from the start, and
`bgp_yaml` turns on the speaker's own BFD (``announce.bgp.bfd``) with the same timers: a
speaker without BFD would keep FRR 8.4's session Idle, so only vipd's speaker gets it.

Each FRR instance runs in the foreground (tracked, killed at teardown) with its own vty
socket directory, zserv path, pid file and one config file per daemon, without ``-N``;
``vtysh --vty_socket DIR`` reaches it. Nothing is read from or written to /etc/frr.

``python -m vipd.lab.routed up`` builds one by hand and keeps it until Ctrl-C; ``… clean
PREFIX`` removes what a killed run left.

What it must not do: touch anything outside its own namespaces and its temporary directory,
start Debian's frr service, or know what vipd decides: it is plumbing and observation (the
router's routes, as vtysh prints them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from vipd.lab.topology import IP, LabError, _run, check_prefix, delete_namespaces, netns_list
from vipd.routed.plan import DEFAULT_PROTOCOL

__all__ = [
    "CLIENT",
    "FRR_DIR",
    "NODE_AS",
    "ROUTER_AS",
    "TABLE",
    "VIP",
    "RoutedBed",
    "RoutedNode",
    "cleanup",
    "frr_problem",
    "new_prefix",
]

FRR_DIR = Path("/usr/lib/frr")
VTYSH = "vtysh"
ROUTER_AS = 65000
NODE_AS = 65100
TABLE = 198
VIP = "10.79.0.100"
VIP6 = "fd00:79::100"
CLIENT = "10.78.0.2"
CLIENT6 = "fd00:78::2"
ROUTER_LAN6 = "fd00:78::1"
ROUTER_LAN = "10.78.0.1"
BFD_MS = 100
BFD_MULT = 3
LAN_PREFIX = "10.78.100"  # the nodes' shared segment, when there is one


def new_prefix() -> str:
    return "vr" + secrets.token_hex(2)


def frr_problem() -> str | None:
    """Why FRR cannot run a bed here, or None."""
    for daemon in ("zebra", "bgpd", "bfdd"):
        if not (FRR_DIR / daemon).exists():
            return f"needs FRR's {daemon} in {FRR_DIR} (apt-get install frr; scripts/setup does it)"
    if shutil.which(VTYSH) is None:
        return "needs vtysh (apt-get install frr; scripts/setup does it)"
    return None


@dataclass(frozen=True, slots=True)
class RoutedNode:
    """One node: its name (``n1``), namespace, address and the router's end of its /31."""

    name: str
    index: int
    ns: str
    addr: str
    router_addr: str
    addr6: str = ""  # with RoutedBed(ipv6=True)
    router_addr6: str = ""


def _bfd(peers: list[tuple[str, str, str]]) -> list[str]:
    """The ``bfd`` block: the profile, and each (peer, local address, interface) as a
    configured session, so BFD comes up beside BGP rather than after it.

    BGP is tied to BFD (``neighbor … bfd``) only once BGP is up (`RoutedBed.bind_bfd`): FRR
    8.4's bgpd holds a session Idle while its BFD is down, and re-keys its BFD session with
    the interface once BGP is established, which reported Down and reset the BGP session it
    was meant to protect (the bed took ~7 s to settle that way instead of ~2 s)."""
    lines = [
        "bfd",
        " profile fast",
        f"  receive-interval {BFD_MS}",
        f"  transmit-interval {BFD_MS}",
        f"  detect-multiplier {BFD_MULT}",
        " exit",
    ]
    for peer, local, ifname in peers:
        lines += [
            f" peer {peer} local-address {local} interface {ifname}",
            "  profile fast",
            " exit",
        ]
    return [*lines, "exit"]


def _router_conf(
    nodes: list[RoutedNode], bfd: bool = True, ipv6: bool = False
) -> dict[str, list[str]]:
    bgp = [
        f"router bgp {ROUTER_AS}",
        f" bgp router-id {ROUTER_LAN}",
        " no bgp ebgp-requires-policy",
    ]
    for node in nodes:
        bgp += [
            f" neighbor {node.addr} remote-as {NODE_AS}",
            f" neighbor {node.addr} timers connect 1",
            # the BFD session's source address known before TCP is up (single-hop BFD)
            f" neighbor {node.addr} update-source {node.router_addr}",
        ]
    if ipv6:
        for node in nodes:
            bgp += [
                f" neighbor {node.addr6} remote-as {NODE_AS}",
                f" neighbor {node.addr6} timers connect 1",
                f" neighbor {node.addr6} update-source {node.router_addr6}",
            ]
    bgp += [" address-family ipv4 unicast", "  maximum-paths 8"]
    bgp += [f"  no neighbor {n.addr6} activate" for n in nodes if ipv6]
    bgp += [" exit-address-family"]
    if ipv6:
        bgp += [" address-family ipv6 unicast", "  maximum-paths 8"]
        bgp += [f"  neighbor {n.addr6} activate" for n in nodes]
        bgp += [" exit-address-family"]
    bgp += ["exit"]
    return {
        "zebra": ["hostname router", "no zebra nexthop kernel enable"],
        "bfdd": _bfd([(n.addr, n.router_addr, n.name) for n in nodes] if bfd else []),
        "bgpd": bgp,
    }


def _node_conf(node: RoutedNode, vip: str) -> dict[str, list[str]]:
    return {
        "zebra": [f"hostname {node.name}", f"ip import-table {TABLE}"],
        "bfdd": _bfd([(node.router_addr, node.addr, "eth0")]),
        "bgpd": [
            f"ip prefix-list VIP seq 5 permit {vip}/32",
            "route-map VIP permit 10",
            " match ip address prefix-list VIP",
            "exit",
            f"router bgp {NODE_AS}",
            f" bgp router-id {node.addr}",
            " no bgp ebgp-requires-policy",
            f" neighbor {node.router_addr} remote-as {ROUTER_AS}",
            # the bed comes up in ~1 s rather than the default 10 s connect retry
            f" neighbor {node.router_addr} timers connect 1",
            f" neighbor {node.router_addr} update-source {node.addr}",
            " address-family ipv4 unicast",
            f"  redistribute table {TABLE} route-map VIP",
            " exit-address-family",
            "exit",
        ],
    }


def cleanup(prefix: str) -> list[str]:
    """Remove a bed's leftovers by prefix: processes, namespaces, temporary directories."""
    names = sorted(ns for ns in netns_list() if ns.startswith(check_prefix(prefix) + "-"))
    delete_namespaces(names)
    for workdir in Path(tempfile.gettempdir()).glob(f"vipd-routed-{prefix}-*"):
        shutil.rmtree(workdir, ignore_errors=True)
    return names


class RoutedBed:
    """Router, nodes and client in namespaces, each with FRR running; a context manager."""

    def __init__(
        self,
        nodes: int = 3,
        prefix: str | None = None,
        vip: str = VIP,
        node_frr: bool = True,
        ipv6: bool = False,
        lan: bool = False,
        speaker_bfd: bool = False,
    ) -> None:
        """``lan=True``: the nodes also share a segment (`LAN_PREFIX`: a bridge in
        ``<prefix>-l``, ``lan0`` on each node, 10.78.100.i/24) for an election that needs
        one (VRRP checks that its adverts come from its own link, TTL 255); the router is
        not on it."""
        if not 1 <= nodes <= 8:
            raise ValueError(f"a routed bed has 1-8 nodes (got {nodes})")
        self.prefix = check_prefix(prefix or new_prefix())
        self.vip = vip
        self.node_frr = node_frr
        self.speaker_bfd = speaker_bfd and not node_frr
        self.ipv6 = ipv6
        self.lan = f"{self.prefix}-l" if lan else None
        self.router = f"{self.prefix}-r"
        self.client = f"{self.prefix}-c"
        self.nodes = [
            RoutedNode(
                f"n{i}",
                i,
                f"{self.prefix}-n{i}",
                f"10.78.{i}.1",
                f"10.78.{i}.0",
                f"fd00:78:{i}::1" if ipv6 else "",
                f"fd00:78:{i}::" if ipv6 else "",
            )
            for i in range(1, nodes + 1)
        ]
        self.workdir = Path(tempfile.mkdtemp(prefix=f"vipd-routed-{self.prefix}-"))
        self.workdir.chmod(0o755)  # the daemons drop to user frr and must reach their dirs
        self.procs: list[subprocess.Popen[Any]] = []

    def __enter__(self) -> RoutedBed:
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.teardown()

    @property
    def namespaces(self) -> list[str]:
        lan = [self.lan] if self.lan else []
        return [self.router, self.client, *lan, *(n.ns for n in self.nodes)]

    def lan_addr(self, node: RoutedNode) -> str:
        return f"{LAN_PREFIX}.{node.index}"

    def node(self, name: str) -> RoutedNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def exec(
        self,
        ns: str,
        argv: list[str],
        *,
        check: bool = True,
        timeout: float = 30.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return _run(
            [IP, "netns", "exec", ns, *argv], check=check, timeout=timeout, input_text=input_text
        )

    def build(self) -> None:
        """Namespaces, links, addresses, sysctls; then FRR everywhere; then wait for BGP."""
        for ns in self.namespaces:
            _run([IP, "netns", "add", ns])
            _run([IP, "-n", ns, "link", "set", "lo", "up"])
        r = self.router
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1"):
            self.exec(r, ["sysctl", "-qw", key])
        _run(
            [
                IP,
                "-n",
                r,
                "link",
                "add",
                "c",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                self.client,
            ]
        )
        _run([IP, "-n", r, "addr", "add", f"{ROUTER_LAN}/24", "dev", "c"])
        _run([IP, "-n", r, "link", "set", "c", "up"])
        _run([IP, "-n", self.client, "addr", "add", f"{CLIENT}/24", "dev", "eth0"])
        _run([IP, "-n", self.client, "link", "set", "eth0", "up"])
        _run([IP, "-n", self.client, "route", "add", "default", "via", ROUTER_LAN])
        for node in self.nodes:
            _run(
                [
                    IP,
                    "-n",
                    r,
                    "link",
                    "add",
                    node.name,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    node.ns,
                ]
            )
            _run([IP, "-n", r, "addr", "add", f"{node.router_addr}/31", "dev", node.name])
            _run([IP, "-n", r, "link", "set", node.name, "up"])
            _run([IP, "-n", node.ns, "addr", "add", f"{node.addr}/31", "dev", "eth0"])
            _run([IP, "-n", node.ns, "link", "set", "eth0", "up"])
            _run([IP, "-n", node.ns, "route", "add", "default", "via", node.router_addr])
        if self.ipv6:
            self._add_ipv6()
        if self.lan is not None:
            self._build_lan(self.lan)
        bfd = self.node_frr or self.speaker_bfd
        self._start_frr(r, _router_conf(self.nodes, bfd=bfd, ipv6=self.ipv6))
        if not self.node_frr:
            # vipd's speaker opens the sessions (bgp_yaml). Its BFD comes up with them, so
            # BGP can be tied to BFD before the sessions exist (no Idle wait for BFD).
            for node in self.nodes if self.speaker_bfd else []:
                self._configure(
                    r, f"router bgp {ROUTER_AS}", f"neighbor {node.addr} bfd profile fast"
                )
            return
        for node in self.nodes:
            self._start_frr(node.ns, _node_conf(node, self.vip))
        self.wait_sessions()
        self.bind_bfd()

    def _build_lan(self, lan: str) -> None:
        _run([IP, "-n", lan, "link", "add", "br0", "type", "bridge"])
        _run([IP, "-n", lan, "link", "set", "br0", "up"])
        for node in self.nodes:
            _run([IP, "-n", lan, "link", "add", node.name, "type", "veth", "peer", "name",
                  "lan0", "netns", node.ns])  # fmt: skip
            _run([IP, "-n", lan, "link", "set", node.name, "master", "br0", "up"])
            _run([IP, "-n", node.ns, "addr", "add", f"{self.lan_addr(node)}/24", "dev", "lan0"])
            _run([IP, "-n", node.ns, "link", "set", "lan0", "up"])

    @property
    def client_ns(self) -> str:
        """The client's namespace (the name `vipd.lab.prober.Prober` looks for)."""
        return self.client

    def spawn(
        self,
        ns: str,
        argv: Sequence[str],
        *,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        env: Mapping[str, str] | None = None,
        text: bool = False,
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``ns`` in the background, in its own session; the teardown
        kills it (as `vipd.lab.topology.Lab.spawn` does)."""
        proc: subprocess.Popen[Any] = subprocess.Popen(
            [IP, "netns", "exec", ns, *argv],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            text=text,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def _add_ipv6(self) -> None:
        """The IPv6 half of every link (``nodad``: no duplicate detection delay in a bed)."""
        r = self.router
        for key in ("net.ipv6.conf.all.forwarding=1", "net.ipv6.fib_multipath_hash_policy=1"):
            self.exec(r, ["sysctl", "-qw", key])
        _run([IP, "-n", r, "addr", "add", f"{ROUTER_LAN6}/64", "dev", "c", "nodad"])
        _run([IP, "-n", self.client, "addr", "add", f"{CLIENT6}/64", "dev", "eth0", "nodad"])
        _run([IP, "-n", self.client, "-6", "route", "add", "default", "via", ROUTER_LAN6])
        for node in self.nodes:
            _run(
                [IP, "-n", r, "addr", "add", f"{node.router_addr6}/127", "dev", node.name, "nodad"]
            )
            _run([IP, "-n", node.ns, "addr", "add", f"{node.addr6}/127", "dev", "eth0", "nodad"])
            _run([IP, "-n", node.ns, "-6", "route", "add", "default", "via", node.router_addr6])

    def bgp_yaml(self, node: RoutedNode, hold_time: int = 9) -> str:
        """The ``announce`` section of a vipd config for ``node`` in ``announce.mode: bgp``
        with the router as its one peer (YAML, indented as a top-level section); with
        ``speaker_bfd`` the speaker's BFD on the router's timers."""
        bfd = (
            f"    bfd: {{enabled: true, min_tx_ms: {BFD_MS}, min_rx_ms: {BFD_MS}, "
            f"multiplier: {BFD_MULT}}}\n"
        )
        return (
            "announce:\n"
            "  mode: bgp\n"
            "  bgp:\n"
            f"    local_asn: {NODE_AS}\n"
            f"    router_id: {node.addr}\n"
            f"    hold_time: {hold_time}\n"
            f"    peers: [{{address: {node.router_addr}, asn: {ROUTER_AS}}}"
            + (f", {{address: '{node.router_addr6}', asn: {ROUTER_AS}}}" if self.ipv6 else "")
            + "]\n"
            + (bfd if self.speaker_bfd else "")
        )

    def sessions_up(self, family: str = "ipv4") -> set[str]:
        """The node addresses whose BGP session (``family``: ipv4, ipv6) the router has
        Established."""
        summary = self.show(self.router, f"show bgp {family} unicast summary json")
        return {a for a, p in summary.get("peers", {}).items() if p.get("state") == "Established"}

    def _start_frr(self, ns: str, confs: dict[str, list[str]]) -> None:
        """zebra, bfdd, bgpd in ``ns``, each reading its own config file at start.

        Each daemon gets its own file rather than ``vtysh -f`` of one integrated file: bgpd
        holds its peers ("config-pending") for seconds after a vtysh load, not after a file
        it read itself."""
        run = self.workdir / ns
        run.mkdir()
        shutil.chown(run, "frr", "frr")
        zserv = run / "zserv.api"
        for daemon, extra in (
            ("zebra", ["-z", str(zserv)]),
            ("bfdd", ["-z", str(zserv), "--bfdctl", str(run / "bfdd.sock")]),
            ("bgpd", ["-z", str(zserv)]),
        ):
            conf = run / f"{daemon}.conf"
            conf.write_text("\n".join(["frr defaults datacenter", *confs[daemon]]) + "\n")
            log = open(run / f"{daemon}.log", "wb")  # noqa: SIM115 - owned by the child
            argv = [
                str(FRR_DIR / daemon),
                *("-u", "frr", "-g", "frr", "--vty_socket", str(run), "-P", "0"),
                *("-f", str(conf), "-i", str(run / f"{daemon}.pid"), *extra),
            ]
            proc = subprocess.Popen(
                [IP, "netns", "exec", ns, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            self.procs.append(proc)
            self._wait_socket(run / f"{daemon}.vty", daemon, ns)

    def _wait_socket(self, path: Path, daemon: str, ns: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise LabError(f"{daemon} in {ns} did not open {path} within {timeout} s")
            time.sleep(0.02)

    def vtysh(self, ns: str, *args: str) -> str:
        """Run vtysh against the FRR of ``ns`` (``-c CMD`` or ``-f FILE``); its stdout."""
        run = self.workdir / ns
        return self.exec(ns, [VTYSH, "--vty_socket", str(run), *args]).stdout

    def show(self, ns: str, command: str) -> Any:
        """A ``show … json`` command's answer, parsed."""
        text = self.vtysh(ns, "-c", command)
        return json.loads(text) if text.strip() else {}

    def bind_bfd(self, timeout: float = 30.0) -> None:
        """Tie every BGP session to its BFD session on both ends; wait until BFD is up."""
        for node in self.nodes:
            self._configure(
                self.router, f"router bgp {ROUTER_AS}", f"neighbor {node.addr} bfd profile fast"
            )
            self._configure(
                node.ns, f"router bgp {NODE_AS}", f"neighbor {node.router_addr} bfd profile fast"
            )
        deadline = time.monotonic() + timeout
        want = {n.addr for n in self.nodes}
        while True:
            neighbors = self.show(self.router, "show bgp neighbors json")
            up = {
                addr
                for addr, peer in neighbors.items()
                if peer.get("bgpState") == "Established"
                and peer.get("peerBfdInfo", {}).get("status") == "Up"
            }
            if want <= up:
                return
            if time.monotonic() > deadline:
                raise LabError(f"BFD not up after {timeout} s for {sorted(want - up)}")
            time.sleep(0.05)

    def _configure(self, ns: str, *lines: str) -> None:
        args: list[str] = ["-c", "configure terminal"]
        for line in lines:
            args += ["-c", line]
        self.vtysh(ns, *args)

    def wait_sessions(self, timeout: float = 30.0) -> None:
        """Until the router has every node's BGP session Established."""
        deadline = time.monotonic() + timeout
        want = {n.addr for n in self.nodes}
        while True:
            summary = self.show(self.router, "show bgp ipv4 unicast summary json")
            peers = summary.get("peers", {})
            up = {addr for addr, peer in peers.items() if peer.get("state") == "Established"}
            if want <= up:
                return
            if time.monotonic() > deadline:
                raise LabError(
                    f"BGP sessions not established after {timeout} s: {sorted(want - up)} down"
                )
            time.sleep(0.1)

    def router_nexthops(self, prefix: str | None = None) -> set[str]:
        """The next hops the router's RIB has installed for ``prefix`` (default: the VIP/32)."""
        prefix = prefix or f"{self.vip}/32"
        show = "ipv6" if ":" in prefix else "ip"
        routes = self.show(self.router, f"show {show} route {prefix} json").get(prefix, [])
        hops: set[str] = set()
        for route in routes:
            if route.get("protocol") != "bgp" or not route.get("selected"):
                continue
            for hop in route.get("nexthops", []):
                if hop.get("active") and "ip" in hop:
                    hops.add(str(hop["ip"]))
        return hops

    def flaps(self) -> int:
        """BFD sessions gone down plus BGP sessions dropped, on the router, since the start.

        A test that judges what the router forwards compares this before and after: on a
        loaded machine a node's bfdd can miss its 300 ms, the session drops and the node's
        path goes with it, which is load and not what the test is about."""
        bfd = json.loads(self.vtysh(self.router, "-c", "show bfd peers counters json") or "[]")
        peers = self.show(self.router, "show bgp ipv4 unicast summary json").get("peers", {})
        return sum(int(p.get("session-down", 0)) for p in bfd) + sum(
            int(p.get("connectionsDropped", 0)) for p in peers.values()
        )

    def kernel_nexthops(self, prefix: str | None = None) -> set[str]:
        """The next hops of ``prefix`` in the router's kernel FIB (what packets follow)."""
        prefix = prefix or f"{self.vip}/32"
        family = "-6" if ":" in prefix else "-4"
        out = _run([IP, "-j", "-n", self.router, family, "route", "show", prefix]).stdout.strip()
        hops: set[str] = set()
        for route in json.loads(out) if out else []:
            if "gateway" in route:
                hops.add(str(route["gateway"]))
            for hop in route.get("nexthops", []):
                if "gateway" in hop:
                    hops.add(str(hop["gateway"]))
        return hops

    def teardown(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.procs.clear()
        cleanup(self.prefix)


def main(argv: list[str] | None = None) -> int:
    """``python -m vipd.lab.routed up [--nodes N]``: build a bed, print how to reach it, keep
    it until Ctrl-C (or SIGTERM), then tear it down. ``… clean PREFIX``: remove a bed that a
    killed run left behind."""
    parser = argparse.ArgumentParser(prog="python -m vipd.lab.routed", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build a bed and keep it until interrupted")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--prefix", default=None)
    clean = sub.add_parser("clean", help="remove a bed's leftovers by prefix")
    clean.add_argument("prefix")
    args = parser.parse_args(argv)
    if args.command == "clean":
        print("\n".join(cleanup(args.prefix)) or "nothing to remove")
        return 0
    problem = frr_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SystemExit runs the teardown
    with RoutedBed(nodes=args.nodes, prefix=args.prefix) as bed:
        print(f"bed {bed.prefix}: router {bed.router}, client {bed.client}, VIP {bed.vip}")
        for node in bed.nodes:
            print(f"  {node.name}: {node.ns} {node.addr} (router end {node.router_addr})")
        print(f"  vtysh: ip netns exec {bed.router} vtysh --vty_socket {bed.workdir / bed.router}")
        print(
            f"  announce from n1: ip -n {bed.nodes[0].ns} route add local {bed.vip}/32 dev lo "
            f"table local proto {DEFAULT_PROTOCOL}; ip -n {bed.nodes[0].ns} route add "
            f"{bed.vip}/32 dev lo table {TABLE} proto {DEFAULT_PROTOCOL}"
        )
        print("Ctrl-C tears it down.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
