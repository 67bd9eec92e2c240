"""Several VIPs and dual stack: the config, the controller's per-VIP actuators, and the agent
running one VRRP virtual router per address family (RFC 9568 §7) on fake wires.

What it tests: ``vips`` and its rules (one key or the other, each entry a VIP, none twice,
VRRPv2 without IPv6, peers of each family); that each VIP is bound, repaired and released on
its own actuator (one failing VIP does not hold up another); and that with an IPv4 and an
IPv6 VIP the agent runs two elections with their own leaders, adverts of their own family's
addresses from their own family's source, and a stop that resigns both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

import pytest

from tests.unit.hostfakes import Events, FakeClock, FakeTimers, FakeWire, Host, advert, run_out
from vipd import config, metrics
from vipd.agent import EXIT_OK, Agent, make_elections
from vipd.config import ConfigError
from vipd.controller import Controller, GarpPolicy, VipActuators
from vipd.preflight import HostLink, Preflight
from vipd.vrrp import packet, state
from vipd.vrrp.driver import VrrpElection
from vipd.vrrp.transport import Datagram

IPAddress = IPv4Address | IPv6Address
V4 = IPv4Address("10.0.0.100")
V4B = IPv4Address("10.0.0.101")
V6 = IPv6Address("fd00::100")
SELF4 = IPv4Address("10.0.0.11")
SELF6 = IPv6Address("fe80::11")
PEER6 = IPv6Address("fe80::12")


def doc(**top: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"node": "n1", "interface": "eth0", "election": {"vrrp": {"vrid": 51}}}
    d.update(top)
    return d


def error(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config.parse(data)
    return info.value


# -- config ----------------------------------------------------------------------------------


def test_vips_keep_their_order_and_split_by_family() -> None:
    cfg = config.parse(doc(vips=[str(V6), str(V4), str(V4B)]))
    assert cfg.vips == (V6, V4, V4B)
    assert cfg.vip == V6  # the first, as written
    assert cfg.families == (4, 6)  # IPv4's virtual router first
    assert cfg.family(4) == (V4, V4B) and cfg.family(6) == (V6,)


def test_vip_is_a_list_of_one() -> None:
    assert config.parse(doc(vip=str(V4))).vips == (V4,)


def test_vip_and_vips_together_name_both_keys() -> None:
    e = error(doc(vip=str(V4), vips=[str(V4B)]))
    assert e.key == "vips" and "vip" in str(e) and "both" in str(e)


def test_vipd_vip_in_the_environment_against_vips_in_the_file_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        config.parse(doc(vips=[str(V4)]), env={"VIPD_VIP": str(V4B)})
    assert "VIPD_VIP" in str(info.value)


@pytest.mark.parametrize(
    ("vips", "key", "words"),
    [
        ([], "vips", "non-empty list"),
        ("10.0.0.100", "vips", "non-empty list"),
        (["10.0.0.100", "api.example.com"], "vips[1]", "not a DNS name"),
        (["10.0.0.100", "127.0.0.1"], "vips[1]", "loopback"),
        (["10.0.0.100", "10.0.0.100/32"], "vips[1]", "prefix length"),
        (["10.0.0.100", "fd00::100", "10.0.0.100"], "vips[2]", "listed twice (first as vips[0])"),
    ],
)
def test_each_vip_is_validated_as_vip_is(vips: object, key: str, words: str) -> None:
    e = error(doc(vips=vips))
    assert e.key == key and words in str(e), str(e)


def test_vrrp_v2_refuses_an_ipv6_vip_among_several() -> None:
    data = doc(vips=[str(V4), str(V6)], election={"vrrp": {"vrid": 51, "version": 2}})
    e = error(data)
    assert e.key == "election.vrrp.version" and str(V6) in str(e) and "RFC 3768" in str(e)


def test_unicast_peers_need_each_family_of_the_vips() -> None:
    vrrp = {"vrid": 51, "unicast_peers": ["10.0.0.12"]}
    e = error(doc(vips=[str(V4), str(V6)], election={"vrrp": vrrp}))
    assert e.key == "election.vrrp.unicast_peers" and "IPv6" in str(e), str(e)
    vrrp = {"vrid": 51, "unicast_peers": ["10.0.0.12", "fe80::12"]}
    cfg = config.parse(doc(vips=[str(V4), str(V6)], election={"vrrp": vrrp}))
    assert cfg.election.vrrp.unicast_peers == (IPv4Address("10.0.0.12"), PEER6)


def test_a_peer_must_not_be_any_vip() -> None:
    vrrp = {"vrid": 51, "unicast_peers": ["10.0.0.12", "10.0.0.101"]}
    e = error(doc(vips=[str(V4), str(V4B)], election={"vrrp": vrrp}))
    assert e.key == "election.vrrp.unicast_peers[1]"


def test_ipvs_takes_one_vip() -> None:
    ipvs = {"enabled": True, "backends": ["10.0.0.11", "10.0.0.12"]}
    e = error(doc(vips=[str(V4), str(V4B)], ipvs=ipvs, health=None))
    assert e.key == "ipvs.enabled" and "one VIP" in str(e)


def test_vmac_refuses_an_ipv6_vip_among_several() -> None:
    e = error(doc(vips=[str(V4), str(V6)], election={"vrrp": {"vrid": 51, "vmac": True}}))
    assert e.key == "election.vrrp.vmac"


def test_the_lease_api_server_must_not_be_any_vip() -> None:
    lease = {"api_server": f"https://[{V6}]:6443"}
    e = error(doc(vips=[str(V4), str(V6)], election={"mode": "lease", "lease": lease}))
    assert e.key == "election.lease.api_server"


def test_check_offline_lists_every_bad_vip() -> None:
    found = config.errors(doc(vips=["10.0.0.100", "127.0.0.1", "api.example.com"]))
    text = [str(e) for e in found]
    # errors() drops each bad item before the next pass, so the third entry is reported at
    # the index it has then; both are reported.
    assert len(found) == 2 and all(e.key.startswith("vips[") for e in found), text
    assert "loopback" in text[0] and "not a DNS name" in text[1], text


# -- the controller: one actuator per VIP ----------------------------------------------------


class Addr:
    def __init__(self, events: Events, vip: IPAddress) -> None:
        self.events, self.vip = events, vip
        self.present = False
        self.fail_add: Exception | None = None
        self.closed = False

    def observe(self) -> bool:
        return self.present

    def add(self) -> None:
        if self.fail_add is not None:
            raise self.fail_add
        self.present = True
        self.events.append(f"bind:{self.vip}")

    def remove(self) -> bool:
        was, self.present = self.present, False
        if was:
            self.events.append(f"unbind:{self.vip}")
        return was

    def close(self) -> None:
        self.closed = True


class Ann:
    def __init__(self, events: Events, vip: IPAddress) -> None:
        self.events, self.vip = events, vip
        self.closed = False

    def burst(self, loop: Any, repeat: int, interval: float) -> bool:
        self.events.append(f"garp:{self.vip}")
        return True

    def send_one(self) -> bool:
        return True

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def controller(*vips: IPAddress) -> tuple[Controller, dict[IPAddress, Addr], Events]:
    events = Events()
    addrs = {v: Addr(events, v) for v in vips}
    ctl = Controller(
        vips=[VipActuators(addrs[v], Ann(events, v)) for v in vips],
        garp=GarpPolicy(delay=0),
        log=logging.getLogger("test"),
    )
    return ctl, addrs, events


def test_each_vip_is_bound_then_announced_in_order() -> None:
    async def scenario() -> None:
        ctl, _, events = controller(V4, V4B)
        ctl.set_leader(True, 0.0)
        assert events == [f"bind:{V4}", f"garp:{V4}", f"bind:{V4B}", f"garp:{V4B}"]
        assert ctl.bound and ctl.bound_by_vip() == [(V4, True), (V4B, True)]
        ctl.release()
        assert events[-2:] == [f"unbind:{V4}", f"unbind:{V4B}"] and not ctl.any_bound

    asyncio.run(scenario())


def test_a_failing_vip_does_not_hold_up_the_other() -> None:
    async def scenario() -> None:
        ctl, addrs, events = controller(V4, V4B)
        addrs[V4].fail_add = OSError("EPERM")
        before = metrics.REGISTRY.get_sample_value(
            "vipd_reconcile_errors_total", {"actuator": "address"}
        )
        ctl.set_leader(True, 0.0)
        assert events == [f"bind:{V4B}", f"garp:{V4B}"]
        assert ctl.bound_by_vip() == [(V4, False), (V4B, True)] and not ctl.bound
        after = metrics.REGISTRY.get_sample_value(
            "vipd_reconcile_errors_total", {"actuator": "address"}
        )
        assert (after or 0) == (before or 0) + 1
        assert metrics.REGISTRY.get_sample_value("vipd_vip_bound", {"vip": str(V4)}) == 0
        assert metrics.REGISTRY.get_sample_value("vipd_vip_bound", {"vip": str(V4B)}) == 1
        # The next resync binds the one that failed, and leaves the other alone.
        addrs[V4].fail_add = None
        ctl.reconcile(resync=True)
        assert events[2:] == [f"bind:{V4}", f"garp:{V4}"] and ctl.bound

    asyncio.run(scenario())


def test_the_resync_repairs_only_the_vip_deleted_by_hand() -> None:
    async def scenario() -> None:
        ctl, addrs, events = controller(V4, V4B)
        ctl.set_leader(True, 0.0)
        mark = len(events)
        addrs[V4B].present = False  # `ip addr del` of one VIP
        ctl.reconcile(resync=True)
        assert events.since(mark) == [f"bind:{V4B}", f"garp:{V4B}"]
        assert ctl.stats.resync_repairs == 1

    asyncio.run(scenario())


# -- the agent: one virtual router per family ------------------------------------------------


def advert6(src: IPv6Address, priority: int, vips: tuple[IPAddress, ...]) -> Datagram:
    """A valid VRRPv3 advert over IPv6 to ff02::12, as the transport hands it over."""
    msg = packet.encode(
        packet.Advert(version=3, vrid=51, priority=priority, interval_cs=100, addresses=vips),
        src,
        packet.GROUP_V6,
    )
    return Datagram(src, packet.GROUP_V6, 255, msg)


class DualNode:
    """One node with an IPv4 and an IPv6 VIP: two VRRP instances on fake wires."""

    def __init__(self) -> None:
        self.cfg = config.parse(doc(vips=[str(V4), str(V6)]))
        self.pre = Preflight(
            link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11"),
            source=SELF4,
            findings=(),
            stale_vip=False,
            sources=(SELF4, SELF6),
        )
        self.clock = FakeClock()
        self.timers = FakeTimers(self.clock)
        self.events = Events()
        self.wires: dict[int, FakeWire] = {}
        self.sources: dict[int, IPAddress] = {}
        self.addrs: dict[IPAddress, Addr] = {}
        self.host = Host(V4, addresses=("10.0.0.11/24", "fe80::11/64"))
        self.opened: list[tuple[int, IPAddress]] = []  # (ifindex, source) of each wire
        self.elections = [
            VrrpElection(
                self.cfg,
                self.pre,
                vips=self.cfg.family(f),
                clock=self.clock,
                open_wire=self._open_wire,
                call_later=self.timers.call_later,
                claimwatch=False,
            )
            for f in self.cfg.families
        ]
        self.agent = Agent(
            self.cfg,
            self.pre,
            self.elections,
            actuators=self._actuators,
            watch_link=self.host.watch_link,
        )
        self.stop = asyncio.Event()

    def _open_wire(
        self, ifname: str, ifindex: int, source: IPAddress, peers: Any, rx: bool
    ) -> FakeWire:
        group = packet.GROUP_V4 if source.version == 4 else packet.GROUP_V6
        wire = FakeWire(self.events, self.clock, (group,))
        self.opened.append((ifindex, source))
        self.wires[source.version] = wire
        self.sources[source.version] = source
        return wire

    def _actuators(
        self, link: Any, vip: IPAddress, on_sent: Callable[[int], None]
    ) -> tuple[Addr, Ann]:
        self.addrs[vip] = Addr(self.events, vip)
        return self.addrs[vip], Ann(self.events, vip)

    def stopping(self) -> bool:
        return any(e.handover is not None for e in self.elections)

    def sent(self, family: int) -> list[tuple[int, tuple[IPAddress, ...]]]:
        """(priority, addresses) of every advert sent on ``family``'s wire."""
        src = self.sources[family]
        out = []
        for message, dst in self.wires[family].sent:
            adv, _ = packet.decode(message, src, dst)
            out.append((adv.priority, adv.addresses))
        return out


