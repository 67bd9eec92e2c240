"""Several VIPs and dual stack in network namespaces: vipd against Debian's keepalived 2.2.7
with one IPv4 and one IPv6 virtual router on each side, and a 3-node vipd lab with two VIPs.

What it tests:

- ``test_dual_stack_against_keepalived``: a two-node lab, vipd on one node and keepalived on
  the other, each with the IPv4 VIP 10.77.0.100 and the IPv6 VIP fd00:77::100 on VRID 51
  (keepalived: two ``vrrp_instance``s, one per family, as RFC 9568 §7 has it; vipd: ``vips``,
  which runs one virtual router per family). Both directions: the higher-priority side
  starts first and takes both VIPs; the lower one starts and must stay backup in both
  families past its Master_Down_Interval (a wire mistake in either family shows as a second
  master, or as a receive error in keepalived's log); then the leader dies (link down, then
  SIGKILL) and the other side takes both VIPs.
- ``test_three_nodes_two_vips_node_death_moves_both``: three vipd nodes with both VIPs; the
  leader (n1, priority 200) holds both, it dies, and n2 (150) ends up with both while n3
  holds neither; n1 restarts and preempts both back.
- ``test_lease_moves_the_whole_set``: the same two VIPs with the Lease backend (the lab's
  Lease API emulator): one holder binds both, and when it dies the next holder (the one the
  Lease names) binds both.

Who holds a VIP is always read from the kernel (``Lab.holders``), never from logs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.netns.waiting import wait_for
from vipd.lab import faults
from vipd.lab.daemons import Daemon, DaemonKind, LeaseSpec, VipdDaemon, VrrpSpec, make_daemon
from vipd.lab.fakes.lease_emulator import Emulator, serve_in_netns
from vipd.lab.faults import NodeRig
from vipd.lab.topology import CLIENT4, VIP4, VIP6, Lab

pytestmark = pytest.mark.netns

HIGH, LOW = 200, 150
ADVERT = 0.1
MARGIN = 1.5  # s beyond the RFC time: start-up, scheduling under load, netlink
STARTUP = 5.0  # s from spawn to a daemon holding a VIP it may take (vipd imports included)
SPEC = VrrpSpec(vip=VIP4, extra_vips=(VIP6,), advert_interval=ADVERT)

# keepalived 2.2.7's receive-side complaints (see test_interop.KEEPALIVED_RX_ERRORS).
KEEPALIVED_RX_ERRORS = re.compile(
    r"Invalid VRRPv3 checksum|wrong version|advertisement interval mismatch|"
    r"unexpected ip number count|expected \d+ VIPs but received|invalid TTL|"
    r"ip_tot_len mismatch|vrrp packet too|Invalid packet type|not present in MASTER advert|"
    r"Unknown VRID"
)
KEEPALIVED_STATE = re.compile(r"\((VI6?_51)\) Entering (MASTER|BACKUP|FAULT) STATE")
VIPD_ROUTER = re.compile(r'msg="?became (active|backup)"? .*?family=(IPv[46])')


def mdi(priority: int) -> float:
    """RFC 9568 §6.1 Master_Down_Interval of a backup with ``priority``."""
    return 3 * ADVERT + (256 - priority) * ADVERT / 256


def both(lab: Lab) -> tuple[list[str], list[str]]:
    return lab.holders(VIP4), lab.holders(VIP6)


def keepalived_states(d: Daemon) -> dict[str, str]:
    """The last state of each keepalived instance in its current log."""
    out: dict[str, str] = {}
    for inst, st in KEEPALIVED_STATE.findall(d.log_text()):
        out[inst] = st
    return out


def vipd_routers(d: Daemon) -> dict[str, str]:
    """The last ``became …`` of each of vipd's virtual routers, by family."""
    out: dict[str, str] = {}
    for word, family in VIPD_ROUTER.findall(d.log_text()):
        out[family] = word
    return out


def report(lab: Lab, *daemons: Daemon) -> str:
    return f"holders {both(lab)}\n" + "\n".join(
        f"--- {d.node.name} {d.kind}\n{d.log_text()[-4000:]}" for d in daemons
    )


