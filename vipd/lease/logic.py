"""Kubernetes Lease leader election, the decision core: records and outcomes in, requests out.

What it is
    `Elector` decides, for one node, what to ask the API server next and which role the node
    has, with the semantics of client-go's ``tools/leaderelection`` on a
    ``coordination.k8s.io/v1`` Lease (``holderIdentity`` = the node name,
    ``leaseDurationSeconds``, ``acquireTime``, ``renewTime``, ``leaseTransitions``):

    - **Validity is measured from when this node observed the record change**, on this node's
      monotonic clock, never from the remote ``renewTime``: a record first seen at ``t`` (or
      seen again unchanged) expires at ``t + leaseDurationSeconds``. Clock skew between nodes
      does not matter; only clock *rate* does.
    - **Acquire** when the Lease does not exist (create), has no holder (released), is ours
      (a restart: renew it, keep ``acquireTime`` and ``leaseTransitions``), or has expired by
      our observation (steal: ``leaseTransitions + 1``). Every write carries the
      ``resourceVersion`` it was based on; a 409 Conflict means someone wrote first, which is
      normal: read again.
    - **Renew** every ``retry_period`` after the last successful renewal was *sent*, by a
      direct update with the known ``resourceVersion`` (client-go's optimistic fast path); on
      a conflict read, then decide.
    - **Step down** (the controller removes the VIP) when no renewal has succeeded within
      ``renew_deadline`` of the last successful one being sent. The process keeps running and
      stays a candidate: unlike kube-vip, losing the Lease is not an exit. Because
      ``renew_deadline < lease_duration``, and a peer can only take over ``lease_duration``
      after it observed our last renewal (which it can only observe after we sent it), the old
      leader has let go at least ``lease_duration - renew_deadline`` before anyone else may
      take the Lease.
    - **Release** on a graceful stop: an update that clears ``holderIdentity`` (and sets
      ``leaseDurationSeconds: 1``, as client-go's ReleaseOnCancel does), so a peer acquires at
      its next retry instead of waiting out the duration.
    - **Wake-ups**: a follower polls every ``retry_period`` (minus a little jitter so that
      followers do not march in step), and also exactly when the Lease it watches expires by
      its observation, so a dead leader is replaced ``lease_duration`` after the last renewal
      this node saw plus one round trip, not up to one more retry period later.

    The unreachable-store rule (the issue's point 4; README "When the API server's store is
    down")
        kube-vip users lose the control-plane endpoint when etcd is slow or down: every
        renewal fails, the leader steps down, nobody can acquire, and the only way to reach
        the API is gone exactly when operators need it (kube-vip #748, #1236, #453). So: when
        the renew deadline passes and **every** failure since the last successful renewal was
        the API server answering that its store cannot serve (HTTP 5xx or 429), **and** the
        local API server is healthy, **and** ``keep_on_unreachable`` is on, the leader keeps
        the VIP (role `Role.HOLDING`) and keeps trying every retry period. It gives the VIP up
        at once when (a) a read succeeds and shows another holder, (b) local health turns bad,
        (c) a failure of another kind happens (a timeout, refused connection or TLS failure:
        this node's path to the store is broken, which is a partition of *this* node, not a
        store outage; or 401/403/4xx: the store answers but refuses us). A renewal that
        succeeds makes it an ordinary leader again.

        The other side: a follower that could not read the Lease for a renew deadline or
        more cannot know whether the holder renewed in the meantime (the holder may have
        been this rule's leader), so when it can read again it counts the record as observed
        *now* (a full ``lease_duration`` before it may take over). A leader that kept
        the VIP through an outage therefore has ``lease_duration`` after the store comes back
        to renew before anyone may steal the Lease, and never races a peer for it.

    Local health gives way to a healthy peer (issue 3 item 2; README "Lease election", "When
    the local API server is unhealthy")
        ``poll``/``on_result`` take ``healthy`` (the local API server, after ``fall``) and
        ``peer_healthy`` (at least one *other* control-plane node's API server is healthy, as
        this node's checker sees it; the driver computes it from ``health.peers``). Then:

        - A **leader** (role `Role.LEADER`) that is unhealthy while a peer is healthy
          **releases** the Lease at once (the graceful-stop write: no holder,
          ``leaseDurationSeconds: 1``) and becomes a follower when the write succeeds, so a
          peer acquires at its next read (within one ``retry_period``). The VIP goes at once:
          on this node it reaches a dead API server anyway.
        - A **follower** that is unhealthy while a peer is healthy does not take a free or
          expired Lease (nor create a missing one) for one ``lease_duration`` after it first
          found it takeable: a healthy peer's vipd gets that long to acquire it. If nobody
          has, it acquires after all (the peer's API server answers but its vipd is not
          running) and **keeps** the Lease until its own API server has been healthy again:
          it gives way once per unhealthy spell, never flaps.
        - **Without a healthy peer nothing changes**: a lone node, or one whose peers are all
          down too, acquires and keeps the Lease with an unhealthy API server (``kubeadm
          init`` needs the VIP before the first API server is up).
        - With the unreachable-store rule: a leader kept there (`Role.HOLDING`) already steps
          down when its local health turns bad; giving way needs a successful write, so in a
          store outage the release fails like a renewal and the renew-deadline rules apply.

What it must not do
    No I/O, no clock, no randomness: ``now`` (seconds on a monotonic clock), outcomes, local
    health and the jitter are passed in, and it returns `Send` requests and role changes for
    the driver (``vipd.lease.driver``) to carry out. It never reads the remote timestamps for
    a decision (they are written for humans and other tools, stamped by the driver). One
    request is in flight at a time; a request the driver abandons (its deadline passed) is
    reported as `Unreachable` and a late answer to it is ignored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = [
    "REASON_LABELS",
    "BecomeFollower",
    "BecomeLeader",
    "Conflict",
    "Elector",
    "Hold",
    "NotFound",
    "Ok",
    "Params",
    "Record",
    "Rejected",
    "Request",
    "Role",
    "Send",
    "Unavailable",
    "Unreachable",
    "validate_timing",
]

# client-go's JitterFactor is 1.2 (waits of 1 to 2.2 retry periods); vipd only shortens the
# wait by up to this fraction, so the documented bounds (takeover within one retry period of a
# release) hold.
JITTER = 0.1
# Fallback request timeout cap, as a fraction of the renew deadline: at least two attempts fit
# in one renew deadline.
REQUEST_FRACTION = 0.5


def validate_timing(duration: float, renew_deadline: float, retry_period: float) -> str | None:
    """client-go's rule, as one message, or None: duration > renew_deadline > 1.2 × retry."""
    if not retry_period > 0:
        return f"retry_period must be positive (got {retry_period})"
    if not renew_deadline > 1.2 * retry_period:
        return (
            f"renew_deadline ({renew_deadline:g} s) must be greater than 1.2 × retry_period "
            f"({1.2 * retry_period:g} s)"
        )
    if not duration > renew_deadline:
        return (
            f"duration ({duration:g} s) must be greater than renew_deadline ({renew_deadline:g} s)"
        )
    return None


