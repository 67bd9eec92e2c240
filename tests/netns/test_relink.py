"""Interfaces that come and go, on real kernels: a 3-node lab, VRRP and Lease.

What it tests (RFC 9568 §6.4: the interface deleted is a Shutdown, back again a Startup):

- VRRP (n1 200, n2 150, n3 100, preempt on, 0.1 s adverts). The leader's veth pair is
  deleted and a new one made with the same names (``Lab.replug``: eth0 with a new index and
  MAC, on the bridge, with its address): n2 takes over, n1 rejoins on fresh sockets and
  preempts back. The same for the backup n2, which comes back with a *new* address: it is a
  backup again, and it takes over when n1 stops, its adverts from the new address (n3's
  ``/status`` names its master by the source of the adverts it accepts). The leader's
  address changed in place (``Lab.readdress``): it keeps the VIP, and its adverts come from
  the new address. With ``election.vrrp.vmac`` the macvlan goes with its parent and is made
  again on the new one. With an IPv6 VIP the adverts' source is the new interface's own
  link-local address. After every step, exactly one node holds the VIP for a while.
- Lease (the Lease API emulator of tests/netns/test_lease.py in the client namespace, no
  health section): the leader's interface re-created: it still holds the Lease (alone in its
  view: no healthy peer to give way to), binds the VIP on the new interface and announces
  it; a follower's re-created: it follows again, and takes over when it is the only one left.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.netns.test_lease import LeaseCluster, lease_cluster  # noqa: F401 (a fixture)
from tests.netns.waiting import wait_for
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.topology import VIP4, VIP6, Lab, Node

SETTLE = 1.0  # seconds with exactly one holder that count as settled


def status(lab: Lab, node: Node) -> dict[str, Any]:
    """vipd's /status inside ``node``."""
    code = (
        "import urllib.request as u;"
        "print(u.urlopen('http://127.0.0.1:2112/status', timeout=5).read().decode())"
    )
    out = lab.exec(node.ns, [sys.executable, "-c", code], check=False)
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}


def master_seen_by(lab: Lab, node: Node) -> str | None:
    master = status(lab, node).get("master") or {}
    return master.get("address")


def settled(
    lab: Lab, who: str, logs: Callable[[], str], timeout: float = 10.0, vip: str = VIP4
) -> None:
    """``who`` alone holds the VIP, and still alone ``SETTLE`` seconds later."""
    took = wait_for(lambda: lab.holders(vip) == [who], timeout, step=0.05)
    assert took is not None, f"VIP on {lab.holders(vip)}, expected {who}\n{logs()}"
    end = time.monotonic() + SETTLE
    while time.monotonic() < end:
        assert lab.holders(vip) == [who], f"VIP on {lab.holders(vip)}\n{logs()}"
        time.sleep(0.05)


def link_local(lab: Lab, node: Node) -> str | None:
    out = lab.ip(node.ns, "-j", "-6", "addr", "show", "dev", "eth0", "scope", "link")
    found = [
        str(a["local"])
        for link in json.loads(out or "[]")
        for a in link.get("addr_info", [])
        if str(a.get("local", "")).startswith("fe80:")
    ]
    return found[0] if found else None


@pytest.fixture
def vrrp(lab: Lab, request: pytest.FixtureRequest) -> Iterator[dict[str, VipdDaemon]]:
    overrides: dict[str, Any] = getattr(request, "param", {})
    spec = VrrpSpec(**{"vip": VIP4, "advert_interval": 0.1, **overrides})
    daemons = {n.name: VipdDaemon(lab, n, spec, lab.nodes) for n in lab.nodes}
    for d in daemons.values():
        d.start()
    try:
        yield daemons
    finally:
        for d in daemons.values():
            d.stop(signal.SIGKILL, timeout=5)


def tails(daemons: dict[str, VipdDaemon]) -> Callable[[], str]:
    return lambda: "\n".join(f"--- {n}\n{d.log_tail(25)}" for n, d in sorted(daemons.items()))


