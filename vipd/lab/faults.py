"""Fault injection for the lab: node death, graceful stop, link loss, restore, and nftables chaos.

What it is:

- ``kill``: node death. The node's eth0 goes down AND every process in its namespace gets
  SIGKILL (daemon and responder alike). SIGKILL alone would not be death: keepalived (and any
  daemon) leaves the VIP bound and the kernel keeps answering ARP for it.
- ``term``: SIGTERM to the daemon only (a graceful step-down: VRRP priority 0).
- ``linkdown``: eth0 down only; the processes live on and see the carrier go.
- ``apidown``: the node's API server dies (the responder, which carries the stand-in API
  server's port and its HTTPS health endpoint, gets SIGKILL); the daemon and the link live
  on. Only meaningful with vipd's health checks on: the node must give the VIP away.
- ``stop``: SIGSTOP to the daemon's whole process tree (a hung or descheduled leader: the
  kernel keeps answering for the VIP it has bound, the daemon sends nothing); ``restore``
  sends SIGCONT and the daemon resumes where it stopped, VIP still bound.
- ``restore``: undo whichever of those was applied: eth0 up, responder and daemon started
  again if they are not running. A killed node comes back as a rebooted node would: the VIP
  it had bound when it died is removed first, since a reboot does not keep addresses. (A
  ``linkdown`` node keeps whatever its daemon left bound: how the daemon handles that is
  exactly what the lab should show, not hide.)
- ``move_vip``: a hand-made failover (delete, add, gratuitous ARP / unsolicited NA) that
  needs no daemon, for testing the measuring itself.
- ``drop_gratuitous_arp``: a LAN that drops gratuitous ARP (some do): the bridge drops every
  broadcast ARP whose sender address is the VIP, so no node hears another's announcement
  and the wire backstop of vipd's Lease mode (``vipd.host.arpwatch.ClaimWatch``) is out of
  play, as for an IPv6 VIP; ``pass_gratuitous_arp`` undoes it.
- ``Chaos``: nftables rules on the lan namespace's bridge (``bridge`` family, ``forward``
  hook, which sees each flooded copy with its output port): drop VRRP (IPv4 protocol 112,
  IPv6 next header 112) between given nodes, and random loss with ``numgen random mod 100 <
  N``. Every rule has a counter and a comment so tests can prove it dropped something.

What it must not do: judge the outcome (the runner does), or touch anything outside the lab's
namespaces; nftables rules live only in the lab's lan namespace and go away with it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from vipd.lab.daemons import Daemon, descendants
from vipd.lab.responder import Responder
from vipd.lab.topology import VIP4, VIP6, Lab, LabError, Node, kill_netns_processes

FaultName = Literal["kill", "term", "linkdown", "apidown", "stop"]
FAULTS: tuple[FaultName, ...] = ("kill", "term", "linkdown", "apidown", "stop")


@dataclass
class NodeRig:
    """What runs on one node, and which fault (if any) is applied to it right now."""

    node: Node
    daemon: Daemon | None = None
    responder: Responder | None = None
    fault: FaultName | None = None


def kill(lab: Lab, rig: NodeRig) -> None:
    """Node death: link down first (no last words on the wire), then SIGKILL everything."""
    lab.set_link(rig.node, False)
    kill_netns_processes(rig.node.ns)
    if rig.daemon is not None:
        rig.daemon.wait(timeout=2.0)  # reap: they are our children
    if rig.responder is not None:
        rig.responder.reap()
    rig.fault = "kill"


def term(lab: Lab, rig: NodeRig) -> None:
    """SIGTERM to the daemon only; returns at once (restore waits for the exit)."""
    if rig.daemon is None:
        raise LabError(f"no daemon on {rig.node.name} to stop")
    rig.daemon.stop(signal.SIGTERM, timeout=None)
    rig.fault = "term"


def linkdown(lab: Lab, rig: NodeRig) -> None:
    lab.set_link(rig.node, False)
    rig.fault = "linkdown"


def apidown(lab: Lab, rig: NodeRig) -> None:
    """The API server dies at once (SIGKILL): its port refuses, its health checks fail."""
    if rig.responder is None:
        raise LabError(f"no API server stand-in on {rig.node.name} to kill")
    rig.responder.stop(signal.SIGKILL)
    rig.fault = "apidown"


def _signal_tree(rig: NodeRig, sig: int) -> None:
    if rig.daemon is None or rig.daemon.pid is None or not rig.daemon.running():
        raise LabError(f"no running daemon on {rig.node.name} to signal")
    # keepalived runs its VRRP instance in a child process: stop (or resume) all of them.
    for pid in [rig.daemon.pid, *descendants(rig.daemon.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop(lab: Lab, rig: NodeRig) -> None:
    """SIGSTOP the daemon's process tree; restore sends SIGCONT."""
    _signal_tree(rig, signal.SIGSTOP)
    rig.fault = "stop"