@dataclass(frozen=True, slots=True)
class Params:
    identity: str
    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    keep_on_unreachable: bool = True

    def __post_init__(self) -> None:
        problem = validate_timing(self.duration, self.renew_deadline, self.retry_period)
        if problem:
            raise ValueError(problem)
        if not self.identity:
            raise ValueError("identity must not be empty")

    @property
    def duration_seconds(self) -> int:
        """``leaseDurationSeconds`` is an integer in the API; never round below 1."""
        return max(1, round(self.duration))


@dataclass(frozen=True, slots=True)
class Record:
    """What this node read of the Lease (spec fields that matter plus metadata)."""

    resource_version: str
    holder: str | None  # "" on the wire is None here
    duration_seconds: int | None
    transitions: int = 0
    acquire_time: str | None = None  # kept as the server wrote them: for logs only
    renew_time: str | None = None


# -- requests ---------------------------------------------------------------------------------


class Verb(enum.Enum):
    GET = "get"
    CREATE = "create"
    UPDATE = "update"


class Purpose(enum.Enum):
    READ = "read"
    CREATE = "create"
    ACQUIRE = "acquire"  # from nobody, from an expired holder, or our own record after restart
    RENEW = "renew"
    RELEASE = "release"
    YIELD = "yield"  # unhealthy, with a healthy peer: the release write, the process goes on


