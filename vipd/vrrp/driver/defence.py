"""The claim watch of a leading virtual router: ARP claims on its VIPs go to the claim policy
(``vrrp.claims``), whose actions are carried out here.

What it is: the shell of ``vrrp.claims.ClaimPolicy`` (RFC 5227 §2.4): one
``vipd.host.arpwatch.ClaimWatch`` per IPv4 VIP (a claim on any of them is a claim on the
virtual router's set: a defence re-announces every bound VIP of it), the policy's timers on
the driver's clock, its announcements through the agent's controller, its probes through
the watch, its counters and log lines. While stopping, a claim is the successor's
announcement and goes to the handover instead.

What it must not do: decide (the policy does), or announce a VIP this node does not hold.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from ipaddress import IPv4Address
from typing import TYPE_CHECKING

from vipd import log as vlog
from vipd import metrics
from vipd.host.arpwatch import ClaimWatch
from vipd.vrrp import claims, state
from vipd.vrrp.driver.wire import IPAddress, Timer

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection


class ClaimDefence:
    """Claims on one virtual router's VIPs (see the module docstring)."""

    def __init__(self, owner: VrrpElection) -> None:
        self.owner = owner
        self.log = owner.log
        self.policy = claims.ClaimPolicy()
        self.watches: list[ClaimWatch] = []  # IPv4: one per VIP
        self._timers: dict[str, Timer] = {}
        self._log_claim = vlog.Sparse(self.log, "another node claims the VIP while we hold it")

    # -- the watches ----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop, ifname: str, mac: str) -> None:
        o = self.owner
        for vip in o.vips:
            assert isinstance(vip, IPv4Address)
            watch = ClaimWatch(
                ifname,
                mac,
                vip,
                self.on_claim,
                also_own=o.vmac.mac if o.vmac is not None else None,
            )
            self.watches.append(watch)
            loop.add_reader(watch.fileno(), o.timers.guarded, watch.on_readable)

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        watches, self.watches = self.watches, []
        for watch in watches:
            loop.remove_reader(watch.fileno())
            watch.close()

    def probe(self, mac: str) -> bool:
        """Ask ``mac`` by a unicast ARP probe whether it still has the VIP; False if no
        probe went out."""
        sent = False
        for watch in self.watches:
            try:
                watch.probe(mac)
                sent = True
            except OSError as exc:  # the link went away meanwhile: the link watch says so
                vlog.event(self.log, logging.DEBUG, "claimant probe not sent", mac=mac, error=exc)
        return sent

    def _drain(self) -> None:
        for watch in self.watches:
            watch.on_readable()  # a reply the loop has not read yet (timers run before I/O)

    # -- inputs ---------------------------------------------------------------------------

    def lead(self) -> claims.Lead:
        o = self.owner
        m = o.machine
        return claims.Lead(
            leading=(
                m.state is state.State.ACTIVE
                and o.handover is None
                and o.controller is not None
                and o.controller.any_bound
            ),
            interval=m.advert_interval,
            lead_pending=m.lead_pending,
            active_since=m.state_since,
        )

    def on_claim(self, mac: str) -> None:
        """Another MAC announced or answered for the VIP."""
        o = self.owner
        if o.handover is not None:
            o.handover.on_claim()  # stopping: the successor's announcement
            return
        self._run(self.policy.on_claim(o.clock(), mac, self.lead()))

    def on_advert(self, src: IPAddress, now: float, priority: int) -> None:
        """An advert with a priority while we lead with the VIP bound: another node claims
        it too (a split brain, healing or not)."""
        self._log_claim(claimant=src, claimant_priority=priority)
        self._run(self.policy.on_advert(now, self.owner.machine.advert_interval))

    def end(self) -> None:
        self._run(self.policy.end())

    def _fire(self, key: str, drain: bool) -> None:
        self._timers.pop(key, None)
        if drain:
            self._drain()
        self._run(self.policy.on_timer(self.owner.clock(), key, self.lead()))

    # -- actions --------------------------------------------------------------------------

    def _run(self, actions: list[claims.Action]) -> None:
        o = self.owner
        for action in actions:
            if isinstance(action, claims.Announce):
                assert o.controller is not None
                o.controller.announce()
                if action.reason is not None:
                    vlog.event(
                        self.log,
                        logging.INFO,
                        "re-announcing",
                        reason=action.reason,
                        claimant_mac=action.claimant_mac,
                    )
            elif isinstance(action, claims.Counted):
                metrics.DUPLICATE_CLAIMS.labels(source=action.source).inc()
            elif isinstance(action, claims.Warn):
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "a foreign host claims the VIP while we hold it",
                    claimant_mac=action.claimant_mac,
                    count=action.count,
                    defending=action.defending,
                    rfc="5227",
                )
            elif isinstance(action, claims.Schedule):
                self._cancel(action.key)
                fire = functools.partial(self._fire, action.key, action.drain)
                self._timers[action.key] = o.timers.later(action.delay, fire)
            elif isinstance(action, claims.Cancel):
                self._cancel(action.key)
            elif isinstance(action, claims.Probe):
                sent = o.probe(action.mac)
                if not sent:
                    self._drain()
                self._run(self.policy.on_probe(o.clock(), action.mac, sent, self.lead()))

    def _cancel(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