INJECT: dict[FaultName, Callable[[Lab, NodeRig], None]] = {
    "kill": kill,
    "term": term,
    "linkdown": linkdown,
    "apidown": apidown,
    "stop": stop,
}


def inject(lab: Lab, rig: NodeRig, fault: FaultName) -> None:
    INJECT[fault](lab, rig)


def restore(lab: Lab, rig: NodeRig, *, stop_timeout: float = 10.0) -> None:
    """Bring the node back: link up, responder and daemon running again."""
    if rig.fault == "kill":
        for vip in (VIP4, VIP6):  # a rebooted node has no VIP bound
            drop_address(lab, rig.node, vip)
    if rig.fault == "stop":
        _signal_tree(rig, signal.SIGCONT)
    daemon = rig.daemon
    # After `term` the daemon may still be stepping down: let it finish (it is our child,
    # so waiting also reaps it), and only then start the new one.
    if daemon is not None and rig.fault == "term" and daemon.wait(stop_timeout) is None:
        daemon.stop(signal.SIGKILL, timeout=5.0)
    lab.set_link(rig.node, True)
    if rig.responder is not None and not rig.responder.running():
        rig.responder.start()
    if rig.daemon is not None and not rig.daemon.running():
        rig.daemon.start()
    rig.fault = None


def _plen(vip: str) -> int:
    return 32 if ipaddress.ip_address(vip).version == 4 else 128


def drop_address(lab: Lab, node: Node, vip: str) -> bool:
    """Remove ``vip`` from the node's eth0 if bound; True if it was."""
    if ipaddress.ip_address(vip) not in {ipaddress.ip_address(a) for a in lab.addresses(node)}:
        return False
    lab.ip(node.ns, "addr", "del", f"{vip}/{_plen(vip)}", "dev", "eth0")
    return True


# A gratuitous ARP request (IPv4) or an unsolicited Neighbour Advertisement with the Override
# flag (IPv6), sent once from inside a node namespace. Stdlib only: arping is not installed
# on these machines, and scapy takes a second to import.
_ANNOUNCE = r"""
import ipaddress, socket, struct, sys
ifname, vip = sys.argv[1], ipaddress.ip_address(sys.argv[2])
mac = bytes.fromhex(open(f"/sys/class/net/{ifname}/address").read().strip().replace(":", ""))
if vip.version == 4:
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, vip.packed, bytes(6),
                      vip.packed)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    s.send(b"\xff" * 6 + mac + b"\x08\x06" + arp)
else:
    # type 136, code 0, checksum 0 (the kernel fills it in), flags O, target, TLLA option
    na = struct.pack("!BBHI16sBB6s", 136, 0, 0, 0x20000000, vip.packed, 2, 1, mac)
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, socket.if_nametoindex(ifname))
    s.sendto(na, ("ff02::1", 0, 0, socket.if_nametoindex(ifname)))
"""


def announce(lab: Lab, node: Node, vip: str) -> None:
    lab.exec(node.ns, [sys.executable, "-c", _ANNOUNCE, "eth0", vip])


GARP_TABLE = "vipdgarp"


def drop_gratuitous_arp(lab: Lab, vip: str) -> None:
    """See the module docstring. Replies to a client's ARP request are unicast and pass."""
    script = (
        f"add table bridge {GARP_TABLE}\n"
        f"add chain bridge {GARP_TABLE} drops {{ type filter hook forward priority -10; }}\n"
        f"add rule bridge {GARP_TABLE} drops ether daddr ff:ff:ff:ff:ff:ff "
        f'arp saddr ip {vip} counter drop comment "gratuitous ARP for the VIP"\n'
    )
    proc = lab.exec(lab.lan_ns, ["nft", "-f", "-"], input_text=script, check=False)
    if proc.returncode != 0:
        raise LabError(f"nft failed: {proc.stderr.strip()}\n{script}")


def gratuitous_arp_dropped(lab: Lab) -> int:
    """How many frames `drop_gratuitous_arp` has dropped (0 when it is not in place)."""
    proc = lab.exec(lab.lan_ns, ["nft", "-j", "list", "table", "bridge", GARP_TABLE], check=False)
    if proc.returncode != 0:
        return 0
    total = 0
    for item in json.loads(proc.stdout).get("nftables", []):
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                total += int(expr["counter"].get("packets", 0))
    return total


def pass_gratuitous_arp(lab: Lab) -> None:
    lab.exec(lab.lan_ns, ["nft", "delete", "table", "bridge", GARP_TABLE], check=False)


def move_vip(lab: Lab, src: Node | None, dst: Node, vip: str, *, gap: float = 0.0) -> float:
    """Move ``vip`` by hand: remove from ``src``, wait ``gap``, bind on ``dst``, announce.

    Returns the monotonic time at which it was removed from ``src``.
    """
    t = time.monotonic()
    if src is not None:
        drop_address(lab, src, vip)
    if gap > 0:
        time.sleep(gap)
    extra = ["nodad"] if ipaddress.ip_address(vip).version == 6 else []
    lab.ip(dst.ns, "addr", "add", f"{vip}/{_plen(vip)}", "dev", "eth0", *extra)
    announce(lab, dst, vip)
    return t


