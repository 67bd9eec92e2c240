"""bgp mode with an IPv4 and an IPv6 VIP: each announced over the session of its own family
(next-hop self) to a real FRR 8.4 router, on `vipd.lab.routed.RoutedBed` with ``ipv6=True``
and no FRR on the nodes. A module of its own so that its bed is built after
tests/netns/test_bgp.py's is gone."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.netns.test_bgp import BgpFabric
from tests.netns.test_routed import VIP, wait_for
from tests.netns.test_routed_agent import LEAVE_BOUND
from tests.prereq import missing
from vipd.lab.routed import VIP6, RoutedBed, frr_problem
from vipd.routed.exabgp import exabgp_problem


class DualFabric(BgpFabric):
    def __init__(self, bed: RoutedBed) -> None:
        super().__init__(bed)
        for node in bed.nodes:
            text = self.config(node).read_text()
            self.config(node).write_text(text.replace(f"vip: {VIP}", f"vips: [{VIP}, '{VIP6}']"))

    def paths6(self) -> set[str]:
        """The router's kernel next hops for the IPv6 VIP, as node names (a next hop may be
        the node's global address or, on its link, a link-local one)."""
        by_addr = {n.addr6: n.name for n in self.bed.nodes}
        out = self.bed.exec(
            self.bed.router, ["ip", "-j", "-6", "route", "show", f"{VIP6}/128"]
        ).stdout.strip()
        names: set[str] = set()
        for route in json.loads(out) if out else []:
            for hop in [route, *route.get("nexthops", [])]:
                if "gateway" in hop:
                    names.add(by_addr.get(hop["gateway"], hop.get("dev", hop["gateway"])))
        return names


@pytest.fixture(scope="module")
def dual(netns_ok: None) -> Iterator[DualFabric]:
    for problem in (frr_problem(), exabgp_problem()):
        if problem is not None:
            missing(problem)
    with RoutedBed(nodes=3, node_frr=False, ipv6=True) as bed:
        fab = DualFabric(bed)
        try:
            for node in bed.nodes:
                fab.start(node.name)
            yield fab
        finally:
            fab.close()


def test_dual_stack_each_vip_goes_to_the_router_of_its_family(dual: DualFabric) -> None:
    took = wait_for(
        "three paths of each family",
        lambda: dual.paths() == {"n1", "n2", "n3"} and dual.paths6() == {"n1", "n2", "n3"},
        30,
    )
    print(f"\ndual stack: three IPv4 and three IPv6 paths after {took:.2f} s")
    assert dual.bed.sessions_up("ipv6") == {n.addr6 for n in dual.bed.nodes}
    assert "10.79.0.100" not in dual.bed.show(dual.bed.router, "show bgp ipv6 unicast json").get(
        "routes", {}
    )
    dual.set_health("n2", "fail")
    gone = wait_for(
        "n2's paths leave",
        lambda: "n2" not in dual.paths() and "n2" not in dual.paths6(),
        LEAVE_BOUND,
    )
    print(f"n2 unhealthy -> both its paths out in {gone:.2f} s")
    assert dual.paths6() == {"n1", "n3"}
    dual.set_health("n2", "ok")
    wait_for("n2 back in both", lambda: "n2" in dual.paths() and "n2" in dual.paths6(), 10)
