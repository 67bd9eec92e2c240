"""Kubernetes Lease leader election, the decision core: records and outcomes in, requests out.

The rules (client-go's ``tools/leaderelection`` on a ``coordination.k8s.io/v1`` Lease:
``holderIdentity`` = the node name, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime``,
``leaseTransitions``), each with the module that implements it:
    - **Validity is measured from when this node observed the record change**, on this node's
      monotonic clock, never from the remote ``renewTime``: a record first seen at ``t`` (or
      seen again unchanged) expires at ``t + leaseDurationSeconds``. Clock skew between nodes
      does not matter; only clock *rate* does (``vipd.lease.state``).
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
      this node saw plus one round trip, not up to one more retry period later
      (``vipd.lease.state``).
    - **The unreachable-store rule** (``vipd.lease.unreachable``): past the renew deadline,
      a leader keeps the VIP only on positive evidence that nobody else can lead (every
      peer's store down, a lone node, or etcd's NOSPACE refusals); another node's
      announcement of the VIP makes it yield at once.
    - **Giving way** (``vipd.lease.giveway``): an unhealthy node yields to a healthy peer,
      never a lone one.
    - **Writes by someone else** (``vipd.lease.foreign``): a node becomes leader only on a
      write of its own that names it, binds the VIP only once a holder someone else wrote
      over has let go, and a leader that sees a write it did not make steps down at once.

What it is
    `Elector` decides, for one node, what to ask the API server next and which role the node
    has: the entry points the driver calls (`poll`, `on_result`, `release`,
    `release_again`; `observe_peers`, `foreign_claim` and `watched` come with their rules)
    and the handling of every answer (`_result`, `_ok`, `_failed`, `_released`), on the
    state of ``vipd.lease.state`` and the rules of the modules above. The vocabulary
    (`Params`, `Record`, `Request`, the outcomes and actions) is ``vipd.lease.model``'s,
    re-exported here: ``logic.X`` names it for the driver and the tests.

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

from vipd.lease.foreign import ForeignWrites
from vipd.lease.giveway import GiveWay
from vipd.lease.model import (
    JITTER,
    REASON_LABELS,
    REQUEST_FRACTION,
    TAKES,
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
    Purpose,
    Record,
    Rejected,
    Request,
    Role,
    Send,
    StoreRefused,
    Unavailable,
    Unreachable,
    Verb,
    classify,
    outcome_kind,
    validate_timing,
)
from vipd.lease.state import Pending
from vipd.lease.unreachable import StoreRule

__all__ = [
    "JITTER",
    "REASON_LABELS",
    "REQUEST_FRACTION",
    "TAKES",
    "Action",
    "BecomeFollower",
    "BecomeLeader",
    "Conflict",
    "Elector",
    "Hold",
    "NotFound",
    "Ok",
    "Outcome",
    "Params",
    "PeerState",
    "Purpose",
    "Record",
    "Rejected",
    "Request",
    "Role",
    "Send",
    "StoreRefused",
    "Unavailable",
    "Unreachable",
    "Verb",
    "classify",
    "outcome_kind",
    "validate_timing",
]


class Elector(StoreRule, GiveWay, ForeignWrites):
    """One node's Lease election. Drive it with `poll`, `on_result`, `observe_peers`,
    `foreign_claim` and `release`."""

    # -- the driver's entry points --------------------------------------------------------

    def poll(
        self, now: float, healthy: bool, jitter: float = 0.0, peer_healthy: bool = False
    ) -> list[Action]:
        """Call at start, at ``wake_at`` and whenever health changes. ``jitter`` in [0, 1).
        ``peer_healthy``: another node's API server is healthy (``vipd.lease.giveway``)."""
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
        self.pending = Pending(req, now, now + timeout)
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

    # -- answers --------------------------------------------------------------------------

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
