"""The Lease backend's evidence: the peers' API servers and the wire, for the core's rules.

The evidence for the unreachable-store rule (docs/design/lease-unreachable.md)
    - **The peers**: every result of the health checker's checks of the other API servers
      (``on_check``) becomes a `logic.PeerState` for `logic.Elector.observe_peers`:
      ``READY`` when the last check answered 200; ``NOT_READY`` only when the answer
      named the etcd check as failed (``[-]etcd…`` in the body, which kube-apiserver's
      ``/readyz`` and ``/healthz`` list in every failing answer): its store is down for
      that node; ``UNREACHABLE`` for everything else: another failure (a 500 of a
      shutting-down server says nothing about its store), a 401/403, never checked yet,
      or a last answer older than two intervals and a timeout. A check with no answer
      (timeout, refused) leaves the last answer standing until it is that old, so a
      partitioned node loses its evidence within that lag, and one slow answer of a
      peer whose store is down does not end it. Without a ``health``
      section nothing is observed (client-go's rule: step down at the renew deadline);
      with one and no peers, an empty mapping (a lone node). This node's own addresses
      (every address on the interface, the source address, ``health.local``, 127.0.0.1,
      ::1 and the VIP) are never peers.
    - **The wire** (IPv4): ``vipd.host.arpwatch.ClaimWatch`` on the interface; an ARP
      for the VIP from a MAC that is not ours is `logic.Elector.foreign_claim`.

What it is
    `Evidence`: the health checker's results for the other API servers as `PeerState`s
    (`peer_state`, `peer_view`) told to the core (`logic.Elector.observe_peers`); the ARP
    watch for the VIP (`logic.Elector.foreign_claim`, or the successor's announcement in a
    handover); the interface's state (`on_link`, `relink`): an unusable link makes the
    local node unhealthy, and this node's own addresses follow the link.

What it must not do
    Decide anything (the core does): it only reports what the checks and the wire showed.
    A bad frame or a missing ARP socket never ends the daemon: the Lease decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from ipaddress import IPv4Address

from vipd import log as vlog
from vipd.election import IPAddress, VipLink
from vipd.health.tracker import Outcome as CheckOutcome
from vipd.host.arpwatch import ClaimWatch
from vipd.lease.feed import LeaseFeed, self_addresses
from vipd.lease.model import PeerState
from vipd.preflight import Preflight

__all__ = ["PEER_STALE_INTERVALS", "Evidence", "peer_state"]

# A peer check result older than this many check intervals (plus one timeout) is stale.
PEER_STALE_INTERVALS = 2


def peer_state(outcome: CheckOutcome) -> PeerState:
    """One check of a peer's API server as evidence (see the module docstring)."""
    if outcome.ok:
        return PeerState.READY
    if any(name.startswith("etcd") for name in outcome.failed_checks):
        return PeerState.NOT_READY
    return PeerState.UNREACHABLE


