"""vipd.ipvs: the plan (diffs, order, idempotency, scope), the pool rules (bootstrap, never
remove the last, join only once healthy) and the reconciler's passes over a fake kernel
table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vipd import metrics
from vipd.ipvs.plan import (
    AddServer,
    AddService,
    DelServer,
    DelService,
    EditServer,
    EditService,
    Op,
    RealServer,
    Service,
    ServiceKey,
    Table,
    describe,
    desired,
    plan,
    select_pool,
)
from vipd.ipvs.reconciler import IpvsReconciler, IpvsSpec

A = IPv4Address
VIP = A("10.0.0.100")
KEY = ServiceKey(VIP, 6443)
SVC = Service(KEY, "rr")
N1, N2, N3 = A("10.0.0.11"), A("10.0.0.12"), A("10.0.0.13")
BACKENDS = (N1, N2, N3)


def rs(addr: IPv4Address, fwd: Any = "nat", weight: int = 1) -> RealServer:
    return RealServer(addr, 6443, fwd, weight)


def table(*servers: RealServer, scheduler: str = "rr") -> Table:
    return Table(Service(KEY, scheduler), frozenset(servers))


# -- plan ------------------------------------------------------------------------------------


def test_nothing_to_nothing() -> None:
    assert plan(None, None) == []


def test_create_service_then_servers_in_order() -> None:
    assert plan(None, table(rs(N2), rs(N1))) == [
        AddService(SVC),
        AddServer(KEY, rs(N1)),
        AddServer(KEY, rs(N2)),
    ]


def test_remove_is_one_service_delete() -> None:
    assert plan(table(rs(N1), rs(N2)), None) == [DelService(KEY)]


def test_membership_change_adds_before_it_deletes() -> None:
    ops = plan(table(rs(N1), rs(N2)), table(rs(N2), rs(N3)))
    assert ops == [AddServer(KEY, rs(N3)), DelServer(KEY, rs(N1))]


def test_scheduler_weight_and_forwarding_are_edited_in_place() -> None:
    ops = plan(table(rs(N1), rs(N2, weight=5)), table(rs(N1, "dr"), rs(N2), scheduler="wlc"))
    assert ops == [
        EditService(Service(KEY, "wlc")),
        EditServer(KEY, rs(N1, "dr")),
        EditServer(KEY, rs(N2)),
    ]


def test_a_service_that_is_not_vipds_is_out_of_scope() -> None:
    other = Table(Service(ServiceKey(A("10.96.0.1"), 443), "rr"), frozenset())
    with pytest.raises(ValueError, match="out of scope"):
        plan(other, table(rs(N1)))


addrs = st.sampled_from([A(f"10.0.0.{i}") for i in range(11, 17)])
servers = st.builds(
    RealServer, addrs, st.just(6443), st.sampled_from(["nat", "dr"]), st.integers(0, 3)
)
tables = st.one_of(
    st.none(),
    st.builds(
        lambda sched, ss: Table(Service(KEY, sched), frozenset({s.ident: s for s in ss}.values())),
        st.sampled_from(["rr", "wlc", "sh"]),
        st.lists(servers, max_size=6),
    ),
)


def apply(t: Table | None, ops: Sequence[Op]) -> Table | None:
    """A model of the kernel's table: what the ops do to it."""
    for op in ops:
        if isinstance(op, AddService):
            assert t is None
            t = Table(op.service, frozenset())
        elif isinstance(op, EditService):
            assert t is not None
            t = Table(op.service, t.servers)
        elif isinstance(op, DelService):
            assert t is not None and t.service.key == op.key
            t = None
        else:
            assert t is not None and op.key == t.service.key == KEY
            rest = {s for s in t.servers if s.ident != op.server.ident}
            if isinstance(op, AddServer):
                assert len(rest) == len(t.servers)
            else:
                assert len(rest) == len(t.servers) - 1
            t = Table(
                t.service,
                frozenset(rest | ({op.server} if not isinstance(op, DelServer) else set())),
            )
    return t