def test_vrrp_leader_and_backup_re_created_and_the_leader_readdressed(
    lab: Lab, vrrp: dict[str, VipdDaemon]
) -> None:
    logs = tails(vrrp)
    n1, n2, n3 = lab.nodes
    settled(lab, "n1", logs, timeout=20.0)

    # The leader's interface deleted and made again: n2 covers, n1 rejoins and preempts.
    lab.replug(n1)
    settled(lab, "n1", logs)
    text = vrrp["n1"].log_text()
    assert "interface unusable: leaving the election" in text, logs()
    assert "interface re-created: fresh sockets on it" in text, logs()
    assert "became active" in text.split("interface re-created")[-1], logs()
    assert wait_for(lambda: master_seen_by(lab, n3) == n1.ipv4, 5) is not None, logs()

    # The backup's, with a new address: a backup again; it takes over when n1 stops.
    new2 = "10.77.0.62"
    lab.replug(n2, ipv4=new2)
    ok = wait_for(
        lambda: "interface-up" in vrrp["n2"].log_text().split("interface re-created")[-1], 10
    )
    assert ok is not None, logs()
    settled(lab, "n1", logs)
    assert vrrp["n2"].state() == "BACKUP", logs()
    assert vrrp["n1"].stop(signal.SIGTERM) == 0
    settled(lab, "n2", logs)
    assert wait_for(lambda: master_seen_by(lab, n3) == new2, 5) is not None, logs()
    vrrp["n1"].start()
    settled(lab, "n1", logs, timeout=20.0)

    # The leader's address changed in place: it keeps the VIP, adverts from the new one.
    new1 = "10.77.0.51"
    lab.readdress(n1, n1.ipv4, new1)
    assert wait_for(lambda: master_seen_by(lab, n3) == new1, 5) is not None, logs()
    assert wait_for(lambda: master_seen_by(lab, n2) == new1, 5) is not None, logs()
    assert "source address changed" in vrrp["n1"].log_text(), logs()
    settled(lab, "n1", logs)
    assert status(lab, n1).get("source") == new1


@pytest.mark.parametrize("vrrp", [{"vmac": True}], indirect=True, ids=["vmac"])
def test_vrrp_vmac_leader_re_created_gets_its_macvlan_back(
    lab: Lab, vrrp: dict[str, VipdDaemon]
) -> None:
    logs = tails(vrrp)
    n1 = lab.nodes[0]
    settled(lab, "n1", logs, timeout=20.0)
    lab.replug(n1)
    settled(lab, "n1", logs)
    links = json.loads(lab.ip(n1.ns, "-j", "link", "show"))
    macvlan = [link for link in links if link.get("ifname") == "vrrp.51"]
    assert macvlan and macvlan[0].get("address") == "00:00:5e:00:01:33", links
    assert "interface re-created: fresh sockets on it" in vrrp["n1"].log_text(), logs()


@pytest.mark.parametrize("vrrp", [{"vip": VIP6}], indirect=True, ids=["ipv6"])
def test_vrrp_ipv6_leader_re_created_advertises_from_its_new_link_local_address(
    lab: Lab, vrrp: dict[str, VipdDaemon]
) -> None:
    """RFC 9568 §5.1.2.1: the IPv6 source is the interface's link-local address, which a new
    interface (a new MAC) changes."""
    logs = tails(vrrp)
    n1, _, n3 = lab.nodes
    settled(lab, "n1", logs, timeout=20.0, vip=VIP6)
    before = link_local(lab, n1)
    assert wait_for(lambda: master_seen_by(lab, n3) == before, 5) is not None, logs()
    lab.replug(n1)
    after = link_local(lab, n1)
    assert after is not None and after != before
    settled(lab, "n1", logs, vip=VIP6)
    assert wait_for(lambda: master_seen_by(lab, n3) == after, 5) is not None, logs()


def test_lease_leader_and_follower_re_created(
    lease_cluster: Callable[..., LeaseCluster],  # noqa: F811
) -> None:
    c = lease_cluster()
    lab = c.lab
    leader = c.leader()
    settled(lab, leader, c.logs)
    lab.replug(lab.node(leader))
    # Alone in its view (no health section: no peer's health to give way to), it keeps the
    # Lease, and binds and announces the VIP on the new interface.
    settled(lab, leader, c.logs)
    text = c.daemons[leader].log_text()
    assert "interface re-created: fresh sockets on it" in text, c.logs()
    assert "VIP bound and announced" in text.split("interface re-created")[-1], c.logs()

    follower, other = (n for n in sorted(c.daemons) if n != leader)
    lab.replug(lab.node(follower))
    ok = wait_for(lambda: "interface re-created" in c.daemons[follower].log_text(), 10)
    assert ok is not None, c.logs()
    settled(lab, leader, c.logs)
    # The re-created follower is the one left: it takes the released Lease.
    c.daemons[other].stop(signal.SIGKILL, timeout=5)
    assert c.daemons[leader].stop(signal.SIGTERM) == 0
    settled(lab, follower, c.logs, timeout=20.0)
    c.check_invariant()
