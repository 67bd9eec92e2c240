"""vipd.routed.leader: routing-table mode's ``pool: leader`` actuator, against fake routes.

The route calls run on the actuator's worker thread; each test waits for that thread's work
with ``close()`` (which waits for everything queued, a drain included) or polls the fake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import Any, cast

from tests.unit.test_routed_bgp import FakeActuator, FakeSpeaker
from vipd import config
from vipd.election import VipLink
from vipd.preflight import Preflight
from vipd.routed.actuator import RouteActuator
from vipd.routed.bgp import BgpRoutes
from vipd.routed.leader import RouteAddress, leader_actuators
from vipd.routed.plan import AddBinding, DelBinding, Observed, Op, Phase, host_network, plan

VIP = ip_address("10.79.0.100")
assert isinstance(VIP, IPv4Address)
NET = ip_network("10.79.0.100/32")
NET6 = ip_network("fd00:79::100/128")
CFG = config.parse(
    {
        "vips": ["10.79.0.100", "fd00:79::100"],
        "node": "n1",
        "announce": {
            "mode": "bgp",
            "pool": "leader",
            "drain": 0.2,
            "bgp": {
                "local_asn": 65100,
                "peers": [
                    {"address": "10.78.1.0", "asn": 65000},
                    {"address": "fd00:78:1::", "asn": 65000},
                ],
            },
        },
        "election": {"vrrp": {"vrid": 7}},
    },
    env={},
    hostname="h",
)


class FakeRoutes:
    """The kernel's routes as the actuator sees them, and every plan applied, in order."""

    def __init__(self, announced: bool = False) -> None:
        net = host_network(VIP)
        self.state = Observed(
            frozenset({net}) if announced else frozenset(),
            frozenset({net}) if announced else frozenset(),
        )
        self.ops: list[Op] = []
        self.lock = threading.Lock()
        self.closed = False

    def observe(self) -> Observed:
        return self.state

    def converge(self, desired: Mapping[IPv4Address | IPv6Address, Phase]) -> list[Op]:
        ops = plan(self.state, desired)
        net = host_network(VIP)
        phase = desired.get(VIP, Phase.WITHDRAWN)
        self.state = Observed(
            frozenset({net}) if phase is Phase.ANNOUNCED else frozenset(),
            frozenset({net}) if phase is not Phase.WITHDRAWN else frozenset(),
        )
        with self.lock:
            self.ops += ops
        return ops

    def close(self) -> None:
        self.closed = True

    def names(self) -> list[str]:
        with self.lock:
            return [type(op).__name__ for op in self.ops]


def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_holder_announces_binding_first_and_withdraws_announcement_first() -> None:
    routes = FakeRoutes()
    addr = RouteAddress(VIP, 0.2, lambda: routes)
    addr.add()
    until(addr.observe)
    assert routes.names() == ["AddBinding", "AddRoute"]
    start = time.monotonic()
    assert addr.remove() is True
    addr.close()  # waits for the drain
    assert time.monotonic() - start >= 0.2
    assert routes.names() == ["AddBinding", "AddRoute", "DelRoute", "DelBinding"]
    assert not addr.observe() and routes.closed


def test_a_start_removes_what_a_killed_predecessor_left() -> None:
    routes = FakeRoutes(announced=True)
    addr = RouteAddress(VIP, 0.0, lambda: routes)
    addr.close()
    assert routes.names() == ["DelRoute", "DelBinding"]


def test_elected_again_during_the_drain_keeps_the_binding() -> None:
    routes = FakeRoutes()
    addr = RouteAddress(VIP, 5.0, lambda: routes)
    addr.add()
    until(addr.observe)
    addr.remove()
    until(lambda: "DelRoute" in routes.names())
    start = time.monotonic()
    addr.add()  # ends the drain at once
    until(addr.observe)
    assert time.monotonic() - start < 2.0
    addr.close()
    assert routes.names() == ["AddBinding", "AddRoute", "DelRoute", "AddRoute"]


def test_a_deleted_route_is_seen_at_the_next_look_and_a_refusal_counted() -> None:
    routes = FakeRoutes()
    addr = RouteAddress(VIP, 0.0, lambda: routes)
    addr.add()
    until(addr.observe)
    routes.state = Observed(frozenset(), routes.state.bound)  # someone deleted the route
    addr.observe()  # queues a look
    until(lambda: not addr.observe())

    def refuse(desired: Mapping[IPv4Address | IPv6Address, Phase]) -> list[Op]:
        raise OSError(1, "refused")

    routes.converge = refuse  # type: ignore[method-assign]
    addr.add()
    until(lambda: addr.errors == 1)
    assert not addr.observe()
    addr.close()


# -- bgp mode: the same actuator over `BgpRoutes` (fake kernel, fake speaker) ------------------

VIP6 = ip_address("fd00:79::100")


def bgp_routes() -> tuple[BgpRoutes, FakeActuator, FakeSpeaker, list[Any]]:
    log: list[Any] = []
    act, sp = FakeActuator(log), FakeSpeaker(log)
    return BgpRoutes(cast(RouteActuator, act), sp), act, sp, log


def test_bgp_holder_binds_then_announces_and_withdraws_before_the_drain_unbinds() -> None:
    routes, act, sp, log = bgp_routes()
    make = leader_actuators(CFG, cast(Preflight, None), lambda c, p: routes)
    addr, _ = make(cast(VipLink, None), VIP, lambda n: None)
    addr.add()
    until(addr.observe)  # the announcement is what the speaker was told
    assert log == [AddBinding(NET), ("announce", NET)]
    log.clear()
    start = time.monotonic()
    assert addr.remove() is True
    until(lambda: ("withdraw", NET) in log)
    assert act.bound == {NET}  # still answering what the router sends during the drain
    addr.close()  # waits for the drain, then closes the routes: the speaker's graceful stop
    assert time.monotonic() - start >= CFG.announce.drain
    assert log == [("withdraw", NET), DelBinding(NET)]
    assert act.bound == set() and sp.stopped is True and act.closed


def test_bgp_follower_never_tells_the_speaker_anything() -> None:
    routes, _act, sp, log = bgp_routes()
    make = leader_actuators(CFG, cast(Preflight, None), lambda c, p: routes)
    addr, _ = make(cast(VipLink, None), VIP, lambda n: None)
    assert addr.remove() is False  # never held
    addr.close()
    assert log == [] and sp.wanted == set() and sp.stopped is True


def test_vips_share_one_speaker_and_keep_each_others_phases() -> None:
    routes, act, sp, _log = bgp_routes()
    opened: list[int] = []

    def open_routes(cfg: object, pre: object) -> BgpRoutes:
        opened.append(1)
        return routes

    make = leader_actuators(CFG, cast(Preflight, None), open_routes)
    a4, _ = make(cast(VipLink, None), VIP, lambda n: None)
    a6, _ = make(cast(VipLink, None), VIP6, lambda n: None)
    a4.add()
    a6.add()
    until(lambda: a4.observe() and a6.observe())
    assert sp.wanted == {NET, NET6} and act.bound == {NET, NET6}
    a4.remove()  # v4's instance lost its election; v6's holds
    a4.close()
    assert sp.wanted == {NET6} and act.bound == {NET6}
    assert sp.stopped is None  # v6 still uses the speaker
    a6.close()  # the stop without a remove: the process' end unbinds all the same
    assert opened == [1] and sp.stopped is True and act.closed