@dataclass(frozen=True, slots=True)
class Request:
    """One call for the driver. For writes, the spec to write; the driver stamps the times.

    ``stamp_acquire``: write ``acquireTime = now`` (a new holder); otherwise keep the one read.
    ``timeout``: seconds the driver may wait for the answer before it abandons the request.
    """

    id: int
    verb: Verb
    purpose: Purpose
    timeout: float
    resource_version: str | None = None
    holder: str | None = None
    duration_seconds: int | None = None
    transitions: int = 0
    stamp_acquire: bool = False
    acquire_time: str | None = None


# -- outcomes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ok:
    record: Record


@dataclass(frozen=True, slots=True)
class NotFound:
    pass


@dataclass(frozen=True, slots=True)
class Conflict:
    """409: a stale resourceVersion on update, or AlreadyExists on create."""


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The API server answered that it cannot serve now: HTTP 5xx or 429."""

    status: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Unreachable:
    """No answer: timeout, refused or reset connection, TLS failure, or abandoned."""

    detail: str = ""


@dataclass(frozen=True, slots=True)
class Rejected:
    """The API server refused the request: 401, 403, 422 or another 4xx."""

    status: int
    detail: str = ""


Outcome = Ok | NotFound | Conflict | Unavailable | Unreachable | Rejected


def outcome_kind(outcome: Outcome) -> str:
    """A short stable label (for logs and metrics)."""
    if isinstance(outcome, Unavailable | Rejected):
        return f"http-{outcome.status}"
    return {
        Ok: "ok",
        NotFound: "not-found",
        Conflict: "conflict",
        Unreachable: "unreachable",
    }[type(outcome)]


# -- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    request: Request


# The stable short labels of role changes (``vipd_role_transitions_total{reason=...}``): one
# per kind of cause, never the free text, which names holders and numbers. "other" is for a
# driver-side change the core did not cause.
REASON_LABELS: tuple[str, ...] = (
    "created",  # leader: created the missing Lease
    "acquired",  # leader: took a free or expired Lease, or our own after a restart
    "store-back",  # leader again: a holding leader renewed when the store came back
    "renewed",  # leader: a renewal write made us leader (a restart that renewed our record)
    "released",  # follower: our release write was answered (or could not be)
    "renew-deadline",  # follower: no renewal succeeded within the renew deadline
    "lost",  # follower: a read shows another holder
    "deleted",  # follower: our Lease was deleted
    "unhealthy",  # follower: local API server unhealthy (gave way, or stopped holding)
    "store-down-ended",  # follower: holding through a store outage ended by another failure
    "store-down",  # holding: past the renew deadline, kept by the unreachable-store rule
    "other",
)


def _check_label(label: str) -> None:
    if label not in REASON_LABELS:
        raise ValueError(f"unknown reason label {label!r}")


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    """The VIP belongs here. ``label``: one of `REASON_LABELS`; ``reason``: the detail."""

    reason: str
    label: str

    def __post_init__(self) -> None:
        _check_label(self.label)


@dataclass(frozen=True, slots=True)
class BecomeFollower:
    """The VIP leaves. ``label``: one of `REASON_LABELS`; ``reason``: the detail."""

    reason: str
    label: str

    def __post_init__(self) -> None:
        _check_label(self.label)


@dataclass(frozen=True, slots=True)
class Hold:
    """The renew deadline passed but the unreachable-store rule keeps the VIP here."""

    reason: str
    label: str = "store-down"

    def __post_init__(self) -> None:
        _check_label(self.label)


Action = Send | BecomeLeader | BecomeFollower | Hold


class Role(enum.Enum):
    FOLLOWER = "follower"
    LEADER = "leader"
    HOLDING = "holding"  # leader past its renew deadline, kept by the unreachable-store rule


@dataclass
class _Pending:
    request: Request
    sent_at: float
    abandon_at: float


@dataclass
class Elector:
    """One node's Lease election. Drive it with `poll`, `on_result` and `release`."""

    params: Params
    role: Role = Role.FOLLOWER
    observed: Record | None = None
    observed_at: float | None = None  # when `observed` was first seen as it is
    last_renew_sent: float | None = None  # send time of our last successful write as holder
    wake_at: float = 0.0  # poll() again at (or after) this time
    # failure kinds since the last successful renewal (leader) or read (follower)
    failures: list[str] = field(default_factory=list)
    last_read_ok: float | None = None  # a follower's last successful read
    lost_sight: bool = False  # a follower was blind (reads failing) for >= renew_deadline
    pending: _Pending | None = None
    releasing: bool = False
    released: bool = False
    stats_renewals: int = 0
    _next_id: int = 0
    _conflict_retry: bool = False
    _jitter: float = 0.0
    # Giving way to a healthy peer: when an unhealthy follower first found the Lease takeable
    # (its window of one duration starts there), and "keep it": we waited a full window and
    # nobody took it, or we acquired it unhealthy with nobody healthy around.
    takeable_since: float | None = None
    keep_unhealthy: bool = False
    stats_yields: int = 0

    # -- queries -------------------------------------------------------------------------

    @property
    def leader(self) -> bool:
        """What the controller is told: the VIP belongs here (leading or holding)."""
        return self.role is not Role.FOLLOWER

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

    # -- the driver's entry points -------------------------------------------------------

    def poll(
        self, now: float, healthy: bool, jitter: float = 0.0, peer_healthy: bool = False
    ) -> list[Action]:
        """Call at start, at ``wake_at`` and whenever health changes. ``jitter`` in [0, 1).
        ``peer_healthy``: another node's API server is healthy (see the module docstring)."""
        actions: list[Action] = []
        self._jitter = min(max(jitter, 0.0), 0.999)
        if self.released:
            return actions
        self._health(healthy)
        if self.pending is not None:
            if now < self.pending.abandon_at:
                actions += self._check_deadline(now, healthy)
                self._wake(min(self.pending.abandon_at, self._deadline_or(now, self.pending)))
                return actions
            # The driver gave up waiting: the answer, if it ever comes, is ignored.
            actions += self._result(
                now, self.pending.request, Unreachable("abandoned"), healthy, peer_healthy
            )
            return actions
        actions += self._check_deadline(now, healthy)
        if self.role is Role.HOLDING and not healthy:
            actions += self._step_down(
                now, "local API server unhealthy while holding the VIP", "unhealthy"
            )
        if (
            self.role is Role.LEADER
            and not healthy
            and peer_healthy
            and not self.keep_unhealthy
            and (not self.failures or now >= self.wake_at)  # after a failure: every period
        ):
            return actions + self._give_way(now)
        if now >= self.wake_at:
            actions += self._start_round(now)
        return actions

    def on_result(
        self,
        now: float,
        request_id: int,
        outcome: Outcome,
        healthy: bool,
        peer_healthy: bool = False,
    ) -> list[Action]:
        """The answer to request ``request_id``; a stale or abandoned id is ignored."""
        p = self.pending
        if p is None or p.request.id != request_id:
            return []
        self._health(healthy)
        return self._result(now, p.request, outcome, healthy, peer_healthy)

    def release(self, now: float, timeout: float) -> list[Action]:
        """Graceful stop: give the Lease up if we hold it. The VIP stays until the write is
        answered (make-before-break: the successor can only bind after it reads the release),
        then `BecomeFollower`. Returns nothing to send when there is nothing to release."""
        self.releasing = True
        if self.role is Role.FOLLOWER or self.observed is None:
            self.released = True
            return []
        self.pending = None  # whatever was in flight no longer matters
        rec = self.observed
        req = self._request(
            Verb.UPDATE,
            Purpose.RELEASE,
            timeout,
            resource_version=rec.resource_version,
            holder=None,
            duration_seconds=1,
            transitions=rec.transitions,
            stamp_acquire=True,
        )
        self.pending = _Pending(req, now, now + timeout)
        return [Send(req)]

    # -- internals -----------------------------------------------------------------------

    def _health(self, healthy: bool) -> None:
        if healthy:
            # A new unhealthy spell starts with a clean slate: give way again then.
            self.takeable_since = None
            self.keep_unhealthy = False

    def _give_way(self, now: float) -> list[Action]:
        """Unhealthy leader, healthy peer: release the Lease (the graceful-stop write)."""
        rec = self.observed
        if rec is None:
            return []
        req = self._request(
            Verb.UPDATE,
            Purpose.YIELD,
            self._timeout(now),
            resource_version=rec.resource_version,
            holder=None,
            duration_seconds=1,
            transitions=rec.transitions,
            stamp_acquire=True,
        )
        return self._send(now, req)

    def _may_take(self, now: float, healthy: bool, peer_healthy: bool) -> bool:
        """May this follower take a takeable (free, expired, missing) Lease now? Not while it
        is unhealthy and a healthy peer has not had one duration to take it."""
        if healthy or not peer_healthy or self.keep_unhealthy:
            return True
        if self.takeable_since is None:
            self.takeable_since = now
        until = self.takeable_since + self.params.duration
        if now >= until:
            # Nobody healthy took it in a whole duration (their vipd is not running): take it
            # and keep it until our own API server recovers.
            self.keep_unhealthy = True
            return True
        self._wake(min(self._next_poll(now), until))
        return False

    def _deadline_or(self, now: float, p: _Pending) -> float:
        d = self.renew_deadline_at
        return d if d is not None and self.role is Role.LEADER else p.abandon_at

    def _wake(self, at: float) -> None:
        d = self.renew_deadline_at
        if self.role is Role.LEADER and d is not None:
            at = min(at, d)  # the deadline is checked on time, whatever else is pending
        self.wake_at = at

    def _request(self, verb: Verb, purpose: Purpose, timeout: float, **kw: object) -> Request:
        self._next_id += 1
        return Request(self._next_id, verb, purpose, timeout, **kw)  # type: ignore[arg-type]

    def _timeout(self, now: float) -> float:
        """Per-request timeout: a leader's renewal must be answered before its deadline."""
        cap = max(0.2, self.params.renew_deadline * REQUEST_FRACTION)
        d = self.renew_deadline_at
        if self.role is Role.LEADER and d is not None:
            return max(0.05, min(cap, d - now))
        return cap

    def _send(self, now: float, req: Request) -> list[Action]:
        self.pending = _Pending(req, now, now + req.timeout)
        self._wake(min(now + req.timeout, self._deadline_or(now, self.pending)))
        return [Send(req)]

    def _start_round(self, now: float) -> list[Action]:
        rec = self.observed
        if self.role is Role.LEADER and rec is not None:
            # client-go's fast path: write on the resourceVersion we know, read only on 409.
            return self._send(now, self._renew_request(now, rec))
        # Followers read first; so does a holding leader, to see another holder at once.
        self._conflict_retry = False
        return self._send(now, self._request(Verb.GET, Purpose.READ, self._timeout(now)))

    def _renew_request(self, now: float, rec: Record) -> Request:
        return self._request(
            Verb.UPDATE,
            Purpose.RENEW,
            self._timeout(now),
            resource_version=rec.resource_version,
            holder=self.params.identity,
            duration_seconds=self.params.duration_seconds,
            transitions=rec.transitions,
            acquire_time=rec.acquire_time,
        )

    def _observe(self, now: float, rec: Record) -> None:
        old = self.observed
        changed = (
            old is None
            or old.resource_version != rec.resource_version
            or old.holder != rec.holder
            or old.duration_seconds != rec.duration_seconds
        )
        if changed or self.lost_sight:
            # A record we could not watch for a renew deadline or more may belong to a leader
            # that kept the VIP through a store outage: count it as seen now (the
            # unreachable-store rule's follower side).
            self.observed_at = now
        self.observed = rec
        self.lost_sight = False
        self.last_read_ok = now

    def _next_poll(self, now: float) -> float:
        at = now + self.params.retry_period * (1.0 - JITTER * self._jitter)
        exp = self.expires_at()
        if self.role is Role.FOLLOWER and exp is not None and now < exp < at:
            at = exp  # the Lease we watch expires before the next poll: look right then
        return at

    def _check_deadline(self, now: float, healthy: bool) -> list[Action]:
        d = self.renew_deadline_at
        if self.role is not Role.LEADER or d is None or now < d:
            return []
        fails = ", ".join(self.failures) or "no answer yet"
        if (
            self.params.keep_on_unreachable
            and healthy
            and self.failures
            and all(f.startswith(("http-5", "http-429")) for f in self.failures)
        ):
            self.role = Role.HOLDING
            return [
                Hold(
                    f"renew deadline {self.params.renew_deadline:g} s passed, every attempt "
                    f"answered that the store is unavailable ({fails}) and the local API "
                    "server is healthy: keeping the VIP until another holder appears",
                    "store-down",
                )
            ]
        why = (
            f"renew deadline {self.params.renew_deadline:g} s passed without a successful "
            f"renewal ({fails})"
        )
        if self.params.keep_on_unreachable and not healthy:
            why += "; local API server unhealthy"
        return self._step_down(now, why, "renew-deadline")

    def _step_down(self, now: float, reason: str, label: str) -> list[Action]:
        if self.role is Role.FOLLOWER:
            return []
        self.role = Role.FOLLOWER
        self.last_renew_sent = None
        self.failures = []
        self._wake(min(self.wake_at, now + self.params.retry_period))
        return [BecomeFollower(reason, label)]

    def _result(
        self,
        now: float,
        req: Request,
        outcome: Outcome,
        healthy: bool,
        peer_healthy: bool = False,
    ) -> list[Action]:
        p = self.pending
        sent_at = p.sent_at if p is not None else now
        self.pending = None
        if req.purpose is Purpose.RELEASE:
            return self._released(now, outcome)
        if self.releasing:
            return []
        actions: list[Action] = []
        if req.purpose is Purpose.YIELD and isinstance(outcome, Ok) and self.leader:
            self._observe(now, outcome.record)
            self.takeable_since = now  # our own window starts now: a healthy peer goes first
            self.stats_yields += 1
            actions += self._step_down(
                now,
                "local API server unhealthy and a peer's is healthy: gave the Lease up "
                "for the peer to take over",
                "unhealthy",
            )
            self._wake(self._next_poll(now))
            return actions
        if isinstance(outcome, Ok):
            actions += self._ok(now, sent_at, req, outcome.record, healthy, peer_healthy)
        elif isinstance(outcome, NotFound):
            self.observed, self.observed_at = None, None
            self.lost_sight = False
            if self.role is not Role.FOLLOWER:
                # Our Lease was deleted under us: whoever creates it next leads.
                actions += self._step_down(now, "the Lease was deleted", "deleted")
            if not self._may_take(now, healthy, peer_healthy):
                return actions
            actions += self._send(
                now,
                self._request(
                    Verb.CREATE,
                    Purpose.CREATE,
                    self._timeout(now),
                    holder=self.params.identity,
                    duration_seconds=self.params.duration_seconds,
                    transitions=0,
                    stamp_acquire=True,
                ),
            )
            return actions
        elif isinstance(outcome, Conflict):
            # Someone wrote first: read right away, once; a storm waits for the next period.
            if not self._conflict_retry:
                self._conflict_retry = True
                return self._send(now, self._request(Verb.GET, Purpose.READ, self._timeout(now)))
            self._wake(self._next_poll(now))
        else:
            actions += self._failed(now, outcome)
        actions += self._check_deadline(now, healthy)
        return actions

    def _failed(self, now: float, outcome: Outcome) -> list[Action]:
        kind = outcome_kind(outcome)
        self.failures.append(kind)
        del self.failures[:-20]  # the last ones tell the story; bounded memory
        if self.role is Role.FOLLOWER:
            blind_since = self.last_read_ok if self.last_read_ok is not None else now
            if now - blind_since >= self.params.renew_deadline:
                self.lost_sight = True
            self._wake(self._next_poll(now))
            return []
        if self.role is Role.HOLDING and not kind.startswith(("http-5", "http-429")):
            return self._step_down(
                now,
                f"holding the VIP through a store outage, then {kind}: this node's own path "
                "to the store is broken or refused",
                "store-down-ended",
            )
        # A leader retries every retry period until its deadline.
        self._wake(now + self.params.retry_period)
        return []

    def _ok(
        self,
        now: float,
        sent_at: float,
        req: Request,
        rec: Record,
        healthy: bool,
        peer_healthy: bool = False,
    ) -> list[Action]:
        me = self.params.identity
        actions: list[Action] = []
        if req.verb is not Verb.GET:
            # Our write went through: we hold the Lease as of when we sent it.
            self._observe(now, rec)
            self.observed_at = sent_at  # conservative for our own expiry bookkeeping
            self.failures = []
            self.last_renew_sent = sent_at
            self.stats_renewals += req.purpose is Purpose.RENEW
            self._conflict_retry = False
            if self.role is Role.FOLLOWER:
                self.role = Role.LEADER
                how, label = {
                    Purpose.CREATE: ("created the Lease", "created"),
                    Purpose.ACQUIRE: ("acquired the Lease", "acquired"),
                }.get(req.purpose, ("renewed the Lease", "renewed"))
                actions.append(
                    BecomeLeader(
                        f"{how} (transitions {rec.transitions}, rv {rec.resource_version})",
                        label,
                    )
                )
            elif self.role is Role.HOLDING:
                self.role = Role.LEADER
                actions.append(
                    BecomeLeader("store reachable again: renewed the Lease", "store-back")
                )
            self._wake(sent_at + self.params.retry_period)
            return actions
        # A read.
        self._observe(now, rec)
        holder = rec.holder
        if self.role is not Role.FOLLOWER:
            if holder and holder != me:
                actions += self._step_down(now, f"the Lease is held by {holder} now", "lost")
                self._wake(self._next_poll(now))
                return actions
            # Still ours (or released by hand): renew on the fresh resourceVersion.
            return self._send(now, self._renew_request(now, rec))
        exp = self.expires_at()
        if not holder or holder == me or (exp is not None and now >= exp):
            if not self._may_take(now, healthy, peer_healthy):
                return actions
            req2 = self._request(
                Verb.UPDATE,
                Purpose.ACQUIRE,
                self._timeout(now),
                resource_version=rec.resource_version,
                holder=me,
                duration_seconds=self.params.duration_seconds,
                # client-go: a new holder counts a transition and stamps acquireTime; our own
                # record (a restart) keeps both.
                transitions=rec.transitions + (holder != me),
                stamp_acquire=holder != me,
                acquire_time=rec.acquire_time if holder == me else None,
            )
            return self._send(now, req2)
        self.takeable_since = None  # someone holds it: a later free Lease opens a new window
        self._wake(self._next_poll(now))
        return actions

    def _released(self, now: float, outcome: Outcome) -> list[Action]:
        self.released = True
        was = self.role
        self.role = Role.FOLLOWER
        if isinstance(outcome, Ok):
            self.observed = outcome.record
            why = "released the Lease"
        else:
            why = f"could not release the Lease ({outcome_kind(outcome)}): peers wait it out"
        return [BecomeFollower(why, "released")] if was is not Role.FOLLOWER else []
