"""The agent with the Lease backend, on an in-memory Lease store and fake host actuators.

What it tests: acquiring a free Lease (the VIP bound, the core's label on the transition), the
graceful release (the Lease's holder cleared, the VIP kept until another holder shows in the
Lease, then removed), the peer's re-acquisition of the released Lease, and the first node
acquiring it again once that peer released it in turn; another MAC's announcement of the
VIP (what the ARP watch reports): a leader yields at once (and takes its own Lease back at
the next round), and a stopping leader waiting for its successor drops the VIP at once.
The store answers in memory; the timings are short real ones (the driver waits on the loop
for the core's ``wake_at``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from ipaddress import IPv4Address

from tests.unit.hostfakes import FakeLeaseApi, Host, LeaseStore
from vipd import config, metrics
from vipd.agent import EXIT_OK, Agent
from vipd.lease import logic
from vipd.lease.driver import LeaseElection
from vipd.preflight import HostLink, Preflight

VIP = IPv4Address("10.0.0.100")
LEASE = {"duration": 2, "renew_deadline": 1.5, "retry_period": 0.1}


class Node:
    def __init__(self, name: str, store: LeaseStore, lease: dict[str, float] = LEASE) -> None:
        self.name = name
        self.cfg = config.parse(
            {
                "node": name,
                "vip": str(VIP),
                "interface": "eth0",
                "election": {"mode": "lease", "lease": lease},
            }
        )
        self.pre = Preflight(
            link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11"),
            source=IPv4Address("10.0.0.11"),
            findings=(),
            stale_vip=False,
        )
        self.host = Host(VIP)
        self.election = LeaseElection(
            self.cfg,
            self.pre,
            open_api=lambda lease, log: FakeLeaseApi(store),
            jitter=lambda: 0.0,
            claimwatch=False,  # no packet socket in a unit test: _on_claim is called directly
        )
        self.agent = Agent(
            self.cfg,
            self.pre,
            self.election,
            actuators=self.host.actuators,
            watch_link=self.host.watch_link,
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[int] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.agent.run(self.stop))

    @property
    def bound(self) -> bool:
        return self.host.address is not None and self.host.address.present

    async def stopped(self) -> int:
        assert self.task is not None
        return await asyncio.wait_for(self.task, 10)


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.005)


def transitions(role: str, reason: str) -> float:
    labels = {"backend": "lease", "role": role, "reason": reason}
    return metrics.REGISTRY.get_sample_value("vipd_role_transitions_total", labels) or 0.0


def test_release_and_reacquire() -> None:
    async def scenario() -> None:
        store = LeaseStore()
        a, b = Node("a", store), Node("b", store)
        created = transitions("leader", "created")
        a.start()
        await until(lambda: a.bound)
        assert store.record is not None and store.record.holder == "a"
        assert a.host.events[:2] == ["bind", "garp"]
        assert transitions("leader", "created") == created + 1
        assert a.agent.status(0.0)["role"] == "leader"
        b.start()
        # b reads a valid Lease held by a (however long a loaded machine takes): it follows.
        await until(lambda: b.agent.status(0.0)["lease"]["holder"] == "a")
        await asyncio.sleep(0.1)
        assert not b.bound and b.agent.status(0.0)["lease"]["holder"] == "a"

        # a stops: it releases the Lease but keeps the VIP until b holds it.
        released = transitions("follower", "released")
        a.stop.set()
        await until(lambda: ("update", None) in store.writes)
        assert transitions("follower", "released") == released + 1
        await until(lambda: b.bound)
        assert store.record is not None and store.record.holder == "b"
        assert await a.stopped() == EXIT_OK
        assert a.host.events == ["bind", "garp", "unbind"]  # the VIP went last
        assert store.record.transitions == 1  # a new holder: one more transition

        # a comes back; b stops; a takes the released Lease again.
        a2 = Node("a", store)
        a2.start()
        await until(lambda: a2.agent.status(0.0)["lease"]["holder"] == "b")
        await asyncio.sleep(0.1)
        assert not a2.bound
        b.stop.set()
        await until(lambda: a2.bound)
        assert await b.stopped() == EXIT_OK
        assert store.record is not None and store.record.holder == "a"
        a2.stop.set()
        assert await a2.stopped() == EXIT_OK
        assert not a2.bound

    asyncio.run(scenario())


def test_status_reports_the_link_and_no_hard_coded_interface_state() -> None:
    async def scenario() -> None:
        store = LeaseStore()
        a = Node("a", store)
        a.start()
        await until(lambda: a.bound)
        assert a.agent.status(0.0)["interface_up"] is True
        assert a.host.link is not None
        a.host.link.flip(False)
        await until(lambda: a.agent.status(0.0)["interface_up"] is False)
        a.stop.set()
        assert await a.stopped() == EXIT_OK

    asyncio.run(scenario())


def test_a_foreign_announcement_makes_the_leader_yield_and_ends_the_successor_wait() -> None:
    async def scenario() -> None:
        store = LeaseStore()
        slow: dict[str, float] = {"duration": 20, "renew_deadline": 15, "retry_period": 1}
        a = Node("a", store, slow)
        a.start()
        await until(lambda: a.bound)
        yielded = transitions("follower", "foreign-claim")
        a.election._on_claim("02:00:00:00:00:22")
        await until(lambda: not a.bound, 0.5)  # at once, not at a renew deadline
        assert transitions("follower", "foreign-claim") == yielded + 1
        assert a.election.status(0.0)["lease"]["foreign_claims"] == 1
        # The Lease is still ours: the next round (one retry period) takes it back.
        await until(lambda: a.bound, 2 * 1 + 1)
        # Stopping with nobody to take over: the VIP would stay for retry + 0.5 s; the
        # successor's announcement ends the wait at once.
        loop = asyncio.get_running_loop()
        a.stop.set()
        await until(lambda: ("update", None) in store.writes)
        t0 = loop.time()
        await asyncio.sleep(0.1)
        assert a.bound  # make-before-break: still waiting
        a.election._on_claim("02:00:00:00:00:22")
        assert await a.stopped() == EXIT_OK
        assert loop.time() - t0 < 0.6, loop.time() - t0
        assert not a.bound

    asyncio.run(scenario())


class RenewalLandsFirst(LeaseStore):
    """The renewal in flight when the stop began reaches the store just before the release:
    the release's resourceVersion is stale by one write (a race client-go's renew loop
    cannot have: it releases only after its last renewal returned)."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False

    def call(self, req: logic.Request) -> logic.Outcome:
        if req.purpose is logic.Purpose.RELEASE and not self.raced:
            self.raced = True
            with self.lock:
                assert self.record is not None
                self.version += 1
                self.record = dataclasses.replace(self.record, resource_version=str(self.version))
        return super().call(req)


