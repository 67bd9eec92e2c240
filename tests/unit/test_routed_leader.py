"""vipd.routed.leader: routing-table mode's ``pool: leader`` actuator, against fake routes.

The route calls run on the actuator's worker thread; each test waits for that thread's work
with ``close()`` (which waits for everything queued, a drain included) or polls the fake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from ipaddress import IPv4Address, IPv6Address, ip_address

from vipd.routed.leader import RouteAddress
from vipd.routed.plan import Observed, Op, Phase, host_network, plan

VIP = ip_address("10.79.0.100")
assert isinstance(VIP, IPv4Address)


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
