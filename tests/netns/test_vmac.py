"""The virtual MAC option (election.vrrp.vmac) on real kernels: 3 nodes on one bridge.

What it proves: the VIP lives on the macvlan ``vrrp.<vrid>`` with the RFC 9568 §7.3 MAC; only
the leader answers ARP for it, and only with the virtual MAC (the parents, whose arp_ignore
vipd sets, stay silent); the leader's adverts leave with the virtual MAC as source; after a
node death the client's neighbour entry for the VIP still holds the same MAC and the client
reaches the new leader; a SIGTERM handover works and the macvlan goes away at stop with the
parent's sysctls restored; a crash leftover is reused, and a foreign link of that name is
replaced.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from collections.abc import Callable

import pytest

from tests.netns.waiting import wait_for
from vipd.host import vmac
from vipd.lab import faults
from vipd.lab.daemons import Daemon, VrrpSpec, make_daemon
from vipd.lab.responder import Responder
from vipd.lab.topology import CLIENT4, VIP4, Lab
from vipd.vrrp import state

VRID = 51
LINK = vmac.link_name(VRID)
MAC = vmac.virtual_mac(VRID)
SPEC = VrrpSpec(vip=VIP4, vrid=VRID, advert_interval=0.1, vmac=True)


class VmacCluster:
    def __init__(self, lab: Lab, spec: VrrpSpec = SPEC) -> None:
        self.lab = lab
        self.spec = spec
        self.daemons: dict[str, Daemon] = {
            n.name: make_daemon("vipd", lab, n, spec) for n in lab.nodes
        }
        self.responders = {n.name: Responder(lab, n) for n in lab.nodes}
        for r in self.responders.values():
            r.start()

    def start(self) -> None:
        for d in self.daemons.values():
            d.start()

    def holders(self) -> list[str]:
        return self.lab.holders(self.spec.vip)

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{d.log_tail(15)}" for n, d in sorted(self.daemons.items()))

    def converge(self, expected: str, timeout: float = 6.0) -> None:
        assert wait_for(lambda: self.holders() == [expected], timeout), (
            f"VIP on {self.holders()}, expected {expected}\n{self.logs()}"
        )

    def link(self, node: str) -> dict[str, object] | None:
        out = self.lab.ip(self.lab.node(node).ns, "-d", "-j", "link", "show", LINK, check=False)
        return json.loads(out)[0] if out.strip() else None

    def sysctl(self, node: str, key: str) -> str:
        out = self.lab.exec(self.lab.node(node).ns, ["sysctl", "-n", key])
        return out.stdout.strip()

    def ask(self, timeout: float = 0.5) -> str:
        code = textwrap.dedent(
            f"""
            import socket
            s = socket.socket()
            s.settimeout({timeout})
            try:
                s.connect(({self.spec.vip!r}, 6443))
                print(s.recv(64).decode().strip())
            except OSError:
                print('')
            """
        )
        out = self.lab.exec(self.lab.client_ns, [sys.executable, "-c", code], check=False)
        return out.stdout.strip()

    def client_neighbour_mac(self) -> str | None:
        out = self.lab.ip(self.lab.client_ns, "-j", "neigh", "show", self.spec.vip, check=False)
        entries = json.loads(out) if out.strip() else []
        macs = [e.get("lladdr") for e in entries if e.get("lladdr")]
        return str(macs[0]).lower() if macs else None

    def arp_replies(self) -> list[str]:
        """Broadcast one ARP request for the VIP from the client; every sender MAC that
        answers within 0.5 s (a parent answering too would show up as a second MAC)."""
        code = textwrap.dedent(
            f"""
            import socket, struct, time, ipaddress
            vip = ipaddress.IPv4Address({self.spec.vip!r}).packed
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
            s.bind(("eth0", 0))
            mine = s.getsockname()[4]
            me = socket.inet_aton({CLIENT4!r})
            arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mine + me + b"\\0" * 6 + vip
            s.send(b"\\xff" * 6 + mine + b"\\x08\\x06" + arp)
            s.settimeout(0.05)
            end = time.monotonic() + 0.5
            seen = []
            while time.monotonic() < end:
                try:
                    f = s.recv(2048)
                except socket.timeout:
                    continue
                if len(f) >= 42 and f[12:14] == b"\\x08\\x06" and f[20:22] == b"\\x00\\x02" \\
                        and f[28:32] == vip:
                    seen.append(f[22:28].hex(":"))
            print(" ".join(seen))
            """
        )
        out = self.lab.exec(self.lab.client_ns, [sys.executable, "-c", code])
        return out.stdout.split()

    def advert_source_macs(self, seconds: float = 0.5) -> set[str]:
        """Source MACs of the VRRP frames the client sees on the LAN for ``seconds``."""
        code = textwrap.dedent(
            f"""
            import socket, time
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
            s.bind(("eth0", 0))
            s.settimeout(0.05)
            end = time.monotonic() + {seconds}
            seen = set()
            while time.monotonic() < end:
                try:
                    f = s.recv(2048)
                except socket.timeout:
                    continue
                if len(f) > 34 and f[23] == 112:
                    seen.add(f[6:12].hex(":"))
            print(" ".join(sorted(seen)))
            """
        )
        out = self.lab.exec(self.lab.client_ns, [sys.executable, "-c", code])
        return set(out.stdout.split())


@pytest.fixture
def vc(make_lab: Callable[..., Lab]) -> Callable[..., VmacCluster]:
    def build(nodes: int = 3) -> VmacCluster:
        return VmacCluster(make_lab(nodes))

    return build


def test_vip_on_the_virtual_mac_survives_node_death_without_an_arp_change(
    vc: Callable[..., VmacCluster],
) -> None:
    c = vc()
    c.start()
    c.converge("n1")
    for name in ("n1", "n2", "n3"):
        # Backups make theirs too (a start on a loaded machine may still be importing).
        assert wait_for(lambda: c.link(name) is not None, 8.0, 0.05), c.logs()  # noqa: B023
        link = c.link(name)
        assert link is not None
        assert str(link["address"]).lower() == MAC
        info = link["linkinfo"]
        assert isinstance(info, dict) and info["info_kind"] == "macvlan"
        assert info["info_data"]["mode"] == "bridge"
        assert c.sysctl(name, "net.ipv4.conf.eth0.arp_ignore") == "1"
    # The VIP is on the macvlan, not on eth0.
    eth0 = c.lab.ip(c.lab.node("n1").ns, "addr", "show", "dev", "eth0")
    assert VIP4 not in eth0
    assert VIP4 in c.lab.ip(c.lab.node("n1").ns, "addr", "show", "dev", LINK)
    assert wait_for(lambda: c.ask() == "n1", 3.0), c.logs()
    assert c.client_neighbour_mac() == MAC
    # One answer to an ARP request for the VIP, from the virtual MAC: neither the leader's
    # parent nor a backup answers with a node MAC.
    assert c.arp_replies() == [MAC]
    # RFC 9568 §7.3: the Active router's adverts carry the virtual MAC as source.
    assert c.advert_source_macs() == {MAC}

    faults.kill(c.lab, faults.NodeRig(c.lab.node("n1"), c.daemons["n1"], c.responders["n1"]))
    bound = state.master_down_interval(3, 150, 10) + 1.0
    assert wait_for(lambda: "n2" in c.holders(), bound), c.logs()
    assert wait_for(lambda: c.ask(0.3) == "n2", 3.0), c.logs()
    # The client's entry for the VIP never changed MAC: only the bridge relearned the port.
    assert c.client_neighbour_mac() == MAC
    assert c.arp_replies() == [MAC]
    assert "n3" not in c.holders()

    # n1 comes back: its macvlan (with the VIP on it) was left by the SIGKILL and is reused;
    # it preempts, and the client still sees the same MAC.
    assert c.link("n1") is not None
    faults.restore(
        c.lab, faults.NodeRig(c.lab.node("n1"), c.daemons["n1"], c.responders["n1"], fault="kill")
    )
    c.converge("n1", timeout=8.0)
    assert "reused_leftover=true" in c.daemons["n1"].log_text(), c.daemons["n1"].log_tail()
    assert wait_for(lambda: c.ask(0.3) == "n1", 3.0), c.logs()
    assert c.client_neighbour_mac() == MAC


def test_sigterm_hands_over_and_removes_the_macvlan(vc: Callable[..., VmacCluster]) -> None:
    c = vc()
    before = c.sysctl("n1", "net.ipv4.conf.eth0.arp_ignore")
    c.start()
    c.converge("n1")
    assert wait_for(lambda: c.ask() == "n1", 3.0), c.logs()
    n1 = c.daemons["n1"]
    n1.stop(signal.SIGTERM, timeout=None)
    assert wait_for(lambda: c.holders() == ["n2"], 5.0), c.logs()
    assert n1.wait(5.0) == 0, n1.log_tail()
    assert "new leader heard: releasing the VIP" in n1.log_text(), n1.log_tail()
    assert c.link("n1") is None, "the macvlan outlived vipd"
    assert c.sysctl("n1", "net.ipv4.conf.eth0.arp_ignore") == before
    assert wait_for(lambda: c.ask(0.3) == "n2", 3.0), c.logs()
    assert c.client_neighbour_mac() == MAC


def test_a_foreign_link_of_that_name_is_replaced(vc: Callable[..., VmacCluster]) -> None:
    c = vc(1)
    ns = c.lab.node("n1").ns
    # The right MAC in the wrong mode (private: the parent would never see peers' adverts).
    c.lab.ip(ns, "link", "add", LINK, "link", "eth0", "type", "macvlan", "mode", "private")
    c.lab.ip(ns, "link", "set", LINK, "address", MAC)
    c.start()
    c.converge("n1", timeout=8.0)
    link = c.link("n1")
    assert link is not None and str(link["address"]).lower() == MAC
    info = link["linkinfo"]
    assert isinstance(info, dict) and info["info_data"]["mode"] == "bridge"
    assert "reused_leftover=false" in c.daemons["n1"].log_text()
    assert c.daemons["n1"].stop(signal.SIGTERM, timeout=5.0) == 0
    assert c.link("n1") is None
    assert c.holders() == []