@pytest.mark.parametrize("high_kind", ["vipd", "keepalived"])
def test_dual_stack_against_keepalived(
    make_lab: Callable[..., Lab], keepalived_ok: None, high_kind: DaemonKind
) -> None:
    lab = make_lab(2)
    n1, n2 = lab.nodes
    low_kind: DaemonKind = "keepalived" if high_kind == "vipd" else "vipd"
    high = make_daemon(high_kind, lab, n1, SPEC)
    low = make_daemon(low_kind, lab, n2, SPEC)
    ka = high if high_kind == "keepalived" else low
    vd = low if ka is high else high
    try:
        high.start(HIGH)
        took = wait_for(lambda: both(lab) == (["n1"], ["n1"]), STARTUP + mdi(HIGH) + MARGIN)
        assert took is not None, report(lab, high)
        low.start(LOW)
        # The lower side must stay backup in both families for longer than its down timer.
        assert wait_for(lambda: low.running() and low.log_text().strip() != "", STARTUP)
        wait_for(lambda: False, STARTUP / 2 + mdi(LOW) + MARGIN)
        assert both(lab) == (["n1"], ["n1"]), report(lab, high, low)
        if ka is low:
            assert keepalived_states(ka) == {"VI_51": "BACKUP", "VI6_51": "BACKUP"}, report(lab, ka)
            assert vipd_routers(vd) == {"IPv4": "active", "IPv6": "active"}, report(lab, vd)
        else:
            assert keepalived_states(ka) == {"VI_51": "MASTER", "VI6_51": "MASTER"}, report(lab, ka)
            assert vipd_routers(vd) == {"IPv4": "backup", "IPv6": "backup"}, report(lab, vd)
        assert not KEEPALIVED_RX_ERRORS.search(ka.log_text()), report(lab, ka)

        # The leader dies: the other side takes both VIPs, each family on its own timer.
        faults.kill(lab, NodeRig(n1, high))
        moved = wait_for(lambda: both(lab) == (["n2"], ["n2"]), mdi(LOW) + MARGIN)
        assert moved is not None, report(lab, high, low)
        if ka is low:
            assert keepalived_states(ka) == {"VI_51": "MASTER", "VI6_51": "MASTER"}
        else:
            assert vipd_routers(vd) == {"IPv4": "active", "IPv6": "active"}, report(lab, vd)
        assert not KEEPALIVED_RX_ERRORS.search(ka.log_text()), report(lab, ka)
        print(f"\n[dual stack, {high_kind} high] takeover of both VIPs in {moved:.3f} s")
    finally:
        for d in (high, low):
            d.stop()


def test_three_nodes_two_vips_node_death_moves_both(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(3)
    daemons = {n.name: make_daemon("vipd", lab, n, SPEC) for n in lab.nodes}
    try:
        for name in ("n1", "n2", "n3"):
            daemons[name].start()  # n1 200, n2 150, n3 100
        took = wait_for(lambda: both(lab) == (["n1"], ["n1"]), STARTUP + mdi(100) + MARGIN)
        assert took is not None, report(lab, *daemons.values())
        # n2 may have held the VIPs while n1 sat out its start-up hold; it logs "became backup"
        # just after it has let them go, so the log is read until it says so.
        settled = wait_for(
            lambda: vipd_routers(daemons["n2"]) == {"IPv4": "backup", "IPv6": "backup"}, MARGIN
        )
        assert settled is not None, report(lab, *daemons.values())
        assert both(lab) == (["n1"], ["n1"]), report(lab, *daemons.values())

        faults.kill(lab, NodeRig(lab.node("n1"), daemons["n1"]))
        moved = wait_for(lambda: both(lab) == (["n2"], ["n2"]), mdi(150) + MARGIN)
        assert moved is not None, report(lab, *daemons.values())
        assert vipd_routers(daemons["n2"]) == {"IPv4": "active", "IPv6": "active"}
        assert vipd_routers(daemons["n3"]) == {"IPv4": "backup", "IPv6": "backup"}

        # n1 comes back: it preempts both routers, and n2 lets both VIPs go.
        lab.set_link(lab.node("n1"), True)
        daemons["n1"].start()
        back = wait_for(lambda: both(lab) == (["n1"], ["n1"]), STARTUP + 3 * mdi(200) + MARGIN)
        assert back is not None, report(lab, *daemons.values())
        print(f"\n[3 nodes, 2 VIPs] node death moved both VIPs in {moved:.3f} s")
    finally:
        for d in daemons.values():
            d.stop()


def test_lease_moves_the_whole_set(make_lab: Callable[..., Lab]) -> None:
    duration, renew, retry = 5, 3.0, 1.0  # the lab's fast Lease profile
    lab = make_lab(3)
    emu = Emulator(lab.workdir, [n.name for n in lab.nodes], host=CLIENT4, port=16443)
    for n in lab.nodes:
        emu.kubeconfig(n.name)
    serve_in_netns(emu, lab.client_ns)
    spec = VrrpSpec(
        vip=VIP4,
        extra_vips=(VIP6,),
        lease=LeaseSpec(f"https://{CLIENT4}:16443", duration, renew, retry),
    )
    daemons = {n.name: VipdDaemon(lab, n, spec, lab.nodes) for n in lab.nodes}
    try:
        for d in daemons.values():
            d.start()

        def one_holder_of_both() -> str | None:
            v4, v6 = both(lab)
            return v4[0] if len(v4) == 1 and v4 == v6 else None

        assert wait_for(lambda: one_holder_of_both() is not None, 30, step=0.05), report(
            lab, *daemons.values()
        )
        old = one_holder_of_both()
        assert old is not None
        faults.kill(lab, NodeRig(lab.node(old), daemons[old]))

        def new_holder() -> str | None:
            v4, v6 = both(lab)
            live = [h for h in v4 if h != old]
            return live[0] if len(live) == 1 and [h for h in v6 if h != old] == live else None

        moved = wait_for(lambda: new_holder() is not None, duration + retry + 10, step=0.05)
        assert moved is not None, report(lab, *daemons.values())
        new = new_holder()
        rec = emu.store.get("kube-system", "vipd-cp-lock")
        assert rec is not None and rec["spec"]["holderIdentity"] == new
        print(f"\n[lease, 2 VIPs] {old} died, {new} holds both after {moved:.3f} s")
    finally:
        for d in daemons.values():
            d.stop()
        emu.stop()