class Evidence(LeaseFeed):
    """The peers' API servers, the wire and the link, for one node's Lease election."""

    # -- the peers' API servers -------------------------------------------------------------

    def on_check(self, addr: IPAddress, outcome: CheckOutcome) -> None:
        """Every finished health check: a peer's is evidence for the core (`peer_state`)."""
        if addr not in self.health_peers:
            return
        now = self.clock()
        last = self._peer_checks.get(addr)
        if outcome.status is None and last is not None:
            # No answer this time: the last answer stands until it is stale. kube-apiserver
            # rate-limits its etcd probe and lets an unlimited one block for its timeout
            # (``newETCD3Check``), so a peer whose store is down answers most checks at once
            # and now and then not in time: that one says nothing new.
            pass
        else:
            self._peer_checks[addr] = (now, peer_state(outcome))
        self._observe_peers(always=True)

    def peer_view(self, now: float) -> dict[str, PeerState]:
        """Each peer's state now; a peer never checked, or checked too long ago, proves
        nothing (``UNREACHABLE``)."""
        h = self.cfg.health
        assert h is not None
        stale = PEER_STALE_INTERVALS * h.interval + h.timeout
        view: dict[str, PeerState] = {}
        for addr in self.health_peers:
            got = self._peer_checks.get(addr)
            fresh = got is not None and now - got[0] <= stale
            view[str(addr)] = got[1] if got is not None and fresh else PeerState.UNREACHABLE
        return view

    def _observe_peers(self, always: bool = False) -> None:
        """Tell the core the peers' states (on every result, and when one turns stale).
        Without a health section nothing is known, and nothing is said (client-go's rule)."""
        if self.health is None or self.cfg.health is None or self._publish is None:
            return
        now = self.clock()
        view = self.peer_view(now)
        if not always and view == self._peers_told:
            return
        self._peers_told = view
        self._apply(self.elector.observe_peers(now, view), now)
        if self._wake is not None:
            self._wake.set()

    # -- the wire (IPv4): another MAC announcing the VIP ----------------------------------

    def _start_claimwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """One ARP watch per IPv4 VIP: another MAC announcing any of them is the set's
        successor or a claimant (the Lease moves them together)."""
        if not self._want_claimwatch:
            return
        for vip in self.cfg.vips:
            if not isinstance(vip, IPv4Address):
                continue
            try:
                watch = ClaimWatch(self.pre.link.name, self.pre.link.mac, vip, self._on_claim)
            except OSError as exc:
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "lease: cannot watch ARP for the VIP: another node's announcement will "
                    "not make this one yield at once",
                    vip=vip,
                    error=str(exc),
                )
                continue
            self.claimwatches.append(watch)
            loop.add_reader(watch.fileno(), self._on_claim_readable, watch)

    def _on_claim_readable(self, watch: ClaimWatch) -> None:
        try:
            watch.on_readable()
        except Exception:
            # A bad frame must not end the daemon: the watch is a hint, the Lease decides.
            self.log.exception("lease: ARP watch failed on a frame")

    def _on_claim(self, mac: str) -> None:
        """Another MAC announced the VIP: in a handover, the successor is up (drop at once);
        otherwise the core yields if it holds it."""
        if self._successor_heard is not None:
            self._successor_heard.set()
            return
        if self._publish is None or not self.elector.leader:
            return
        self.foreign_claims += 1
        vlog.event(
            self.log,
            logging.WARNING,
            "another node announced the VIP: yielding",
            claimant_mac=mac,
            count=self.foreign_claims,
        )
        now = self.clock()
        self._apply(self.elector.foreign_claim(now), now)
        if self._wake is not None:
            self._wake.set()

    def on_link(self, up: bool) -> None:
        """The interface stopped (or started) being usable: deleted, down, or without an
        address. The node cannot serve the VIP there, so it counts as an unhealthy local
        node, the core's own rule: a leader gives way to a healthy peer (it releases the
        Lease, and a peer binds the VIP on a working link), and without one it keeps the
        Lease and its VIP comes back with the interface (the agent binds it on the new
        link). A follower takes no free Lease while a healthy peer can."""
        if up == self._link_up:
            return
        self._link_up = up
        vlog.event(
            self.log,
            logging.INFO if up else logging.WARNING,
            "lease: interface usable again: the local node counts as healthy"
            if up
            else "lease: interface unusable: the local node counts as unhealthy "
            "(gives way to a healthy peer)",
            interface=self.pre.link.name,
        )
        if self._wake is not None:
            self._wake.set()

    async def relink(self, pre: Preflight) -> VipLink:
        """The interface re-created or its address changed: this node's addresses (never
        peers) follow it, and the ARP watch is reopened on the new interface (its MAC)."""
        self.pre = pre
        self.self_addresses = self_addresses(self.cfg, pre)
        self.elector.params = dataclasses.replace(
            self.elector.params, self_addresses=self.self_addresses
        )
        watches, self.claimwatches = self.claimwatches, []
        for watch in watches:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(watch.fileno())
            watch.close()
        if self._started:
            self._start_claimwatch(asyncio.get_running_loop())
        link = pre.link
        return VipLink(link.name, link.index, link.mac)
