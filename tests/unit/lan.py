"""An in-memory LAN of VRRP state machines on a fake clock, for unit tests.

What it is: a deterministic discrete-event simulator. Every node runs one
:class:`vipd.vrrp.state.Machine` and plays the part of the daemon's shell: it calls
``on_timer`` exactly at the machine's deadline, and turns each ``SendAdvert`` into a delivery
of ``on_advert(src=primary_ip, priority, interval_cs)`` to every other running node after
``latency`` seconds. Faults: silent death (:meth:`Lan.kill`), graceful stop (:meth:`Lan.stop`),
restart (:meth:`Lan.start`), partitions (:meth:`Lan.partition` / :meth:`Lan.heal`) and random
loss per delivery from a seeded RNG.

What it must not do: touch real time, sockets or threads. Same inputs, same seed -> the same
timeline, bit for bit: events run in (time, insertion order), floats are never rounded.

Records: :attr:`Lan.timeline` (lifecycle, role changes, announcements), :attr:`Lan.sent`
(every advert put on the segment), and the history of which nodes are active
(:meth:`Lan.holders_at`, :meth:`Lan.active_nodes`, :meth:`Lan.multi_active_periods`).

A killed node holds nothing: ``kill`` models a dead node (power off, link down), not a
``SIGKILL``-ed daemon whose VIP stays bound.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from vipd.vrrp.state import (
    Action,
    Announce,
    BecomeActive,
    BecomeBackup,
    ContestLost,
    Machine,
    Params,
    SendAdvert,
    State,
)

EventKind = Literal[
    "started",
    "killed",
    "stopped",
    "became-active",
    "became-backup",
    "announce",
    "contest-lost",
    "priority",
    "partition",
    "heal",
]

DEFAULT_LATENCY = 0.0001


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the timeline. ``node`` is "" for segment-wide events (partition, heal)."""

    time: float
    node: str
    kind: EventKind
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Sent:
    """One advert put on the segment (whether or not anyone received it)."""

    time: float
    node: str
    priority: int


@dataclass(eq=False)
class Node:
    name: str
    params: Params
    machine: Machine
    running: bool = False
    # Generation of the armed timer; a popped timer event with an older one is stale.
    timer_gen: int = 0
    armed_for: float | None = None
    received: int = 0
    dropped: int = 0


@dataclass(order=True)
class _Queued:
    time: float
    seq: int
    run: Callable[[], None] = field(compare=False)


