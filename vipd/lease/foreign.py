"""Kubernetes Lease leader election, writes by someone else: never a second holder.

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

What it is
    `ForeignWrites`: which record naming this node is its own (`_is_own`), how long a
    holder that someone else wrote over may still hold the VIP (`_takeover_wait`, which
    `Elector._ok` turns into `bind_at`), and the entry point for the driver's watch on the
    Lease (`watched`; the watch itself is ``vipd.lease.watch``).

What it must not do
    No I/O, no clock: ``now`` and the watched records are passed in. It never trusts the
    remote timestamps, only the records' terms (``leaseTransitions``, ``acquireTime``) and
    their ``resourceVersion``.
"""

from __future__ import annotations

import math

from vipd.lease.model import Action, Purpose, Record, Role, Verb
from vipd.lease.state import ElectorState

__all__ = ["ForeignWrites"]


class ForeignWrites(ElectorState):
    """The foreign-write rules of one node's Lease election."""

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
        # Other nodes saw that record up to a retry period and a read earlier than we did, so
        # by their view it expired that much sooner: only while it was valid by every view
        # can no one have taken the Lease unseen before this write (then its holder, still
        # renewing, is one we saw and lets go by its expiry as we see it).
        if until is not None and now < until - self.params.retry_period - self._short():
            return until
        if rec is None and not self._seen_any:
            return None  # no Lease, and none ever seen: the first start, not a deletion
        if (rec is None and self._own_term is not None) or (rec is not None and self._held_before):
            return None  # we held it until that write: no one else can have held it unseen
        # The last other holder we saw has expired by our view, or we saw none: another node
        # may have taken the Lease since without our seeing it, and this write may have
        # replaced its record. It lets go by its renew deadline after its last good renewal,
        # which was sent before that write: bind at our write's send + renew deadline.
        return math.inf
