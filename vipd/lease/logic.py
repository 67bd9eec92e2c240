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

    The unreachable-store rule (docs/design/lease-unreachable.md has the argument and the
    bounds per fault)
        kube-vip users lose the control-plane endpoint when etcd is down: every renewal fails, the
        leader steps down, nobody can acquire (kube-vip#748, kube-vip#1236, kube-vip#453). But a
        failing call proves only that *this* node cannot write: with kubeadm's stacked etcd each API
        server talks to its own member, and one member cut off from the quorum, or one API server's
        Priority and Fairness (429), fails one node only. So the rule is client-go's — step down at
        the renew deadline — **unless this node has positive evidence that nobody else can lead**
        (and ``keep_on_unreachable`` is on):

        - **Peers** (`observe_peers`, from the driver's checks of the other API servers'
          etcd readiness): every known peer *answered* not ready (it cannot reach the store,
          so its vipd cannot write the Lease either), or there are no peers at all and no
          other holder was ever seen in the Lease (a lone node). A peer that does not answer
          proves nothing (a partitioned leader sees exactly that). Then the leader keeps the
          VIP (`Role.HOLDING`, `Hold`), reads first every retry period, and gives it up when
          a read shows another holder, or when the evidence ends: then one last round at
          once, and a step-down if it fails or ``duration - renew_deadline`` passes without
          a renewal (the peer that turned ready could not read the Lease either, so it needs
          a whole duration from its first good read). Evidence that arrives after the
          renew deadline (kube-apiserver's etcd check lags the store) still brings the VIP
          back, holding, if it comes before our last renewal's send + duration and our
          record is the last we saw: no follower can have taken the Lease before then.
        - **The store itself** (`classify`, `StoreRefused`): etcd's NOSPACE alarm answers
          every write of every member alike, reads still work. A follower whose expiry falls
          just after the writes return would take the Lease without ever meeting a refusal,
          before our next round renews; so on refusals the leader steps down at the deadline
          like client-go, and takes the VIP back (holding) once every follower's expiry has
          passed with our record unchanged and writes still refused. A follower that takes
          the Lease from another holder after one of its own requests failed (nobody having
          written since) binds the VIP only after the old holder's next read could have seen
          it (`bind_at`): its failure may have pushed its expiry past that wait. A 429 is
          never store-wide.
        - **The wire** (`foreign_claim`): another MAC announcing the VIP means someone else
          believes it holds it: yield at once, never defend.

        The other side: a follower any of whose requests failed since its last good read (a
        read, or a refused write) counts the record as observed at its next good read, a
        full ``lease_duration`` before it may take over: the holder may have renewed out of
        its sight, or kept the VIP on evidence that this very follower was not ready.

    Local health gives way to a healthy peer (docs/design/lease.md, "When the local API
    server is unhealthy")
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
          init`` needs the VIP before the first API server is up). A peer entry that is this
          node (its ``identity`` or one of ``self_addresses``) is never a peer; when the
          driver reports the peers (`observe_peers`), "a healthy peer" also needs one of
          them to answer ready, so a node never gives way to itself.
        - With the unreachable-store rule: giving way needs a successful write, so in a
          store outage the release fails like a renewal and the renew-deadline rules apply;
          a holding leader's own health does not matter (the evidence is that nobody else
          can do better).

Writes by someone else (docs/design/lease.md, "When someone else writes the Lease")
    ``kubectl patch``/``edit``/``delete``, or another tool, can write the Lease under a
    holder. client-go has a node take a record naming it at once and a deleted Lease be
    re-created at once, while the old holder lets go only at its next renewal: two holders
    for up to a retry period (no wire to settle it for an IPv6 VIP, or on a LAN that drops
    gratuitous ARP). So:

    - **A node becomes leader only on a write of its own that names it** (its create or
      update answer). A record naming it that it did not write (not the term of its last
      write with no other record seen since, nor, before it has written, the first record
      it saw since start: its own from before a restart) starts a term of its own
      (``leaseTransitions + 1``, new ``acquireTime``). The answer to a write that names
      nobody (a give-way) never makes a leader.
    - **When someone else has written over another holder's valid record** (renamed it to
      us, emptied it other than by a release, or deleted it) the node takes the Lease at
      once (its own write: nobody else can) but binds the VIP only when that holder has let
      go even if it never saw the write: at its write's send + ``renew_deadline`` (the old
      holder's last good renewal was sent before the foreign write, and it steps down at its
      renew deadline) or that holder's expiry by our view, whichever is first (`bind_at`).
      A release (no holder, ``leaseDurationSeconds: 1``) and an expired record are the
      ordinary handovers: bound at once.
    - **A leader that sees a write it did not make steps down at once** (`watched`: the
      driver's watch on the Lease; a renewal's 409 and read, or 404, without it). Our own
      renewal's echo, a change that keeps us the holder, an event no newer than a record
      we saw, and our give-way's echo are not news. A write of ours still in flight has been
      overtaken: its answer makes no leader.

