"""The VRRP election backend behind the election port: one VRID and one address family (a
virtual router, RFC 9568 §7: the agent runs one per family of the VIPs, each advertising its
family's VIPs from its family's source address).

What it is: the port adapter (``vipd.election.Election``) between the agent and the VRRP
state machine (``vrrp.state``). It opens the wire (``vrrp.transport``), feeds the machine
with the clock, the adverts and the agent's events (``on_link``, ``on_health``: the gated
priority, ``on_track``, ``reconfigure``), executes the actions the machine returns in order
(send an advert, become active, step down, re-announce) and publishes each role change as a
`Transition` to the agent, which converges the host (``vipd.agent``, ``vipd.controller``).
Its parts, one seam each: the agent's events (``events``), the machine's timer and the
advert pacer (``timers``), quiet following (``following``), the claim watch and its policy
(``defence``, ``vrrp.claims``), the stop's make-before-break (``handover``), the wire and its
counters (``wire``).

The order of events on a move (docs/design/vrrp.md): a takeover from a dead master sends
the advert first, then the agent binds the VIP and announces it in the same call; preempting
a live master is make-before-break: bind and announce now, the advert ``preempt_lead`` later.
Resigning (SIGTERM, crash): a priority-0 advert (RFC 9568 §6.4.3), then the VIP stays bound
(quiet) until the successor is heard and its claim seen, or none can still come. With
``election.vrrp.vmac`` the VIP, the adverts and the gratuitous ARP use a macvlan with the
virtual MAC (RFC 9568 §7.3), made in ``prepare``.

What it must not do: decide the election (``vrrp.state`` decides; the claim policy only ever
announces a VIP this node already holds), decode packets (``vrrp.packet``), touch the VIP
(the agent's controller does), or let a malformed packet from the wire raise into the loop:
every decode error is counted by reason and dropped.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import time
from collections.abc import Callable
from ipaddress import IPv6Address
from typing import Any

from vipd import log as vlog
from vipd import track
from vipd.config import Config
from vipd.controller import Controller
from vipd.election import Host, Publish, Transition, VipLink
from vipd.health.checker import HealthChecker
from vipd.host.vmaclink import VmacLink
from vipd.preflight import Preflight
from vipd.vrrp import claims, packet, state
from vipd.vrrp.driver import links, members, observe
from vipd.vrrp.driver.adverts import AdvertIO
from vipd.vrrp.driver.defence import ClaimDefence
from vipd.vrrp.driver.events import AgentEvents, _locked
from vipd.vrrp.driver.following import Follower
from vipd.vrrp.driver.handover import Handover
from vipd.vrrp.driver.timers import PACE_BELOW, Timers
from vipd.vrrp.driver.wire import (
    AdvertCache,
    CallLater,
    IPAddress,
    OpenWire,
    VrrpStats,
    Wire,
    open_transport,
)


class VrrpElection(AgentEvents):
    """One VRID of one address family on one interface, behind the election port.

    ``vips``: the VIPs of this virtual router, all of one family (default: every VIP of
    ``cfg``, which must then be of one family). ``clock``, ``open_wire``, ``call_later``,
    ``claimwatch`` and ``probe`` are the seams the unit tests use (a fake clock and timers,
    an in-memory wire, no raw ARP socket). ``pace``: the Active's steady adverts from a
    thread of their own (``vrrp.pacer``); by default below 0.1 s adverts with the loop's
    own timers (not ``call_later``).
    """

    backend = "vrrp"

    def __init__(
        self,
        cfg: Config,
        pre: Preflight,
        *,
        vips: tuple[IPAddress, ...] | None = None,
        clock: Callable[[], float] = time.monotonic,
        open_wire: OpenWire = open_transport,
        call_later: CallLater | None = None,
        claimwatch: bool = True,
        probe: Callable[[str], bool] | None = None,
        pace: bool | None = None,
    ) -> None:
        self.cfg = cfg
        self.pre = pre
        self.log = vlog.get()
        self.clock = clock
        self.open_wire = open_wire
        self.want_claimwatch = claimwatch
        v = cfg.election.vrrp
        self.vrrp = v
        self._vips = tuple(vips if vips is not None else cfg.vips)
        if len({ip.version for ip in self._vips}) != 1:
            raise ValueError(f"one virtual router is one address family, not {self._vips}")
        self.family = self._vips[0].version
        self.source: IPAddress = pre.source_for(self.family)
        self.unicast_peers = pre.peers_for(self.family)
        self.ifname = pre.link.name
        self.ifindex = pre.link.index
        self.stats = VrrpStats()
        auth = (v.auth_pass or "").encode()
        auth_type = 1 if v.auth_pass else 0
        auth_data = auth.ljust(8, b"\x00")[:8] if auth else b""
        self.expect = packet.Expectation(
            version=v.version,
            vrid=v.vrid,
            addresses=frozenset(self._vips),
            auth_type=auth_type,
            auth_data=auth_data,
            interval_cs=v.advert_interval_cs if v.version == 2 else None,
            unicast_peers=frozenset(self.unicast_peers),
        )
        if auth_type:
            # The password compare's module (vipd.vrrp.packet imports it where it compares),
            # loaded at start rather than on the first advert received.
            importlib.import_module("hmac")
        advert_auth = None
        if v.auth_hmac is not None:
            # Only here: the module pulls in hashlib, which a node without auth does not need.
            from vipd.vrrp.driver.signing import AdvertAuth

            advert_auth = AdvertAuth(v, peers=len(self.unicast_peers))
        self.adverts = AdvertIO(
            self,
            AdvertCache(
                version=v.version,
                vrid=v.vrid,
                interval_cs=v.advert_interval_cs,
                addresses=self._vips,
                auth_type=auth_type,
                auth_data=auth_data,
                message_only=v.checksum == "message-only",
            ),
            advert_auth,
        )
        self.machine = state.Machine(
            state.Params(
                version=v.version,
                priority=v.priority,
                advert_interval_cs=v.advert_interval_cs,
                primary_ip=self.source,
                preempt=v.preempt,
                preempt_delay=v.preempt_delay,
            )
        )
        if pace is None:
            pace = call_later is None and v.advert_interval < PACE_BELOW
        self.timers = Timers(self, clock, call_later, pace)
        self.follower = Follower(self)
        self.defence = ClaimDefence(self)
        # Asks a claimant's MAC whether it still has the VIP; False if no probe went out.
        self.probe = probe or self.defence.probe
        self._publish: Publish | None = None
        self.transport: Wire | None = None
        # election.vrrp.vmac: the macvlan and its send-only socket (the leader's adverts).
        self.vmac: VmacLink | None = None
        self.sender: Wire | None = None
        self.controller: Controller | None = None
        self.health: HealthChecker | None = None
        self.link_up = False
        self._track = track.NONE  # the tracked checks (vipd.track), pushed by the agent
        self._faulted = False  # a "fault" track is down: out of the election
        # Membership's admission rule holds this node out (vipd.membership.policy.Admission):
        # from the start when the unicast peers follow the cluster and this node is not in
        # the static list every node has, until the first read.
        self.held = bool(v.unicast_peers_from) and self.source not in v.unicast_peers
        self.handover: Handover | None = None  # stopping: the wait for the successor
        self._was_active = False
        # Stopping, after the successor's first advert: how long we wait for its claim. A
        # vipd successor claims a contest window later, keepalived announces at once (IPv6:
        # its next advert, an interval later). We stay quiet meanwhile: waiting costs nothing.
        self.claim_bound = v.advert_interval + claims.CLAIM_DEFER_MAX
        # The slowest possible successor is a priority-1 backup, Skew_Time(1) after our
        # priority-0 advert; one more interval covers a lost advert and scheduling.
        self.handover_bound = (
            state.skew_time(v.version, 1, v.advert_interval_cs) + v.advert_interval
        )
        self.observe = observe.Observer(self)

    # -- the election port: set-up -------------------------------------------------------

    @property
    def vips(self) -> tuple[IPAddress, ...]:
        return self._vips

    @property
    def health_peers(self) -> list[IPAddress]:
        return []  # the local API server only; IPVS adds its backends itself

    def init_metrics(self) -> None:
        self.observe.init_metrics()

    @_locked
    def set_membership(self, peers: tuple[IPAddress, ...], held: bool, why: str) -> None:
        """Membership's unicast peers and admission (``vipd.vrrp.driver.members``)."""
        members.set_membership(self, peers, held, why)

    async def prepare(self) -> VipLink:
        """The VIP's link: the interface, or with ``vmac`` the macvlan made for it here."""
        return await links.prepare(self)

    def attach(self, host: Host) -> None:
        """The node joins the election at its unhealthy priority: a node whose API server
        is not up yet must not preempt a healthy leader, and a lone node still takes the VIP
        after its down interval (kubeadm init needs the VIP before its API server is up)."""
        self.controller = host.controller
        self.health = host.health
        self.link_up = host.link_up
        self.timers.offer_beat = host.beat
        h = self.cfg.health
        if self.health is None or h is None:
            return
        if h.weight > 0:
            with self.timers.lock:
                now = self.clock()
                self.apply(self.machine.set_priority(now, self._gated_priority(False)), now)
        vlog.event(
            self.log,
            logging.INFO,
            "health gating on" if h.weight > 0 else "health checks on, leadership not gated",
            url=self.health.url(h.local),
            priority_healthy=self.vrrp.priority,
            priority_unhealthy=self._gated_priority(False),
            interval_s=h.interval,
            timeout_s=h.timeout,
            rise=h.rise,
            fall=h.fall,
            tls="verify chain" if h.ca_file else "no verification",
        )

    async def run(self, publish: Publish, ready: Callable[[], None]) -> None:
        """Open the sockets, join the election (once the link is up) and run until
        cancelled; a bug in a loop callback ends it with that exception."""
        loop = asyncio.get_running_loop()
        self.timers.loop = loop
        self.observe.loop_started(loop)
        self.timers.fatal = fatal = loop.create_future()
        self._publish = publish
        try:
            links.open_sockets(self, loop)
            links.start_claimwatch(self, loop)
            if self.link_up and not self._faulted and not self.held:
                now = self.clock()
                self.apply(self.machine.start(now), now)
            elif self.held:
                vlog.event(self.log, logging.INFO, "membership: waiting for the first read")
            else:
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "interface is down: waiting for it before joining the election",
                    interface=self.ifname,
                )
            self.observe.log_started()
            ready()
            # Everything allocated so far lives as long as the process: move it out of the
            # collector's sight, so a collection never walks pyroute2's import-time objects
            # in the middle of a takeover.
            gc.collect()
            gc.freeze()
            # After the collection: a real-time process must not spend tens of ms in it.
            self.timers.realtime(self.log, self.vrrp.advert_interval)
            self.timers.start_pacer()  # after the real-time request: the thread inherits it
            await fatal
        finally:
            # The election is over for this run: no timer may fire into the stop path. The
            # socket stays open: resign() listens on it for the successor.
            self.timers.stop()
            self.defence.end()

    # -- the election port: events (the agent's: vipd.vrrp.driver.events) ------------------

    async def relink(self, pre: Preflight) -> VipLink:
        """The interface as it is now: fresh sockets on it (see ``links.relink``)."""
        return await links.relink(self, pre)

    # -- the election port: stop ---------------------------------------------------------

    async def resign(self, graceful: bool) -> None:
        """Priority 0 first so a backup starts its Skew timer; keep the VIP until it is heard.

        Make-before-break: a leader keeps the VIP bound (without announcing it again) until it
        hears the new leader's first advert and sees its claim, its announcement (IPv4) or
        its second advert, at most ``claim_bound`` after the first (a vipd successor claims a
        contest window after its first advert, keepalived announces just after it), or
        until no backup can still be coming (``handover_bound``). Clients keep being
        answered here until the ARP announcement moves them, so a stop costs them next to
        nothing instead of a whole Skew_Time. ``graceful`` makes no difference: a crashed
        leader hands over the same way. The waits run on the injected clock's timers.
        """
        with self.timers.lock:  # the pacer's last advert, if due now, goes before the 0
            self.timers.stop()
            resigned = self._resign_now()
        if resigned and self.handover is not None and self.link_up:
            await self.handover.wait(self.handover_bound, self.claim_bound)

    def _resign_now(self) -> bool:
        """The priority-0 advert and the step down; True if the advert went out."""
        self.follower.catch_up()
        self.follower.unfollow()  # the successor's adverts are waited for on the polled socket
        self._was_active = self.machine.state is state.State.ACTIVE
        if self.transport is None:
            return False
        resigned = False
        now = self.clock()
        for action in self.machine.shutdown(now):
            if isinstance(action, state.SendAdvert):
                self.handover = Handover(self.timers.later, self.clock, self.log)
                self.adverts.send(action.priority)
                resigned = True
            elif isinstance(action, state.BecomeBackup):
                vlog.event(self.log, logging.INFO, "resigned", reason=action.reason)
                self.observe.emit(action.reason, now)
        return resigned

    async def close(self) -> None:
        """Sockets, watches and the virtual MAC link (see ``links.close``)."""
        self.observe.close()
        self.timers.close()
        await links.close(self)

    def stopped_fields(self) -> dict[str, object]:
        return {
            "was_active": self._was_active,
            "adverts_sent": self.stats.adverts_sent,
            "adverts_received": self.stats.adverts_received,
            "invalid": dict(self.stats.invalid),
            "checksum_forms": dict(self.stats.checksum_forms),
        }

    # -- adverts -------------------------------------------------------------------------

    # -- the machine's actions -----------------------------------------------------------

    def apply(
        self, actions: list[state.Action], now: float, cause: IPAddress | None = None
    ) -> None:
        """``cause``: the source of the advert the actions answer. A re-announcement is
        charged to it (the machine's "contest over" one, from a timer, to the source it
        last answered) and held to that source's budget, as is its log line."""
        # The log lines wait until every action is out: an advert that follows a takeover's
        # announcement in the same call (after a priority-0 advert) is what stops the other
        # backups' skew timers, and a log write is the slowest thing here.
        lines: list[tuple[str, str]] = []
        claimant = cause if cause is not None else self.defence.contested_by
        held = self.controller is not None and self.controller.any_bound
        preempted: bool | None = None  # set on a step-down: for a higher-priority master?
        for action in actions:
            if isinstance(action, state.SendAdvert):
                self.adverts.send(action.priority)
            elif isinstance(action, state.BecomeActive | state.BecomeBackup):
                word = "active" if isinstance(action, state.BecomeActive) else "backup"
                self.stats.transitions[word] += 1
                self.observe.emit(action.reason, now)
                lines.append((word, action.reason))
                if isinstance(action, state.BecomeBackup):
                    preempted = state.reason_label(action.reason) == "preempted"
            elif isinstance(action, state.Announce):
                if claimant is not None and not self.defence.may_announce(claimant, now):
                    continue
                if self.controller is not None:
                    self.controller.announce()
                lines.append(("", action.reason))
            elif isinstance(action, state.ContestLost):
                # Not a role change: we never held the VIP (nothing to publish or undo).
                lines.append(("contest", action.reason))
        if preempted is not None:
            # The VIPs are removed by now (the agent converged on the transition).
            self.defence.stepped_down(now, preempted=preempted, held=held)
        for word, reason in lines:
            if word == "contest":
                vlog.event(self.log, logging.INFO, "release contest lost", reason=reason)
            elif word:
                self.observe.log_transition(word, reason)
            elif claimant is None:
                vlog.event(self.log, logging.INFO, "re-announcing", reason=reason)
            elif (suppressed := self.defence.may_log("re-announcing", claimant, now)) is not None:
                vlog.event(
                    self.log, logging.INFO, "re-announcing", reason=reason, suppressed=suppressed
                )
        self.follower.after_actions()
        self.timers.rearm()
        self.observe.master_changed()

    def publish(self, transition: Transition) -> None:
        if self._publish is not None:
            self._publish(transition)

    # -- observability -------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """/readyz: does this node take part in the election right now, and if not, why."""
        if self.transport is None or self.controller is None:
            return False, "starting: sockets not open yet"
        if not self.link_up:
            return False, f"interface {self.ifname} is down: not in the election"
        if self.held:
            return False, "membership: held out until the other nodes can hear this one"
        if self.machine.state is state.State.INITIALIZE:
            return False, "not in the election"
        if self.adverts.send_error is not None:
            return False, f"adverts cannot be sent: {self.adverts.send_error}"
        return True, "ready"

    @_locked
    def status(self, now: float) -> dict[str, Any]:
        """The VRRP part of /status (see vipd.endpoint.status for the shape)."""
        self.follower.catch_up()
        return self.observe.status(now)

    @property
    def transport_v6(self) -> bool:
        return isinstance(self.source, IPv6Address)
