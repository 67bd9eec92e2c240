"""Kubernetes Lease leader election, the unreachable-store rule: keep the VIP only on positive
evidence that nobody else can lead.

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

What it is
    `StoreRule`: the renew-deadline check (client-go's step-down, or a hold on evidence:
    `_check_deadline`), the hold and its end (`_check_holding`, `_late_hold`), the reclaim
    after store-wide refusals (`_arm_reclaim`, `_reclaim`), and two entry points of the
    `Elector`: `observe_peers` and `foreign_claim`. The evidence itself is gathered by the
    driver (``vipd.lease.evidence``).

What it must not do
    No I/O, no clock: ``now``, the peers' states and the wire's claims are passed in. It
    never holds the VIP on a failure alone: a peer that does not answer proves nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from vipd.lease.model import Action, BecomeLeader, Hold, PeerState, Purpose, Request, Role
from vipd.lease.state import ElectorState

__all__ = ["StoreRule"]


def _same_node(key: str) -> str:
    """A peer key as compared with this node's own names: addresses in canonical form."""
    try:
        return str(ipaddress.ip_address(key.strip("[]")))
    except ValueError:
        return key


class StoreRule(ElectorState):
    """The unreachable-store rule of one node's Lease election."""

    # -- the evidence ---------------------------------------------------------------------

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

    # -- entry points ---------------------------------------------------------------------

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

    # -- the renew deadline and the hold --------------------------------------------------

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

    def _reclaim_after(self) -> float:
        """From the answer to our last renewal until every follower's take-over attempt that
        could have succeeded without meeting a refusal has been answered: a follower's next
        read is sent within a retry period and answered within a request, it expires a
        duration later, reads again and writes, each within a request. A write that landed
        by then shows in our next read."""
        return self.params.duration + self.params.retry_period + 3 * self._short()

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

    def _bind_delay(self) -> float:
        """Taking a Lease from a holder that may be holding on store-wide refusals: the old
        holder reads the Lease every round and steps down when it sees us; its next read is
        answered (or abandoned) within one retry period and two of its requests of our write."""
        return self.params.retry_period + 2 * self._short()

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