class Lan:
    """A broadcast segment of VRRP nodes on a fake clock starting at 0.0."""

    def __init__(self, *, latency: float = DEFAULT_LATENCY, loss: float = 0.0, seed: int = 0):
        if latency < 0 or not 0.0 <= loss <= 1.0:
            raise ValueError("latency must be >= 0 and loss in [0, 1]")
        self.latency = latency
        self.loss = loss
        self.rng = random.Random(seed)
        self.now = 0.0
        self.nodes: dict[str, Node] = {}
        self.timeline: list[Event] = []
        self.sent: list[Sent] = []
        self._queue: list[_Queued] = []
        self._seq = 0
        self._partitions: list[tuple[frozenset[str], frozenset[str]]] = []
        # (time, set of active nodes) at every change, in order; starts empty at t=0.
        self._holders: list[tuple[float, frozenset[str]]] = [(0.0, frozenset())]

    # ------------------------------------------------------------------ setup and faults

    def add(self, name: str, params: Params, *, start: bool = False) -> Node:
        if name in self.nodes:
            raise ValueError(f"duplicate node {name}")
        node = Node(name, params, Machine(params))
        self.nodes[name] = node
        if start:
            self.start(name)
        return node

    def machine(self, name: str) -> Machine:
        return self.nodes[name].machine

    def start(self, name: str) -> None:
        """(Re)start the daemon on a node: a fresh Machine, as after a process restart."""
        node = self.nodes[name]
        if node.running:
            raise ValueError(f"{name} is already running")
        node.machine = Machine(node.params)
        node.running = True
        self._record(name, "started")
        self._apply(node, node.machine.start(self.now))

    def kill(self, name: str) -> None:
        """Silent death: no advert, no more timers, deliveries to it are lost."""
        node = self.nodes[name]
        node.running = False
        node.timer_gen += 1
        node.armed_for = None
        self._record(name, "killed")
        self._note_holders()

    def stop(self, name: str) -> None:
        """Graceful stop: ``shutdown()`` and its actions (the priority-0 advert) go out."""
        node = self.nodes[name]
        actions = node.machine.shutdown(self.now)
        self._apply(node, actions)
        node.running = False
        node.timer_gen += 1
        node.armed_for = None
        self._record(name, "stopped")
        self._note_holders()

    def set_priority(self, name: str, priority: int) -> None:
        node = self.nodes[name]
        self._record(name, "priority", str(priority))
        self._apply(node, node.machine.set_priority(self.now, priority))

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Drop every advert between a node of ``side_a`` and one of ``side_b`` (both ways)."""
        a, b = frozenset(side_a), frozenset(side_b)
        if a & b:
            raise ValueError("a node cannot be on both sides of a partition")
        self._partitions.append((a, b))
        self._record("", "partition", f"{sorted(a)} | {sorted(b)}")

    def heal(self) -> None:
        self._partitions.clear()
        self._record("", "heal")

    def reachable(self, src: str, dst: str) -> bool:
        return not any(
            (src in a and dst in b) or (src in b and dst in a) for a, b in self._partitions
        )

    # ------------------------------------------------------------------ running

    def call_at(self, time: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` at ``time`` (after the events already queued for that time)."""
        if time < self.now:
            raise ValueError(f"cannot schedule in the past ({time} < {self.now})")
        self._push(time, fn)

    def run_until(self, time: float) -> None:
        """Process every event with a time <= ``time``, then leave the clock at ``time``."""
        if time < self.now:
            raise ValueError(f"the clock cannot go back ({time} < {self.now})")
        while self._queue and self._queue[0].time <= time:
            item = heapq.heappop(self._queue)
            self.now = item.time
            item.run()
        self.now = float(time)

    def run_for(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    # ------------------------------------------------------------------ queries

    def active_nodes(self) -> frozenset[str]:
        """Running nodes whose machine is ACTIVE right now."""
        return frozenset(
            n.name for n in self.nodes.values() if n.running and n.machine.state is State.ACTIVE
        )

    def holders_at(self, time: float) -> frozenset[str]:
        """The active nodes at ``time`` (after every event at exactly ``time``)."""
        holders: frozenset[str] = frozenset()
        for at, group in self._holders:
            if at > time:
                break
            holders = group
        return holders

    def holder_history(self) -> list[tuple[float, frozenset[str]]]:
        return list(self._holders)

    def multi_active_periods(
        self, since: float = 0.0, until: float | None = None
    ) -> list[tuple[float, float, frozenset[str]]]:
        """Periods (start, end, nodes) with more than one active node, clipped to the range.

        Periods of zero length (several changes at one instant) are left out.
        """
        end_of_range = self.now if until is None else until
        out: list[tuple[float, float, frozenset[str]]] = []
        changes = [*self._holders, (end_of_range, frozenset())]
        for (start, group), (end, _) in itertools.pairwise(changes):
            lo, hi = max(start, since), min(end, end_of_range)
            if len(group) > 1 and hi > lo:
                out.append((lo, hi, group))
        return out

    def events(self, kind: EventKind | None = None, node: str | None = None) -> list[Event]:
        return [
            e
            for e in self.timeline
            if (kind is None or e.kind == kind) and (node is None or e.node == node)
        ]

    def role_changes(self, since: float = 0.0) -> int:
        """How many became-active / became-backup transitions happened at or after ``since``
        (the BecomeBackup of a start is not a role change and is not counted)."""
        return sum(
            1
            for e in self.timeline
            if e.time >= since
            and (e.kind == "became-active" or (e.kind == "became-backup" and e.detail != "start"))
        )

    def adverts_from(self, name: str) -> list[Sent]:
        return [s for s in self.sent if s.node == name]

    # ------------------------------------------------------------------ internals

    def _push(self, time: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, _Queued(time, self._seq, fn))

    def _record(self, node: str, kind: EventKind, detail: str = "") -> None:
        self.timeline.append(Event(self.now, node, kind, detail))

    def _note_holders(self) -> None:
        current = self.active_nodes()
        if current != self._holders[-1][1]:
            self._holders.append((self.now, current))

    def _apply(self, node: Node, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case SendAdvert(priority=priority):
                    self._broadcast(node, priority)
                case BecomeActive(reason=reason):
                    self._record(node.name, "became-active", reason)
                case BecomeBackup(reason=reason):
                    label = reason.split(":", 1)[0]
                    self._record(node.name, "became-backup", label if label == "start" else reason)
                case Announce(reason=reason):
                    self._record(node.name, "announce", reason)
                case ContestLost(reason=reason):
                    self._record(node.name, "contest-lost", reason)
        self._note_holders()
        self._arm(node)

    def _broadcast(self, node: Node, priority: int) -> None:
        self.sent.append(Sent(self.now, node.name, priority))
        src = node.params.primary_ip
        interval_cs = node.params.advert_interval_cs
        for other in self.nodes.values():
            if other is node or not self.reachable(node.name, other.name):
                continue
            # One draw per (advert, receiver), in node insertion order: deterministic.
            if self.loss and self.rng.random() < self.loss:
                other.dropped += 1
                continue

            def deliver(dst: Node = other) -> None:
                if not dst.running:
                    return
                dst.received += 1
                self._apply(dst, dst.machine.on_advert(self.now, src, priority, interval_cs))

            self._push(self.now + self.latency, deliver)

    def _arm(self, node: Node) -> None:
        deadline = node.machine.deadline if node.running else None
        if deadline == node.armed_for:
            return
        node.timer_gen += 1
        node.armed_for = deadline
        if deadline is None:
            return
        gen = node.timer_gen

        def fire() -> None:
            if node.timer_gen != gen or not node.running:
                return
            node.armed_for = None
            self._apply(node, node.machine.on_timer(self.now))

        # A deadline already in the past fires now, as a real shell's timer would.
        self._push(max(deadline, self.now), fire)