@settings(deadline=None)  # a loaded shared machine is not a failure
@given(tables)
def test_plan_of_a_converged_table_is_empty(t: Table | None) -> None:
    assert plan(t, t) == []


@settings(deadline=None)  # a loaded shared machine is not a failure
@given(tables, tables)
def test_plan_reaches_the_goal_and_is_then_empty(a: Table | None, b: Table | None) -> None:
    ops = plan(a, b)
    after = apply(a, ops)
    assert after == b
    assert plan(after, b) == []
    # only vipd's key is ever touched
    for op in ops:
        key = op.service.key if isinstance(op, AddService | EditService) else op.key
        assert key == KEY


def test_describe_is_one_line() -> None:
    assert (
        describe(AddServer(KEY, rs(N1)))
        == "AddServer 10.0.0.11:6443 (nat, weight 1) of 10.0.0.100:6443/tcp"
    )
    assert describe(DelService(KEY)) == "DelService 10.0.0.100:6443/tcp"
    six = ServiceKey(IPv6Address("fd00::100"), 6443)
    assert str(six) == "[fd00::100]:6443/tcp"


def test_desired_is_no_service_on_a_follower() -> None:
    assert desired(False, SVC, [N1, N2], "nat") is None
    assert desired(True, SVC, [N1, N2], "dr") == table(rs(N1, "dr"), rs(N2, "dr"))


# -- pool rules ------------------------------------------------------------------------------


def test_only_healthy_backends_join() -> None:
    pool = select_pool(BACKENDS, healthy={N1, N3}, current={N1, N2})
    assert pool.members == (N1, N3) and pool.rule == "healthy"


def test_bootstrap_adds_one_backend_to_an_empty_pool_before_it_is_healthy() -> None:
    pool = select_pool(BACKENDS, healthy=set(), current=set())
    assert pool.members == (N1,) and pool.rule == "bootstrap"
    # this node first, when it is a backend (kubeadm init runs here)
    assert select_pool(BACKENDS, set(), set(), local=N2).members == (N2,)


def test_bootstrap_member_leaves_once_another_is_healthy() -> None:
    assert select_pool(BACKENDS, healthy={N3}, current={N1}).members == (N3,)


def test_the_last_remaining_backend_is_never_removed() -> None:
    pool = select_pool(BACKENDS, healthy=set(), current={N2})
    assert pool.members == (N2,) and pool.rule == "keep-last"
    # several left and all failed at once: one stays (this node's if it is one)
    assert select_pool(BACKENDS, set(), {N2, N3}).members == (N2,)
    assert select_pool(BACKENDS, set(), {N2, N3}, local=N3).members == (N3,)


def test_a_member_that_is_no_longer_a_backend_is_not_kept() -> None:
    pool = select_pool((N1, N2), healthy=set(), current={N3})
    assert pool.members == (N1,) and pool.rule == "bootstrap"


def test_no_backends_no_pool() -> None:
    assert select_pool((), set(), {N1}).members == ()


@settings(deadline=None)  # a loaded shared machine is not a failure
@given(
    st.lists(addrs, unique=True, min_size=1, max_size=5),
    st.sets(addrs),
    st.sets(addrs),
)
def test_pool_invariants(
    backends: list[IPv4Address], healthy: set[IPv4Address], current: set[IPv4Address]
) -> None:
    pool = select_pool(backends, healthy, current)
    assert pool.members, "a configured pool is never empty"
    assert set(pool.members) <= set(backends)
    if healthy & set(backends):
        assert set(pool.members) == healthy & set(backends)
    else:
        assert len(pool.members) == 1


# -- the reconciler over a fake kernel -------------------------------------------------------