What it must not do
    No I/O, no clock, no randomness: ``now`` (seconds on a monotonic clock), outcomes, local
    health, the peers' states, the wire's claims and the jitter are passed in, and it returns
    `Send` requests and role changes for the driver (``vipd.lease.driver``) to carry out. It
    never reads the remote timestamps for a decision (they are written for humans and other
    tools, stamped by the driver). One request is in flight at a time; a request the driver
    abandons (its deadline passed) is reported as `Unreachable` and a late answer to it is
    ignored.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
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
    # This node's own addresses (and any other name it may be listed under): a peer entry
    # equal to one of them, or to ``identity``, is this node and never counts as a peer.
    self_addresses: frozenset[str] = frozenset()

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


# The writes that take the Lease for this node.
TAKES = (Purpose.CREATE, Purpose.ACQUIRE)


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

    def __post_init__(self) -> None:
        if self.verb is Verb.UPDATE and not self.resource_version:
            # The Lease strategy answers 422 to an update without one; and without one an
            # update would overwrite whatever another node wrote since our read.
            raise ValueError(f"an update ({self.purpose.value}) needs the resourceVersion read")


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


@dataclass(frozen=True, slots=True)
class StoreRefused:
    """The store refuses every write for every member alike: etcd's NOSPACE alarm."""

    status: int
    detail: str = ""


Outcome = Ok | NotFound | Conflict | Unavailable | Unreachable | Rejected | StoreRefused

# etcd's NOSPACE alarm as the API server passes it on in a 500: the quota check's error
# (``rpctypes.ErrGRPCNoSpace``, server/etcdserver/api/v3rpc/quota.go) and, once the alarm is
# raised through raft, the capped applier's (``errors.ErrNoSpace``). A 429 never is.
NOSPACE_MESSAGES = ("mvcc: database space exceeded", "etcdserver: no space")


def classify(status: int, message: str = "") -> Outcome:
    """The outcome of an HTTP error answer (``status`` 0: no answer at all)."""
    if status == 0:
        return Unreachable(message)
    if status == 404:
        return NotFound()
    if status == 409:
        return Conflict()
    if status == 429:
        # This API server's own Priority and Fairness: says nothing about the store.
        return Unavailable(status, message)
    if status >= 500:
        if any(m in message for m in NOSPACE_MESSAGES):
            return StoreRefused(status, message)
        return Unavailable(status, message)
    return Rejected(status, message)


def outcome_kind(outcome: Outcome) -> str:
    """A short stable label (for logs and metrics)."""
    if isinstance(outcome, StoreRefused):
        return "store-refused"
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
    "foreign-claim",  # follower: another node announced the VIP on the wire
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


class PeerState(enum.Enum):
    """What this node's checker last got from one peer's API server ``/readyz``."""

    READY = "ready"
    NOT_READY = "not-ready"
    UNREACHABLE = "unreachable"


