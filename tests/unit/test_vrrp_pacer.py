"""The Active's adverts from the pacer's thread (vipd.vrrp.pacer) and the driver's tick.

What it tests: the pacer runs its tick at the due times it is given, in its own thread,
stops when told or when the tick says so, wakes for an earlier due time and ends on close;
the driver, on a real loop and clock, sends a Master's steady adverts from that thread and
the loop's none, stops them on a step-down and before its priority-0 advert; and the
driver's tick on a fake clock: a steady advert is sent, anything else (woken more than an
interval late, not Active, a deadline moved later, a bug) goes back to the loop, which
decides as it does without the pacer.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from ipaddress import IPv4Address
from typing import Any

from tests.unit.hostfakes import Events, FakeWire, Host, advert
from tests.unit.test_vrrp_driver import Node, until
from vipd import config
from vipd.agent import EXIT_CRASH, EXIT_OK, Agent
from vipd.preflight import HostLink, Preflight
from vipd.vrrp import state
from vipd.vrrp.driver import TIMER_SLACK, VrrpElection
from vipd.vrrp.pacer import AdvertPacer

VIP = IPv4Address("10.0.0.100")
SELF = IPv4Address("10.0.0.11")
PEER = "10.0.0.12"


# -- the pacer alone ----------------------------------------------------------------------


class Ticks:
    """A tick that records when and in which thread it ran, then returns ``next_due()``."""

    def __init__(self, next_due: Callable[[float], float | None]) -> None:
        self.next_due = next_due
        self.runs: list[tuple[float, float, int]] = []  # (due, ran at, thread)
        self.ran = threading.Event()

    def __call__(self, due: float) -> float | None:
        self.runs.append((due, time.monotonic(), threading.get_ident()))
        self.ran.set()
        return self.next_due(due)


def wait_until(cond: Callable[[], bool], timeout: float = 3.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.002)


def test_the_pacer_ticks_at_each_due_time_in_its_own_thread_until_the_tick_stops() -> None:
    lock = threading.RLock()
    ticks = Ticks(lambda due: due + 0.02 if len(ticks.runs) < 5 else None)
    pacer = AdvertPacer(ticks, lock)
    try:
        with lock:
            pacer.pace(time.monotonic() + 0.02)
        wait_until(lambda: len(ticks.runs) == 5)
        time.sleep(0.1)
        assert len(ticks.runs) == 5  # the fifth returned None: nothing more is due
        assert pacer.due is None
        assert pacer.ticks == 5
        assert {thread for _, _, thread in ticks.runs} != {threading.get_ident()}
        for due, ran, _ in ticks.runs:
            assert ran >= due - 0.0002 - 1e-6  # never early by more than the slack
        dues = [due for due, _, _ in ticks.runs]
        assert all(abs(b - a - 0.02) < 1e-9 for a, b in itertools.pairwise(dues))
    finally:
        pacer.close()
    assert not pacer.running


def test_a_halted_pacer_sends_nothing_and_an_earlier_due_time_wakes_it() -> None:
    lock = threading.RLock()
    ticks = Ticks(lambda due: None)
    pacer = AdvertPacer(ticks, lock)
    try:
        with lock:
            pacer.pace(time.monotonic() + 0.05)
            pacer.halt()
        time.sleep(0.15)
        assert ticks.runs == []
        # Asleep until a due time 10 s away, then given one 20 ms away: it ticks then.
        with lock:
            pacer.pace(time.monotonic() + 10.0)
        time.sleep(0.05)
        given = time.monotonic() + 0.02
        with lock:
            pacer.pace(given)
        assert ticks.ran.wait(2.0)
        assert [due for due, _, _ in ticks.runs] == [given]
    finally:
        pacer.close()
    assert not pacer.running
    with lock:
        pacer.pace(time.monotonic())  # closed: ignored
    time.sleep(0.02)
    assert len(ticks.runs) == 1


# -- the driver on a real loop and clock ----------------------------------------------------


class WallClock:
    """The real monotonic clock with the fakes' ``now``: setting it later waits until then
    (FakeWire's ``wait_readable`` passes the time that way)."""

    def __call__(self) -> float:
        return time.monotonic()

    @property
    def now(self) -> float:
        return time.monotonic()

    @now.setter
    def now(self, value: float) -> None:
        time.sleep(max(0.0, value - time.monotonic()))


def node_config(priority: int, interval: float) -> config.Config:
    return config.parse(
        {
            "node": "n1",
            "vip": str(VIP),
            "interface": "eth0",
            "election": {
                "mode": "vrrp",
                "vrrp": {"vrid": 51, "priority": priority, "advert_interval": interval},
            },
        }
    )


PRE = Preflight(
    link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11"),
    source=SELF,
    findings=(),
    stale_vip=False,
)


class RealNode:
    """A node whose driver runs on the loop's own timers and the real clock, with the
    pacer asked for (by default only below 0.1 s; at 0.1 s no real-time scheduling is asked
    for)."""

    def __init__(self, priority: int = 200) -> None:
        self.host = Host(VIP)
        self.events: Events = self.host.events
        self.clock = WallClock()
        self.wire: FakeWire | None = None
        self.senders: list[tuple[str, int]] = []  # (event, thread) per advert sent
        self.election = VrrpElection(
            node_config(priority, 0.1), PRE, clock=self.clock, open_wire=self._open_wire,
            claimwatch=False, pace=True,
        )  # fmt: skip
        self.agent = Agent(
            node_config(priority, 0.1),
            PRE,
            self.election,
            None,
            actuators=self.host.actuators,
            watch_link=self.host.watch_link,
        )
        self.stop = asyncio.Event()

    def _open_wire(self, ifname: str, ifindex: int, source: Any, peers: Any, rx: bool) -> FakeWire:
        wire = FakeWire(self.events, self.clock, (IPv4Address("224.0.0.18"),))  # type: ignore[arg-type]
        plain = wire.send

        def send(message: bytes, dst: Any) -> None:
            plain(message, dst)
            self.senders.append((f"advert:{message[2]}", threading.get_ident()))

        wire.send = send  # type: ignore[method-assign]
        self.wire = wire
        return wire


def test_a_master_sends_its_steady_adverts_from_the_pacer_and_stops_them_on_a_step_down() -> None:
    async def scenario() -> None:
        n = RealNode()
        loop_thread = threading.get_ident()
        task = asyncio.get_running_loop().create_task(n.agent.run(n.stop))
        e = n.election
        await until(lambda: e.timers.pacer is not None)
        # Started when the node joined the election, not on the takeover's path.
        assert e.timers.pacer is not None and e.timers.pacer.running
        assert e.machine.state is state.State.BACKUP and e.timers.pacer.due is None
        await until(lambda: e.machine.state is state.State.ACTIVE)  # after its down interval
        await until(lambda: len(n.senders) >= 5)
        pacer = e.timers.pacer
        assert pacer is not None and pacer.running
        # The takeover's advert is the loop's; every steady one after it the pacer's.
        assert n.senders[0] == ("advert:200", loop_thread)
        assert all(ev == "advert:200" and t != loop_thread for ev, t in n.senders[1:])
        assert pacer.ticks >= len(n.senders) - 1
        assert n.events.index("advert:200") < n.events.index("bind") < n.events.index("garp")

        # A better router's advert: the loop steps down, and the pacer sends no more.
        assert n.wire is not None
        n.wire.inject(advert(PEER, 250))
        await until(lambda: e.machine.state is state.State.BACKUP)
        sent = len(n.senders)
        assert pacer.due is None
        await asyncio.sleep(0.35)  # more than three advert intervals
        assert len(n.senders) == sent
        n.stop.set()
        assert await asyncio.wait_for(task, 5) == EXIT_OK
        assert not pacer.running

    asyncio.run(scenario())


def test_a_stopping_master_sends_no_paced_advert_after_its_priority_0() -> None:
    async def scenario() -> None:
        n = RealNode()
        task = asyncio.get_running_loop().create_task(n.agent.run(n.stop))
        await until(lambda: len(n.senders) >= 3)
        n.stop.set()
        assert await asyncio.wait_for(task, 5) == EXIT_OK
        sent = [ev for ev, _ in n.senders]
        assert sent[-1] == "advert:0" and sent.count("advert:0") == 1, sent
        pacer = n.election.timers.pacer
        assert pacer is not None and not pacer.running

    asyncio.run(scenario())


# -- the driver's tick on a fake clock ---------------------------------------------------------


class FakeNode(Node):
    """The driver tests' node (fake clock and timers, no pacer thread): ``Timers.paced_tick`` is
    called by the test as the pacer would call it."""

    async def active(self) -> None:
        await self.start()
        await self.take_over()
        self.election.timers.pacing_on = True  # as run() sets it with a pacer

    def tick(self) -> float | None:
        m = self.election.machine
        assert m.deadline is not None
        with self.election.timers.lock:
            return self.election.timers.paced_tick(m.deadline)


def fake(scenario: Callable[[FakeNode], Awaitable[None]]) -> None:
    async def main() -> None:
        await scenario(FakeNode(priority=200))

    asyncio.run(main())


def test_the_driver_tick_sends_a_due_advert_and_returns_the_next_due_time() -> None:
    async def scenario(n: FakeNode) -> None:
        await n.active()
        m = n.election.machine
        assert m.deadline is not None
        due = m.deadline
        n.clock.now = due - TIMER_SLACK  # not due yet (the loop moved it, say): nothing sent
        mark = len(n.events)
        assert n.tick() == due and n.events.since(mark) == []
        n.clock.now = due + 0.0001
        assert n.tick() == due + 0.0001 + 1.0  # restarted from now, as the Adver_Timer does
        assert n.events.since(mark) == ["advert:200"]
        n.stop.set()
        assert await n.stopped() == EXIT_OK

    fake(scenario)


def test_the_driver_tick_woken_late_hands_the_moment_to_the_loop_which_announces_first() -> None:
    # As without the pacer (test_vrrp_driver): SIGSTOP, then SIGCONT seconds later, a
    # lower-priority router took over meanwhile; the overdue advert must not go first.
    async def scenario(n: FakeNode) -> None:
        await n.active()
        assert n.wire is not None
        n.wire.queue.append(advert(PEER, 150))
        n.clock.now += 5.0
        mark = len(n.events)
        assert n.tick() is None
        assert n.events.since(mark) == []  # nothing from the pacer's thread
        await until(lambda: "garp" in n.events.since(mark))  # the loop read and announced
        while n.timers.pending and "advert:200" not in n.events.since(mark):
            n.timers.fire_next()
        got = n.events.since(mark)
        assert got.index("garp") < got.index("advert:200"), got
        assert n.election.machine.state is state.State.ACTIVE
        n.stop.set()
        assert await n.stopped() == EXIT_OK

    fake(scenario)


def test_the_driver_tick_of_a_backup_does_nothing() -> None:
    async def scenario(n: FakeNode) -> None:
        await n.active()
        assert n.wire is not None
        n.wire.inject(advert(PEER, 250))
        await until(lambda: n.election.machine.state is state.State.BACKUP)
        mark = len(n.events)
        with n.election.timers.lock:
            assert n.election.timers.paced_tick(n.clock.now) is None
        await asyncio.sleep(0.01)
        assert n.events.since(mark) == []
        n.stop.set()
        assert await n.stopped() == EXIT_OK

    fake(scenario)


def test_a_bug_in_the_driver_tick_ends_the_run_as_a_crash() -> None:
    async def scenario(n: FakeNode) -> None:
        await n.active()
        assert n.wire is not None

        def broken(message: bytes, dst: Any) -> None:
            raise RuntimeError("a bug in the send path")

        n.wire.send = broken  # type: ignore[method-assign]
        n.clock.now = (n.election.machine.deadline or 0.0) + 0.0001
        assert n.tick() is None
        assert await n.stopped() == EXIT_CRASH

    fake(scenario)
