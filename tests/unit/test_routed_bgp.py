"""`vipd.routed.bgp.BgpRoutes` on a fake actuator and a fake speaker: the order of bindings
and announcements, the stop sequence, a dead speaker's prefixes announced again, and the
vipd_bgp_* metrics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from ipaddress import IPv4Address, IPv6Address, ip_network
from typing import Any, cast

from vipd import metrics
from vipd.routed.actuator import RouteActuator
from vipd.routed.bgp import BgpRoutes
from vipd.routed.plan import (
    AddBinding,
    AddRoute,
    DelBinding,
    DelRoute,
    IPNetwork,
    Observed,
    Op,
    Phase,
)

VIP = IPv4Address("10.79.0.100")
NET = ip_network("10.79.0.100/32")
ROUTER = IPv4Address("10.78.1.0")


class FakeActuator:
    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.bound: set[IPNetwork] = set()
        self.table: set[IPNetwork] = set()
        self.closed = False

    def observe(self) -> Observed:
        return Observed(frozenset(self.table), frozenset(self.bound))

    def apply(self, ops: Iterable[Op]) -> None:
        for op in ops:
            self.log.append(op)
            if isinstance(op, AddBinding):
                self.bound.add(op.dst)
            elif isinstance(op, DelBinding):
                self.bound.discard(op.dst)
            elif isinstance(op, DelRoute):
                self.table.discard(op.dst)
            else:
                raise AssertionError(f"bgp mode wrote a table route: {op}")

    def close(self) -> None:
        self.closed = True


class FakeSpeaker:
    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.wanted: set[IPNetwork] = set()
        self.alive = True
        self.stopped: bool | None = None
        self.held: list[tuple[str, IPv4Address | IPv6Address]] = []

    def start(self) -> None:
        pass

    def announce(self, prefix: IPNetwork) -> None:
        self.log.append(("announce", prefix))
        self.wanted.add(prefix)

    def withdraw(self, prefix: IPNetwork) -> None:
        self.log.append(("withdraw", prefix))
        self.wanted.discard(prefix)

    def announced(self) -> frozenset[IPNetwork]:
        return frozenset(self.wanted) if self.alive else frozenset()

    def sessions(self) -> Mapping[IPv4Address | IPv6Address, bool]:
        return {ROUTER: self.alive}

    def bfd_down(self, peer: IPv4Address | IPv6Address) -> None:
        self.held.append(("down", peer))

    def bfd_up(self, peer: IPv4Address | IPv6Address) -> None:
        self.held.append(("up", peer))

    def stop(self, graceful: bool) -> None:
        self.stopped = graceful


def make() -> tuple[BgpRoutes, FakeActuator, FakeSpeaker, list[Any]]:
    log: list[Any] = []
    act, sp = FakeActuator(log), FakeSpeaker(log)
    return BgpRoutes(cast(RouteActuator, act), sp), act, sp, log


def sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def test_announce_binds_first_and_withdraw_unbinds_last() -> None:
    routes, act, sp, log = make()
    assert routes.converge({VIP: Phase.ANNOUNCED}) == [AddBinding(NET), AddRoute(NET)]
    assert log == [AddBinding(NET), ("announce", NET)]
    assert routes.converge({VIP: Phase.ANNOUNCED}) == []  # converged
    log.clear()
    assert routes.converge({VIP: Phase.DRAINING}) == [DelRoute(NET)]
    assert act.bound == {NET} and sp.announced() == frozenset()
    assert routes.converge({}) == [DelBinding(NET)]
    assert log == [("withdraw", NET), DelBinding(NET)]


def test_a_table_route_left_by_routing_table_mode_is_removed() -> None:
    routes, act, _sp, log = make()
    act.table.add(NET)
    routes.converge({})
    assert act.table == set() and log == [DelRoute(NET)]


def test_the_stop_withdraws_drains_then_unbinds_and_close_stops_gracefully() -> None:
    routes, act, sp, log = make()
    routes.converge({VIP: Phase.ANNOUNCED})
    log.clear()
    routes.withdraw_all([VIP], drain=1.5, sleep=lambda s: log.append(("sleep", s)))
    assert log == [("withdraw", NET), ("sleep", 1.5), DelBinding(NET)]
    routes.close()
    assert sp.stopped is True and act.closed


def test_a_dead_speaker_is_counted_once_and_not_told_again() -> None:
    routes, _act, sp, log = make()
    before = sample("vipd_bgp_withdrawals_total", reason="speaker-died")
    routes.converge({VIP: Phase.ANNOUNCED})
    assert sample("vipd_bgp_announced_prefixes") == 1
    assert sample("vipd_bgp_session_up", peer=str(ROUTER)) == 1
    sp.alive = False
    routes.publish()  # the driver's on_change
    assert sample("vipd_bgp_withdrawals_total", reason="speaker-died") == before + 1
    assert sample("vipd_bgp_announced_prefixes") == 0
    assert sample("vipd_bgp_session_up", peer=str(ROUTER)) == 0
    routes.publish()
    assert sample("vipd_bgp_withdrawals_total", reason="speaker-died") == before + 1  # once
    log.clear()
    routes.converge({VIP: Phase.ANNOUNCED})
    assert log == []  # the driver replays to its next process, not the caller


def test_a_withdrawal_while_the_speaker_is_dead_is_still_passed_on() -> None:
    routes, _act, sp, log = make()
    routes.converge({VIP: Phase.ANNOUNCED})
    sp.alive = False
    log.clear()
    routes.withdraw_all([VIP], drain=0.0, sleep=lambda s: None)
    assert ("withdraw", NET) in log and sp.wanted == set()


def test_the_bfd_hooks_reach_the_speaker() -> None:
    routes, _act, sp, _log = make()
    routes.converge({VIP: Phase.ANNOUNCED})
    before = sample("vipd_bgp_withdrawals_total", reason="bfd-down")
    routes.bfd_down(ROUTER)
    routes.bfd_up(ROUTER)
    assert sp.held == [("down", ROUTER), ("up", ROUTER)]
    assert sample("vipd_bgp_withdrawals_total", reason="bfd-down") == before + 1