class Role(enum.Enum):
    FOLLOWER = "follower"
    LEADER = "leader"
    HOLDING = "holding"  # leader past its renew deadline, kept by the unreachable-store rule


@dataclass
class _Pending:
    request: Request
    sent_at: float
    abandon_at: float


def _same_node(key: str) -> str:
    """A peer key as compared with this node's own names: addresses in canonical form."""
    try:
        return str(ipaddress.ip_address(key.strip("[]")))
    except ValueError:
        return key


@dataclass
class Elector:
    """One node's Lease election. Drive it with `poll`, `on_result`, `observe_peers`,
    `foreign_claim` and `release`."""

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
    # The unreachable-store rule's evidence (see the module docstring).
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
    # Writes by someone else (see "Writes by someone else" in the module docstring).
    _own_term: tuple[int, str | None] | None = None  # (transitions, acquireTime) we last wrote
    _seen_any: bool = False  # an answer about the Lease since start (a record, or 404)
    _restart_rv: str | None = None  # the first record seen since start, when it named us
    _wrote: bool = False  # a write of ours naming us has been answered since start
    _other_until: float | None = None  # the last other holder's record expires (our view)
    _take_wait: float | None = None  # the take in flight overwrites a holder valid until then
    _rv_max: int | None = None  # the newest resourceVersion seen (they compare as integers)
    _rv_seen: list[str] = field(default_factory=list)  # the last ones (any other format)
    _overtaken: int | None = None  # a write whose answer a foreign write has overtaken
    stats_foreign_writes: int = 0

    # -- queries -------------------------------------------------------------------------

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

    def evidence(self, now: float) -> str | None:
        """Why nobody else can lead right now (the unreachable-store rule), or None."""
        return self._peer_evidence() or self._store_evidence(now)

    def _peer_evidence(self) -> str | None:
        peers = self.peers
        if not self.params.keep_on_unreachable or peers is None:
            return None
        if not peers:
            return None if self.others_seen else "no peers: a lone node"
        if all(s is PeerState.NOT_READY for s in peers.values()):
            return f"every peer's API server answers not ready ({', '.join(sorted(peers))})"
        return None

    def _store_evidence(self, now: float) -> str | None:
        at = self.store_refused_at
        if not self.params.keep_on_unreachable or at is None or now - at > self._store_fresh():
            return None
        return "the store refuses every write for every member (etcd NOSPACE alarm)"

    # -- the driver's entry points -------------------------------------------------------

    def poll(
        self, now: float, healthy: bool, jitter: float = 0.0, peer_healthy: bool = False
    ) -> list[Action]:
        """Call at start, at ``wake_at`` and whenever health changes. ``jitter`` in [0, 1).
        ``peer_healthy``: another node's API server is healthy (see the module docstring)."""
        actions: list[Action] = []
        self._now = now
        self._jitter = min(max(jitter, 0.0), 0.999)
        if self.released:
            return actions
        self._health(healthy)
        peer_healthy = self._peer_ok(peer_healthy)
        actions += self._check_bind(now)
        actions += self._check_holding(now)
        if self.pending is not None:
            if now < self.pending.abandon_at:
                actions += self._check_deadline(now)
                self._wake(min(self.pending.abandon_at, self._deadline_or(now, self.pending)))
                return actions
            # The driver gave up waiting: the answer, if it ever comes, is ignored.
            actions += self._result(
                now, self.pending.request, Unreachable("abandoned"), healthy, peer_healthy
            )
            return actions
        actions += self._check_deadline(now)
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
        self._now = now
        self._health(healthy)
        return self._result(now, p.request, outcome, healthy, self._peer_ok(peer_healthy))

    def observe_peers(self, now: float, peers: Mapping[str, PeerState]) -> list[Action]:
        """The peers' API servers as this node's checker last saw them (key: address or
        name). Call whenever one changes, and once at start (an empty mapping: this node is
        alone). Entries that are this node itself (``identity``, ``self_addresses``) are
        dropped. A holding leader whose evidence this removes steps down at once."""
        self._now = now
        mine = {_same_node(a) for a in self.params.self_addresses} | {self.params.identity}
        self.peers = {k: v for k, v in peers.items() if _same_node(k) not in mine}
        if self.released:
            return []
        return self._late_hold(now) + self._check_holding(now)

    def foreign_claim(self, now: float) -> list[Action]:
        """Another MAC announced the VIP (a gratuitous ARP or unsolicited NA): someone else
        believes it holds it. Yield at once, never defend: remove the VIP, stay a candidate.
        The next round reads the Lease: if it is still ours, we take it back (and the other
        node, a leader holding on stale evidence, yields to our announcement in turn)."""
        self._now = now
        if self.released or not self.leader:
            return []
        self.stats_foreign_claims += 1
        return self._step_down(
            now,
            "another node announced the VIP on the wire: yielding, never defending",
            "foreign-claim",
        )

    def watched(self, now: float, rec: Record | None) -> list[Action]:
        """An event of the driver's watch on the Lease (``None``: it was deleted). A leader
        (or holding one) that sees a write it did not make step down at once: the Lease was
        deleted, or names another holder or none. Not news, and ignored: a record naming us
        (our renewal's echo, or a change that keeps us), one no newer than a record we have
        seen (a watch that starts or lags), the echo of our own give-way write. A write of
        ours still in flight has been overtaken: its answer makes no leader."""
        self._now = now
        if self.released or self.releasing or self.role is Role.FOLLOWER:
            return []
        me = self.params.identity
        p = self.pending
        if rec is not None:
            if rec.holder == me or not self._rv_news(rec.resource_version):
                return []
            if rec.holder is None and p is not None and p.request.purpose is Purpose.YIELD:
                return []
        if p is not None and p.request.verb is not Verb.GET:
            self._overtaken = p.request.id
        self.stats_foreign_writes += 1
        if rec is None:
            self.observed, self.observed_at = None, None
            actions = self._step_down(now, "the Lease was deleted by someone else", "deleted")
        else:
            self._observe(now, rec)
            who = f"names {rec.holder}" if rec.holder else "names no holder"
            actions = self._step_down(
                now, f"the Lease was written by someone else: it {who} now", "lost"
            )
        # Read at once: a Lease deleted or emptied by hand is ours again to take (and bind at
        # once: the holder it was written over is us, and we have let go).
        self._wake(now)
        return actions

    def release(self, now: float, timeout: float) -> list[Action]:
        """Graceful stop: give the Lease up if we hold it. The VIP stays until the write is
        answered (make-before-break: the successor can only bind after it reads the release),
        then `BecomeFollower`. Returns nothing to send when there is nothing to release."""
        self.releasing = True
        if self.role is Role.FOLLOWER or self.observed is None:
            self.released = True
            self.pending = None  # done: an answer still on its way no longer matters
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

    def release_again(self, now: float, timeout: float, fresh: Record) -> list[Action]:
        """The release was refused with 409 and ``fresh`` is the Lease as read since: the
        renewal that was in flight when the stop began landed first and moved the
        resourceVersion on (client-go cannot meet this: it releases only after its renew
        loop has returned). Release again on the fresh version if the Lease is still ours;
        nothing to send if another node holds it (it is no longer ours to give up)."""
        self.observed = fresh
        if fresh.holder != self.params.identity:
            self.pending = None
            return []
        return self.release(now, timeout)

    # -- internals -----------------------------------------------------------------------

    def _health(self, healthy: bool) -> None:
        if healthy:
            # A new unhealthy spell starts with a clean slate: give way again then.
            self.takeable_since = None
            self.keep_unhealthy = False

    def _peer_ok(self, peer_healthy: bool) -> bool:
        """The driver's "a peer is healthy", unless the peers it reported are all this node
        or none of them answers ready: never give way to ourselves."""
        if not peer_healthy or self.peers is None:
            return peer_healthy
        return any(s is PeerState.READY for s in self.peers.values())

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

    def _bind_delay(self) -> float:
        """Taking a Lease from a holder that may be holding on store-wide refusals: the old
        holder reads the Lease every round and steps down when it sees us; its next read is
        answered (or abandoned) within one retry period and two of its requests of our write."""
        return self.params.retry_period + 2 * self._short()

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

    def _request(self, verb: Verb, purpose: Purpose, timeout: float, **kw: object) -> Request:
        self._next_id += 1
        return Request(self._next_id, verb, purpose, timeout, **kw)  # type: ignore[arg-type]

    def _timeout(self, now: float) -> float:
        """Per-request timeout: a leader's renewal must be answered before its deadline."""
        d = self.renew_deadline_at
        if self.role is Role.LEADER and d is not None:
            return max(0.05, min(self._cap(), d - now))
        return self._short()

    def _send(self, now: float, req: Request) -> list[Action]:
        if req.purpose not in TAKES:
            self._take_wait = None
        self.pending = _Pending(req, now, now + req.timeout)
        self._wake(min(now + req.timeout, self._deadline_or(now, self.pending)))
        return [Send(req)]

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

    def _is_own(self, rec: Record) -> bool:
        """A record naming us that we wrote: the term of our last write (a renewal of ours
        committed after we gave up on it, or our record unchanged), or, before we have
        written anything, the first record we saw since start (ours from before a restart:
        the design doc's "ours")."""
        if self._own_term is not None:
            return self._own_term == (rec.transitions, rec.acquire_time)
        return rec.resource_version == self._restart_rv and not self._wrote

    def _takeover_wait(self, now: float, rec: Record | None) -> float | None:
        """Taking a Lease that someone else has written over another holder's valid record
        (deleted, emptied other than by a release, or renamed to us): until when that holder
        may still hold the VIP by our view, or None (bind at once). A release (no holder,
        ``leaseDurationSeconds: 1``, as client-go and vipd write it) and an expired record
        are handovers the design already covers."""
        me = self.params.identity
        if rec is not None and rec.holder and rec.holder != me:
            return None  # an expired record of another holder: the ordinary steal
        if rec is not None and rec.holder is None and rec.duration_seconds == 1:
            return None
        if rec is not None and rec.holder == me and self._is_own(rec):
            return None
        until = self._other_until
        return until if until is not None and now < until else None

    def _next_poll(self, now: float) -> float:
        at = now + self.params.retry_period * (1.0 - JITTER * self._jitter)
        exp = self.expires_at()
        if self.role is Role.FOLLOWER and exp is not None and now < exp < at:
            at = exp  # the Lease we watch expires before the next poll: look right then
        return at

    def _check_deadline(self, now: float) -> list[Action]:
        d = self.renew_deadline_at
        if self.role is not Role.LEADER or d is None or now < d:
            return []
        fails = ", ".join(self.failures) or "no answer yet"
        why = self._peer_evidence()
        if why is not None and self.bind_at is None:
            self.role = Role.HOLDING
            self._hold_on = "peers"
            self.stats_holds += 1
            self._wake(min(self.wake_at, now + self.params.retry_period))
            return [
                Hold(
                    f"renew deadline {self.params.renew_deadline:g} s passed ({fails}) and "
                    f"{why}: keeping the VIP while that holds",
                    "store-down",
                )
            ]
        reason = (
            f"renew deadline {self.params.renew_deadline:g} s passed without a successful "
            f"renewal ({fails})"
        )
        rec = self.observed
        if self.bind_at is None and rec is not None and rec.holder == self.params.identity:
            self._late_hold_until = d - self.params.renew_deadline + self.params.duration
        if self._arm_reclaim(now):
            # Store-wide refusals: nobody can take the Lease, but a follower whose expiry
            # comes just after the writes return takes it without ever seeing a refusal, before
            # our next round renews. So step down like client-go, and take the VIP back once
            # every follower's expiry has passed with our record still unchanged.
            reason += (
                "; the store refuses every write for every member (etcd NOSPACE alarm): the "
                f"VIP comes back here {self._reclaim_after():g} s after the last renewal if the "
                "Lease is still ours then"
            )
        return self._step_down(now, reason, "renew-deadline")

    def _reclaim_after(self) -> float:
        """From the answer to our last renewal until every follower's take-over attempt that
        could have succeeded without meeting a refusal has been answered: a follower's next
        read is sent within a retry period and answered within a request, it expires a
        duration later, reads again and writes, each within a request. A write that landed
        by then shows in our next read."""
        return self.params.duration + self.params.retry_period + 3 * self._short()

    def _check_holding(self, now: float, failed: bool = False) -> list[Action]:
        """A holding leader keeps the VIP only while the evidence holds. When it ends (a peer
        answers ready: the store is back, for it at least), one last round at once: renewed,
        it leads as before; a failure, or ``duration - renew_deadline`` without a renewal,
        and it steps down. A peer that was not ready could not read the Lease either, so it
        counts our record from its first good read and needs a whole duration from there."""
        if self.role is not Role.HOLDING:
            return []
        # Held on the peers: store refusals do not carry it on (taking the VIP on refusals
        # needs the reclaim's wait). Held on refusals: the peers' evidence may take over.
        held = self._peer_evidence()
        if held is None and self._hold_on == "store":
            held = self._store_evidence(now)
        if held is not None:
            self._last_chance_until = None
            return []
        if self._last_chance_until is None and not failed:
            self._last_chance_from = now
            self._last_chance_until = now + min(
                self.params.duration - self.params.renew_deadline, 2 * self._cap()
            )
            self._wake(now)
            return []
        if not failed and self._last_chance_until is not None and now < self._last_chance_until:
            return []
        self._arm_reclaim(now)
        return self._step_down(
            now,
            "holding the VIP through a store outage, and nothing shows any more that no "
            "other node can lead",
            "store-down-ended",
        )

    def _late_hold(self, now: float) -> list[Action]:
        """The peers' evidence arrived after the renew deadline (kube-apiserver's etcd check
        lags the store by its probe's timeout and rate limit): a follower that stepped down
        at the deadline, whose last good view is its own record, takes the VIP back
        (holding) while no other node can have taken the Lease yet: before the last renewal
        it sent plus one duration, which bounds every follower's expiry from below (each
        observed that renewal after it was sent). Then it holds as if the evidence had come
        in time."""
        until = self._late_hold_until
        if until is None or self.role is not Role.FOLLOWER or self.pending_write():
            return []
        rec = self.observed
        if now >= until or rec is None or rec.holder != self.params.identity:
            self._late_hold_until = None
            return []
        why = self._peer_evidence()
        if why is None:
            return []
        self._late_hold_until = None
        self.role = Role.HOLDING
        self._hold_on = "peers"
        self.stats_holds += 1
        self._wake(now + self.params.retry_period)
        text = f"{why}, within one duration of our last renewal: taking the VIP back"
        return [BecomeLeader(text, "store-down"), Hold(text, "store-down")]

    def pending_write(self) -> bool:
        p = self.pending
        return p is not None and p.request.verb is not Verb.GET

    def _arm_reclaim(self, now: float) -> bool:
        """Stepping down while the store refuses writes: come back once every follower's
        expiry has passed with our record unchanged (see `_reclaim`)."""
        last, rec = self._last_renew_ok or self.last_renew_sent, self.observed
        if self._store_evidence(now) is None or last is None or rec is None:
            return False
        if rec.holder != self.params.identity:
            return False
        self._reclaim_rv = rec.resource_version
        self._reclaim_at = last + self._reclaim_after()
        return True

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
        if self._overtaken == req.id:
            # A write of someone else's came after ours: our answer is old news, and the
            # next round reads what the Lease is now.
            self._overtaken = None
            if isinstance(outcome, Ok | Conflict | NotFound):
                self._wake(self._next_poll(now))
                return actions
        if req.purpose is Purpose.YIELD and isinstance(outcome, Ok):
            # Given up, whatever happened meanwhile (another node's announcement may have
            # made us yield already): a write that names no holder never makes a leader.
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
            self._take_wait = self._takeover_wait(now, None)
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
            actions += self._failed(now, req, outcome)
            actions += self._check_deadline(now)
            last = self._last_chance_until is not None and sent_at >= self._last_chance_from
            return actions + self._check_holding(now, failed=last)
        actions += self._check_deadline(now)
        actions += self._check_holding(now)
        return actions

    def _failed(self, now: float, req: Request, outcome: Outcome) -> list[Action]:
        kind = outcome_kind(outcome)
        self.failures.append(kind)
        del self.failures[:-20]  # the last ones tell the story; bounded memory
        refused = isinstance(outcome, StoreRefused) and req.verb is not Verb.GET
        if self.role is Role.FOLLOWER:
            # Blind, or unable to write: its view of the Lease no longer proves anything.
            self.lost_sight = True
            self.failed_since_change = now
            due = self._round_read_ok and now >= self._reclaim_at and self.bind_at is None
            if refused and due:
                return self._reclaim(now)
            if req.verb is Verb.GET:
                self._reclaim_rv = None  # the claim needs unbroken sight of our record
            self._wake(self._next_poll(now))
            return []
        if req.verb is Verb.GET:
            self.store_refused_at = None  # the evidence needs reads to work
        elif refused:
            self._read_first = True
            if self._round_read_ok:
                self.store_refused_at = now
        else:
            self.store_refused_at = None
        # A leader retries every retry period until its deadline; a holding one, while the
        # evidence holds (and at once for its last chance).
        self._wake(now if self._last_chance_until is not None else now + self.params.retry_period)
        return []

    def _reclaim(self, now: float) -> list[Action]:
        """Every follower's expiry has passed, our record is unchanged and the store still
        refuses every write: nobody took the Lease and nobody can. Keep the VIP (holding)."""
        self._reclaim_rv = None
        self.role = Role.HOLDING
        self._hold_on = "store"
        self.store_refused_at = now
        self._read_first = True
        self.stats_holds += 1
        self._wake(now + self.params.retry_period)
        why = (
            "the store refuses every write for every member (etcd NOSPACE alarm) and the Lease "
            "is still ours after every follower's expiry: taking the VIP back while that holds"
        )
        return [BecomeLeader(why, "store-down"), Hold(why, "store-down")]

    def _took_after_failures(self, req: Request) -> bool:
        """Did this acquisition take a Lease from another holder after one of our requests
        failed, with nobody writing the Lease since? That holder may be holding on the
        store's refusals (taken back after a wait that our failure outlasted: our expiry
        restarted) and read the Lease only once per round: it needs that long to see us
        before we bind the VIP."""
        return (
            self.failed_since_change is not None
            and req.purpose is Purpose.ACQUIRE
            and req.stamp_acquire
        )

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
            from_other = (
                req.stamp_acquire
                and self.observed is not None
                and bool(self.observed.holder)
                and self.observed.holder != me
            )
            self._observe(now, rec)
            if rec.holder == me:
                self._own_term = (rec.transitions, rec.acquire_time)
                self._wrote = True
            self._late_hold_until = None
            self.observed_at = sent_at  # conservative for our own expiry bookkeeping
            self.failures = []
            self.last_renew_sent = sent_at
            self._last_renew_ok = now
            self.store_refused_at = None
            self._read_first = False
            self._last_chance_until = None
            self._reclaim_rv = None
            self.stats_renewals += req.purpose is Purpose.RENEW
            self._conflict_retry = False
            wait, self._take_wait = self._take_wait, None
            if self.role is Role.FOLLOWER and rec.holder != me:
                pass  # a write of ours that names nobody (a give-way) never makes a leader
            elif self.role is Role.FOLLOWER:
                self.role = Role.LEADER
                how, label = {
                    Purpose.CREATE: ("created the Lease", "created"),
                    Purpose.ACQUIRE: ("acquired the Lease", "acquired"),
                }.get(req.purpose, ("renewed the Lease", "renewed"))
                reason = f"{how} (transitions {rec.transitions}, rv {rec.resource_version})"
                if from_other and self._took_after_failures(req):
                    self.bind_at = sent_at + self._bind_delay()
                    self._bind_reason = (
                        f"{reason}, after the store had refused writes: bound "
                        f"{self._bind_delay():g} s later, once the old holder has read it"
                    )
                if wait is not None and req.purpose in TAKES:
                    # Someone else wrote over a holder still valid by our view: it lets go
                    # at its renew deadline at the latest (its last good renewal was sent
                    # before that write, which we saw before sending ours), or when its
                    # record expires by our view, as in any steal; sooner when it sees
                    # the write.
                    at = min(sent_at + self.params.renew_deadline, wait)
                    if self.bind_at is None or at > self.bind_at:
                        self.bind_at = at
                        self._bind_reason = (
                            f"{reason}, over a write by someone else while another holder's "
                            f"record was valid: bound {at - sent_at:.3g} s after the write, "
                            "when that holder has let go"
                        )
                    self.stats_foreign_writes += 1
                if self.bind_at is None:
                    actions.append(BecomeLeader(reason, label))
                self.failed_since_change = None
            elif self.role is Role.HOLDING:
                self.role = Role.LEADER
                actions.append(
                    BecomeLeader("store reachable again: renewed the Lease", "store-back")
                )
            self._wake(sent_at + self.params.retry_period)
            return actions
        # A read.
        self._observe(now, rec)
        self._late_hold_until = None  # the store answers: the ordinary rules decide
        holder = rec.holder
        if self.role is not Role.FOLLOWER:
            if holder and holder != me:
                actions += self._step_down(now, f"the Lease is held by {holder} now", "lost")
                self._wake(self._next_poll(now))
                return actions
            # Still ours (or released by hand): renew on the fresh resourceVersion.
            self._round_read_ok = True
            return self._send(now, self._renew_request(now, rec))
        if self._reclaim_rv is not None and (
            holder != me or rec.resource_version != self._reclaim_rv
        ):
            self._reclaim_rv = None  # someone wrote: nothing to take back
        self._round_read_ok = self._reclaim_rv is not None
        exp = self.expires_at()
        if not holder or holder == me or (exp is not None and now >= exp):
            if not self._may_take(now, healthy, peer_healthy):
                return actions
            # client-go: a new holder counts a transition and stamps acquireTime; our own
            # record (a restart, or our renewal that landed late) keeps both. A record that
            # names us but that we did not write starts a term of ours.
            own = holder == me and self._is_own(rec)
            self._take_wait = self._takeover_wait(now, rec)
            req2 = self._request(
                Verb.UPDATE,
                Purpose.ACQUIRE,
                self._timeout(now),
                resource_version=rec.resource_version,
                holder=me,
                duration_seconds=self.params.duration_seconds,
                transitions=rec.transitions + (not own),
                stamp_acquire=not own,
                acquire_time=rec.acquire_time if own else None,
            )
            return self._send(now, req2)
        self.takeable_since = None  # someone holds it: a later free Lease opens a new window
        self._wake(self._next_poll(now))
        return actions

    def _released(self, now: float, outcome: Outcome) -> list[Action]:
        self.released = True
        was = self.leader
        self.role = Role.FOLLOWER
        self.bind_at = None
        if isinstance(outcome, Ok):
            self.observed = outcome.record
            why = "released the Lease"
        else:
            why = f"could not release the Lease ({outcome_kind(outcome)}): peers wait it out"
        return [BecomeFollower(why, "released")] if was else []
