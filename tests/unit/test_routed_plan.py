"""vipd.routed.plan: phases, drain, and the route plan's order and idempotence."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_imports import GRAPH
from tests.unit.test_purity import FORBIDDEN, imported_modules
from vipd.routed.plan import (
    AddBinding,
    AddRoute,
    DelBinding,
    DelRoute,
    IPNetwork,
    Observed,
    Op,
    Phase,
    Track,
    host_network,
    plan,
    step,
    wake_at,
)

V4 = ip_address("10.79.0.100")
V6 = ip_address("fd00:79::100")
OTHER = ip_address("10.79.0.7")
N4 = ip_network("10.79.0.100/32")
ROOT = Path(__file__).resolve().parents[2] / "vipd"


@pytest.mark.parametrize("module", ["routed/plan.py", "routed/ecmp.py", "routed/core.py"])
def test_routed_core_is_pure(module: str) -> None:
    assert imported_modules(ROOT / module) & FORBIDDEN == set()
    name = "vipd." + module.removesuffix(".py").replace("/", ".")
    pure = {"vipd", "vipd.routed.plan", "vipd.routed.ecmp", "vipd.health.tracker"}
    assert GRAPH[name] <= pure


def apply(observed: Observed, ops: list[Op]) -> Observed:
    announced, bound = set(observed.announced), set(observed.bound)
    for op in ops:
        if isinstance(op, AddBinding):
            bound.add(op.dst)
        elif isinstance(op, AddRoute):
            assert op.dst in bound, "announced before the node can answer"
            announced.add(op.dst)
        elif isinstance(op, DelRoute):
            announced.discard(op.dst)
        else:
            assert op.dst not in announced, "binding removed while still announced"
            bound.discard(op.dst)
    return Observed(frozenset(announced), frozenset(bound))


def test_announce_binds_first_then_routes() -> None:
    assert plan(Observed(), {V4: Phase.ANNOUNCED}) == [AddBinding(N4), AddRoute(N4)]


def test_draining_removes_only_the_announcement() -> None:
    now = Observed(frozenset({N4}), frozenset({N4}))
    assert plan(now, {V4: Phase.DRAINING}) == [DelRoute(N4)]


def test_withdrawn_removes_route_then_binding() -> None:
    now = Observed(frozenset({N4}), frozenset({N4}))
    assert plan(now, {V4: Phase.WITHDRAWN}) == [DelRoute(N4), DelBinding(N4)]
    assert plan(now, {}) == [DelRoute(N4), DelBinding(N4)]


def test_converged_costs_nothing() -> None:
    now = Observed(frozenset({N4}), frozenset({N4}))
    assert plan(now, {V4: Phase.ANNOUNCED}) == []
    assert plan(Observed(frozenset(), frozenset({N4})), {V4: Phase.DRAINING}) == []
    assert plan(Observed(), {}) == []


def test_stale_routes_of_unconfigured_vips_are_cleaned() -> None:
    stale = host_network(OTHER)
    now = Observed(frozenset({stale, N4}), frozenset({stale}))
    assert plan(now, {V4: Phase.ANNOUNCED}) == [AddBinding(N4), DelRoute(stale), DelBinding(stale)]


def test_ipv6_is_a_128() -> None:
    assert plan(Observed(), {V6: Phase.ANNOUNCED}) == [
        AddBinding(ip_network("fd00:79::100/128")),
        AddRoute(ip_network("fd00:79::100/128")),
    ]


def test_step_drains_before_withdrawing() -> None:
    t = step(10.0, True, Track())
    assert t == Track(Phase.ANNOUNCED, 10.0)
    assert step(11.0, True, t) is t  # staying announced keeps its start
    t = step(20.0, False, t, drain=2.0)
    assert t == Track(Phase.DRAINING, 20.0)
    assert step(21.9, False, t, drain=2.0) == t
    assert wake_at([t], drain=2.0) == 22.0
    t = step(22.0, False, t, drain=2.0)
    assert t == Track(Phase.WITHDRAWN, 22.0)
    assert wake_at([t]) is None


def test_step_zero_drain_withdraws_at_once_and_back_to_announce_keeps_binding() -> None:
    assert step(5.0, False, Track(Phase.ANNOUNCED, 0.0), drain=0.0).phase is Phase.WITHDRAWN
    draining = Track(Phase.DRAINING, 5.0)
    back = step(6.0, True, draining)
    assert back.phase is Phase.ANNOUNCED
    bound_only = Observed(frozenset(), frozenset({N4}))
    assert plan(bound_only, {V4: back.phase}) == [AddRoute(N4)]
    with pytest.raises(ValueError, match="drain"):
        step(0.0, False, Track(), drain=-1.0)


VIPS: list[IPv4Address | IPv6Address] = [V4, V6, OTHER]
nets = st.frozensets(st.sampled_from([host_network(v) for v in VIPS]))
desired_st = st.dictionaries(st.sampled_from(VIPS), st.sampled_from(list(Phase)))


@given(announced=nets, bound=nets, desired=desired_st)
def test_plan_converges_in_order_and_is_idempotent(
    announced: frozenset[IPNetwork],
    bound: frozenset[IPNetwork],
    desired: dict[IPv4Address | IPv6Address, Phase],
) -> None:
    # Every state vipd itself leaves has each announcement bound (the order rules); apply()
    # asserts the plan never breaks that on the way.
    start = Observed(announced, bound | announced)
    ops = plan(start, desired)
    kinds = [type(op) for op in ops]
    order: list[type] = [AddBinding, AddRoute, DelRoute, DelBinding]
    assert kinds == sorted(kinds, key=order.index)
    end = apply(start, ops)
    assert end.announced == {host_network(v) for v, p in desired.items() if p is Phase.ANNOUNCED}
    assert end.bound == {host_network(v) for v, p in desired.items() if p is not Phase.WITHDRAWN}
    assert plan(end, desired) == []


def test_an_unbound_announcement_gets_its_binding_first() -> None:
    # A crash or a hand edit can leave the table route without the local one.
    assert plan(Observed(frozenset({N4}), frozenset()), {V4: Phase.ANNOUNCED}) == [AddBinding(N4)]
