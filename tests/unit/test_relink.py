"""Interfaces that come and go, through the agent, on fakes: both backends.

What it tests: the configured interface deleted (a Shutdown: out of the election, the VIP
gone with the link, no priority-0 advert) and created again under the same name with a new
index and MAC (a relink: a fresh VRRP socket on the new index, new actuators on the new
link, then a Startup as a backup that takes over after its down interval); a new primary
address while leading (adverts from it at once, without leaving the election); the address
removed and added back (out and in again); the VIP removed by someone else, put back on its
address notification rather than on a timer; and in Lease mode a lone leader whose
interface is re-created keeps the Lease and binds and announces the VIP on the new link.
"""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Address
from typing import Any

from tests.unit import test_lease_driver as lease_nodes
from tests.unit import test_vrrp_driver as vrrp_nodes
from tests.unit.hostfakes import FakeWire, LeaseStore
from vipd.election import VipLink
from vipd.vrrp import packet, state

VIP = vrrp_nodes.VIP
SELF = vrrp_nodes.SELF
NEW_MAC = "02:00:00:00:00:77"
until = vrrp_nodes.until


class Node(vrrp_nodes.Node):
    """The VRRP test node, recording every VRRP socket it opens (interface, index, source)."""

    def __init__(self, **kw: Any) -> None:
        self.opened: list[tuple[str, int, Any, FakeWire]] = []
        super().__init__(**kw)

    def _open_wire(self, ifname: str, ifindex: int, source: Any, peers: Any, rx: bool) -> FakeWire:
        wire = super()._open_wire(ifname, ifindex, source, peers, rx)
        self.opened.append((ifname, ifindex, source, wire))
        return wire


def run(scenario: Any) -> None:
    async def main() -> None:
        await scenario(Node())

    asyncio.run(main())


def test_a_deleted_and_re_created_interface_is_a_shutdown_then_a_startup_on_fresh_sockets() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        link, old_wire, old_address = n.host.link, n.wire, n.host.address
        assert link is not None and old_wire is not None and old_address is not None
        mark = len(n.events)
        link.delete()
        await until(lambda: n.election.machine.state is state.State.INITIALIZE)
        # No priority-0 advert: it cannot leave a deleted link.
        assert n.events.since(mark) == ["unbind"]
        assert n.election.machine.last_reason.startswith("interface-down:")
        assert not n.agent.readiness()[0]
        assert n.timers.next_due() is None
        # The same name again: index 7, another MAC, the node's address on it.
        link.recreate(7, NEW_MAC, "10.0.0.11/24")
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        assert old_wire.closed and n.opened[-1][:3] == ("eth0", 7, SELF)
        assert n.host.actuated[-1] == VipLink("eth0", 7, NEW_MAC)
        assert old_address.closed and n.host.address is not old_address
        assert n.election.machine.last_reason.startswith("interface-up:")
        assert n.agent.status(n.clock.now)["interface_up"] is True
        assert n.agent.readiness() == (True, "ready")
        mark = len(n.events)
        n.timers.fire_next()  # its down interval later: leader again, on the new link
        assert n.events.since(mark) == ["advert:100", "bind", "garp"]
        assert n.host.address is not None and n.host.address.present
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_new_primary_address_moves_the_adverts_to_it_without_leaving_the_election() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.host.link is not None
        new = IPv4Address("10.0.0.21")
        mark = len(n.events)
        n.host.link.readdress("10.0.0.21/24")
        await until(lambda: n.opened[-1][2] == new)
        assert n.election.machine.state is state.State.ACTIVE
        assert n.election.machine.params.primary_ip == new
        assert n.agent.status(n.clock.now)["source"] == str(new)
        assert "unbind" not in n.events.since(mark)
        wire = n.opened[-1][3]
        n.timers.fire_next()  # the next advert
        message, dst = wire.sent[-1]
        # The VRRPv3 checksum covers the source (RFC 9568 §5.2.8): it was computed with the
        # new one, so the cache of encoded adverts was dropped.
        packet.decode(message, new, dst)
        try:
            packet.decode(message, SELF, dst)
        except packet.DecodeError:
            pass
        else:
            raise AssertionError("an advert encoded for the old source")
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_an_interface_without_an_address_leaves_the_election_until_one_is_back() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.host.link is not None
        mark = len(n.events)
        n.host.link.readdress()
        await until(lambda: n.election.machine.state is state.State.INITIALIZE)
        assert n.events.since(mark) == ["unbind"]
        n.host.link.readdress("10.0.0.11/24")
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        assert len(n.opened) == 1  # the same interface and source: the same socket
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_vip_removed_by_someone_else_is_put_back_on_its_notification() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.host.link is not None and n.host.address is not None
        assert n.agent.controller is not None
        assert n.agent.controller.resync_interval >= 10  # no poll would catch it in time
        repairs = n.agent.controller.stats.resync_repairs
        n.host.address.present = False  # `ip addr del` by hand
        n.host.link.address_event(2, VIP)
        await until(lambda: n.host.address is not None and n.host.address.present)
        assert n.agent.controller.stats.resync_repairs == repairs + 1
        assert n.events[-2:] == ["bind", "garp"]
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_lease_a_lone_leader_rebinds_the_vip_on_a_re_created_interface() -> None:
    async def scenario() -> None:
        store = LeaseStore()
        a = lease_nodes.Node("a", store)
        a.start()
        await until(lambda: a.bound)
        link, old = a.host.link, a.host.address
        assert link is not None and old is not None
        link.delete()
        await until(lambda: not a.election._link_up)
        assert a.agent.controller is not None and not a.agent.controller.bound
        # Alone, it keeps the Lease (no healthy peer to give way to).
        await asyncio.sleep(0.3)
        assert store.record is not None and store.record.holder == "a"
        mark = len(a.host.events)
        link.recreate(7, NEW_MAC, "10.0.0.31/24")
        await until(lambda: a.host.address is not old and a.bound)
        assert a.host.actuated[-1] == VipLink("eth0", 7, NEW_MAC)
        assert a.host.events.since(mark) == ["bind", "garp"]
        assert "10.0.0.31" in a.election.self_addresses
        assert a.election.elector.params.self_addresses == a.election.self_addresses
        assert a.election._link_up
        a.stop.set()
        await a.stopped()

    asyncio.run(scenario())