def gauge(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


class FakeKernel:
    def __init__(self) -> None:
        self.table: Table | None = None
        self.passes = 0
        self.closed = False

    def observe(self) -> Table | None:
        self.passes += 1
        return self.table

    def apply(self, ops: Sequence[Op]) -> None:
        self.table = apply(self.table, ops)

    def remove(self) -> bool:
        had = self.table is not None
        self.table = None
        return had

    def close(self) -> None:
        self.closed = True


class FakeNat:
    def __init__(self) -> None:
        self.on = False

    def ensure(self) -> bool:
        changed, self.on = not self.on, True
        return changed

    def remove(self) -> bool:
        changed, self.on = self.on, False
        return changed


class Health:
    def __init__(self) -> None:
        self.up: set[IPv4Address | IPv6Address] = set()

    def healthy(self, addr: IPv4Address | IPv6Address) -> bool:
        return addr in self.up


def test_reconciler_follows_leadership_and_health() -> None:
    kernel, nat, health = FakeKernel(), FakeNat(), Health()
    spec = IpvsSpec(SVC, "nat", BACKENDS, local=N1)
    rec = IpvsReconciler(spec, health, logging.getLogger("test"), actuator=lambda: kernel, nat=nat)

    def members() -> set[IPv4Address | IPv6Address]:
        assert kernel.table is not None
        return {s.addr for s in kernel.table.servers}

    async def scenario() -> None:
        await rec.reconcile()
        await rec.settle_nat()
        assert kernel.table is None and not nat.on  # follower: no service, no NAT
        rec.set_leader(True)
        await rec.reconcile()
        await rec.settle_nat()
        assert members() == {N1} and nat.on  # bootstrap: this node, before it is healthy
        health.up = {N2, N3}
        await rec.reconcile()
        assert members() == {N2, N3}
        assert gauge("vipd_ipvs_real_servers", state="healthy") == 2
        assert gauge("vipd_ipvs_service_present") == 1
        health.up = {N3}
        await rec.reconcile()
        assert members() == {N3}
        health.up = set()
        await rec.reconcile()
        assert members() == {N3}  # the last one stays
        assert gauge("vipd_ipvs_real_servers", state="unhealthy") == 1
        assert gauge("vipd_ipvs_real_servers", state="healthy") == 0
        health.up = {N2}
        await rec.reconcile()
        assert members() == {N2}
        before = kernel.table
        await rec.reconcile()
        assert kernel.table is before  # converged: nothing applied
        kernel.table = table(rs(N2), rs(N1))  # a real server added by hand
        await rec.reconcile()
        assert members() == {N2}
        # A NAT convergence still in flight from the passes above is skipped over by the next
        # pass and re-poked when it ends (run() would converge again): let it finish first.
        await rec.settle_nat()
        rec.set_leader(False)
        await rec.reconcile()
        await rec.settle_nat()
        assert kernel.table is None and not nat.on  # step-down removes it all
        assert gauge("vipd_ipvs_service_present") == 0
        rec.set_leader(True)
        await rec.reconcile()
        await rec.release()
        assert kernel.table is None and not nat.on and kernel.closed

    asyncio.run(scenario())
    assert rec.stats.reconcile_errors == 0
    assert rec.stats.services_removed == 2


def test_reconciler_counts_a_failed_pass_and_keeps_going() -> None:
    class Broken(FakeKernel):
        def apply(self, ops: Sequence[Op]) -> None:
            raise OSError("EPERM")

    kernel = Broken()
    rec = IpvsReconciler(
        IpvsSpec(SVC, "dr", BACKENDS), Health(), logging.getLogger("test"), actuator=lambda: kernel
    )

    async def scenario() -> None:
        rec.set_leader(True)
        assert await rec.reconcile() is None
        assert await rec.reconcile() is None
        await rec.release()

    before = metrics.REGISTRY.get_sample_value("vipd_reconcile_errors_total", {"actuator": "ipvs"})
    asyncio.run(scenario())
    assert rec.stats.reconcile_errors == 2
    after = metrics.REGISTRY.get_sample_value("vipd_reconcile_errors_total", {"actuator": "ipvs"})
    assert before is not None and after == before + 2
