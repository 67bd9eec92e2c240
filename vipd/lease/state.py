"""Kubernetes Lease leader election, the decision core's state: what one node has seen of the
Lease, when, and how a round of requests goes.

The rules this module implements (client-go's ``tools/leaderelection`` semantics)
    - **Validity is measured from when this node observed the record change**, on this node's
      monotonic clock, never from the remote ``renewTime``: a record first seen at ``t`` (or
      seen again unchanged) expires at ``t + leaseDurationSeconds`` (`expires_at`). Clock
      skew between nodes does not matter; only clock *rate* does. A record read after one
      of this node's requests failed counts as first seen at that read (`lost_sight`: the
      holder may have renewed out of our sight meanwhile).
    - **resourceVersions** are compared as kube-apiserver's integers (`_rv_news`); any other
      format is news unless it is one of the last seen.
    - **Wake-ups**: a follower polls every ``retry_period`` (minus a little jitter so that
      followers do not march in step), and also exactly when the Lease it watches expires by
      its observation (`_next_poll`); every due time (a renew deadline, a bind time, a hold's
      last chance) brings the next poll forward (`_wake`).
    - **One request in flight** (`pending`), each with a timeout: a leader's renewal must be
      answered before its renew deadline (`_timeout`); a round starts with client-go's fast
      path for a leader (an update on the known ``resourceVersion``) and with a read for
      everyone else (`_start_round`).
    - **Stepping down** clears the leader's bookkeeping and tells the driver only if the VIP
      was bound (`_step_down`); a bind deferred to `bind_at` is announced then (`_check_bind`).

What it is
    `ElectorState`: the fields of one node's election (every rule's memory, in one place)
    and the mechanics the rules share. The rules themselves build on it:
    ``vipd.lease.unreachable`` (the unreachable-store rule), ``vipd.lease.giveway`` (local
    health gives way to a healthy peer), ``vipd.lease.foreign`` (writes by someone else),
    and ``vipd.lease.logic`` (`Elector`: acquire, renew, release; the entry points).

What it must not do
    No I/O, no clock, no randomness: ``now`` and the jitter are passed in. No decision of a
    rule's own beyond the ones above: a rule that needs a field adds it here, with a comment
    naming the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vipd.lease.model import (
    JITTER,
    REQUEST_FRACTION,
    TAKES,
    Action,
    BecomeFollower,
    BecomeLeader,
    Params,
    PeerState,
    Purpose,
    Record,
    Request,
    Role,
    Send,
    Verb,
)

__all__ = ["ElectorState", "Pending"]


@dataclass
class Pending:
    """The request in flight: when it was sent, and when the driver abandons it."""

    request: Request
    sent_at: float
    abandon_at: float


@dataclass
class ElectorState:
    """One node's Lease election: its state, and the mechanics every rule shares."""

    params: Params
    role: Role = Role.FOLLOWER
    observed: Record | None = None
    observed_at: float | None = None  # when `observed` was first seen as it is
    last_renew_sent: float | None = None  # send time of our last successful write as holder
    wake_at: float = 0.0  # poll() again at (or after) this time
    # failure kinds since the last successful renewal (leader) or read (follower)
    failures: list[str] = field(default_factory=list)
    last_read_ok: float | None = None  # a follower's last successful read
    # A follower had a request fail since its last good read: whatever happened meanwhile
    # (a renewal it could not see, a leader holding on evidence), its next good read counts
    # as a first sighting.
    lost_sight: bool = False
    pending: Pending | None = None
    releasing: bool = False
    released: bool = False
    stats_renewals: int = 0
    _next_id: int = 0
    _conflict_retry: bool = False
    _jitter: float = 0.0
    # Giving way (``vipd.lease.giveway``): when an unhealthy follower first found the Lease
    # takeable (its window of one duration starts there), and "keep it": we waited a full
    # window and nobody took it, or we acquired it unhealthy with nobody healthy around.
    takeable_since: float | None = None
    keep_unhealthy: bool = False
    stats_yields: int = 0
    # The unreachable-store rule's evidence (``vipd.lease.unreachable``).
    peers: dict[str, PeerState] | None = None  # None: nothing known about the others
    others_seen: bool = False  # a record held by another identity was seen: not alone
    store_refused_at: float | None = None  # read ok, then the write refused store-wide
    # A follower's request failed (a read, or a write refused), and nobody has written the
    # Lease since: the holder may be holding on evidence, or reclaimed on refusals with this
    # follower's expiry pushed past its wait by the failure.
    failed_since_change: float | None = None
    bind_at: float | None = None  # acquired, the VIP is bound from then (see _took)
    stats_holds: int = 0
    stats_foreign_claims: int = 0
    _read_first: bool = False  # a leader whose renewal was refused reads before it writes
    _round_read_ok: bool = False  # this round's read showed the Lease still ours
    _bind_reason: str = ""
    _last_chance_until: float | None = None  # holding, evidence gone: renew by then
    _last_chance_from: float = 0.0
    _reclaim_rv: str | None = None  # stepped down on store-wide refusals: our last record
    _reclaim_at: float = 0.0
    _last_renew_ok: float | None = None  # when our last successful write was answered
    _now: float = float("-inf")  # the latest ``now`` an entry point was given
    _hold_on: str = ""  # what the hold began on: "peers" or "store"
    # Stepped down at the renew deadline without evidence, our record the last we saw: until
    # then (our last renewal's send + duration) nobody else can have taken the Lease, so
    # the peers' evidence arriving late still carries a hold (`_late_hold`).
    _late_hold_until: float | None = None
    # Writes by someone else (``vipd.lease.foreign``).
    _own_term: tuple[int, str | None] | None = None  # (transitions, acquireTime) we last wrote
    # The record before the one last observed was ours, of our term: no one held it unseen.
    _held_before: bool = False
    _seen_any: bool = False  # an answer about the Lease since start (a record, or 404)
    _restart_rv: str | None = None  # the first record seen since start, when it named us
    _wrote: bool = False  # a write of ours naming us has been answered since start
    _other_until: float | None = None  # the last other holder's record expires (our view)
    _take_wait: float | None = None  # the take in flight overwrites a holder valid until then
    _rv_max: int | None = None  # the newest resourceVersion seen (they compare as integers)
    _rv_seen: list[str] = field(default_factory=list)  # the last ones (any other format)
    _overtaken: int | None = None  # a write whose answer a foreign write has overtaken
    stats_foreign_writes: int = 0

    # -- queries --------------------------------------------------------------------------

    @property
    def leader(self) -> bool:
        """What the controller is told: the VIP belongs here (leading or holding)."""
        return self.role is not Role.FOLLOWER and self.bind_at is None

    @property
    def renew_deadline_at(self) -> float | None:
        if self.role is Role.FOLLOWER or self.last_renew_sent is None:
            return None
        return self.last_renew_sent + self.params.renew_deadline

    def expires_at(self) -> float | None:
        """When the observed record expires by our observation (None: nothing observed)."""
        if self.observed is None or self.observed_at is None:
            return None
        duration = self.observed.duration_seconds or self.params.duration_seconds
        return self.observed_at + duration

    def holder_visible(self, now: float) -> str | None:
        """Another node that holds an unexpired Lease as far as we can tell, or None."""
        rec = self.observed
        if rec is None or not rec.holder or rec.holder == self.params.identity:
            return None
        exp = self.expires_at()
        return rec.holder if exp is not None and now < exp else None

    def pending_write(self) -> bool:
        p = self.pending
        return p is not None and p.request.verb is not Verb.GET

    # -- observation ----------------------------------------------------------------------

    def _observe(self, now: float, rec: Record) -> None:
        old = self.observed
        changed = (
            old is None
            or old.resource_version != rec.resource_version
            or old.holder != rec.holder
            or old.duration_seconds != rec.duration_seconds
        )
        if changed or self.lost_sight:
            # A record read after requests failed may belong to a leader that renewed out of
            # our sight or kept the VIP on evidence meanwhile: count it as seen now (the
            # unreachable-store rule's follower side).
            self.observed_at = now
        if changed and rec.holder and rec.holder != self.params.identity:
            # Someone else wrote it: writes work again and this node is not alone.
            self.others_seen = True
            self.failed_since_change = None
        if not self._seen_any and rec.holder == self.params.identity:
            self._restart_rv = rec.resource_version  # ours from before a restart
        self._seen_any = True
        self.observed = rec
        self.lost_sight = False
        self.last_read_ok = now
        if rec.holder and rec.holder != self.params.identity:
            self._other_until = self.expires_at()
        if changed:  # the same record read again (after the watch saw it) keeps the answer
            self._held_before = (
                self._own_term is not None
                and old is not None
                and old.holder == self.params.identity
            )
        if rec.holder != self.params.identity:
            # A write of ours served late carries the version we knew: after any other
            # write it is refused, so a record of our term seen after this one is a copy
            # someone else wrote back, not ours.
            self._own_term = None
        self._note_rv(rec.resource_version)

    def _note_rv(self, rv: str) -> None:
        if rv.isdigit():
            self._rv_max = max(self._rv_max or 0, int(rv))
        self._rv_seen = [*self._rv_seen[-15:], rv]

    def _rv_news(self, rv: str) -> bool:
        """Is ``rv`` newer than every record seen? kube-apiserver's resourceVersions are
        integers that grow with every write and compare (KEP-5504, stable in Kubernetes
        1.35: k8s.io/apimachinery/pkg/util/resourceversion); any other format counts as
        news unless it is one of the last we saw."""
        if rv.isdigit() and self._rv_max is not None:
            return int(rv) > self._rv_max
        return rv not in self._rv_seen

    # -- rounds ---------------------------------------------------------------------------

    def _cap(self) -> float:
        return max(0.2, self.params.renew_deadline * REQUEST_FRACTION)

    def _short(self) -> float:
        """A follower's (and a holding leader's) request timeout: no deadline to meet, and
        the store rule's waits below are counted in these."""
        return max(0.2, min(self._cap(), self.params.retry_period))

    def _store_fresh(self) -> float:
        """How long one "read ok, write refused" round counts as evidence: until the next
        round (one retry period later, a read and a write, each within the request cap)
        could have renewed it."""
        return self.params.retry_period + 2 * self._short()

    def _timeout(self, now: float) -> float:
        """Per-request timeout: a leader's renewal must be answered before its deadline."""
        d = self.renew_deadline_at
        if self.role is Role.LEADER and d is not None:
            return max(0.05, min(self._cap(), d - now))
        return self._short()

    def _request(self, verb: Verb, purpose: Purpose, timeout: float, **kw: object) -> Request:
        self._next_id += 1
        return Request(self._next_id, verb, purpose, timeout, **kw)  # type: ignore[arg-type]

    def _send(self, now: float, req: Request) -> list[Action]:
        if req.purpose not in TAKES:
            self._take_wait = None
        self.pending = Pending(req, now, now + req.timeout)
        self._wake(min(now + req.timeout, self._deadline_or(now, self.pending)))
        return [Send(req)]

    def _deadline_or(self, now: float, p: Pending) -> float:
        d = self.renew_deadline_at
        return d if d is not None and self.role is Role.LEADER else p.abandon_at

    def _wake(self, at: float) -> None:
        """Poll again at ``at``, or earlier at the next time something is due. A due time
        already past is not one (it has been handled, or is being): clamping to it would make
        the driver spin."""
        points = [self.bind_at]
        if self.role is Role.LEADER:
            points.append(self.renew_deadline_at)  # checked on time, whatever else is pending
        if self.role is Role.HOLDING:
            if self.store_refused_at is not None:
                points.append(self.store_refused_at + self._store_fresh())
            points.append(self._last_chance_until)
        for p in points:
            if p is not None and p > self._now:
                at = min(at, p)
        self.wake_at = at

    def _next_poll(self, now: float) -> float:
        at = now + self.params.retry_period * (1.0 - JITTER * self._jitter)
        exp = self.expires_at()
        if self.role is Role.FOLLOWER and exp is not None and now < exp < at:
            at = exp  # the Lease we watch expires before the next poll: look right then
        return at

    def _start_round(self, now: float) -> list[Action]:
        rec = self.observed
        self._round_read_ok = False
        if self.role is Role.LEADER and rec is not None and not self._read_first:
            # client-go's fast path: write on the resourceVersion we know, read only on 409.
            return self._send(now, self._renew_request(now, rec))
        # Followers read first; so does a holding leader, to see another holder at once, and
        # a leader whose renewal the store refused (the read is half of the evidence).
        self._conflict_retry = False
        return self._send(now, self._request(Verb.GET, Purpose.READ, self._timeout(now)))

    def _renew_request(self, now: float, rec: Record) -> Request:
        me = self.params.identity
        if rec.holder == me:
            return self._request(
                Verb.UPDATE,
                Purpose.RENEW,
                self._timeout(now),
                resource_version=rec.resource_version,
                holder=me,
                duration_seconds=self.params.duration_seconds,
                transitions=rec.transitions,
                acquire_time=rec.acquire_time,
            )
        # Released under us (holder cleared): client-go's tryAcquireOrRenew sees a record that
        # is not ours and counts a new term, with a new acquireTime.
        return self._request(
            Verb.UPDATE,
            Purpose.ACQUIRE,
            self._timeout(now),
            resource_version=rec.resource_version,
            holder=me,
            duration_seconds=self.params.duration_seconds,
            transitions=rec.transitions + 1,
            stamp_acquire=True,
        )

    def _check_bind(self, now: float) -> list[Action]:
        if self.bind_at is None or now < self.bind_at or self.role is not Role.LEADER:
            return []
        self.bind_at = None
        return [BecomeLeader(self._bind_reason, "acquired")]

    def _step_down(self, now: float, reason: str, label: str) -> list[Action]:
        if self.role is Role.FOLLOWER:
            return []
        told = self.bind_at is None
        self.role = Role.FOLLOWER
        self.bind_at = None
        self.last_renew_sent = None
        self.failures = []
        self.store_refused_at = None
        self._read_first = False
        self._last_chance_until = None
        self._wake(min(self.wake_at, now + self.params.retry_period))
        return [BecomeFollower(reason, label)] if told else []
