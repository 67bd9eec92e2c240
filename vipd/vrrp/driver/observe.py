"""What a VRRP virtual router shows: role changes published, its metrics, its log lines and
the VRRP part of /status.

What it is: the observability of ``vipd.vrrp.driver.election.VrrpElection``: the peers heard
(for /status), the master's advert age and the duplicate-claim gauge (read by the HTTP thread
when scraped, the followed master's queued adverts handed to the machine first), the VRRP-only
metrics of a role change, the "became ..." and "vrrp started" lines.

What it must not do: change the election; a scrape only brings the counters up to date.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from vipd import log as vlog
from vipd import metrics
from vipd.aio import on_loop
from vipd.election import FOLLOWER, INIT, LEADER, Transition
from vipd.vrrp import state
from vipd.vrrp.driver.wire import IPAddress

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection

# A scrape of the master's advert age waits this long for the loop to read the quiet socket.
AGE_WAIT = 0.2
# Peers remembered for the status document (multicast: anyone on our VRID could show up).
MAX_PEERS = 64
ROLE_OF_STATE = {
    state.State.ACTIVE: LEADER,
    state.State.BACKUP: FOLLOWER,
    state.State.INITIALIZE: INIT,
}


class Observer:
    """The metrics, log lines and /status of one virtual router."""

    def __init__(self, owner: VrrpElection) -> None:
        self.owner = owner
        self.log = owner.log
        self.peers: dict[IPAddress, tuple[int, float]] = {}  # address -> (priority, seen at)
        self.master_advert_at: float | None = None  # the followed master's last advert
        self._master_seen: tuple[IPAddress | None, int | None, int] = (None, None, -1)
        # The loop of run(): asyncio.get_running_loop() checks the process id with a
        # getpid() system call, once per advert sent or heard if asked every time.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        o = owner
        self._scrape_name = f"vrrp-ipv{o.family}-vrid{o.vrrp.vrid}"  # its before_expose hook

    def init_metrics(self) -> None:
        o = self.owner
        metrics.init_vrrp(
            node=o.cfg.node,
            vips=[str(v) for v in o.vips],
            interface=o.ifname,
            priority=o.vrrp.priority,
            auth=o.vrrp.auth_hmac is not None,
        )
        for vip in o.vips:
            metrics.DUPLICATE_CLAIM.labels(vip=str(vip)).set_function(self._duplicate_claim)
            metrics.VRRP_MASTER_ADVERT_AGE.set_function(self._master_advert_age, vip=str(vip))
        # The copies queued on the quiet socket are brought up to date first.
        metrics.REGISTRY.before_expose(self._scrape_name, self._scraped)

    def close(self) -> None:
        metrics.REGISTRY.forget_before_expose(self._scrape_name, self._scraped)

    def loop_started(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def log_started(self) -> None:
        o = self.owner
        vlog.event(
            self.log,
            logging.INFO,
            "vrrp started",
            node=o.cfg.node,
            vip=",".join(map(str, o.vips)),
            interface=o.ifname,
            source=o.source,
            vrid=o.vrrp.vrid,
            version=o.vrrp.version,
            priority=o.vrrp.priority,
            advert_interval_s=o.vrrp.advert_interval,
            mode="unicast" if o.unicast_peers else "multicast",
        )

    # -- role changes ---------------------------------------------------------------------

    def emit(self, reason: str, at: float) -> None:
        """Publish the machine's new role with the core's reason label, then the VRRP-only
        metrics of a role change (after the VIP was bound/removed and announced)."""
        o = self.owner
        m = o.machine
        role = ROLE_OF_STATE[m.state]
        o.publish(Transition(role, state.reason_label(reason), reason, at))
        for vip in o.vips:
            metrics.VRRP_PRIORITY.labels(vip=str(vip)).set(m.priority)
        if role == LEADER and self.master_advert_at is not None:
            since = o.clock() - self.master_advert_at
            metrics.TAKEOVER_SINCE_ADVERT.observe(max(0.0, since))
        if role != FOLLOWER:
            self.master_advert_at = None

    def log_transition(self, word: str, reason: str) -> None:
        o = self.owner
        m = o.machine
        vlog.event(
            self.log,
            logging.INFO,
            f"became {word}",
            vrid=o.vrrp.vrid,
            family=f"IPv{o.family}",
            reason=reason,
            priority=m.priority,
            master=m.master_ip,
            master_priority=m.master_priority,
            master_adver_interval_s=m.master_adver_interval_cs / 100,
            master_down_interval_s=m.mdi,
        )

    def master_changed(self) -> None:
        """Cheap, but not per advert: only when the master or our priority changed."""
        o = self.owner
        m = o.machine
        if (m.master_ip, m.master_priority, m.priority) != self._master_seen:
            self._master_seen = (m.master_ip, m.master_priority, m.priority)
            for vip in o.vips:
                metrics.set_master(m.master_ip, m.master_priority, str(vip))
                metrics.VRRP_PRIORITY.labels(vip=str(vip)).set(m.priority)

    def saw_peer(self, src: IPAddress, now: float, priority: int) -> None:
        """Remember a peer for /status."""
        if src not in self.peers and len(self.peers) >= MAX_PEERS:
            del self.peers[min(self.peers, key=lambda a: self.peers[a][1])]
        self.peers[src] = (priority, now)

    # -- read by the HTTP thread ----------------------------------------------------------

    def _duplicate_claim(self) -> float:
        """vipd_vip_duplicate_claim, read by the HTTP thread when scraped."""
        o = self.owner
        held = o.controller is not None and o.controller.any_bound
        duplicate = o.defence.policy.duplicate_claim(o.clock(), held, o.machine.advert_interval)
        return 1.0 if duplicate else 0.0

    def _scraped(self) -> None:
        """Before a scrape (the HTTP thread): the master's adverts queued on the quiet socket
        go to the machine and the counters first."""
        o = self.owner
        if o.follower.followed is not None and self._loop is not None:
            if threading.get_ident() == self._loop_thread:
                self._catch_up_locked()
            else:
                with contextlib.suppress(Exception):
                    on_loop(self._loop, self._catch_up_locked, AGE_WAIT)

    def _catch_up_locked(self) -> None:
        with self.owner.timers.lock:
            self.owner.follower.catch_up()

    def _master_advert_age(self) -> float | None:
        """vipd_vrrp_master_advert_age_seconds, read by the HTTP thread when scraped."""
        # Registry.expose ran _scraped first: the copies counted so far are in.
        o = self.owner
        if o.machine.state is state.State.ACTIVE:
            return 0.0
        master = o.machine.master_ip
        seen = self.peers.get(master) if master is not None else None
        return None if seen is None else max(0.0, o.clock() - seen[1])

    def status(self, now: float) -> dict[str, Any]:
        """The VRRP part of /status (see vipd.endpoint.status for the shape)."""
        o = self.owner
        m = o.machine
        master: dict[str, Any] | None = None
        if m.master_ip is not None:
            leading = m.state is state.State.ACTIVE
            seen = None if leading else self.peers.get(m.master_ip)
            master = {
                "address": str(m.master_ip),
                "priority": m.master_priority,
                "self": leading,
                "advert_age_s": None if seen is None else round(max(0.0, now - seen[1]), 6),
            }
        peers = [
            {"address": str(a), "priority": p, "last_seen_s": round(max(0.0, now - t), 6)}
            for a, (p, t) in sorted(self.peers.items(), key=lambda kv: kv[1][1], reverse=True)
        ]
        return {
            "role": ROLE_OF_STATE[m.state],
            "role_since_s": None if m.state_since is None else round(now - m.state_since, 6),
            "last_reason": m.last_reason,
            "duplicate_claim": self._duplicate_claim() == 1.0,
            "vrrp": {
                "vrid": o.vrrp.vrid,
                "version": o.vrrp.version,
                "state": m.state.value,
                "priority": m.priority,
                "advert_interval_s": o.vrrp.advert_interval,
                "master_down_interval_s": round(m.mdi, 6),
                "family": f"IPv{o.family}",
                "mode": "unicast" if o.unicast_peers else "multicast",
            },
            "master": master,
            "peers": peers,
            "counters": {
                "transitions": sum(o.stats.transitions.values()),
                "adverts_sent": o.stats.adverts_sent,
                "adverts_received": o.stats.adverts_received,
                "advert_send_errors": o.stats.send_errors,
                "invalid_adverts": dict(o.stats.invalid),
                "duplicate_claims": o.defence.policy.claims,
                "rate_limited": {
                    "answer": o.defence.answers.refused,
                    "defence": o.defence.announces.refused,
                    "log": o.defence.lines.refused,
                },
            },
        }