async def until(cond: Callable[[], bool], timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


def test_make_elections_runs_one_virtual_router_per_family() -> None:
    n = DualNode()
    made = make_elections(n.cfg, n.pre)
    assert [e.vips for e in made] == [(V4,), (V6,)]
    assert [e.backend for e in made] == ["vrrp", "vrrp"]
    lease = config.parse(doc(vips=[str(V4), str(V6)], election={"mode": "lease"}))
    (one,) = make_elections(lease, n.pre)
    assert one.vips == (V4, V6)  # one Lease moves the whole set


def test_dual_stack_elects_each_family_on_its_own() -> None:
    """The IPv6 router hears a better master and follows; the IPv4 router hears nobody and
    takes over. Each advertises only its family's VIPs from its family's source; each VIP is
    bound on its own actuator; the stop resigns both (priority 0 on both wires)."""

    async def scenario() -> None:
        n = DualNode()
        task = asyncio.get_running_loop().create_task(n.agent.run(n.stop))
        v4, v6 = n.elections
        await until(
            lambda: (
                v4.machine.state is state.State.BACKUP and v6.machine.state is state.State.BACKUP
            )
        )
        assert n.sources == {4: SELF4, 6: SELF6}
        n.wires[6].inject(advert6(PEER6, 200, (V6,)))
        await until(lambda: v6.machine.master_ip == PEER6)
        while v4.machine.state is not state.State.ACTIVE:
            n.timers.fire_next()
        await until(lambda: n.addrs[V4].present)
        assert v6.machine.state is state.State.BACKUP
        assert not n.addrs[V6].present
        assert n.sent(4) == [(100, (V4,))] and n.sent(6) == []
        doc_ = n.agent.status(n.clock.now)
        by_vip = {v["vip"]: v for v in doc_["vips"]}
        assert by_vip[str(V4)] == {"vip": str(V4), "bound": True, "role": "leader", "vrid": 51}
        assert by_vip[str(V6)]["role"] == "follower" and not by_vip[str(V6)]["bound"]
        assert [i["vrrp"]["family"] for i in doc_["instances"]] == ["IPv4", "IPv6"]
        get = metrics.REGISTRY.get_sample_value
        assert get("vipd_role", {"backend": "vrrp", "role": "leader", "vip": str(V4)}) == 1
        assert get("vipd_role", {"backend": "vrrp", "role": "follower", "vip": str(V6)}) == 1
        assert get("vipd_vrrp_master_priority", {"vip": str(V6)}) == 200
        assert n.agent.readiness() == (True, "ready")
        n.stop.set()
        assert await run_out(task, n.timers, n.stopping) == EXIT_OK
        assert n.sent(4)[-1] == (0, (V4,))  # the IPv4 leader resigned
        assert not n.addrs[V4].present and not n.addrs[V6].present
        assert all(w.closed for w in n.wires.values())

    asyncio.run(scenario())


def test_an_ipv6_takeover_binds_only_the_ipv6_vip() -> None:
    async def scenario() -> None:
        n = DualNode()
        task = asyncio.get_running_loop().create_task(n.agent.run(n.stop))
        v4, v6 = n.elections
        await until(lambda: v4.machine.state is state.State.BACKUP)
        await until(lambda: v6.machine.state is state.State.BACKUP)
        n.wires[4].inject(advert("10.0.0.12", 200))
        await until(lambda: v4.machine.master_ip == ip_address("10.0.0.12"))
        while v6.machine.state is not state.State.ACTIVE:
            n.timers.fire_next()
        await until(lambda: n.addrs[V6].present)
        assert not n.addrs[V4].present
        assert n.sent(6) == [(100, (V6,))] and n.sent(4) == []
        assert n.events.index(f"bind:{V6}") < n.events.index(f"garp:{V6}")
        n.stop.set()
        assert await run_out(task, n.timers, n.stopping) == EXIT_OK

    asyncio.run(scenario())


def test_a_reload_refuses_a_change_of_the_vip_set() -> None:
    from vipd import reload

    two = config.parse(doc(vips=[str(V4), str(V6)]))
    assert reload.plan(two, config.parse(doc(vips=[str(V4)]))).refused == ("vips",)
    assert reload.plan(two, config.parse(doc(vips=[str(V6), str(V4)]))).refused == ("vips",)
    one = config.parse(doc(vip=str(V4)))
    assert reload.plan(one, config.parse(doc(vip=str(V4B)))).refused == ("vip",)
    assert not reload.plan(two, config.parse(doc(vips=[str(V4), str(V6)]))).changed


def test_a_re_created_interface_relinks_both_routers_and_rebinds_the_leaders_vip() -> None:
    """The interface is deleted and created again (index 7, a new MAC, a new link-local
    address): both virtual routers leave the election, reopen their sockets on the new index
    from their own family's new source, and the IPv4 router, leader again after its down
    interval, binds its VIP on the new link's actuators; the IPv6 VIP stays unbound."""

    async def scenario() -> None:
        n = DualNode()
        task = asyncio.get_running_loop().create_task(n.agent.run(n.stop))
        v4, v6 = n.elections
        await until(lambda: v6.machine.state is state.State.BACKUP)
        n.wires[6].inject(advert6(PEER6, 200, (V6,)))
        await until(lambda: v6.machine.master_ip == PEER6)
        while v4.machine.state is not state.State.ACTIVE:
            n.timers.fire_next()
        await until(lambda: n.addrs[V4].present)
        old_v4 = n.addrs[V4]
        link = n.host.link
        assert link is not None
        link.delete()
        await until(
            lambda: (
                v4.machine.state is state.State.INITIALIZE
                and v6.machine.state is state.State.INITIALIZE
            )
        )
        new6 = IPv6Address("fe80::99")
        link.recreate(7, "02:00:00:00:00:99", "10.0.0.11/24", f"{new6}/64")
        await until(
            lambda: (
                v4.machine.state is state.State.BACKUP and v6.machine.state is state.State.BACKUP
            )
        )
        assert (7, SELF4) in n.opened and (7, new6) in n.opened
        assert v6.source == new6 and v4.source == SELF4
        assert n.agent.pre.sources == (SELF4, new6)
        assert n.addrs[V4] is not old_v4 and old_v4.closed
        # The IPv6 router hears its better master again, on its new socket.
        n.wires[6].inject(advert6(PEER6, 200, (V6,)))
        await until(lambda: v6.machine.master_ip == PEER6)
        while v4.machine.state is not state.State.ACTIVE:
            n.timers.fire_next()
        await until(lambda: n.addrs[V4].present)
        assert not n.addrs[V6].present
        n.stop.set()
        assert await run_out(task, n.timers, n.stopping) == EXIT_OK

    asyncio.run(scenario())