class Chaos:
    """nftables chaos on the lab's bridge (table ``bridge vipdlab`` in the lan namespace)."""

    TABLE = "vipdlab"

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self._ready = False

    def _nft(self, script: str) -> None:
        proc = self.lab.exec(self.lab.lan_ns, ["nft", "-f", "-"], input_text=script, check=False)
        if proc.returncode != 0:
            raise LabError(f"nft failed: {proc.stderr.strip()}\n{script}")

    def _ensure(self) -> None:
        if self._ready:
            return
        self._nft(
            f"add table bridge {self.TABLE}\n"
            f"add chain bridge {self.TABLE} forward "
            "{ type filter hook forward priority 0; policy accept; }\n"
        )
        self._ready = True

    def _port(self, name: str) -> str:
        if name == "c" or name == "client":
            return "c"
        return self.lab.node(name).port

    def drop_vrrp(self, src: str, dst: str, *, both_ways: bool = True) -> None:
        """Drop VRRP from node ``src`` to node ``dst`` (and back, unless ``both_ways=False``)."""
        self._ensure()
        pairs = [(src, dst), (dst, src)] if both_ways else [(src, dst)]
        lines = []
        for a, b in pairs:
            pa, pb = self._port(a), self._port(b)
            for match, fam in (("ip protocol 112", "v4"), ("ip6 nexthdr 112", "v6")):
                lines.append(
                    f'add rule bridge {self.TABLE} forward iifname "{pa}" '
                    f'oifname "{pb}" {match} counter drop '
                    f'comment "vrrp-{fam} {a}>{b}"'
                )
        self._nft("\n".join(lines) + "\n")

    def allow_vrrp(self, src: str, dst: str) -> int:
        """Lift ``drop_vrrp``'s rules from ``src`` to ``dst`` only (the rest stay); how many."""
        if not self._ready:
            return 0
        out = self.lab.exec(
            self.lab.lan_ns, ["nft", "-a", "-j", "list", "table", "bridge", self.TABLE]
        ).stdout
        wanted = {f"vrrp-{fam} {src}>{dst}" for fam in ("v4", "v6")}
        handles = [
            int(rule["handle"])
            for item in json.loads(out).get("nftables", [])
            if (rule := item.get("rule")) and rule.get("comment") in wanted
        ]
        if handles:
            self._nft(
                "".join(f"delete rule bridge {self.TABLE} forward handle {h}\n" for h in handles)
            )
        return len(handles)

    def partition_vrrp(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """No VRRP crosses between the two groups of nodes (other traffic still flows)."""
        b_side = list(side_b)
        for a in side_a:
            for b in b_side:
                self.drop_vrrp(a, b)

    def loss(
        self,
        percent: int,
        *,
        src: str | None = None,
        dst: str | None = None,
        vrrp_only: bool = False,
    ) -> None:
        """Drop ``percent``% of frames (chosen at random) entering from ``src`` and/or leaving
        to ``dst`` (node names, or ``c`` for the client; None = any port)."""
        if not 0 <= percent <= 100:
            raise ValueError(f"loss percent must be 0..100 (got {percent})")
        self._ensure()
        where = []
        if src is not None:
            where.append(f'iifname "{self._port(src)}"')
        if dst is not None:
            where.append(f'oifname "{self._port(dst)}"')
        label = f"{src or '*'}>{dst or '*'}"
        matches = ["ip protocol 112", "ip6 nexthdr 112"] if vrrp_only else [""]
        lines = []
        for m in matches:
            tag = f"{label} {m}".strip()
            sel = " ".join([*where, m]).strip()
            # A counting rule ahead of the drop: how many frames the loss rule was offered.
            lines.append(f'add rule bridge {self.TABLE} forward {sel} counter comment "seen {tag}"')
            lines.append(
                f"add rule bridge {self.TABLE} forward {sel} "
                f"numgen random mod 100 < {percent} counter drop "
                f'comment "loss{percent} {tag}"'
            )
        self._nft("\n".join(lines) + "\n")

    def counters(self) -> dict[str, int]:
        """Packets counted by each rule, by its comment."""
        if not self._ready:
            return {}
        out = self.lab.exec(
            self.lab.lan_ns, ["nft", "-j", "list", "table", "bridge", self.TABLE]
        ).stdout
        result: dict[str, int] = {}
        for item in json.loads(out).get("nftables", []):
            rule = item.get("rule")
            if not rule or "comment" not in rule:
                continue
            packets = 0
            for expr in rule.get("expr", []):
                if "counter" in expr:
                    packets = int(expr["counter"]["packets"])
            result[str(rule["comment"])] = result.get(str(rule["comment"]), 0) + packets
        return result

    def clear(self) -> None:
        """Remove every chaos rule (the whole table)."""
        if self._ready:
            with contextlib.suppress(LabError):
                self._nft(f"delete table bridge {self.TABLE}\n")
            self._ready = False
