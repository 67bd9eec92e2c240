"""The Lease election backend: the official ``kubernetes`` client feeding `vipd.lease.logic`.

What it is
    `LeaseElection` implements the election port (``vipd.election``): it runs the core's
    requests as calls of the ``kubernetes`` client on a small thread pool, never on the
    event loop, feeds the results, the clock and the health the agent pushes (``on_health``)
    to the `Elector`, and publishes each of the core's decisions as a `Transition` with the
    core's reason label. On SIGTERM it releases the Lease and keeps the VIP (quiet) until the
    successor shows (make-before-break, as the VRRP backend's stop). Its parts:

    - ``vipd.lease.codec``: the Lease object and the core's record, both ways;
    - ``vipd.lease.api``: `LeaseApi`, one blocking client call per request with an explicit
      total timeout; credentials, the local API server and the ``super-admin.conf``
      fallback come from ``vipd.kube``;
    - ``vipd.lease.feed``: the backend's state; the core's actions carried out, its answers
      fed back;
    - ``vipd.lease.evidence``: the peers' API servers, the wire and the link, for the
      unreachable-store rule and giving way;
    - ``vipd.lease.handover``: the stop, the release and the successor wait;
    - this module: the loop that feeds the core (`run`), the watch on the Lease, set-up,
      /status and /readyz.

Writes by someone else
    ``vipd.lease.watch`` watches the Lease on a thread of its own (when the API has a
    ``watch``: `LeaseApi` does, the unit tests' in-memory store does not); every event
    goes to `logic.Elector.watched` on the loop, so a leader whose Lease someone else
    renamed, emptied or deleted lets go at once (docs/design/lease.md, "When someone
    else writes the Lease"). The watch needs ``list`` and ``watch`` on the Lease; without
    them it is refused, logged, and tried again a minute later, and the core's rules
    keep the holders apart without it.

What it must not do
    Decide anything (the core does), touch the VIP (the agent's controller does), block the
    loop (every API call is in the executor, with a timeout no longer than the core asked
    for), or exit because the Lease was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from vipd import log as vlog
from vipd import metrics
from vipd.election import FOLLOWER, LEADER, Host, Publish, VipLink
from vipd.kube import ADMIN_CONF, Credentials
from vipd.lease import logic
from vipd.lease.api import LeaseApi, check
from vipd.lease.codec import microtime
from vipd.lease.evidence import Evidence
from vipd.lease.handover import Handover

__all__ = ["ADMIN_CONF", "Credentials", "LeaseApi", "LeaseElection", "check", "microtime"]


class LeaseElection(Handover, Evidence):
    """One node's Lease election, behind the election port.

    ``clock``, ``open_api`` and ``jitter`` are the seams the unit tests use (a fake clock, an
    API double that answers in memory, no randomness)."""

    backend = "lease"

    # -- set-up --------------------------------------------------------------------------

    def init_metrics(self) -> None:
        metrics.init_lease(
            node=self.cfg.node, vips=[str(v) for v in self.cfg.vips], interface=self.pre.link.name
        )
        metrics.LEASE_RENEW_AGE.set_function(self._renew_age)

    async def prepare(self) -> VipLink:
        """The configured interface; the API client for this host's credentials."""
        self.api = self._open_api(self.lease, self.log)
        link = self.pre.link
        return VipLink(link.name, link.index, link.mac)

    def attach(self, host: Host) -> None:
        self.controller = host.controller
        self.health = host.health
        self._link_up = host.link_up
        h = self.cfg.health
        if self.health is None or h is None:
            vlog.event(
                self.log,
                logging.INFO,
                "lease: no health section, the local API server counts as healthy "
                "(and with no peers' readiness to go on, the leader steps down at the renew "
                "deadline when its calls fail, as client-go's; the store's NOSPACE refusals "
                "and another node's ARP for the VIP still count)",
                keep_on_unreachable=self.lease.keep_on_unreachable,
            )
            return
        peers = self.health_peers
        vlog.event(
            self.log,
            logging.INFO,
            "lease: health gating on"
            + ("" if peers else " (no peers listed: this node never gives way)"),
            url=self.health.url(h.local),
            peers=",".join(str(a) for a in peers) or "-",
        )

    # -- the election --------------------------------------------------------------------

    async def run(self, publish: Publish, ready: Callable[[], None]) -> None:
        """Poll the core at its ``wake_at``, on every answer and on every health change;
        runs until cancelled."""
        assert self.api is not None
        self._publish = publish
        self._wake = asyncio.Event()
        vlog.event(
            self.log,
            logging.INFO,
            "lease election started",
            node=self.cfg.node,
            vip=",".join(map(str, self.cfg.vips)),
            interface=self.pre.link.name,
            lease=f"{self.lease.namespace}/{self.lease.name}",
            api_server=self.lease.api_server or "(kubeconfig)",
            credentials=self.api.using.label,
            duration_s=self.lease.duration,
            renew_deadline_s=self.lease.renew_deadline,
            retry_period_s=self.lease.retry_period,
        )
        self._started = True
        for vip in self.cfg.vips:
            metrics.set_role(self.backend, FOLLOWER, str(vip))
        ready()
        loop = asyncio.get_running_loop()
        self._start_claimwatch(loop)
        self._start_watch(loop)
        self._observe_peers(always=True)
        while True:
            self._observe_peers()  # a result that turned stale
            now = self.clock()
            self._wake.clear()
            self._apply(
                self.elector.poll(
                    now, self.healthy(), self._jitter(), peer_healthy=self.peer_healthy()
                ),
                now,
            )
            woken = loop.create_task(self._wake.wait(), name="lease-wake")
            waiters: set[asyncio.Future[Any]] = {woken}
            if self._inflight is not None:
                waiters.add(self._inflight)
            delay = max(0.0, self.elector.wake_at - self.clock())
            try:
                await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
            if self._inflight is not None and self._inflight.done():
                fut, self._inflight = self._inflight, None
                self._apply(self._result(fut.result()), self.clock())

    def _start_watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The watch on the Lease (`vipd.lease.watch`), on a thread of its own: a leader
        learns of a write it did not make at once. An API without one (the unit tests'
        in-memory store) has none: the core's rules hold without it."""
        start = getattr(self.api, "watch", None)
        if start is None:
            return

        def deliver(rec: logic.Record | None) -> None:
            loop.call_soon_threadsafe(self._on_watch, rec)

        threading.Thread(
            target=start,
            args=(deliver, self._watch_stop, self.lease.retry_period),
            name="lease-watch",
            daemon=True,  # a read blocked on a dead server must not hold the exit up
        ).start()

    def _on_watch(self, rec: logic.Record | None) -> None:
        if self._publish is None or self._watch_stop.is_set():
            return
        now = self.clock()
        actions = self.elector.watched(now, rec)
        if actions:
            vlog.event(
                self.log,
                logging.WARNING,
                "the Lease was written by someone else: letting go",
                holder=rec.holder if rec else None,
                resource_version=rec.resource_version if rec else None,
                deleted=rec is None,
            )
        self._apply(actions, now)
        if self._wake is not None:
            self._wake.set()

    # -- stop ----------------------------------------------------------------------------

    async def close(self) -> None:
        self._watch_stop.set()
        for watch in self.claimwatches:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(watch.fileno())
            watch.close()
        self.claimwatches.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def stopped_fields(self) -> dict[str, object]:
        return {
            "was_leader": self._was_leader,
            "renewals": self.elector.stats_renewals,
            "errors": dict(self.errors),
        }

    # -- observability -------------------------------------------------------------------

    def _renew_age(self) -> float | None:
        last = self.elector.last_renew_sent
        return None if last is None or not self.elector.leader else self.clock() - last

    def readiness(self) -> tuple[bool, str]:
        """/readyz: takes part in the election (started)."""
        if not self._started:
            return False, "starting"
        return True, "ready"

    def status(self, now: float) -> dict[str, Any]:
        """The Lease part of /status (``master`` is the Lease holder)."""
        e = self.elector
        rec = e.observed
        holder = rec.holder if rec else None
        last = e.last_renew_sent
        return {
            "role": LEADER if e.leader else FOLLOWER,
            "role_since_s": None if self._role_since is None else round(now - self._role_since, 6),
            "last_reason": self._last_reason,
            "duplicate_claim": False,
            "lease": {
                "name": f"{self.lease.namespace}/{self.lease.name}",
                "state": e.role.value,
                "holder": holder,
                "transitions": rec.transitions if rec else None,
                "resource_version": rec.resource_version if rec else None,
                "duration_s": self.lease.duration,
                "renew_deadline_s": self.lease.renew_deadline,
                "retry_period_s": self.lease.retry_period,
                "last_renewal_age_s": None if last is None else round(now - last, 6),
                "credentials": self.api.using.label if self.api else None,
                "local_healthy": self.healthy(),
                "peer_healthy": self.peer_healthy(),
                "gave_way": e.stats_yields,
                "peers": None if e.peers is None else {k: v.value for k, v in e.peers.items()},
                "evidence": e.evidence(now),
                "foreign_claims": self.foreign_claims,
            },
            "master": None
            if not holder
            else {"address": holder, "priority": None, "self": holder == self.cfg.node,
                  "advert_age_s": None},
            "peers": [],
            "counters": {
                "transitions": self.transitions,
                "renewals": e.stats_renewals,
                "lease_errors": dict(self.errors),
            },
        }  # fmt: skip
