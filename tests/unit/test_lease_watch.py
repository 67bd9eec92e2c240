"""The watch on the Lease: its events reach the core, and a displaced leader lets go at once.

What it tests: `vipd.lease.watch.event_record` (an event as the core's record, ``None`` for a
deletion), and the Lease driver with an API whose ``watch`` hands events over from a thread
of its own, as `vipd.lease.driver.LeaseApi.watch` does: a leader whose Lease someone else
renames or deletes removes the VIP at once, well before its next renewal, and its own
renewals' echoes change nothing; and a leader that yields to another node's announcement
while its give-way write is in flight does not take the VIP back on that write's answer. The
real watch against kube-apiserver runs in tests/kube/test_foreign_writes.py.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from tests.unit.hostfakes import FakeLeaseApi, LeaseStore
from tests.unit.test_lease_driver import Node, transitions, until
from vipd.lease import logic
from vipd.lease import watch as lease_watch
from vipd.lease.codec import to_record

# A renewal period long enough that only the watch can explain a quick step-down.
SLOW: dict[str, float] = {"duration": 20, "renew_deadline": 15, "retry_period": 5}


def test_event_record_turns_events_into_records() -> None:
    obj = SimpleNamespace(
        metadata=SimpleNamespace(resource_version="42"),
        spec=SimpleNamespace(
            holder_identity="n2",
            lease_duration_seconds=5,
            lease_transitions=3,
            acquire_time=None,
            renew_time=None,
        ),
    )
    kind, rec = lease_watch.event_record({"type": "MODIFIED", "object": obj}, to_record)
    assert kind == "MODIFIED" and rec is not None
    assert (rec.resource_version, rec.holder, rec.transitions) == ("42", "n2", 3)
    assert lease_watch.event_record({"type": "DELETED", "object": obj}, to_record) == (
        "DELETED",
        None,
    )


class WatchingApi(FakeLeaseApi):
    """A fake API with a watch: the test pushes events through ``push``."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(store)
        self.deliver: lease_watch.Deliver | None = None
        self.started = threading.Event()

    def watch(self, deliver: lease_watch.Deliver, stop: threading.Event, retry: float) -> None:
        self.deliver = deliver
        self.started.set()
        stop.wait()

    def push(self, rec: logic.Record | None) -> None:
        assert self.deliver is not None
        threading.Thread(target=self.deliver, args=(rec,)).start()


def watching_node(store: LeaseStore) -> tuple[Node, WatchingApi]:
    node = Node("a", store, SLOW)
    api = WatchingApi(store)
    node.election._open_api = lambda lease, log: api
    return node, api


def foreign(store: LeaseStore, holder: str | None) -> logic.Record | None:
    """Someone else writes the store (kubectl): rename the holder, or delete (None)."""
    with store.lock:
        store.version += 1
        rec = store.record
        if holder == "-":
            store.record = None
            return None
        assert rec is not None
        store.record = logic.Record(str(store.version), holder, rec.duration_seconds, 0)
        return store.record


def run_case(holder: str | None) -> None:
    async def scenario() -> None:
        store = LeaseStore()
        node, api = watching_node(store)
        label = "deleted" if holder == "-" else "lost"
        before = transitions("follower", label)
        node.start()
        await until(lambda: node.bound)
        await until(api.started.is_set)
        await asyncio.sleep(0.05)
        # Our own renewal's echo: nothing happens.
        assert store.record is not None
        api.push(store.record)
        await asyncio.sleep(0.1)
        assert node.bound
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        seen = len(node.host.events)
        api.push(foreign(store, holder))
        await until(lambda: "unbind" in node.host.events[seen:], timeout=2.0)
        # Well inside the 5 s renewal period: the watch, not a renewal, made it let go.
        assert loop.time() - t0 < 1.0
        assert transitions("follower", label) == before + 1
        if holder == "-":
            # It read at once, re-created the Lease and bound the VIP again: the holder
            # the deletion was written over was itself.
            await until(lambda: node.bound and store.record is not None, timeout=2.0)
            assert store.record is not None and store.record.holder == "a"
            # Leave as a follower (a stopping leader would wait a retry period for a
            # successor that never comes).
            api.push(foreign(store, "b"))
            await until(lambda: not node.bound, timeout=2.0)
        else:
            assert not node.bound
        node.stop.set()
        await node.stopped()

    asyncio.run(scenario())


def test_a_leader_lets_go_at_once_when_the_watch_shows_another_holder() -> None:
    run_case("b")


def test_a_leader_lets_go_at_once_when_the_watch_shows_the_lease_deleted() -> None:
    run_case("-")


class GatedApi(FakeLeaseApi):
    """Holds the give-way write until the test opens the gate."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(store)
        self.gate = threading.Event()
        self.yielding = threading.Event()

    def call(self, req: logic.Request) -> logic.Outcome:
        if req.purpose is logic.Purpose.YIELD:
            self.yielding.set()
            self.gate.wait(5)
        return super().call(req)


def test_the_give_way_answer_after_yielding_to_an_announcement_binds_nothing() -> None:
    """The leader gives way (unhealthy, a healthy peer) and, while that write is in flight,
    yields to another node's gratuitous ARP: the write's answer (no holder) must not make
    it a leader again (before: "became leader … renewed the Lease", the VIP bound again)."""

    async def scenario() -> None:
        store = LeaseStore()
        node = Node("a", store, SLOW)
        api = GatedApi(store)
        node.election._open_api = lambda lease, log: api
        node.start()
        await until(lambda: node.bound)
        leader_before = transitions("leader", "renewed")
        health = {"ok": True}
        node.election.healthy = lambda: health["ok"]  # type: ignore[method-assign]
        node.election.peer_healthy = lambda: True  # type: ignore[method-assign]
        health["ok"] = False
        node.election.on_track(node.election._track)  # wake the loop: health changed
        await until(api.yielding.is_set)
        seen = len(node.host.events)
        node.election._on_claim("02:00:00:00:00:99")  # another node announced the VIP
        await until(lambda: "unbind" in node.host.events[seen:])
        api.gate.set()
        await until(lambda: store.record is not None and store.record.holder is None)
        await asyncio.sleep(0.3)
        assert not node.bound
        assert "bind" not in node.host.events[seen:]
        assert transitions("leader", "renewed") == leader_before
        node.stop.set()
        await node.stopped()

    asyncio.run(scenario())
