"""The claim watch of a leading virtual router: ARP claims on its VIPs go to the claim policy
(``vrrp.claims``), whose actions are carried out here.

What it is: the shell of ``vrrp.claims.ClaimPolicy`` (RFC 5227 §2.4): one
``vipd.host.arpwatch.ClaimWatch`` per IPv4 VIP (a claim on any of them is a claim on the
virtual router's set: a defence re-announces every bound VIP of it), the policy's timers on
the driver's clock, its announcements through the agent's controller, its probes through
the watch, its counters and log lines. While stopping, a claim is the successor's
announcement and goes to the handover instead. After a step-down to a higher-priority master
it carries out ``vrrp.yielding``: who holds the VIP now is asked on the wire, and (IPv4) the
MAC that answered is announced for the VIP, so the clients we moved follow the new master.

Per-source budgets (``vrrp.ratelimit``), kept here for the whole virtual router: the
master's immediate answers to lower-priority adverts (RFC 9568 §6.4.3; an advert over its
source's budget is dropped before the machine, as if lost on the wire, so it cannot keep
restarting the periodic advert timer either), the re-announcements for a claimant (the
machine's, keyed by the advert's source, and the claim policy's, by the claimant's MAC) and
the log lines about a source, each refusal counted in ``vipd_vrrp_rate_limited_total``.

What it must not do: decide (the policies do), or announce a VIP this node does not hold,
except the yielding policy's relay of the MAC that answered for a VIP we just gave up.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from ipaddress import IPv4Address
from typing import TYPE_CHECKING

from vipd import log as vlog
from vipd import metrics
from vipd.host import announce
from vipd.host.arpwatch import ClaimWatch
from vipd.host.conflict import probe_frame
from vipd.host.neighbor import gratuitous_arp, parse_mac
from vipd.vrrp import claims, ratelimit, state, yielding
from vipd.vrrp.driver.wire import IPAddress, Timer

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection


class ClaimDefence:
    """Claims on one virtual router's VIPs (see the module docstring)."""

    def __init__(self, owner: VrrpElection) -> None:
        self.owner = owner
        self.log = owner.log
        self.policy = claims.ClaimPolicy()
        self.yielding = yielding.YieldPolicy()
        # Writes the yielding policy's frames on an interface (a seam for the unit tests).
        self.send_frames: Callable[[str, list[bytes]], int] = announce.send_once
        self.watches: list[ClaimWatch] = []  # IPv4: one per VIP
        self._timers: dict[str, Timer] = {}
        interval = owner.vrrp.advert_interval  # a reload cannot change it
        self.answers = ratelimit.Limiter(ratelimit.answers(interval))
        self.announces = ratelimit.Limiter(ratelimit.defences(interval))
        self.lines = ratelimit.Limiter(ratelimit.log_lines())
        # The source of the lower-priority advert the machine last answered: its "contest
        # over" re-announcement (a timer's) is charged to it.
        self.contested_by: IPAddress | None = None

    # -- the watches ----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop, ifname: str, mac: str) -> None:
        o = self.owner
        for vip in o.vips:
            assert isinstance(vip, IPv4Address)
            watch = ClaimWatch(
                ifname,
                mac,
                vip,
                functools.partial(self.on_claim, vip=vip),
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

    def on_claim(self, mac: str, vip: IPAddress | None = None) -> None:
        """Another MAC announced or answered for the VIP (``vip``, when the watch says)."""
        o = self.owner
        if o.handover is not None:
            o.handover.on_claim()  # stopping: the successor's announcement
            return
        lead = self.lead()
        if vip is not None and self.yielding.waiting:
            now = o.clock()
            self._yield(self.yielding.on_answer(now, vip, mac, leading=lead.leading))
        self._run(self.policy.on_claim(o.clock(), mac, lead))

    def stepped_down(self, now: float, *, preempted: bool, held: bool) -> None:
        """We left Active (the VIPs are removed by now): ``preempted`` for a higher-priority
        advert, ``held`` the VIPs were bound until then."""
        o = self.owner
        self._yield(self.yielding.on_step_down(now, o.vips, preempted=preempted, held=held))

    def on_advert(self, src: IPAddress, now: float, priority: int) -> None:
        """An advert with a priority while we lead with the VIP bound: another node claims
        it too (a split brain, healing or not)."""
        suppressed = self.may_log("claim", src, now)
        if suppressed is not None:
            vlog.event(
                self.log,
                logging.WARNING,
                "another node claims the VIP while we hold it",
                claimant=src,
                claimant_priority=priority,
                suppressed=suppressed,
            )
        self._run(self.policy.on_advert(now, self.owner.machine.advert_interval))

    # -- per-source budgets ---------------------------------------------------------------

    def may_answer(self, src: IPAddress, priority: int, now: float) -> bool:
        """False: an advert the machine would answer at once (Active, a lower priority, or
        an equal one from a lower address: RFC 9568 §6.4.3), over ``src``'s budget."""
        m = self.owner.machine
        if m.state is not state.State.ACTIVE or priority == 0 or priority > m.priority:
            return True
        if priority == m.priority and int(src) > int(m.params.primary_ip):
            return True  # it wins: the machine steps down
        if not self.answers.allow(now, src).allowed:
            metrics.VRRP_RATE_LIMITED.labels(kind="answer").inc()
            return False
        self.contested_by = src
        return True

    def may_announce(self, key: object, now: float) -> bool:
        """A re-announcement for the claimant ``key`` (an advert's source or a MAC)."""
        if self.announces.allow(now, key).allowed:
            return True
        metrics.VRRP_RATE_LIMITED.labels(kind="defence").inc()
        return False

    def may_log(self, kind: str, key: object, now: float) -> int | None:
        """None: no line about ``key`` now; else the lines of this kind about it left out
        since the last one."""
        verdict = self.lines.allow(now, (kind, key))
        if verdict.allowed:
            return verdict.suppressed
        metrics.VRRP_RATE_LIMITED.labels(kind="log").inc()
        return None

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
                now = o.clock()
                mac = action.claimant_mac
                if not self.may_announce(mac, now):
                    continue
                o.controller.announce()
                if action.reason is None:
                    continue
                # A quiet claimant's (stranded clients) is as rare as our probes: always said.
                suppressed = self.may_log("re-announcing", mac, now) if action.answers_claim else 0
                if suppressed is not None:
                    vlog.event(
                        self.log,
                        logging.INFO,
                        "re-announcing",
                        reason=action.reason,
                        claimant_mac=mac,
                        suppressed=suppressed,
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

    def _yield(self, actions: list[yielding.Action]) -> None:
        o = self.owner
        own = parse_mac(o.pre.link.mac)
        frames: list[bytes] = []
        for action in actions:
            if isinstance(action, yielding.Solicit):
                if isinstance(action.vip, IPv4Address) and not self.watches:
                    continue  # the holder answers us alone: unread, it would move no one
                frames.append(probe_frame(own, action.vip))
            else:
                frames.append(gratuitous_arp(parse_mac(action.mac), action.vip, eth_src=own))
        if not frames:
            return
        error: OSError | None = None
        try:
            sent = self.send_frames(o.ifname, frames)
        except OSError as exc:  # the link went away meanwhile: the link watch says so
            sent, error = 0, exc
        for action in actions:
            if isinstance(action, yielding.Solicit):
                what = "asking who holds the VIP now, for the clients we moved"
                vlog.event(self.log, logging.INFO, what, vip=action.vip, sent=sent, error=error)
            else:
                what = "announcing the VIP at the new master's MAC"
                fields = {"vip": action.vip, "mac": action.mac, "sent": sent, "rfc": "5227"}
                vlog.event(self.log, logging.INFO, what, **fields, error=error)

    def _cancel(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