def test_a_release_refused_on_a_stale_version_is_sent_again_and_the_handover_stays_graceful() -> (
    None
):
    async def scenario() -> None:
        store = RenewalLandsFirst()
        slow = {"duration": 30, "renew_deadline": 20, "retry_period": 0.1}
        a, b = Node("a", store, slow), Node("b", store, slow)
        a.start()
        await until(lambda: a.bound)
        b.start()
        await until(lambda: b.agent.status(0.0)["lease"]["holder"] == "a")
        a.stop.set()
        # Without the second release b would wait out the 30 s Lease; with it, b takes the
        # released Lease at its next read and a keeps the VIP until then.
        await until(lambda: b.bound)
        assert store.raced and ("update", None) in store.writes
        assert await a.stopped() == EXIT_OK
        assert a.host.events == ["bind", "garp", "unbind"]
        assert store.record is not None and store.record.holder == "b"
        b.stop.set()
        assert await b.stopped() == EXIT_OK

    asyncio.run(scenario())


class GatedApi(FakeLeaseApi):
    """The store's answers, except that a takeover write waits until ``gate`` opens: an
    acquire or create still on its way when the stop begins."""

    def __init__(self, store: LeaseStore, gate: threading.Event) -> None:
        super().__init__(store)
        self.gate = gate
        self.waiting = threading.Event()
        self.landed = threading.Event()

    def call(self, req: logic.Request) -> logic.Outcome:
        if req.purpose not in (logic.Purpose.ACQUIRE, logic.Purpose.CREATE):
            return super().call(req)
        self.waiting.set()
        self.gate.wait(10)
        try:
            return super().call(req)
        finally:
            self.landed.set()


def test_a_takeover_that_lands_after_the_stop_began_is_released() -> None:
    """A follower's create is in flight when it is told to stop, and the API server takes it
    after that: the stopping node must give the Lease back, not leave it to a holder that is
    gone (the peers would wait out its duration with nobody holding the VIP)."""

    async def scenario() -> None:
        store, gate = LeaseStore(), threading.Event()
        a = Node("a", store)
        api = GatedApi(store, gate)
        a.election._open_api = lambda lease, log: api
        a.start()
        await until(api.waiting.is_set)
        a.stop.set()
        await asyncio.sleep(0.2)  # the stop has begun and waits on the write
        gate.set()
        assert await a.stopped() == EXIT_OK
        await until(api.landed.is_set)
        assert store.writes == [("create", "a"), ("update", None)], store.writes
        assert store.record is not None and store.record.holder is None
        assert "bind" not in a.host.events  # a stopping agent binds nothing

    asyncio.run(scenario())
