"""The step-down that ends a split brain: the clients we moved are pointed at the new master.

What it tests: the pure policy (vipd.vrrp.yielding) on a fake clock: only a step-down for a
higher-priority advert with the VIPs held asks who holds them now; an IPv4 answer is relayed
once, within ANSWER_WINDOW, and never while we lead again; IPv6 asks only (the holder's own
Neighbor Advertisement moves the clients). And the driver's side on a fake wire (the agent,
fake actuators): the VIP is removed before the probe goes out, the probe is the RFC 5227
one, the relay carries the answering MAC from our own Ethernet source, and a stop or a
lower-priority advert sends nothing.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address
from typing import cast

from tests.unit.hostfakes import advert
from tests.unit.test_vrrp_driver import VIP, Node, run, until
from vipd.host.arpwatch import ClaimWatch
from vipd.host.conflict import probe_frame
from vipd.host.neighbor import gratuitous_arp, parse_mac
from vipd.vrrp import state
from vipd.vrrp.yielding import ANSWER_WINDOW, Relay, Solicit, YieldPolicy

V4 = IPv4Address("10.0.0.100")
V4B = IPv4Address("10.0.0.101")
V6 = IPv6Address("fd00::100")
MASTER_MAC = "00:00:5e:00:01:33"
OWN = "02:00:00:00:00:11"


def test_a_preempted_step_down_asks_who_holds_each_vip_and_relays_the_first_answer() -> None:
    p = YieldPolicy()
    assert p.on_step_down(10.0, (V4, V4B), preempted=True, held=True) == [
        Solicit(V4),
        Solicit(V4B),
    ]
    assert p.on_answer(10.001, V4, MASTER_MAC, leading=False) == [Relay(V4, MASTER_MAC)]
    assert p.on_answer(10.002, V4, "02:00:00:00:00:99", leading=False) == []  # once
    assert p.waiting
    assert p.on_answer(10.003, V4B, MASTER_MAC, leading=False) == [Relay(V4B, MASTER_MAC)]
    assert not p.waiting


def test_no_other_step_down_asks_anything() -> None:
    p = YieldPolicy()
    assert p.on_step_down(10.0, (V4,), preempted=False, held=True) == []  # fault, link, stop
    assert p.on_step_down(10.0, (V4,), preempted=True, held=False) == []  # nobody moved to us
    assert p.on_answer(10.001, V4, MASTER_MAC, leading=False) == []


def test_a_late_answer_or_one_while_we_lead_again_is_not_relayed() -> None:
    p = YieldPolicy()
    p.on_step_down(10.0, (V4,), preempted=True, held=True)
    assert p.on_answer(10.0 + ANSWER_WINDOW + 0.001, V4, MASTER_MAC, leading=False) == []
    p.on_step_down(20.0, (V4,), preempted=True, held=True)
    assert p.on_answer(20.001, V4, MASTER_MAC, leading=True) == []
    assert not p.waiting


def test_a_new_step_down_forgets_the_last_ones_question() -> None:
    p = YieldPolicy()
    p.on_step_down(10.0, (V4,), preempted=True, held=True)
    p.on_step_down(10.1, (V4,), preempted=False, held=False)
    assert p.on_answer(10.101, V4, MASTER_MAC, leading=False) == []


def test_ipv6_asks_and_waits_for_no_answer() -> None:
    # The holder answers a DAD solicitation to all nodes with Override set: that moves the
    # clients, so nothing is relayed and nothing waits.
    p = YieldPolicy()
    assert p.on_step_down(10.0, (V6,), preempted=True, held=True) == [Solicit(V6)]
    assert not p.waiting
    assert p.on_answer(10.001, V6, MASTER_MAC, leading=False) == []


# -- the driver -----------------------------------------------------------------------------


def _watching(n: Node, sent: list[tuple[str, list[bytes]]]) -> None:
    """The ARP watch's answers are fed by hand (``on_claim``); the frames are recorded."""
    d = n.election.defence
    d.watches = [cast(ClaimWatch, None)]  # an IPv4 watch is open: answers can be read

    def send(ifname: str, frames: list[bytes]) -> int:
        # The VIP is gone before anyone is asked: its holder must be the new master.
        assert n.events.since(0)[-1] == "unbind"
        sent.append((ifname, frames))
        return len(frames)

    d.send_frames = send


def test_the_driver_asks_after_the_unbind_and_relays_the_answering_mac() -> None:
    sent: list[tuple[str, list[bytes]]] = []

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        _watching(n, sent)
        n.clock.now += 1.0
        n.wire.inject(advert("10.0.0.12", 254))  # a higher-priority master: we step down
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        assert sent == [("eth0", [probe_frame(parse_mac(OWN), VIP)])]
        n.clock.now += 0.001
        n.election.defence.on_claim(MASTER_MAC, vip=VIP)  # its answer to our probe
        n.election.defence.on_claim(MASTER_MAC, vip=VIP)  # a second frame: nothing more
        relay = gratuitous_arp(parse_mac(MASTER_MAC), VIP, eth_src=parse_mac(OWN))
        assert sent[1:] == [("eth0", [relay])]
        assert relay[6:12] == parse_mac(OWN) and relay[22:28] == parse_mac(MASTER_MAC)
        n.election.defence.watches = []
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_the_driver_sends_nothing_on_a_stop_or_a_lower_priority_advert() -> None:
    sent: list[tuple[str, list[bytes]]] = []

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        _watching(n, sent)
        n.clock.now += 1.0
        n.wire.inject(advert("10.0.0.12", 50))  # lower: we stay and re-announce
        n.election.defence.on_claim(MASTER_MAC, vip=VIP)
        assert n.election.machine.state is state.State.ACTIVE
        n.election.defence.watches = []
        n.stop.set()
        await n.stopped()
        assert sent == []

    run(scenario)
