"""`vipd.routed.backend.RoutedElection` on a fake clock, a fake route actuator and a fake
health checker: the start-up reconcile, the decisions it publishes, the routes it asks for,
the stop's order, its metrics, and how the agent picks it (inert VIP actuators)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from ipaddress import IPv4Address
from typing import Any

import pytest

from vipd import config, metrics
from vipd.agent import Agent, make_elections
from vipd.election import IPAddress, Transition, VipLink
from vipd.health.tracker import BackendHealth
from vipd.instance import inert_actuators
from vipd.preflight import HostLink, Preflight
from vipd.routed.backend import RESYNC, RETRY, RoutedElection
from vipd.routed.plan import Observed, Op, Phase, host_network

VIP = IPv4Address("10.79.0.100")
LOCAL = IPv4Address("127.0.0.1")
PEER = IPv4Address("10.78.2.1")


class FakeRoutes:
    """Records every call; ``desired`` is what the kernel would hold after the last one."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail = False
        self.closed = False
        self.seen = Observed()  # what a predecessor left

    def observe(self) -> Observed:
        return self.seen

    def converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]:
        if self.fail:
            raise OSError(1, "refused")
        self.calls.append(("converge", dict(desired)))
        return []

    def withdraw_all(self, vips: Sequence[IPAddress], drain: float = 2.0) -> None:
        self.calls.append(("withdraw_all", (tuple(vips), drain)))

    def close(self) -> None:
        self.closed = True


class FakeHealth:
    def __init__(self) -> None:
        self.snap: dict[IPv4Address, BackendHealth] = {}

    def snapshot(self) -> Mapping[IPv4Address, BackendHealth]:
        return self.snap


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def healthy(at: float) -> BackendHealth:
    return BackendHealth(True, since=at - 5, checked_at=at, successes=3)


def unhealthy(since: float, at: float) -> BackendHealth:
    return BackendHealth(False, since=since, checked_at=at, failures=3)


def make_cfg(peers: list[str] | None = None, drain: float = 1.5) -> config.Config:
    return config.parse(
        {
            "vip": str(VIP),
            "node": "n1",
            "interface": "eth0",
            "announce": {"mode": "routing-table", "drain": drain},
            "health": {"peers": [*(peers or [str(PEER)]), "10.0.0.11"]},
        },
        env={},
        hostname="h",
    )


PRE = Preflight(
    link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11"),
    source=IPv4Address("10.0.0.11"),
    findings=(),
    stale_vip=False,
)


class Bed:
    def __init__(self, **kw: Any) -> None:
        self.clock = Clock()
        self.routes = FakeRoutes()
        self.health = FakeHealth()
        self.published: list[Transition] = []
        self.election = RoutedElection(
            make_cfg(**kw), PRE, clock=self.clock, open_routes=lambda cfg: self.routes
        )
        self.election.health = self.health  # type: ignore[assignment]
        self.election._publish = self.published.append

    def routes_wanted(self) -> dict[IPAddress, Phase]:
        _, desired = [c for c in self.routes.calls if c[0] == "converge"][-1]
        return dict(desired)


def withdrawals(reason: str) -> float:
    v = metrics.REGISTRY.get_sample_value(
        "vipd_routed_withdrawals_total", {"vip": str(VIP), "reason": reason}
    )
    return v or 0.0


def announced() -> float | None:
    return metrics.REGISTRY.get_sample_value("vipd_routed_announced", {"vip": str(VIP)})


def test_peers_leave_out_this_nodes_own_address() -> None:
    assert Bed().election.health_peers == [PEER]


def test_prepare_removes_a_predecessors_routes_before_any_decision() -> None:
    bed = Bed()
    link = asyncio.run(bed.election.prepare())
    assert link.name == "eth0"
    assert bed.routes.calls == [("converge", {})]
    assert bed.published == []


def test_a_predecessors_bound_vip_drains_instead_of_vanishing() -> None:
    """After a SIGKILL the VIP's binding is kept for the drain (announcement off at once):
    connections the router still sends are answered; healthy by then, it stays bound."""
    for healthy_soon in (True, False):
        bed = Bed(drain=1.5)
        net = host_network(VIP)
        bed.routes.seen = Observed(frozenset({net}), frozenset({net}))
        asyncio.run(bed.election.prepare())
        assert bed.routes.calls == [("converge", {VIP: Phase.DRAINING})]
        bed.clock.t += 0.5
        if healthy_soon:
            bed.health.snap = {LOCAL: healthy(bed.clock.t)}
        asyncio.run(bed.election.tick())
        want = Phase.ANNOUNCED if healthy_soon else Phase.DRAINING
        assert bed.routes_wanted() == {VIP: want}
        bed.clock.t += 1.5
        asyncio.run(bed.election.tick())
        assert bed.routes_wanted() == {VIP: want if healthy_soon else Phase.WITHDRAWN}


def test_healthy_announces_and_publishes_leader() -> None:
    bed = Bed()
    asyncio.run(bed.election.prepare())
    bed.health.snap = {LOCAL: healthy(bed.clock.t)}
    asyncio.run(bed.election.tick())
    assert bed.routes_wanted() == {VIP: Phase.ANNOUNCED}
    assert [(t.role, t.label) for t in bed.published] == [("leader", "healthy")]
    assert announced() == 1


