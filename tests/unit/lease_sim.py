"""Lease electors on a fake clock against an in-memory Lease store, for unit tests.

What it is: a deterministic discrete-event simulator. The store keeps one Lease with
Kubernetes' optimistic concurrency (every write bumps ``resourceVersion``; a write on a stale
one is a 409; an update without one is a 422, as the real Lease strategy answers); each node
runs one `vipd.lease.logic.Elector` and plays the driver: it polls at ``wake_at``, sends
requests that the store applies ``latency / 2`` later and whose answer arrives ``latency``
after sending, and follows the elector's role. Every HTTP error goes through
`vipd.lease.logic.classify`, as the driver's does.

Faults per node (``SimNode.fault``), each what a real fault looks like from vipd's side:

- ``"5xx"``: this node's etcd member is cut off from the quorum: its API server answers 503
  to vipd and ``/readyz`` not ready (its etcd check fails);
- ``"429"``: this API server's Priority and Fairness rejects vipd; ``/readyz`` stays 200;
- ``"5xx-writes"``: this node's writes answer 503, reads work (``/readyz`` is 200);
- ``"blackhole"``: this node's API server is stalled (SIGSTOP): no answer, and its
  ``/readyz`` does not answer either;
- ``"store-hang"``: this node's API server waits on an etcd that does not answer: vipd's
  calls hang until abandoned, while ``/readyz`` answers not ready (its etcd check has its
  own timeout);
- ``"partition"``: the node is cut off the bridge with its processes alive: its calls hang,
  it hears no peer and no peer hears it (no health answers, no ARP either way);
- ``"403"``: RBAC refuses vipd;
- ``"stall"``: this node's API server is SIGSTOPped for a while: no answer, but what it was
  sent is served when it runs again (``Sim.unstall``), a renewal the elector gave up on
  included.

Someone else can write the Lease (``Sim.foreign_write``, ``Sim.foreign_delete``: a
``kubectl patch`` or ``delete``); with ``watch=True`` every change reaches every node's
`Elector.watched` ``watch_delay`` later, as the driver's watch on the Lease does.

Store-wide: ``Store.nospace`` (etcd's NOSPACE alarm: every write answers 500 "database space
exceeded", reads work, ``/readyz`` is 200). A node can die silently or stop gracefully
(release). Every node has its own clock offset (``skew``): the elector sees ``now + skew``,
which must change nothing.

The driver's other inputs: with ``views=True`` every node gets `Elector.observe_peers` with
the other nodes' ``/readyz`` states (ready, answered not ready, unreachable) whenever they
change, ``view_lag`` seconds late (the checker's interval and rise); with ``arp=True`` a node
that becomes leader sends a gratuitous ARP that every node on the bridge hears
(`Elector.foreign_claim`) ``arp_delay`` later.

What it must not do: touch real time, threads or sockets. Same inputs, same timeline.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from vipd.lease.logic import Elector
from vipd.lease.model import (
    Action,
    BecomeFollower,
    BecomeLeader,
    Conflict,
    Hold,
    NotFound,
    Ok,
    Outcome,
    Params,
    PeerState,
    Record,
    Request,
    Send,
    Verb,
    classify,
)

NOSPACE = "etcdserver: mvcc: database space exceeded"


@dataclass
class Store:
    """One Lease, kept the way the API server keeps it (wall times are fake strings)."""

    record: Record | None = None
    rv: int = 0
    writes: list[tuple[float, str | None, int]] = field(default_factory=list)
    nospace: bool = False  # etcd's NOSPACE alarm: every write refused, reads served
    refused_updates_without_rv: int = 0

    def apply(self, now: float, req: Request) -> Outcome:
        if req.verb is Verb.GET:
            return Ok(self.record) if self.record is not None else NotFound()
        if req.verb is Verb.UPDATE and not req.resource_version:
            # The Lease strategy: "metadata.resourceVersion: Invalid value: 0x0: must be
            # specified for an update".
            self.refused_updates_without_rv += 1
            return classify(422, "metadata.resourceVersion: must be specified for an update")
        if self.nospace:
            return classify(500, NOSPACE)
        if req.verb is Verb.CREATE:
            if self.record is not None:
                return Conflict()
        elif self.record is None:
            return NotFound()
        elif req.resource_version != self.record.resource_version:
            return Conflict()
        # The driver keeps acquireTime unless the request stamps a new one.
        keep = None if req.stamp_acquire else req.acquire_time
        return Ok(self.write(now, req.holder, req.duration_seconds, req.transitions, keep))

    def write(
        self,
        now: float,
        holder: str | None,
        duration: int | None,
        transitions: int,
        acquire_time: str | None = None,
    ) -> Record:
        self.rv += 1
        self.record = Record(
            resource_version=str(self.rv),
            holder=holder,
            duration_seconds=duration,
            transitions=transitions,
            acquire_time=acquire_time or f"t={now}",
            renew_time=f"t={now}",
        )
        self.writes.append((now, holder, self.rv))
        return self.record


Fault = str  # "" | "5xx" | "429" | "5xx-writes" | "blackhole" | "store-hang" | "partition" | "403"
# | "stall"
HANGS = ("blackhole", "partition", "store-hang")


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
        *,
        views: bool = True,
        view_lag: float = 0.0,
        view_self: bool = False,
        arp: bool = False,
        arp_delay: float = 0.001,
        error_delay: float = 0.0,
        jitters: dict[str, float] | None = None,
        watch: bool = False,
        watch_delay: float = 0.001,
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
        self.views = views
        self.view_lag = view_lag
        self.view_self = view_self  # a driver bug: the node's own address among its peers
        self.arp = arp
        self.arp_delay = arp_delay
        # A 5xx/429 answered this much later than a good answer (the API server waits for
        # etcd's own request timeout before it answers 503); a request that outlives the
        # elector's timeout is abandoned.
        self.error_delay = error_delay
        self.jitters = jitters or {}  # per node, in [0, 1): the driver's random.random()
        self.foreign_claims: list[tuple[float, str, str]] = []  # (time, heard by, sender)
        self.watch = watch  # every node watches the Lease: each change reaches its elector
        self.watch_delay = watch_delay
        self.stalled: list[tuple[SimNode, Request, float]] = []  # "stall": requests held
        self._signature: tuple[object, ...] | None = None
        self._detect()
        for n in names:
            self._schedule_poll(self.nodes[n], 0.0)

    # -- scheduling --

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._q, (t, next(self._seq), fn))

    def run_until(self, t: float) -> None:
        self._detect()
        same, last = 0, None
        while self._q and self._q[0][0] <= t:
            when, _, fn = heapq.heappop(self._q)
            same = same + 1 if when == last else 0
            if same > 10_000:
                # An elector that asks to be polled again at the same instant forever: the
                # driver would spin on it.
                raise RuntimeError(f"livelock at t={when}")
            last = when
            self.now = when
            fn()
            self._detect()
        self.now = t

    # -- the driver's other inputs: peers' /readyz and the wire --

    def readyz(self, viewer: SimNode, target: SimNode) -> PeerState:
        """What ``viewer``'s checker gets from ``target``'s API server's etcd check right now
        (``/readyz/etcd``: not ready exactly when that server cannot reach the store)."""
        if target.fault in ("5xx", "store-hang") and viewer.fault != "partition":
            return PeerState.NOT_READY
        if viewer.fault == "partition" or target.fault in (*HANGS, "stall"):
            return PeerState.UNREACHABLE
        return PeerState.READY

    def view(self, viewer: SimNode) -> dict[str, PeerState]:
        out = {o.name: self.readyz(viewer, o) for o in self.nodes.values() if o is not viewer}
        if self.view_self:
            out[viewer.name] = PeerState.READY
        return out

    def _detect(self) -> None:
        """Tests change faults between events: push the new views when anything changed."""
        if not self.views:
            return
        nodes = tuple((n.name, n.fault, n.health, n.alive) for n in self.nodes.values())
        sig = (*nodes, self.store.nospace)
        if sig == self._signature:
            return
        self._signature = sig
        for n in self.nodes.values():
            self.at(self.now + self.view_lag, self._pusher(n, self.view(n)))

    def _pusher(self, node: SimNode, view: dict[str, PeerState]) -> Callable[[], None]:
        return lambda: self._push(node, view)

    def _push(self, node: SimNode, view: dict[str, PeerState]) -> None:
        if not node.alive or e_done(node.elector):
            return
        self._apply(node, node.elector.observe_peers(self.now + node.skew, view))
        self._rearm(node)

    def _garp(self, sender: SimNode) -> None:
        if sender.fault == "partition":
            return
        for o in self.nodes.values():
            if o is sender or not o.alive or o.fault == "partition" or e_done(o.elector):
                continue

            def hear(o: SimNode = o) -> None:
                if not o.alive or e_done(o.elector):
                    return
                self.foreign_claims.append((self.now, o.name, sender.name))
                self._apply(o, o.elector.foreign_claim(self.now + o.skew))
                self._rearm(o)

            self.at(self.now + self.arp_delay, hear)

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
            e.poll(
                self.now + node.skew,
                node.health,
                jitter=self.jitters.get(node.name, 0.5),
                peer_healthy=self.peer(node),
            ),
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
                if self.arp:
                    self._garp(node)
            elif isinstance(a, BecomeFollower):
                self._set_leader(node, False, f"follower: {a.reason}")
            elif isinstance(a, Hold):
                node.log.append((self.now, f"hold: {a.reason}"))

    def _set_leader(self, node: SimNode, leader: bool, why: str) -> None:
        node.log.append((self.now, why))
        if node.leader != leader:
            node.leader = leader
            self.timeline.append((self.now, node.name, leader))

    # -- the watch, and writes by someone else --

    def _changed(self) -> None:
        """The Lease changed: every watching node hears of it ``watch_delay`` later (a
        partitioned or stalled node's watch hears nothing)."""
        if not self.watch:
            return
        rec = self.store.record
        for o in self.nodes.values():
            if not o.alive or o.fault in (*HANGS, "stall") or e_done(o.elector):
                continue

            def hear(o: SimNode = o) -> None:
                if not o.alive or e_done(o.elector):
                    return
                self._apply(o, o.elector.watched(self.now + o.skew, rec))
                self._rearm(o)

            self.at(self.now + self.watch_delay, hear)

    def foreign_write(self, **changes: object) -> Record:
        """Someone else (``kubectl patch``) changes the Lease: ``holder``, ``duration``."""
        r = self.store.record
        assert r is not None
        rec = self.store.write(
            self.now,
            changes.get("holder", r.holder),  # type: ignore[arg-type]
            changes.get("duration", r.duration_seconds),  # type: ignore[arg-type]
            r.transitions,
            r.acquire_time,
        )
        self._changed()
        return rec

    def foreign_put(self, old: Record) -> Record:
        """Someone writes back a copy of an older record (its holder and term)."""
        rec = self.store.write(
            self.now, old.holder, old.duration_seconds, old.transitions, old.acquire_time
        )
        self._changed()
        return rec

    def foreign_delete(self) -> None:
        self.store.record = None
        self.store.rv += 1
        self._changed()

    def unstall(self, name: str) -> None:
        """A stalled API server runs again: it serves what it was sent meanwhile (the
        elector gave up on those requests: their answers are ignored) and answers again."""
        node = self.nodes[name]
        node.fault = ""
        held, self.stalled = (
            [s for s in self.stalled if s[0] is node],
            [s for s in self.stalled if s[0] is not node],
        )
        for _, req, _sent in held:
            before = self.store.rv
            self.store.apply(self.now, req)
            if self.store.rv != before:
                self._changed()

    def _send(self, node: SimNode, req: Request) -> None:
        fault = node.fault
        if fault in HANGS:
            return  # no answer ever: the elector abandons it at its timeout
        if fault == "stall":
            # SIGSTOPped API server: the request waits in the socket and is served when the
            # server runs again (`unstall`), after the elector has given up on it.
            self.stalled.append((node, req, self.now))
            return
        sent = self.now

        def arrive() -> None:
            delay = self.error_delay if fault in ("5xx", "5xx-writes", "429") else 0.0
            if fault == "5xx" or (fault == "5xx-writes" and req.verb is not Verb.GET):
                outcome: Outcome = classify(503, "etcdserver: request timed out")
            elif fault == "429":
                outcome = classify(429, "Too many requests, please try again later.")
            elif fault == "403":
                outcome = classify(403, "forbidden")
            else:
                before = self.store.rv
                outcome = self.store.apply(sent + self.latency / 2, req)
                if self.store.rv != before:
                    self._changed()

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

            self.at(sent + self.latency + delay, deliver)

        self.at(sent + self.latency / 2, arrive)

    def peer(self, node: SimNode) -> bool:
        """What node's checker sees: another node's API server is healthy (its vipd may be
        dead: the checker cannot tell)."""
        if self.view_self:
            # Its own API server listed as a peer, checked at the node address: healthy there
            # a while longer (or only there), whatever the local check says.
            return True
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

    def overlap_time(self, until: float | None = None) -> float:
        """The longest stretch with two or more holders (0.0: the invariant held)."""
        return max((b - a for a, b in self._spans(lambda k: k > 1, until)), default=0.0)

    def gaps(self, after: float = 0.0, until: float | None = None) -> list[tuple[float, float]]:
        """Stretches with no holder at all, clipped to [after, until]."""
        out = []
        for a, b in self._spans(lambda k: k == 0, until):
            a, b = max(a, after), b
            if b > a:
                out.append((a, b))
        return out

    def _spans(self, bad: Callable[[int], bool], until: float | None) -> list[tuple[float, float]]:
        end = self.now if until is None else until
        held: set[str] = set()
        spans: list[tuple[float, float]] = []
        start: float | None = 0.0 if bad(0) else None
        for t, name, leader in self.timeline:
            if t > end:
                break
            (held.add if leader else held.discard)(name)
            if bad(len(held)):
                if start is None:
                    start = t
            elif start is not None:
                spans.append((start, t))
                start = None
        if start is not None:
            spans.append((start, end))
        return spans

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
