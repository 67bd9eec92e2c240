"""The VRRP driver under membership (``vipd.vrrp.driver.members``): a peer is heard from
the moment it is in the set, adverts go to the new set, and the admission rule's hold keeps
a node out of the election (never master) until it is released, and takes a leader out
(priority-0 advert) when it is held again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from ipaddress import IPv4Address
from typing import Any

import pytest

from tests.unit.hostfakes import Events, FakeClock, FakeTimers, FakeWire, Host, run_out
from vipd import config
from vipd.agent import Agent
from vipd.preflight import HostLink, Preflight
from vipd.vrrp import packet, state
from vipd.vrrp.driver import VrrpElection
from vipd.vrrp.transport import Datagram

VIP = IPv4Address("10.0.0.100")
SELF = IPv4Address("10.0.0.11")
A = IPv4Address


def advert_to(src: str, dst: IPv4Address, priority: int) -> Datagram:
    msg = packet.encode(
        packet.Advert(version=3, vrid=51, priority=priority, interval_cs=100, addresses=(VIP,)),
        A(src),
        dst,
    )
    return Datagram(src=A(src), dst=dst, ttl=255, message=msg)


class Node:
    def __init__(self, static: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
        # The agent's own membership task is not run: the test plays its part.
        monkeypatch.setattr(Agent, "_follow_membership", lambda self: None)
        self.cfg = config.parse(
            {
                "node": "n1",
                "vip": str(VIP),
                "interface": "eth0",
                "election": {
                    "vrrp": {
                        "vrid": 51,
                        "priority": 100,
                        "unicast_peers": list(static),
                        "unicast_peers_from": ["nodes"],
                    }
                },
            }
        )
        peers = tuple(A(p) for p in static if A(p) != SELF)
        self.pre = Preflight(
            link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11"),
            source=SELF,
            findings=(),
            stale_vip=False,
            unicast_peers=peers,
        )
        self.clock = FakeClock()
        self.timers = FakeTimers(self.clock)
        self.host = Host(VIP)
        self.events: Events = self.host.events
        self.wire: FakeWire | None = None
        self.election = VrrpElection(
            self.cfg,
            self.pre,
            clock=self.clock,
            open_wire=lambda ifname, ifindex, source, peers, rx: self._open(peers),
            call_later=self.timers.call_later,
            claimwatch=False,
            probe=lambda mac: True,
        )
        self.agent = Agent(
            self.cfg,
            self.pre,
            self.election,
            None,
            actuators=self.host.actuators,
            watch_link=self.host.watch_link,
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[int] | None = None

    def _open(self, peers: Any) -> FakeWire:
        self.wire = FakeWire(self.events, self.clock, tuple(peers))
        return self.wire

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.agent.run(self.stop))
        await until(lambda: self.agent.instances[0].ready)

    async def hear(self, d: Datagram) -> None:
        assert self.wire is not None
        s = self.election.stats
        seen = s.adverts_received + sum(s.invalid.values())
        self.wire.inject(d)
        await until(lambda: s.adverts_received + sum(s.invalid.values()) > seen)

    async def stopped(self) -> int:
        assert self.task is not None
        self.stop.set()
        return await run_out(self.task, self.timers, lambda: self.election.handover is not None)


async def until(cond: Callable[[], bool], timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


def run(scenario: Callable[[Node], Awaitable[None]], node: Node) -> None:
    async def main() -> None:
        await scenario(node)

    asyncio.run(main())


def test_a_new_peer_is_heard_once_it_is_in_the_set(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        assert not n.election.held  # in the static list: known to every node
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        new = "10.0.0.14"
        await n.hear(advert_to(new, SELF, 200))
        assert n.election.stats.invalid.get("source") == 1  # not in the set: dropped
        assert n.election.stats.adverts_received == 0
        n.election.set_membership((A("10.0.0.12"), A(new)), False, "in the static list")
        assert n.wire is not None and n.wire.destinations == (A("10.0.0.12"), A(new))
        await n.hear(advert_to(new, SELF, 200))
        assert n.election.stats.adverts_received == 1
        assert n.election.machine.state is state.State.BACKUP
        # An empty set never switches to multicast: the last peers stay.
        n.election.set_membership((), False, "")
        assert n.wire.destinations == (A("10.0.0.12"), A(new))
        assert await n.stopped() == 0

    run(scenario, Node(("10.0.0.11", "10.0.0.12"), monkeypatch))


def test_a_held_node_never_leads_until_released(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        e = n.election
        assert e.held  # not in the static list: out until membership says otherwise
        assert e.machine.state is state.State.INITIALIZE
        assert n.timers.next_due() is None  # no master-down timer: it cannot take over
        ready, why = e.readiness()
        assert not ready and why.startswith("membership: held out"), why
        e.set_membership((A("10.0.0.12"), A("10.0.0.13")), True, "not in the set")
        assert e.machine.state is state.State.INITIALIZE and "advert:100" not in n.events
        e.set_membership((A("10.0.0.12"), A("10.0.0.13")), False, "in the set")
        assert e.machine.state.value == state.State.BACKUP.value
        while e.machine.state.value != state.State.ACTIVE.value:
            n.timers.fire_next()
        assert "advert:100" in n.events
        # Out of the set again: the leader resigns (priority 0) and leaves the election.
        e.set_membership((A("10.0.0.12"), A("10.0.0.13")), True, "not in the set")
        assert e.machine.state is state.State.INITIALIZE
        assert "advert:0" in n.events
        assert await n.stopped() == 0

    run(scenario, Node(("10.0.0.12", "10.0.0.13"), monkeypatch))