def test_unhealthy_with_a_serving_peer_drains_then_withdraws() -> None:
    bed = Bed(drain=1.5)
    asyncio.run(bed.election.prepare())
    bed.health.snap = {LOCAL: healthy(bed.clock.t), PEER: healthy(bed.clock.t)}
    asyncio.run(bed.election.tick())
    before = withdrawals("unhealthy")
    bed.clock.t += 3
    failed_at = bed.clock.t
    bed.health.snap = {LOCAL: unhealthy(failed_at, failed_at), PEER: healthy(failed_at + 0.2)}
    bed.clock.t += 0.3
    wake = asyncio.run(bed.election.tick())
    assert bed.routes_wanted() == {VIP: Phase.DRAINING}  # announcement off, binding kept
    assert bed.published[-1].role == "follower" and bed.published[-1].label == "unhealthy"
    assert withdrawals("unhealthy") == before + 1
    assert announced() == 0
    assert wake == pytest.approx(bed.clock.t + 1.5)  # the drain's end
    assert wake is not None
    bed.clock.t = wake
    asyncio.run(bed.election.tick())
    assert bed.routes_wanted() == {VIP: Phase.WITHDRAWN}


def test_every_api_server_failing_at_once_keeps_the_last_resort() -> None:
    bed = Bed()
    asyncio.run(bed.election.prepare())
    bed.health.snap = {LOCAL: healthy(bed.clock.t), PEER: healthy(bed.clock.t)}
    asyncio.run(bed.election.tick())
    bed.clock.t += 3
    t = bed.clock.t
    # the peer's last good check is older than this node's failure: it proves nothing
    bed.health.snap = {LOCAL: unhealthy(t, t), PEER: healthy(t - 0.5)}
    asyncio.run(bed.election.tick())
    assert bed.routes_wanted() == {VIP: Phase.ANNOUNCED}
    assert bed.published[-1].label == "last-resort" and bed.published[-1].role == "leader"


def test_nothing_changed_converges_again_only_at_the_resync() -> None:
    bed = Bed()
    asyncio.run(bed.election.prepare())
    bed.health.snap = {LOCAL: healthy(bed.clock.t)}
    wake = asyncio.run(bed.election.tick())
    n = len(bed.routes.calls)
    bed.clock.t += 1
    asyncio.run(bed.election.tick())
    assert len(bed.routes.calls) == n and len(bed.published) == 1
    assert wake == pytest.approx(100.0 + RESYNC)
    bed.clock.t = 100.0 + RESYNC
    asyncio.run(bed.election.tick())
    assert len(bed.routes.calls) == n + 1


def test_a_refused_route_is_counted_and_retried() -> None:
    bed = Bed()
    asyncio.run(bed.election.prepare())
    bed.routes.fail = True
    bed.health.snap = {LOCAL: healthy(bed.clock.t)}
    wake = asyncio.run(bed.election.tick())
    assert bed.election.errors == 1
    assert wake == pytest.approx(bed.clock.t + RETRY)
    bed.routes.fail = False
    bed.clock.t += RETRY
    asyncio.run(bed.election.tick())
    assert bed.routes_wanted() == {VIP: Phase.ANNOUNCED}


def test_resign_withdraws_with_the_drain_and_publishes_the_stop() -> None:
    bed = Bed(drain=1.5)
    asyncio.run(bed.election.prepare())
    bed.health.snap = {LOCAL: healthy(bed.clock.t)}
    asyncio.run(bed.election.tick())
    before = withdrawals("stop")
    asyncio.run(bed.election.resign(graceful=True))
    assert bed.routes.calls[-1] == ("withdraw_all", ((VIP,), 1.5))
    assert bed.published[-1].label == "stop" and bed.published[-1].role == "follower"
    assert withdrawals("stop") == before + 1
    assert bed.election.stopped_fields()["was_announcing"] is True
    asyncio.run(bed.election.close())
    assert bed.routes.closed


def test_resign_after_a_crash_withdraws_too() -> None:
    bed = Bed()
    asyncio.run(bed.election.prepare())
    asyncio.run(bed.election.resign(graceful=False))
    assert bed.routes.calls[-1][0] == "withdraw_all"


def test_the_agent_picks_it_and_gives_the_controller_inert_actuators() -> None:
    cfg = make_cfg()
    elections = make_elections(cfg, PRE)
    assert [type(e) for e in elections] == [RoutedElection]
    agent = Agent(cfg, PRE, elections)
    assert agent._make_actuators is inert_actuators
    address, announcer = inert_actuators(
        VipLink("eth0", 2, "02:00:00:00:00:11"), VIP, lambda n: pytest.fail("no frame is sent")
    )
    assert not address.observe()
    address.add()
    assert address.observe() and address.remove() and not address.observe()
    assert announcer.send_one()


def test_run_decides_on_a_pushed_check_and_wakes_for_the_drain() -> None:
    """The loop itself, on the real clock: a check's push wakes it; the drain's end wakes it
    without any push."""
    bed = Bed(drain=0.2)
    bed.election.clock = time.monotonic

    async def scenario() -> None:
        await bed.election.prepare()
        ready: list[bool] = []
        task = asyncio.create_task(
            bed.election.run(bed.published.append, lambda: ready.append(True))
        )
        await asyncio.sleep(0.05)
        # nothing checked yet, a peer listed: not a lone node, so it waits
        assert ready == [True] and [t.label for t in bed.published] == ["waiting"]
        now = bed.election.clock()
        bed.health.snap = {LOCAL: healthy(now), PEER: healthy(now)}
        bed.election.on_check(LOCAL, None)  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert [t.label for t in bed.published] == ["waiting", "healthy"]
        now = bed.election.clock()
        bed.health.snap = {LOCAL: unhealthy(now, now), PEER: healthy(now + 0.001)}
        await asyncio.sleep(0.01)
        bed.election.on_health(LOCAL, bed.health.snap[LOCAL])
        await asyncio.sleep(0.05)
        assert bed.routes_wanted() == {VIP: Phase.DRAINING}
        await asyncio.sleep(0.3)  # the drain ends: woken by its timer, not by a push
        assert bed.routes_wanted() == {VIP: Phase.WITHDRAWN}
        task.cancel()

    asyncio.run(scenario())
