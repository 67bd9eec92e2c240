"""The agent with the VRRP backend, on a fake wire, a fake clock and fake host actuators.

What it tests: the ordering logic that used to run only in root netns tests — the takeover
(advert first, then the VIP, then the gratuitous ARP, all from one timer expiry that finishes
the last ``TIMER_SLACK`` on the socket), the make-before-break stop (priority 0, the VIP kept
until the successor's advert is heard, then removed), a link flap (down: the VIP goes, no
advert, out of the election; up: a backup again, with the core's own reason labels), and the
crash path (a bug in a loop callback: the same ordered cleanup, exit 1, and a failing stop step
logged and counted while the rest is still released).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from ipaddress import IPv4Address
from typing import Any

import pytest

from tests.unit.hostfakes import Events, FakeClock, FakeTimers, FakeWire, Host, advert, run_out
from vipd import config, metrics
from vipd.agent import EXIT_CRASH, EXIT_OK, Agent
from vipd.endpoint.server import Endpoint
from vipd.preflight import HostLink, Preflight
from vipd.vrrp import packet, state
from vipd.vrrp.driver import (
    CLAIM_DEFER_MAX,
    CLAIM_SETTLE,
    CLAIMANT_PROBE_MAX_GAP,
    CLAIMANT_PROBE_WAIT,
    DEFEND_INTERVAL,
    SPLIT_BRAIN_ADVERTS,
    TIMER_SLACK,
    VrrpElection,
)

VIP = IPv4Address("10.0.0.100")
SELF = IPv4Address("10.0.0.11")
PEER = "10.0.0.12"


class Node:
    def __init__(self, priority: int = 100, endpoint: Endpoint | None = None, **vrrp: Any) -> None:
        self.cfg = config.parse(
            {
                "node": "n1",
                "vip": str(VIP),
                "interface": "eth0",
                "election": {"mode": "vrrp", "vrrp": {"vrid": 51, "priority": priority, **vrrp}},
            }
        )
        self.pre = Preflight(
            link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11"),
            source=SELF,
            findings=(),
            stale_vip=False,
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
            open_wire=self._open_wire,
            call_later=self.timers.call_later,
            claimwatch=False,
            probe=self._probe,
        )
        self.agent = Agent(
            self.cfg,
            self.pre,
            self.election,
            endpoint,
            actuators=self.host.actuators,
            watch_link=self.host.watch_link,
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[int] | None = None
        self.probes: list[tuple[float, str]] = []  # unicast ARP probes: (when, to which MAC)

    def _probe(self, mac: str) -> bool:
        self.probes.append((self.clock.now, mac))
        return True

    def _open_wire(self, ifname: str, ifindex: int, source: Any, peers: Any, rx: bool) -> FakeWire:
        self.wire = FakeWire(self.events, self.clock, (IPv4Address("224.0.0.18"),))
        return self.wire

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.agent.run(self.stop))
        await until(lambda: self.election.machine.state is state.State.BACKUP)

    async def take_over(self) -> None:
        """Let the master-down timer run out: the takeover."""
        mdi = state.master_down_interval(3, self.election.machine.priority, 100)
        due = self.timers.fire_next()
        assert abs(due - (1000.0 + mdi - TIMER_SLACK)) < 1e-9  # armed TIMER_SLACK early
        assert self.election.machine.state is state.State.ACTIVE
        assert abs(self.clock.now - (1000.0 + mdi)) < 1e-9  # finished on the socket

    async def stopped(self) -> int:
        assert self.task is not None
        return await run_out(self.task, self.timers, lambda: self.election.handover is not None)


async def until(cond: Callable[[], bool], timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


def run(scenario: Callable[[Node], Awaitable[None]], **node: Any) -> None:
    async def main() -> None:
        await scenario(Node(**node))

    asyncio.run(main())


def transitions(role: str, reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "vipd_role_transitions_total", {"backend": "vrrp", "role": role, "reason": reason}
    )
    return value or 0.0


def test_takeover_sends_the_advert_then_binds_then_announces() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        assert n.events == []  # a backup is silent and holds nothing
        before = transitions("leader", "master-down")
        mark = len(n.events)
        await n.take_over()
        assert n.events.since(mark) == ["advert:100", "bind", "garp"]
        assert transitions("leader", "master-down") == before + 1
        assert n.agent.status(n.clock.now)["role"] == "leader"
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_every_timer_the_driver_runs_is_offered_to_the_heartbeat_with_its_lag() -> None:
    """The agent lends the endpoint's offer_beat to the election: each VRRP timer run, the
    down timer's and the advert tick's, is offered with how late it ran."""
    ep = Endpoint.bind("127.0.0.1:0")
    offers: list[float] = []
    ep.offer_beat = offers.append  # type: ignore[method-assign,assignment]

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert offers == [0.0]  # the down timer, run at its (TIMER_SLACK early) time
        due = n.timers.next_due()
        assert due is not None
        n.timers.fire_next_at(due + 0.004)  # a tick the loop ran 4 ms late
        assert offers[1:] == [pytest.approx(0.004)]
        n.timers.fire_next()
        assert offers[2:] == [0.0]
        n.stop.set()
        await n.stopped()

    try:
        run(scenario, endpoint=ep)
    finally:
        ep.close()


def test_an_active_woken_late_reads_first_and_announces_before_it_advertises() -> None:
    # SIGSTOP, then SIGCONT seconds later: meanwhile a lower-priority router took over and
    # its adverts wait in our socket. The overdue tick must not advertise first (that makes
    # the other router drop the VIP while the clients still point at its MAC).
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.wire.queue.append(advert(PEER, 150))
        n.clock.now += 5.0  # frozen for five advert intervals
        mark = len(n.events)
        n.timers.fire_next()
        while n.timers.pending and "advert:200" not in n.events.since(mark):
            n.timers.fire_next()
        got = n.events.since(mark)
        assert got.index("garp") < got.index("advert:200"), got
        assert n.election.machine.state is state.State.ACTIVE
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_an_active_woken_late_reads_once_and_garbage_does_not_hold_its_advert() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.wire.queue.append(packet.DecodeError("truncated", "test"))
        n.clock.now += 5.0
        mark = len(n.events)
        n.timers.fire_next()
        assert n.events.since(mark) == ["advert:200"]  # in the same tick, not re-armed
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_an_active_woken_late_with_nothing_queued_just_advertises() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        n.clock.now += 5.0
        mark = len(n.events)
        n.timers.fire_next()
        assert n.events.since(mark) == ["advert:200"]
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_an_active_timer_fired_early_by_the_loop_advertises_without_waiting() -> None:
    # The loop's timers have millisecond grain: one that fires a fraction of a millisecond
    # before the advert is due sends it then, on the schedule, without a second wake-up.
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        due = n.election.machine.deadline
        assert due is not None
        mark = len(n.events)
        n.timers.fire_next_at(due - 0.0005)
        assert n.events.since(mark) == ["advert:200"]
        assert n.clock.now == due - 0.0005  # no wait on the socket
        assert n.election.machine.deadline == due + 1.0  # the schedule, not now + interval
        assert n.timers.next_due() == pytest.approx(due + 1.0)
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_better_advert_queued_when_the_down_timer_fires_late_stops_the_takeover() -> None:
    # Woken past the deadline (a loaded machine), the Backup reads what is waiting before it
    # takes over: the better backup's advert arrived in time.
    async def scenario(n: Node) -> None:
        await n.start()
        assert n.wire is not None
        due = n.election.machine.deadline
        assert due is not None
        n.wire.queue.append(advert(PEER, 200))
        n.timers.fire_next_at(due + 0.008)
        assert n.election.machine.state is state.State.BACKUP
        assert "bind" not in n.events and "advert:100" not in n.events
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_better_advert_inside_the_last_slack_stops_the_takeover() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        assert n.wire is not None
        n.wire.queue.append(advert(PEER, 200))  # already waiting when the slack begins
        n.timers.fire_next()
        assert n.election.machine.state is state.State.BACKUP
        assert "bind" not in n.events and "advert:100" not in n.events
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_stop_is_make_before_break() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None and n.host.address is not None
        mark = len(n.events)
        n.stop.set()
        await until(lambda: "advert:0" in n.events.since(mark))
        await asyncio.sleep(0.05)
        # Resigned, but the VIP stays until the successor is heard (or none can come).
        assert n.events.since(mark) == ["advert:0"] and n.host.address.present
        assert not n.agent.readiness()[0]
        n.wire.inject(advert(PEER, 100))
        assert await n.stopped() == EXIT_OK
        assert n.events.since(mark) == ["advert:0", "unbind"]
        assert n.wire.closed and n.host.address.closed

    run(scenario)


def test_link_flap_leaves_and_rejoins_the_election() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.host.link is not None
        down_before = transitions("init", "interface-down")
        up_before = transitions("follower", "interface-up")
        mark = len(n.events)
        n.host.link.flip(False)
        await until(lambda: n.election.machine.state is state.State.INITIALIZE)
        # No priority-0 advert (it cannot leave a down link): the VIP just goes.
        assert n.events.since(mark) == ["unbind"]
        assert transitions("init", "interface-down") == down_before + 1
        assert n.agent.readiness() == (False, "interface eth0 is down: not in the election")
        assert n.agent.status(n.clock.now)["interface_up"] is False
        assert n.timers.next_due() is None  # out of the election: no timer
        n.host.link.flip(True)
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        assert transitions("follower", "interface-up") == up_before + 1
        assert n.election.machine.last_reason.startswith("interface-up:")
        mark = len(n.events)
        n.timers.fire_next()  # a full down interval later: leader again
        assert n.events.since(mark) == ["advert:100", "bind", "garp"]
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_crash_takes_the_same_ordered_path_and_counts_a_failed_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None and n.host.address is not None
        assert n.host.announcer is not None
        n.host.address.fail_close = OSError("netlink socket already gone")
        errors = metrics.REGISTRY.get_sample_value("vipd_stop_errors_total", {"step": "host"})
        mark = len(n.events)
        n.wire.fail_receive = RuntimeError("a bug in the receive path")
        n.wire.inject(advert(PEER, 50))
        await until(lambda: "advert:0" in n.events.since(mark))
        n.wire.inject(advert(PEER, 100))  # the successor
        assert await n.stopped() == EXIT_CRASH
        assert n.events.since(mark) == ["advert:0", "unbind"]
        after = metrics.REGISTRY.get_sample_value("vipd_stop_errors_total", {"step": "host"})
        assert after == (errors or 0.0) + 1
        # The failed step did not stop the rest.
        assert n.wire.closed and n.host.announcer.closed
        failed = [r for r in caplog.records if r.getMessage() == "stop step failed"]
        assert [getattr(r, "fields", {}).get("step") for r in failed] == ["host"]

    run(scenario)


def test_health_is_pushed_into_the_priority() -> None:
    """The gated priority follows the checker's change at once (no polling)."""

    async def scenario(n: Node) -> None:
        from vipd.health.tracker import BackendHealth

        await n.start()
        cfg = config.parse(
            {
                "node": "n1",
                "vip": str(VIP),
                "interface": "eth0",
                "election": {"vrrp": {"vrid": 51, "priority": 100}},
                "health": {"weight": 60},
            }
        )
        n.election.cfg = cfg
        assert cfg.health is not None
        n.election.on_health(cfg.health.local, BackendHealth(healthy=False, since=n.clock.now))
        assert n.election.machine.priority == 40
        n.election.on_health(cfg.health.local, BackendHealth(healthy=True, since=n.clock.now))
        assert n.election.machine.priority == 100
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_split_brain_claim_is_answered_at_once_despite_the_defend_limit() -> None:
    """A lower-priority peer of our own VRID took the VIP (it missed our adverts) and its
    gratuitous ARP lands just after our answer to its advert: the claim is answered at once,
    although the RFC 5227 defend budget for foreign hosts was spent seconds ago; and the
    contest's end (the peer quiet at our next advert) is announced once more."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.election.defence.on_claim("02:00:00:00:00:99")  # a foreign host: defended, budget spent
        n.clock.now += 5.0
        mark = len(n.events)
        n.wire.inject(advert(PEER, 100))  # the peer believes it is active
        await until(lambda: n.events.since(mark).count("garp") >= 1)
        assert n.events.since(mark) == ["garp"]  # make-before-break: announced first
        n.timers.fire_next()
        assert n.events.since(mark) == ["garp", "advert:200"]
        n.clock.now += 0.001
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:12")  # its gratuitous ARP, after ours
        assert n.events.since(mark) == ["garp"]
        n.election.defence.on_claim("02:00:00:00:00:12")  # bounded: once per advert interval
        assert n.events.since(mark) == ["garp"]
        # Our next adverts: the peer stepped down (quiet), so the end is announced once.
        mark = len(n.events)
        while "garp" not in n.events.since(mark):
            n.timers.fire_next()
            assert len(n.events.since(mark)) < 10
        assert n.events.since(mark)[-1] == "garp"
        mark = len(n.events)
        n.timers.fire_next()
        assert "garp" not in n.events.since(mark)
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_split_brain_peers_later_claim_is_answered_though_its_advert_is_lost() -> None:
    """Under VRRP loss a backup that took over once (its MAC shown a peer's by its advert)
    takes over again and its advert never reaches us: its claim is still a peer's, answered
    at once, although the RFC 5227 budget was spent on a foreign host meanwhile."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.clock.now += 5.0
        n.wire.inject(advert(PEER, 100))  # its first takeover: the advert reached us
        await until(lambda: n.election.machine.lead_pending)
        n.timers.fire_next()
        n.election.defence.on_claim("02:00:00:00:00:12")
        window = SPLIT_BRAIN_ADVERTS * n.election.machine.advert_interval
        n.clock.now += window + 1.0
        n.election.defence.on_claim("02:00:00:00:00:99")  # a foreign host: defended, budget spent
        fire_within(n, 0.1)
        n.clock.now += 1.0
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:12")  # its second takeover, advert lost
        assert n.events.since(mark) == ["garp"]
        n.election.defence.on_claim("02:00:00:00:00:12")  # bounded: once per advert interval
        fire_within(n, 0.1)
        assert n.events.since(mark).count("garp") == 1
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_peers_claim_is_announced_again_once_the_peer_no_longer_answers() -> None:
    """We answer a peer's claim at its first frame, and the rest of its burst (frames
    ``garp.interval`` apart, as ours) can land after ours: the clients end on its MAC, and
    it steps down on our next advert. It is asked an interval later: while it answers, it
    still has the VIP; once it does not, we announce once more."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        peer, adv = "02:00:00:00:00:12", n.election.machine.advert_interval
        n.clock.now += 5.0
        n.wire.inject(advert(PEER, 100))  # the advert that shows its MAC a peer's
        await until(lambda: n.election.machine.lead_pending)
        n.election.defence.on_claim(peer)
        fire_within(n, SPLIT_BRAIN_ADVERTS * adv + 2 * CLAIMANT_PROBE_MAX_GAP + 1.0)
        n.clock.now += 10.0
        mark, t0 = len(n.events), n.clock.now
        n.election.defence.on_claim(peer)  # a later takeover, its advert lost: answered at once
        assert garps(n, mark) == 1 and n.probes[-1][0] < t0
        fire_until(n, lambda: n.probes[-1][0] > t0, adv + CLAIM_SETTLE + 0.001)
        assert n.probes[-1][1] == peer
        assert n.probes[-1][0] == pytest.approx(t0 + adv + CLAIM_SETTLE)
        n.election.defence.on_claim(peer)  # still active: it has not heard our advert yet
        fire_within(n, CLAIMANT_PROBE_WAIT + 0.001)
        assert garps(n, mark) == 1
        asked = len(n.probes)
        fire_until(n, lambda: len(n.probes) > asked, CLAIMANT_PROBE_MAX_GAP + 0.1)
        fire_within(n, CLAIMANT_PROBE_WAIT + 0.001)  # no answer: it stepped down
        assert garps(n, mark) == 2
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_claim_its_advert_follows_is_a_peers_and_costs_no_defend_budget() -> None:
    """A vipd peer announces just before it advertises: its claim first looks foreign and is
    defended, then its lower-priority advert shows whose it was. The defence is refunded, so
    a foreign host a second later is still defended, and the peer's next claim is answered
    at once."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.clock.now += 5.0
        mark = len(n.events)
        t0 = n.clock.now
        n.election.defence.on_claim("02:00:00:00:00:12")  # its announcement, before its advert
        fire_within(n, CLAIM_SETTLE + 0.001)
        assert garps(n, mark) == 1  # defended as a foreign host's
        # Its first advert lost, the next one an interval and a half later.
        n.clock.now = t0 + 1.5 * n.election.machine.advert_interval
        n.wire.inject(advert(PEER, 100))
        await until(lambda: n.election.machine.lead_pending)
        heard = n.clock.now
        window = SPLIT_BRAIN_ADVERTS * n.election.machine.advert_interval
        fire_within(n, window + 0.5)  # our answer, then the contest's end announced
        n.clock.now = heard + window + 1.0
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:99")  # a foreign host
        fire_within(n, 0.1)
        assert garps(n, mark) == 1, "the peer's claim spent the budget"
        n.clock.now += 1.0
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:12")  # the peer again, its advert lost
        assert n.events.since(mark) == ["garp"]
        n.election.defence.on_claim("02:00:00:00:00:99")  # the foreign host: budget spent now
        fire_within(n, 0.1)
        assert garps(n, mark) == 1
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_claim_only_inside_the_split_brain_window_is_answered_but_not_remembered() -> None:
    """A claim 0.2 s after a lower-priority advert is answered as the split brain's, but so
    far from the advert it may be a foreign host's: its MAC is not remembered as a peer's,
    so its later claims are held to the RFC 5227 budget."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.clock.now += 5.0
        n.wire.inject(advert(PEER, 100))
        await until(lambda: n.election.machine.lead_pending)
        heard = n.clock.now
        n.timers.fire_next()
        n.clock.now = heard + 0.2
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:99")
        assert garps(n, mark) == 1  # inside SPLIT_BRAIN_ADVERTS intervals: answered
        window = SPLIT_BRAIN_ADVERTS * n.election.machine.advert_interval
        fire_within(n, window + 0.5)
        n.clock.now = heard + window + 1.0
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:99")
        assert garps(n, mark) == 0  # a foreign claim: defended only after CLAIM_SETTLE
        fire_within(n, CLAIM_SETTLE + 0.001)
        assert garps(n, mark) == 1
        n.clock.now += 1.0
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:99")  # the budget is spent
        fire_within(n, 0.1)
        assert garps(n, mark) == 0
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def garps(n: Node, mark: int) -> int:
    return n.events.since(mark).count("garp")


def received_more_than(n: Node, count: int) -> bool:
    return n.election.stats.adverts_received > count


def fire_within(n: Node, horizon: float) -> None:
    """Run every timer due within ``horizon`` seconds of the fake clock's now."""
    end = n.clock.now + horizon
    while (due := n.timers.next_due()) is not None and due < end:
        n.timers.fire_next()


async def lower_master_heard(n: Node, count: int = 3) -> None:
    """A live lower-priority master's adverts, one a second, discarded by our backup."""
    assert n.wire is not None
    for i in range(count):
        n.clock.now = 1000.0 + 1 + i
        n.wire.inject(advert(PEER, 100))
        await until(functools.partial(received_more_than, n, i))


def test_preempting_a_live_master_binds_and_announces_before_the_advert() -> None:
    """The order on the wire of a planned move: bind and gratuitous ARP, then the advert
    that makes the old master step down (not a duration: the fake clock has none)."""

    async def scenario(n: Node) -> None:
        await n.start()
        await lower_master_heard(n)
        mark = len(n.events)
        n.timers.fire_next()  # the down timer: a takeover from a live master
        assert n.election.machine.state is state.State.ACTIVE
        assert n.events.since(mark) == ["bind", "garp"]
        assert "make-before-break" in n.election.machine.last_reason
        n.timers.fire_next()  # preempt_lead later
        assert n.events.since(mark) == ["bind", "garp", "advert:200"]
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_foreign_claim_is_defended_only_if_we_still_lead_after_the_settle_time() -> None:
    """A claim from a MAC we know nothing about is defended CLAIM_SETTLE later, so a
    higher-priority node announcing before its preempting advert is not fought."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.clock.now += 5.0
        mark = len(n.events)
        n.election.defence.on_claim("02:00:00:00:00:99")
        assert n.events.since(mark) == []  # not yet
        n.wire.inject(advert(PEER, 254))  # its preempting advert: we step down
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        fire_within(n, 0.1)
        assert "garp" not in n.events.since(mark)
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_claimants_burst_is_answered_after_its_last_frame() -> None:
    """Under VRRP loss a backup can take over unheard and announce in a burst; a defence sent
    in the middle of it is overwritten by its next frame. The defence waits for the burst to
    end (CLAIM_SETTLE after the latest frame, at most CLAIM_DEFER_MAX after the first)."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        n.clock.now += 5.0
        mark = len(n.events)
        t0 = n.clock.now
        for i in range(5):  # garp.repeat 5, garp.interval 10 ms
            n.clock.now = t0 + i * 0.01
            n.election.defence.on_claim("02:00:00:00:00:99")
        last = n.clock.now
        while "garp" not in n.events.since(mark):
            n.timers.fire_next()
            assert n.clock.now < t0 + 1.0, n.events.since(mark)
        assert abs(n.clock.now - (last + CLAIM_SETTLE)) < 1e-9
        assert n.events.since(mark).count("garp") == 1
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_claim_storm_does_not_defer_the_defence_forever() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        n.clock.now += 5.0
        mark = len(n.events)
        t0 = n.clock.now
        for i in range(100):  # a frame every 10 ms for a second
            n.clock.now = t0 + i * 0.01
            n.election.defence.on_claim("02:00:00:00:00:99")
            if "garp" in n.events.since(mark):
                break
            while (due := n.timers.next_due()) is not None and due <= n.clock.now:
                n.timers.fire_next()
        assert "garp" in n.events.since(mark)
        assert n.clock.now <= t0 + CLAIM_DEFER_MAX + CLAIM_SETTLE + 0.01 + 1e-9
        n.stop.set()
        await n.stopped()

    run(scenario)


def fire_until(n: Node, cond: Callable[[], bool], horizon: float) -> None:
    """Fire the next timers until ``cond`` holds; fail past ``horizon`` s of fake time."""
    end = n.clock.now + horizon
    while not cond():
        assert n.clock.now < end, n.events
        n.timers.fire_next()


def test_a_claimant_left_unanswered_is_asked_and_its_stranded_clients_announced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under VRRP loss a backup takes over twice in 10 s and neither advert reaches us: its
    second announcement finds the RFC 5227 budget spent. It steps down on our next advert,
    and the clients it moved would time out on its MAC: a unicast probe one advert interval
    after its claim, then at doubling gaps, asks whether it still has the VIP; once it does
    not answer, we announce."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        caplog.set_level(logging.INFO, logger="vipd")
        x, adv = "02:00:00:00:00:13", n.election.machine.advert_interval
        n.clock.now += 5.0
        mark = len(n.events)
        n.election.defence.on_claim(x)  # its first takeover: defended as a foreign host's
        fire_within(n, CLAIM_SETTLE + 0.001)
        assert garps(n, mark) == 1 and n.probes == []
        n.clock.now += 1.0
        claimed = n.clock.now
        mark = len(n.events)
        n.election.defence.on_claim(x)  # its second: the budget is spent
        fire_until(n, lambda: len(n.probes) == 1, 2 * CLAIM_SETTLE + adv + 0.001)
        assert garps(n, mark) == 0
        # Judged CLAIM_SETTLE after the claim (we still lead), asked an interval (and
        # CLAIM_SETTLE: a peer steps down on our next advert) later.
        assert [mac for _, mac in n.probes] == [x]
        assert n.probes[0][0] == pytest.approx(claimed + 2 * CLAIM_SETTLE + adv)
        n.clock.now += 0.001
        n.election.defence.on_claim(x)  # it answers: it still has the VIP
        fire_until(n, lambda: len(n.probes) == 2, 2 * adv + 0.1)
        assert garps(n, mark) == 0, "answered, so not stranded: held to the budget"
        # An interval after the first probe's verdict (the peer's next chance to hear us).
        assert n.probes[1][0] - n.probes[0][0] == pytest.approx(CLAIMANT_PROBE_WAIT + adv)
        # No answer: it stepped down, and whoever its announcement moved is stranded.
        fire_within(n, CLAIMANT_PROBE_WAIT + 0.001)
        assert garps(n, mark) == 1
        said = [r for r in caplog.records if "no longer answers" in str(r.__dict__)]
        assert len(said) == 1 and x in str(said[0].__dict__)
        fire_within(n, 12.0)
        assert len(n.probes) == 2 and garps(n, mark) == 1  # the check is over
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_claimant_that_keeps_the_vip_is_held_to_the_defend_budget() -> None:
    """A foreign host that keeps answering is never announced against more often than the
    RFC 5227 budget allows: its answer DEFEND_INTERVAL after its claim is judged as a claim,
    and defended then, once."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        x = "02:00:00:00:00:99"
        n.clock.now += 5.0
        n.election.defence.on_claim(x)
        fire_within(n, CLAIM_SETTLE + 0.001)  # defended: the budget is spent
        n.clock.now += 0.5
        claimed = n.clock.now
        mark = len(n.events)
        n.election.defence.on_claim(x)
        asked, defended = 0, list[float]()
        while n.timers.next_due() is not None and n.clock.now < claimed + 25.0:
            n.timers.fire_next()
            if garps(n, mark) > len(defended):
                defended.append(n.clock.now)
            if len(n.probes) > asked:
                asked = len(n.probes)
                n.election.defence.on_claim(x)  # its answer
        assert len(defended) == 1, defended
        limit = claimed + CLAIM_SETTLE + DEFEND_INTERVAL
        assert limit <= defended[0] <= limit + CLAIMANT_PROBE_MAX_GAP + 0.1, defended
        assert n.probes and all(t <= defended[0] for t, _ in n.probes)
        gaps = [b[0] - a[0] for a, b in zip(n.probes, n.probes[1:], strict=False)]
        adv = n.election.machine.advert_interval
        assert all(g >= adv - 1e-9 for g in gaps), gaps
        # Three an interval apart (and the verdict's wait), then at doubling gaps up to 1 s.
        assert gaps[:2] == [pytest.approx(adv + CLAIMANT_PROBE_WAIT)] * 2, gaps
        assert max(gaps) <= CLAIMANT_PROBE_MAX_GAP + CLAIMANT_PROBE_WAIT + 1e-9, gaps
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_claimant_check_ends_when_we_step_down() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        x = "02:00:00:00:00:99"
        n.clock.now += 5.0
        n.election.defence.on_claim(x)
        fire_within(n, CLAIM_SETTLE + 0.001)
        n.clock.now += 1.0
        mark = len(n.events)
        n.election.defence.on_claim(x)
        fire_within(n, CLAIM_SETTLE + 0.001)
        n.wire.inject(advert(PEER, 254))  # a better router: we step down
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        fire_within(n, 3.0)
        assert n.probes == [] and garps(n, mark) == 0
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_foreign_claim_is_defended_when_we_still_lead() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        n.clock.now += 5.0
        mark = len(n.events)
        t0 = n.clock.now
        n.election.defence.on_claim("02:00:00:00:00:99")
        assert n.events.since(mark) == []
        while "garp" not in n.events.since(mark):
            n.timers.fire_next()
            assert n.clock.now < t0 + 1.0, n.events.since(mark)
        assert abs(n.clock.now - (t0 + CLAIM_SETTLE)) < 1e-9
        n.election.defence.on_claim("02:00:00:00:00:99")  # the RFC 5227 limit: once per 10 s
        fire_within(n, 0.1)
        assert n.events.since(mark).count("garp") == 1
        n.stop.set()
        await n.stopped()

    run(scenario)


def role_of(m: state.Machine) -> state.State:
    # Through a function: mypy would keep an asserted state narrowed past a timer.
    return m.state


async def _resigned(n: Node) -> None:
    """Our master PEER (prio 200) resigns at 1001.5; our Skew_Time timer is armed."""
    await n.start()
    assert n.wire is not None
    n.clock.now = 1001.0
    n.wire.inject(advert(PEER, 200))  # the master
    await until(functools.partial(received_more_than, n, 0))
    n.clock.now = 1001.5
    n.wire.inject(advert(PEER, 0))  # it resigns
    await until(functools.partial(received_more_than, n, 1))


def test_after_a_priority_0_advert_we_advertise_then_bind_after_the_contest_window() -> None:
    """The old master keeps the VIP until our announcement: the advert goes first, and the
    bind when the contest window has passed with the socket read to its end."""

    async def scenario(n: Node) -> None:
        await _resigned(n)
        m = n.election.machine
        mark = len(n.events)
        fire_within(n, m.skew + 0.001)  # Skew_Time later: the takeover's decision
        assert n.events.since(mark) == ["advert:100"]
        assert m.contest_pending and role_of(m) is state.State.BACKUP
        fire_within(n, m.params.release_contest + 0.001)
        assert role_of(m) is state.State.ACTIVE
        assert n.events.since(mark) == ["advert:100", "bind", "garp", "advert:100"]
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_better_backups_advert_inside_the_contest_window_keeps_the_vip_off_us() -> None:
    """Backups of one priority fire together after a priority-0 advert: the one with the
    higher address binds, and we never do (no bind, no role change published)."""

    async def scenario(n: Node) -> None:
        await _resigned(n)
        assert n.wire is not None
        m = n.election.machine
        mark = len(n.events)
        fire_within(n, m.skew + 0.001)
        assert n.events.since(mark) == ["advert:100"]
        other = IPv4Address("10.0.0.99")  # equal priority, an address above ours
        assert int(other) > int(m.params.primary_ip)
        n.clock.now += 0.001
        n.wire.inject(advert(str(other), 100))
        await until(lambda: not m.contest_pending)
        fire_within(n, 0.05)
        assert m.state is state.State.BACKUP and m.master_ip == other
        assert n.events.since(mark) == ["advert:100"]
        assert n.election.stats.transitions["active"] == 0
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_stopping_leader_releases_after_the_successors_announcement() -> None:
    """A keepalived successor advertises before it announces: the resigned leader keeps the
    VIP until the announcement is seen too (bounded by CLAIM_SETTLE)."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None and n.host.address is not None
        mark = len(n.events)
        n.stop.set()
        await until(lambda: "advert:0" in n.events.since(mark))
        n.wire.inject(advert(PEER, 150))  # the successor's advert, its ARP not yet seen
        await asyncio.sleep(0.005)
        assert n.host.address.present  # still waiting for the announcement
        n.election.defence.on_claim("02:00:00:00:00:12")
        assert await n.stopped() == EXIT_OK
        assert n.events.since(mark) == ["advert:0", "unbind"]

    run(scenario)


def test_a_stopping_leader_releases_on_the_successors_second_advert(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where announcements are not watched (IPv6), a vipd successor's claim shows as its
    second advert, sent right after its bind; the first adverts of two tied backups (the
    release contest) are not a claim."""

    caplog.set_level(logging.INFO, logger="vipd")

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None and n.host.address is not None
        mark = len(n.events)
        n.stop.set()
        await until(lambda: "advert:0" in n.events.since(mark))
        n.wire.inject(advert(PEER, 150))  # the contest's adverts, one of each backup
        n.wire.inject(advert("10.0.0.13", 150))
        await asyncio.sleep(0.01)
        assert n.host.address.present  # no claim yet: the VIP stays
        n.wire.inject(advert("10.0.0.13", 150))  # the winner's claim
        assert await n.stopped() == EXIT_OK
        assert n.events.since(mark) == ["advert:0", "unbind"]
        (line,) = [
            r for r in caplog.records if r.getMessage() == "new leader heard: releasing the VIP"
        ]
        fields = getattr(line, "fields", {})
        assert (fields.get("claim_seen"), str(fields.get("leader"))) == ("advert", "10.0.0.13")

    run(scenario)


def test_a_split_brain_claim_inside_our_lead_window_is_answered_at_once() -> None:
    """The other router's gratuitous ARP lands between our announcement and our advert (the
    lead): it is the split brain's, answered at once, not ignored as a preemption's."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert n.wire is not None
        n.clock.now += 5.0
        mark = len(n.events)
        n.wire.inject(advert(PEER, 100))
        await until(lambda: "garp" in n.events.since(mark))
        assert n.election.machine.lead_pending
        n.election.defence.on_claim("02:00:00:00:00:12")
        assert n.events.since(mark) == ["garp", "garp"]
        n.timers.fire_next()
        assert n.events.since(mark) == ["garp", "garp", "advert:200"]
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)
