"""Kubernetes Lease leader election, giving way: an unhealthy node yields to a healthy peer,
never a lone one.

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

What it is
    `GiveWay`: the local-health rules of one node's Lease election: a leader's give-way
    write (`_give_way`), a follower's wait before it takes a takeable Lease (`_may_take`),
    and what counts as "a healthy peer" (`_peer_ok`). `Elector.poll` and the answers call
    them (``vipd.lease.logic``).

What it must not do
    No I/O, no clock: the local and the peers' health are passed in, as the driver sees
    them (``vipd.lease.evidence``). Never give way to this node itself.
"""

from __future__ import annotations

from vipd.lease.model import Action, PeerState, Purpose, Verb
from vipd.lease.state import ElectorState

__all__ = ["GiveWay"]


class GiveWay(ElectorState):
    """Giving way to a healthy peer, for one node's Lease election."""

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
