"""Lease electors on a fake clock against an in-memory Lease store, for unit tests.

What it is: a deterministic discrete-event simulator. The store keeps one Lease with
Kubernetes' optimistic concurrency (every write bumps ``resourceVersion``; a write on a stale
one is a 409); each node runs one `vipd.lease.logic.Elector` and plays the driver: it polls at
``wake_at``, sends requests that the store applies ``latency / 2`` later and whose answer
arrives ``latency`` after sending, and follows the elector's role. Faults per node: the store
answers 5xx (all requests or writes only), or never answers (a partition or a stall), and a
node can die silently or stop gracefully (release). Every node also has its own clock offset
(``skew``): the elector sees ``now + skew``, which must change nothing.

What it must not do: touch real time, threads or sockets. Same inputs, same timeline.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from vipd.lease.logic import (
    Action,
    BecomeFollower,
    BecomeLeader,
    Conflict,
    Elector,
    Hold,
    NotFound,
    Ok,
    Outcome,
    Params,
    Record,
    Rejected,
    Request,
    Send,
    Unavailable,
    Verb,
)


@dataclass
class Store:
    """One Lease, kept the way the API server keeps it (wall times are fake strings)."""

    record: Record | None = None
    rv: int = 0
    writes: list[tuple[float, str | None, int]] = field(default_factory=list)

    def apply(self, now: float, req: Request) -> Outcome:
        if req.verb is Verb.GET:
            return Ok(self.record) if self.record is not None else NotFound()
        if req.verb is Verb.CREATE:
            if self.record is not None:
                return Conflict()
        elif self.record is None:
            return NotFound()
        elif req.resource_version != self.record.resource_version:
            return Conflict()
        return Ok(self.write(now, req.holder, req.duration_seconds, req.transitions))

    def write(
        self, now: float, holder: str | None, duration: int | None, transitions: int
    ) -> Record:
        self.rv += 1
        self.record = Record(
            resource_version=str(self.rv),
            holder=holder,
            duration_seconds=duration,
            transitions=transitions,
            acquire_time=f"t={now}",
            renew_time=f"t={now}",
        )
        self.writes.append((now, holder, self.rv))
        return self.record


Fault = str  # "" | "5xx" | "5xx-writes" | "blackhole" | "403"


@dataclass(eq=False)
class SimNode:
    name: str
    elector: Elector
    skew: float = 0.0
    alive: bool = True
    health: bool = True  # this node's API server (a killed vipd leaves it as it was)
    fault: Fault = ""
    leader: bool = False  # what the controller was told (the VIP is here)
    log: list[tuple[float, str]] = field(default_factory=list)


class Sim:
    def __init__(
        self,
        names: list[str],
        params: Callable[[str], Params] | None = None,
        latency: float = 0.002,
        skews: dict[str, float] | None = None,
    ) -> None:
        mk = params or (lambda n: Params(identity=n, duration=5, renew_deadline=3, retry_period=1))
        self.now = 0.0
        self.store = Store()
        self.latency = latency
        self.nodes = {n: SimNode(n, Elector(mk(n)), skew=(skews or {}).get(n, 0.0)) for n in names}
        self._q: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.timeline: list[tuple[float, str, bool]] = []  # (time, node, leader)
        self._poll_at: dict[str, float] = {}
        for n in names:
            self._schedule_poll(self.nodes[n], 0.0)

    # -- scheduling --

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._q, (t, next(self._seq), fn))

    def run_until(self, t: float) -> None:
        while self._q and self._q[0][0] <= t:
            when, _, fn = heapq.heappop(self._q)
            self.now = when
            fn()
        self.now = t

    def _schedule_poll(self, node: SimNode, t: float) -> None:
        # Keep one outstanding poll per node: the earliest wins, later ones check wake_at.
        self._poll_at[node.name] = t
        self.at(t, lambda: self._poll(node, t))

    def _poll(self, node: SimNode, t: float) -> None:
        if not node.alive or self._poll_at.get(node.name) != t:
            return
        e = node.elector
        self._apply(
            node,
            e.poll(self.now + node.skew, node.health, jitter=0.5, peer_healthy=self.peer(node)),
        )
        self._rearm(node)

    def _rearm(self, node: SimNode) -> None:
        wake = node.elector.wake_at - node.skew
        if e_done(node.elector):
            return
        self._schedule_poll(node, max(wake, self.now))

    def _apply(self, node: SimNode, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Send):
                self._send(node, a.request)
            elif isinstance(a, BecomeLeader):
                self._set_leader(node, True, f"leader: {a.reason}")
            elif isinstance(a, BecomeFollower):
                self._set_leader(node, False, f"follower: {a.reason}")
            elif isinstance(a, Hold):
                node.log.append((self.now, f"hold: {a.reason}"))

    def _set_leader(self, node: SimNode, leader: bool, why: str) -> None:
        node.log.append((self.now, why))
        if node.leader != leader:
            node.leader = leader
            self.timeline.append((self.now, node.name, leader))

    def _send(self, node: SimNode, req: Request) -> None:
        fault = node.fault
        if fault == "blackhole":
            return  # no answer ever: the elector abandons it at its timeout
        sent = self.now

        def arrive() -> None:
            if fault == "5xx" or (fault == "5xx-writes" and req.verb is not Verb.GET):
                outcome: Outcome = Unavailable(503, "etcdserver: request timed out")
            elif fault == "403":
                outcome = Rejected(403, "forbidden")
            else:
                outcome = self.store.apply(sent + self.latency / 2, req)

            def deliver() -> None:
                if not node.alive:
                    return
                self._apply(
                    node,
                    node.elector.on_result(
                        self.now + node.skew, req.id, outcome, node.health, self.peer(node)
                    ),
                )
                self._rearm(node)

            self.at(sent + self.latency, deliver)

        self.at(sent + self.latency / 2, arrive)

    def peer(self, node: SimNode) -> bool:
        """What node's checker sees: another node's API server is healthy (its vipd may be
        dead: the checker cannot tell)."""
        return any(o.health for o in self.nodes.values() if o is not node)

    def set_health(self, name: str, healthy: bool) -> None:
        """The node's API server changes (after rise/fall); every vipd polls at once, as the
        driver does within MAX_SLEEP."""
        self.nodes[name].health = healthy
        for n in self.nodes.values():
            if n.alive and not e_done(n.elector):
                self._schedule_poll(n, self.now)

    # -- faults --

    def kill(self, name: str) -> None:
        """Silent death: the node and its VIP are gone (power off)."""
        node = self.nodes[name]
        node.alive = False
        self._set_leader(node, False, "killed")

    def stop(self, name: str, timeout: float = 1.0) -> None:
        """Graceful stop: release the Lease; the VIP goes when the release is answered."""
        node = self.nodes[name]
        actions = node.elector.release(self.now + node.skew, timeout)
        if not any(isinstance(a, Send) for a in actions):
            self._set_leader(node, False, "stopped")
        self._apply(node, actions)

    def leaders(self) -> list[str]:
        return sorted(n.name for n in self.nodes.values() if n.leader)

    def overlaps(self) -> list[tuple[float, list[str]]]:
        """Instants at which two or more nodes were leaders (the invariant's violations)."""
        held: set[str] = set()
        bad: list[tuple[float, list[str]]] = []
        for t, name, leader in self.timeline:
            if leader:
                held.add(name)
            else:
                held.discard(name)
            if len(held) > 1:
                bad.append((t, sorted(held)))
        return bad

    def became_leader(self, name: str, after: float) -> float | None:
        for t, n, leader in self.timeline:
            if n == name and leader and t >= after:
                return t
        return None

    def first_leader_after(self, after: float) -> tuple[float, str] | None:
        for t, n, leader in self.timeline:
            if leader and t >= after:
                return t, n
        return None


def e_done(e: Elector) -> bool:
    return e.released and e.pending is None
