"""The VRRP election backend: timers, the takeover path and link events for one VRID and
one address family (a virtual router, RFC 9568 §7: the agent runs one per family of the VIPs,
each advertising its family's VIPs from its family's source address).

What it is: the driver between the VRRP state machine (``vrrp.state``) and the wire
(``vrrp.transport``), behind the election port (``vipd.election``). It feeds the machine with
the clock and the adverts from the transport, executes the actions the machine returns in
order (send an advert, become active, step down, re-announce) and publishes each role change
as a `Transition` to the agent, which converges the host (``vipd.agent``,
``vipd.controller``). Link events from the agent (``on_link``) and health changes
(``on_health``: the gated priority, ``vipd.health.gate``) are the machine's events too.

The takeover path, in order: the master-down timer is armed ``TIMER_SLACK`` early on the loop
and finished precisely in ``_on_timer`` (waiting on the VRRP socket, so a better backup's
advert still stops it). With the old master presumed dead the machine answers ``SendAdvert``
then ``BecomeActive``: the advert leaves first (RFC 9568 §6.4.2, keepalived
``vrrp_state_goto_master``), then the agent binds the VIP and sends the first gratuitous ARP
in the same call (``Controller.set_leader``). Preempting a live master is make-before-break:
``BecomeActive`` (bind, gratuitous ARP) now, the advert ``preempt_lead`` later from the
machine's own timer, so the clients have moved before the old master steps down on it; an
Active answering a lower-priority master does the same (``Announce``, then the advert). A
vipd old master's claim watch waits ``CLAIM_SETTLE`` before defending against a foreign
claim, so it does not pull the clients back in between (docs/design/vrrp.md, "Order of
events on a move").

A Master's steady adverts (one advert, nothing else due) leave from the advert pacer's
thread (``vrrp.pacer``), which runs the machine's ``advert_tick`` under ``MACHINE_LOCK``, the
lock every loop callback of the driver holds too; anything else it hands back to the loop's
``_on_timer``. The loop wakes only for what arrives and for its heartbeat.

Resigning (SIGTERM, crash): a priority-0 advert (RFC 9568 §6.4.3), then the VIP stays bound
(quiet) until the successor's first advert is heard and its claim seen (its announcement, or
its second advert), or no backup can still come (``handover_bound``): make-before-break. The
successor, after a priority-0 advert, advertises first and binds, announces and advertises
again ``release_contest`` later, unless a better backup's advert reached it in between (its
down timer's wait on the VRRP socket reads it): backups of one priority fire together, and
only one of them binds.

Claims on the VIP while Active (IPv4, ``vipd.host.arpwatch.ClaimWatch``; RFC 5227 §2.4): a
peer's (next to a lower-priority advert of our VRID) is answered at once, a foreign host's
CLAIM_SETTLE later and at most once per DEFEND_INTERVAL; a claimant whose announcement may be
the clients' latest is asked by unicast ARP probes whether it still has the VIP, and once it
does not, the VIP is announced again (see CLAIMANT_PROBE_WAIT). With ``election.vrrp.vmac``
the VIP, the adverts and the gratuitous ARP use a macvlan with the virtual MAC (RFC 9568
§7.3), made in ``prepare``.

What it must not do: decide the election (``vrrp.state`` decides; the claim policy above
only ever announces a VIP this node already holds), decode packets
(``vrrp.packet``), touch the VIP (the agent's controller does), or let a malformed packet
from the wire raise into the loop: every decode error is counted by reason and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import importlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from vipd import log as vlog
from vipd import metrics, track
from vipd.aio import on_loop
from vipd.config import Config
from vipd.controller import Controller
from vipd.election import FOLLOWER, INIT, LEADER, Host, Publish, Transition, VipLink
from vipd.health.checker import HealthChecker
from vipd.health.tracker import BackendHealth
from vipd.health.tracker import Outcome as HealthOutcome
from vipd.host import sched
from vipd.host.arpwatch import ClaimWatch
from vipd.host.vmaclink import VmacLink
from vipd.preflight import Preflight
from vipd.vrrp import packet, state
from vipd.vrrp.pacer import DUE_SLACK, AdvertPacer
from vipd.vrrp.transport import Datagram, Transport

IPAddress = IPv4Address | IPv6Address

# How early a Backup's down timer is armed on the loop (see _rearm).
TIMER_SLACK = 0.002
# A scrape of the master's advert age waits this long for the loop to read the quiet socket.
AGE_WAIT = 0.2
# RFC 5227 §2.4 (b): defend the address at most once per DEFEND_INTERVAL seconds.
DEFEND_INTERVAL = 10.0
# A claim within this many advert intervals of a lower-priority advert of our own VRID is
# that peer's split brain, not a foreign host: answered at once (once per advert interval).
SPLIT_BRAIN_ADVERTS = 3
# A router sends its gratuitous ARP in the same moment as its advert (vipd just before it,
# keepalived just after): a claim this soon after a lower-priority advert of our VRID shows the
# claimant's MAC to be that peer's, remembered for its later claims. Tight, so that a foreign
# host's claim that merely falls inside the split-brain window (after a preemption, say) is
# not taken for a peer's. (A claim that such an advert follows: see _after_advert.)
PEER_CLAIM_WINDOW = 0.05
# A foreign claim is defended this long after it is seen, if we still lead then: a returning
# higher-priority node announces first and advertises a preempt_lead later
# (make-before-break), and our defence must not pull the clients back in between. Also how
# long after becoming active a claim is expected (the old master's last ARP replies).
CLAIM_SETTLE = 0.02
# A claimant announces in a burst (``garp.repeat`` frames ``garp.interval`` apart, 40 ms by
# default): the defence waits for CLAIM_SETTLE after its latest frame, so that ours is the
# announcement clients keep, but never more than this after the first.
CLAIM_DEFER_MAX = 0.25
# A claimant whose announcement may be the last one the clients heard (a peer's, answered at
# once while the rest of its burst went on; or one the RFC 5227 budget left unanswered) is
# followed: while we lead, its MAC is asked (a unicast ARP probe) whether it still has the
# VIP, first an advert interval (and CLAIM_SETTLE) after its claim, CLAIMANT_PROBES_AT_ADVERT
# times an interval apart, then at doubling gaps up to CLAIMANT_PROBE_MAX_GAP. A VRRP peer
# steps down on our next advert that reaches it and stops answering (under 30 % loss, 97 % of
# them within three), and the clients its announcement moved would time out on its MAC until
# their neighbour entries fail (seconds): no answer within CLAIMANT_PROBE_WAIT, and we
# announce (no conflict is left, so the budget is not charged). A reply on a LAN takes well
# under a millisecond; the socket is drained before the verdict, so a stalled loop does not
# miss one. One still answering DEFEND_INTERVAL after its claim is judged as a new claim.
CLAIMANT_PROBE_WAIT = 0.02
CLAIMANT_PROBES_AT_ADVERT = 3
CLAIMANT_PROBE_MAX_GAP = 1.0
# Peers remembered for the status document (multicast: anyone on our VRID could show up).
MAX_PEERS = 64
# Every VRRP driver of the process and its advert pacer take this lock for whatever reads or
# changes a machine, a socket or the VRRP counters: the pacer's thread and the loop's thread
# (and the two families' pacers, which count into the same metrics) never interleave.
# Re-entrant: a loop callback may call another entry point of the driver.
MACHINE_LOCK = threading.RLock()
P = ParamSpec("P")
R = TypeVar("R")
ROLE_OF_STATE = {
    state.State.ACTIVE: LEADER,
    state.State.BACKUP: FOLLOWER,
    state.State.INITIALIZE: INIT,
}


def _locked(
    method: Callable[Concatenate[VrrpElection, P], R],
) -> Callable[Concatenate[VrrpElection, P], R]:
    """The method under ``MACHINE_LOCK``: an entry point the loop calls outside
    ``_guarded`` (the agent's health, track, link and reload events, /status)."""

    def locked(self: VrrpElection, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


def _reraise(exc: Exception) -> None:
    """On the loop: a bug in the pacer's tick ends the run like one in a loop callback."""
    raise exc


class Wire(Protocol):
    """What the driver needs of ``vrrp.transport.Transport`` (a fake in the unit tests)."""

    @property
    def destinations(self) -> tuple[IPAddress, ...]: ...

    @property
    def can_follow(self) -> bool: ...

    def send(self, message: bytes, dst: IPAddress) -> None: ...
    def receive(self) -> Any: ...
    def follow(self, dgram: Datagram | None) -> None: ...
    def receive_quiet(self) -> list[tuple[float, Datagram]]: ...
    def wait_readable(self, timeout: float) -> bool: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


# (ifname, ifindex, source, unicast peers, receive) -> a transport.
OpenWire = Callable[[str, int, IPAddress, tuple[IPAddress, ...], bool], Wire]
CallLater = Callable[[float, Callable[[], None]], Timer]


def open_transport(
    ifname: str, ifindex: int, source: IPAddress, peers: tuple[IPAddress, ...], receive: bool
) -> Wire:
    return Transport(
        ifname=ifname, ifindex=ifindex, source=source, unicast_peers=peers, receive=receive
    )


@dataclass
class VrrpStats:
    adverts_sent: int = 0
    adverts_received: int = 0
    send_errors: int = 0
    invalid: Counter[str] = field(default_factory=Counter)
    checksum_forms: Counter[str] = field(default_factory=Counter)
    transitions: Counter[str] = field(default_factory=Counter)


@dataclass
class _ClaimantCheck:
    """A claimant of the VIP followed until it lets the VIP go (see CLAIMANT_PROBE_WAIT)."""

    ends: float  # DEFEND_INTERVAL after its claim: an answer then is judged as a new claim
    gap: float  # until the next probe
    timer: Timer | None = None
    probed_at: float | None = None  # the probe out, its answer awaited
    answered: bool = False
    asked: int = 0


class VrrpElection:
    """One VRID of one address family on one interface: transport + state machine, behind
    the election port.

    ``vips``: the VIPs of this virtual router, all of one family (default: every VIP of
    ``cfg``, which must then be of one family). ``clock``, ``open_wire``, ``call_later`` and
    ``claimwatch`` are the seams the unit tests use (a fake clock and timers, an in-memory
    wire, no raw ARP socket). ``pace``: the Active's steady adverts from a thread of their own
    (``vrrp.pacer``); by default when the loop's own timers are used (not ``call_later``).
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
        self._open_wire = open_wire
        self._call_later = call_later
        self._want_claimwatch = claimwatch
        # Asks a claimant's MAC whether it still has the VIP; False if no probe went out.
        self._probe = probe or self._probe_by_claimwatch
        self._want_pace = call_later is None if pace is None else pace
        self._lock = MACHINE_LOCK
        # Made on run(), used once the loop has run past its real-time request (the thread
        # inherits it): before that, and for anything but an Active's ticks, the loop's timer.
        self.pacer: AdvertPacer | None = None
        self._pacing_on = False
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
        self.auth_type = 1 if v.auth_pass else 0
        self.auth_data = auth.ljust(8, b"\x00")[:8] if auth else b""
        self.expect = packet.Expectation(
            version=v.version,
            vrid=v.vrid,
            addresses=frozenset(self._vips),
            auth_type=self.auth_type,
            auth_data=self.auth_data,
            interval_cs=v.advert_interval_cs if v.version == 2 else None,
            unicast_peers=frozenset(self.unicast_peers),
        )
        if self.auth_type:
            # The password compare's module (vipd.vrrp.packet imports it where it compares),
            # loaded at start rather than on the first advert received.
            importlib.import_module("hmac")
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
        self._encoded: dict[int, list[tuple[bytes, IPAddress]]] = {}
        self._timer: Timer | None = None
        self._timer_at = 0.0  # when _timer was set for (its lag is offered as a heartbeat)
        self._offer_beat: Callable[[float], None] | None = None
        self._fatal: asyncio.Future[None] | None = None
        # The loop of run(): asyncio.get_running_loop() checks the process id with a
        # getpid() system call, once per advert sent or heard if asked every time.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._publish: Publish | None = None
        self.transport: Wire | None = None
        # election.vrrp.vmac: the macvlan and its send-only socket (the leader's adverts).
        self.vmac: VmacLink | None = None
        self.sender: Wire | None = None
        self.controller: Controller | None = None
        self.health: HealthChecker | None = None
        self.claimwatches: list[ClaimWatch] = []  # IPv4: one per VIP
        self.link_up = False
        self._track = track.NONE  # the tracked checks (vipd.track), pushed by the agent
        self._faulted = False  # a "fault" track is down: out of the election
        self._defended_at: float | None = None
        self._handover: asyncio.Event | None = None
        # Stopping: the successor claimed the VIP (another MAC announced it, or a router's
        # second advert), and which of the two showed it first.
        self._announced: asyncio.Event | None = None
        self._claimed_by: str | None = None
        self._successor: IPAddress | None = None
        self._successor_rank = (0, 0)  # (priority, address): the best advert heard stopping
        self._heard_stopping: Counter[IPAddress] = Counter()  # adverts per router, stopping
        # Stopping, after the successor's first advert: how long we wait for its claim (its
        # announcement or second advert). A vipd successor claims a contest window later,
        # keepalived announces at once (IPv6: its next advert, an interval later); a busy
        # machine may deschedule either. We stay quiet meanwhile, so waiting costs nothing.
        self.claim_bound = v.advert_interval + CLAIM_DEFER_MAX
        self._was_active = False
        # The slowest possible successor is a priority-1 backup, Skew_Time(1) after our
        # priority-0 advert; one more interval covers a lost advert and scheduling.
        self.handover_bound = (
            state.skew_time(v.version, 1, v.advert_interval_cs) + v.advert_interval
        )
        # Observability (vipd.metrics, /status): who we heard, and what went wrong lately.
        self.peers: dict[IPAddress, tuple[int, float]] = {}  # address -> (priority, seen at)
        self._claimed_at: float | None = None  # last advert claiming the VIP while we held it
        self._vrrp_claim_at: float | None = None  # last lower-priority advert while we led
        self._split_answered_at: float | None = None  # last answer to a split-brain claim
        self._defence: Timer | None = None  # a foreign claim's defence, CLAIM_SETTLE later
        self._defence_first = 0.0  # when the first claim of the pending defence came
        # MACs that claimed the VIP next to a lower-priority advert of our VRID: the other
        # side of a split brain. Their later claims are answered as such, although under
        # VRRP loss the advert that would show it again may never reach us.
        self._peer_macs: dict[str, float] = {}  # MAC -> when it was last shown a peer's
        self._foreign_seen: tuple[float, str] | None = None  # the last unexplained claim
        # The last foreign defence: (claimant MAC, the budget before it), refunded if that
        # MAC turns out to be a peer's (its advert came just after its announcement).
        self._charged: tuple[str, float | None] | None = None
        # Claimants whose announcement may be the clients' latest, asked whether they still
        # have the VIP (by MAC).
        self._claimants: dict[str, _ClaimantCheck] = {}
        self._claims = 0
        self._master_advert_at: float | None = None  # the followed master's last advert
        # Quiet following (vrrp.transport): the steady master's advert that the wire keeps off
        # the polled socket, and the receive time of the last advert handled (a copy both
        # sockets took while the filters changed is older, and dropped).
        self._followed: Datagram | None = None
        self._followed_as: tuple[packet.Advert, str] | None = None  # decoded, checksum form
        self._last_rx_at = float("-inf")
        self._quiet = True  # False once following failed on this host (logged)
        self._follow_logged = False  # the first following's filter kind was logged
        self._scrape_name = f"vrrp-ipv{self.family}-vrid{v.vrid}"  # its before_expose hook
        self._send_error: str | None = None  # the last advert send failure, until one succeeds
        self._master_seen: tuple[IPAddress | None, int | None, int] = (None, None, -1)
        self._log_send_error = vlog.Sparse(self.log, "advert send failed")
        self._log_dropped = vlog.Sparse(self.log, "advert dropped", every=10000)
        self._log_claim = vlog.Sparse(self.log, "another node claims the VIP while we hold it")

    # -- the election port: set-up ---------------------------------------------------------

    @property
    def vips(self) -> tuple[IPAddress, ...]:
        return self._vips

    @property
    def health_peers(self) -> list[IPAddress]:
        return []  # the local API server only; IPVS adds its backends itself

    def init_metrics(self) -> None:
        metrics.init_vrrp(
            node=self.cfg.node,
            vips=[str(v) for v in self._vips],
            interface=self.ifname,
            priority=self.vrrp.priority,
        )
        for vip in self._vips:
            metrics.DUPLICATE_CLAIM.labels(vip=str(vip)).set_function(self._duplicate_claim)
            metrics.VRRP_MASTER_ADVERT_AGE.set_function(self._master_advert_age, vip=str(vip))
        # The counters of the copies queued on the quiet socket are brought up to date first.
        metrics.REGISTRY.before_expose(self._scrape_name, self._scraped)

    async def prepare(self) -> VipLink:
        """The VIP's link: the interface, or with ``vmac`` the macvlan made for it here."""
        if not self.vrrp.vmac or self.family != 4:
            return VipLink(self.ifname, self.ifindex, self.pre.link.mac)
        return await self._make_vmac()

    async def _make_vmac(self) -> VipLink:
        self.vmac = VmacLink(self.ifname, self.ifindex, self.vrrp.vrid)
        # In a thread: pyroute2's IPRoute runs an asyncio loop of its own, which cannot start
        # inside this (running) one. Start-up only.
        index = await asyncio.to_thread(self.vmac.start)
        vlog.event(
            self.log,
            logging.INFO,
            "virtual MAC on",
            link=self.vmac.name,
            mac=self.vmac.mac,
            parent=self.ifname,
            reused_leftover=self.vmac.reused,
        )
        return VipLink(self.vmac.name, index, self.vmac.mac)

    def attach(self, host: Host) -> None:
        """The node joins the election at its unhealthy priority: a node whose API server
        is not up yet must not preempt a healthy leader, and a lone node still takes the VIP
        after its down interval (kubeadm init needs the VIP before its API server is up)."""
        self.controller = host.controller
        self.health = host.health
        self.link_up = host.link_up
        self._offer_beat = host.beat
        h = self.cfg.health
        if self.health is None or h is None:
            return
        if h.weight > 0:
            with self._lock:
                now = self.clock()
                self._apply(self.machine.set_priority(now, self._gated_priority(False)), now)
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
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._fatal = loop.create_future()
        self._publish = publish
        try:
            self._open_sockets(loop)
            self._start_claimwatch(loop)
            if self.link_up and not self._faulted:
                now = self.clock()
                self._apply(self.machine.start(now), now)
            else:
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "interface is down: waiting for it before joining the election",
                    interface=self.ifname,
                )
            vlog.event(
                self.log,
                logging.INFO,
                "vrrp started",
                node=self.cfg.node,
                vip=",".join(map(str, self._vips)),
                interface=self.ifname,
                source=self.source,
                vrid=self.vrrp.vrid,
                version=self.vrrp.version,
                priority=self.vrrp.priority,
                advert_interval_s=self.vrrp.advert_interval,
                mode="unicast" if self.unicast_peers else "multicast",
            )
            ready()
            # Everything allocated so far lives as long as the process: move it out of the
            # collector's sight, so a collection never walks pyroute2's import-time objects
            # in the middle of a takeover.
            gc.collect()
            gc.freeze()
            # After the collection: a real-time process must not spend tens of ms in it.
            self._realtime()
            if self._want_pace:
                # After the real-time request: the pacer's thread inherits it.
                pacer = AdvertPacer(self._paced_tick, self._lock, clock=self.clock)
                pacer.start()  # now, not on a takeover's path
                with self._lock:
                    self.pacer = pacer
                    self._pacing_on = True
                    self._rearm()
            await self._fatal
        finally:
            # The election is over for this run: no timer may fire into the stop path. The
            # socket stays open: resign() listens on it for the successor.
            with self._lock:
                self._pacing_on = False
                self._cancel_timer()
            if self._defence is not None:
                self._defence.cancel()
                self._defence = None
            self._end_claimant_checks()

    # -- the election port: events ---------------------------------------------------------

    @_locked
    def on_health(self, addr: IPAddress, health: BackendHealth) -> None:
        h = self.cfg.health
        if h is None or addr != h.local or h.weight == 0:
            return
        self._catch_up()
        now = self.clock()
        priority = self._gated_priority(health.healthy)
        old = self.machine.priority
        vlog.event(
            self.log,
            logging.INFO,
            "local API server healthy: priority restored"
            if health.healthy
            else "local API server unhealthy: priority lowered",
            priority_from=old,
            priority_to=priority,
            state=self.machine.state.value,
            error=health.error,
        )
        self._apply(self.machine.set_priority(now, priority), now)

    @_locked
    def on_track(self, adj: track.Adjustment) -> None:
        """Tracked checks changed: the priority (like health), or with a ``fault`` track down
        keepalived's FAULT: out of the election (a leader resigns with a priority-0 advert
        and releases the VIP) until it is up again."""
        self._track = adj
        self._catch_up()
        now = self.clock()
        self._apply(self.machine.set_priority(now, self._current_priority()), now)
        if adj.fault and not self._faulted:
            self._faulted = True
            vlog.event(
                self.log, logging.WARNING, "track fault: leaving the election", tracks=adj.down
            )
            self._apply(self.machine.shutdown(now), now)
        elif not adj.fault and self._faulted:
            self._faulted = False
            vlog.event(self.log, logging.INFO, "track fault cleared: joining the election")
            if self.link_up and self._publish is not None:
                self._apply(self.machine.start(now), now)

    def _current_priority(self) -> int:
        h = self.cfg.health
        healthy = h is None or h.weight == 0 or self.health is None or self.health.local_healthy()
        return self._gated_priority(healthy)

    @_locked
    def reconfigure(self, cfg: Config) -> None:
        """A reload's live keys (``vipd.reload.LIVE``): priority, preemption and its delay,
        the health weight. The new priority goes through the machine like a health change
        (a leader sends one advert with it; a backup moves its down timer), so a reload by
        itself neither releases nor re-announces the VIP."""
        v = cfg.election.vrrp
        self.cfg, self.vrrp = cfg, v
        self.machine.params = dataclasses.replace(
            self.machine.params,
            priority=v.priority,
            preempt=v.preempt,
            preempt_delay=v.preempt_delay,
        )
        self._catch_up()
        now = self.clock()
        self._apply(self.machine.set_priority(now, self._current_priority()), now)

    def on_check(self, addr: IPAddress, outcome: HealthOutcome) -> None:
        """VRRP goes by health changes only (``on_health``)."""

    async def relink(self, pre: Preflight) -> VipLink:
        """The interface as it is now: fresh sockets on it (see ``vipd.election``).

        Re-created (another index or MAC): the agent took the node out of the election
        first (``on_link(False)``); the VRRP socket (bound to the new index, the multicast
        membership joined there), the claim watch (the new MAC is ours) and, with ``vmac``,
        the macvlan on the new parent (it went with the old one) are made again. A new
        source address on the same interface: the node may be leading, so the VRRP socket
        is reopened with it in this same call, no advert is missed, and the machine takes
        it as its own address (the tie-break of RFC 9568 §6.4.3 and the own-advert check)."""
        loop = asyncio.get_running_loop()
        with self._lock:  # the pacer's tick finds the old sockets or none (then: the loop)
            new_link = (pre.link.index, pre.link.mac) != (self.ifindex, self.pre.link.mac)
            self.pre = pre
            self.ifname, self.ifindex = pre.link.name, pre.link.index
            self.source = pre.source_for(self.family)  # this virtual router's family
            self.unicast_peers = pre.peers_for(self.family)
            params = dataclasses.replace(self.machine.params, primary_ip=self.source)
            self.machine.params = params
            self._encoded.clear()  # the IPv4 checksum covers the source address
            started = self._fatal is not None
            self._close_sockets(loop)
            if new_link:
                self._close_claimwatch(loop)
        link = VipLink(self.ifname, self.ifindex, pre.link.mac)
        vmac = self.vmac
        if vmac is not None and (vmac.parent_index != self.ifindex or vmac.index is None):
            # The macvlan went with its old parent (or an earlier try did not make it); this
            # also restores the sysctls it had set on the parent.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(vmac.stop)
            link = await self._make_vmac()
        elif vmac is not None and vmac.index is not None:
            link = VipLink(vmac.name, vmac.index, vmac.mac)
        if started:
            with self._lock:
                self._open_sockets(loop)
                if not self.claimwatches:
                    self._start_claimwatch(loop)
        vlog.event(
            self.log,
            logging.INFO,
            "vrrp: sockets reopened",
            interface=self.ifname,
            index=self.ifindex,
            source=self.source,
            vip_link=link.name,
            family=f"IPv{self.family}",
            multicast="no (unicast)" if self.unicast_peers else "joined",
        )
        return link

    def _open_sockets(self, loop: asyncio.AbstractEventLoop) -> None:
        """The VRRP socket on the interface (and the virtual MAC's send-only one)."""
        self.transport = self._open_wire(
            self.ifname, self.ifindex, self.source, self.unicast_peers, True
        )
        self._followed = None
        if self.vmac is not None:
            assert self.vmac.index is not None
            self.sender = self._open_wire(self.vmac.name, self.vmac.index, self.source, (), False)
        loop.add_reader(self.transport.fileno(), self._guarded, self._on_readable)

    def _close_sockets(self, loop: asyncio.AbstractEventLoop) -> None:
        transport, sender = self.transport, self.sender
        self.transport = self.sender = None
        if transport is not None:
            loop.remove_reader(transport.fileno())
            transport.close()
        if sender is not None:
            sender.close()

    def _close_claimwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        watches, self.claimwatches = self.claimwatches, []
        for claimwatch in watches:
            loop.remove_reader(claimwatch.fileno())
            claimwatch.close()

    @_locked
    def on_link(self, up: bool) -> None:
        """Interface down is the machine's ``link_down``, up its ``link_up`` (RFC 9568 §6.4)."""
        self.link_up = up
        self._catch_up()
        now = self.clock()
        if up:
            vlog.event(
                self.log,
                logging.INFO,
                "interface is up: joining the election",
                interface=self.ifname,
            )
            if not self._faulted:
                self._apply(self.machine.link_up(now), now)
        else:
            vlog.event(
                self.log,
                logging.WARNING,
                "interface is down: leaving the election and releasing the VIP",
                interface=self.ifname,
                state=self.machine.state.value,
            )
            self._apply(self.machine.link_down(now), now)

    # -- the election port: stop -----------------------------------------------------------

    async def resign(self, graceful: bool) -> None:
        """Priority 0 first so a backup starts its Skew timer; keep the VIP until it is heard.

        Make-before-break: a leader keeps the VIP bound (without announcing it again) until it
        hears the new leader's first advert and sees its claim, its announcement (IPv4) or
        its second advert, at most ``claim_bound`` after the first (a vipd successor claims a
        contest window after its first advert, keepalived announces just after it), or
        until no backup can still be coming (``handover_bound``).
        Clients keep being answered here until the ARP announcement moves them, so a stop costs them
        next to nothing instead of a whole Skew_Time. ``graceful`` makes no difference: a
        crashed leader hands over the same way.
        """
        with self._lock:  # the pacer's last advert, if due now, goes before the priority 0
            self._pacing_on = False
            self._cancel_timer()
            resigned = self._resign_now()
        if not (resigned and self._handover is not None and self.link_up):
            return
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._handover.wait(), self.handover_bound)
        except TimeoutError:
            vlog.event(
                self.log,
                logging.INFO,
                "no new leader heard: releasing the VIP",
                waited_s=self.handover_bound,
            )
            return
        # A vipd successor advertises first, and when its contest window has passed
        # (vrrp.state, Params.release_contest) binds, announces and advertises again;
        # keepalived announces right after its advert (vrrp_state_goto_master). The clients
        # move on the announcement: wait for it, or for the successor's second advert where
        # announcements are not watched (IPv6), bounded, before letting go.
        claimed = None
        if self._announced is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._announced.wait(), self.claim_bound)
            claimed = self._claimed_by or "not seen"
        vlog.event(
            self.log,
            logging.INFO,
            "new leader heard: releasing the VIP",
            after_s=round(time.monotonic() - started, 6),
            leader=self._successor,
            claim_seen=claimed,
        )

    def _resign_now(self) -> bool:
        """The priority-0 advert and the step down; True if the advert went out."""
        self._catch_up()
        self._unfollow()  # the successor's adverts are waited for on the polled socket
        self._was_active = self.machine.state is state.State.ACTIVE
        if self.transport is None:
            return False
        resigned = False
        now = self.clock()
        for action in self.machine.shutdown(now):
            if isinstance(action, state.SendAdvert):
                self._handover = asyncio.Event()
                self._announced = asyncio.Event()
                self._send_advert(action.priority)
                resigned = True
            elif isinstance(action, state.BecomeBackup):
                vlog.event(self.log, logging.INFO, "resigned", reason=action.reason)
                self._emit(action.reason, now)
        return resigned

    async def close(self) -> None:
        """Sockets, watches and the virtual MAC link; each failure is raised after the rest
        are closed (the agent logs and counts it)."""
        loop = asyncio.get_running_loop()
        errors: list[BaseException] = []
        metrics.REGISTRY.forget_before_expose(self._scrape_name, self._scraped)
        if self.pacer is not None:
            self.pacer.close()  # not with the lock held: its thread may be waiting for it

        def attempt(fn: Callable[[], object]) -> None:
            try:
                fn()
            except Exception as exc:
                errors.append(exc)

        transport = self.transport
        for claimwatch in self.claimwatches:
            attempt(lambda cw=claimwatch: loop.remove_reader(cw.fileno()))  # type: ignore[misc]
            attempt(claimwatch.close)
        if transport is not None:
            attempt(lambda: loop.remove_reader(transport.fileno()))
            attempt(transport.close)
        if self.sender is not None:
            attempt(self.sender.close)
        if self.vmac is not None:
            try:
                await asyncio.to_thread(self.vmac.stop)
            except Exception as exc:
                vlog.event(
                    self.log,
                    logging.ERROR,
                    "could not remove the virtual MAC link",
                    link=self.vmac.name,
                    error=exc,
                )
                errors.append(exc)
        if errors:
            raise errors[0]

    def stopped_fields(self) -> dict[str, object]:
        return {
            "was_active": self._was_active,
            "adverts_sent": self.stats.adverts_sent,
            "adverts_received": self.stats.adverts_received,
            "invalid": dict(self.stats.invalid),
            "checksum_forms": dict(self.stats.checksum_forms),
        }

    # -- adverts -------------------------------------------------------------------------

    def _messages(self, priority: int) -> list[tuple[bytes, IPAddress]]:
        """Encoded adverts per destination; they only change with the priority, so cache."""
        cached = self._encoded.get(priority)
        if cached is None:
            assert self.transport is not None
            advert = packet.Advert(
                version=self.vrrp.version,
                vrid=self.vrrp.vrid,
                priority=priority,
                interval_cs=self.vrrp.advert_interval_cs,
                addresses=self._vips,
                auth_type=self.auth_type,
                auth_data=self.auth_data,
            )
            message_only = self.vrrp.checksum == "message-only"
            cached = [
                (packet.encode(advert, self.source, dst, message_only=message_only), dst)
                for dst in self.transport.destinations
            ]
            self._encoded[priority] = cached
        return cached

    def _send_advert(self, priority: int) -> None:
        assert self.transport is not None
        # Only a leader (or a leader resigning) sends adverts, so with a virtual MAC they all
        # leave from it (RFC 9568 §7.3: the Active router's source MAC is the virtual MAC).
        sender = self.sender or self.transport
        for message, dst in self._messages(priority):
            try:
                sender.send(message, dst)
                self.stats.adverts_sent += 1
                metrics.VRRP_ADVERTS_SENT.inc()
                self._send_error = None
            except OSError as exc:
                # A down link must not stop the loop: the next tick retries.
                self.stats.send_errors += 1
                metrics.VRRP_SEND_ERRORS.inc()
                self._send_error = f"{exc} (to {dst})"
                self._log_send_error(dst=dst, error=exc)

    # -- the machine's actions -----------------------------------------------------------

    def _apply(self, actions: list[state.Action], now: float) -> None:
        # The log lines wait until every action is out: an advert that follows a takeover's
        # announcement in the same call (after a priority-0 advert) is what stops the other
        # backups' skew timers, and a log write is the slowest thing here.
        lines: list[tuple[str, str]] = []
        for action in actions:
            if isinstance(action, state.SendAdvert):
                self._send_advert(action.priority)
            elif isinstance(action, state.BecomeActive | state.BecomeBackup):
                word = "active" if isinstance(action, state.BecomeActive) else "backup"
                self.stats.transitions[word] += 1
                self._emit(action.reason, now)
                lines.append((word, action.reason))
            elif isinstance(action, state.Announce):
                if self.controller is not None:
                    self.controller.announce()
                lines.append(("", action.reason))
            elif isinstance(action, state.ContestLost):
                # Not a role change: we never held the VIP (nothing to publish or undo).
                lines.append(("contest", action.reason))
        for word, reason in lines:
            if word == "contest":
                vlog.event(self.log, logging.INFO, "release contest lost", reason=reason)
            elif word:
                self._log_transition(word, reason)
            else:
                vlog.event(self.log, logging.INFO, "re-announcing", reason=reason)
        m = self.machine
        followed = self._followed_as
        if self._followed is not None and (
            followed is None or not m.follows_quietly(self._followed.src, followed[0].priority)
        ):
            # Left Backup, or the copies would now do more than restart the down timer (our
            # priority rose above the master's, a release contest): every advert is read.
            # First: where the timer goes depends on it.
            self._unfollow()
        self._rearm()
        if (m.master_ip, m.master_priority, m.priority) != self._master_seen:
            # Cheap, but not per advert: only when the master or our priority changed.
            self._master_seen = (m.master_ip, m.master_priority, m.priority)
            for vip in self._vips:
                metrics.set_master(m.master_ip, m.master_priority, str(vip))
                metrics.VRRP_PRIORITY.labels(vip=str(vip)).set(m.priority)

    def _emit(self, reason: str, at: float) -> None:
        """Publish the machine's new role with the core's reason label, then the VRRP-only
        metrics of a role change (after the VIP was bound/removed and announced)."""
        role = ROLE_OF_STATE[self.machine.state]
        if self._publish is not None:
            self._publish(Transition(role, state.reason_label(reason), reason, at))
        for vip in self._vips:
            metrics.VRRP_PRIORITY.labels(vip=str(vip)).set(self.machine.priority)
        if role == LEADER and self._master_advert_at is not None:
            since = self.clock() - self._master_advert_at
            metrics.TAKEOVER_SINCE_ADVERT.observe(max(0.0, since))
        if role != FOLLOWER:
            self._master_advert_at = None

    def _log_transition(self, word: str, reason: str) -> None:
        m = self.machine
        vlog.event(
            self.log,
            logging.INFO,
            f"became {word}",
            vrid=self.vrrp.vrid,
            family=f"IPv{self.family}",
            reason=reason,
            priority=m.priority,
            master=m.master_ip,
            master_priority=m.master_priority,
            master_adver_interval_s=m.master_adver_interval_cs / 100,
            master_down_interval_s=m.mdi,
        )

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.pacer is not None:
            self.pacer.halt()

    def _rearm(self) -> None:
        deadline = self.machine.deadline
        if (
            deadline is not None
            and self._pacing_on
            and self.pacer is not None
            and self.machine.advert_only
        ):
            # The Active's adverts: from the pacer's thread, the loop sleeps (vrrp.pacer).
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.pacer.pace(deadline)
            return
        self._cancel_timer()
        if deadline is None:
            return
        # The machine's clock is time.monotonic(), not loop.time(): uvloop's clock has
        # millisecond resolution and is cached per loop iteration. A Backup's down timer
        # is the takeover itself, so it is armed a little early and finished precisely
        # in _on_timer; the Active's advert timer needs no such care.
        early = TIMER_SLACK if self.machine.state is state.State.BACKUP else 0.0
        now = self.clock()
        delay = max(0.0, deadline - now - early)
        self._timer_at = now + delay
        self._timer = self._later(delay, self._on_timer)

    def _later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """``fn`` on the loop ``delay`` seconds from now (the fake timers in the unit tests)."""
        if self._call_later is not None:
            return self._call_later(delay, lambda: self._guarded(fn))
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(delay, self._guarded, fn)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Loop callbacks run through here so that a bug ends the run instead of vanishing,
        and under the lock the pacer's thread takes for its tick."""
        try:
            with self._lock:
                fn(*args)
        except Exception as exc:
            if self._fatal is not None and not self._fatal.done():
                self._fatal.set_exception(exc)
            else:
                raise

    def _on_timer(self) -> None:
        self._timer = None
        lag = self.clock() - self._timer_at
        try:
            self._timer_due()
        finally:
            # After the advert or the takeover, not before: the heartbeat can wait.
            if self._offer_beat is not None:
                self._offer_beat(lag)

    def _timer_due(self) -> None:
        m = self.machine
        if m.state is state.State.BACKUP and self._catch_up():
            # The followed master's adverts since the last look, each at its receive time:
            # the down timer runs from the last of them, as if each had woken us.
            deadline, now = m.deadline, self.clock()
            if deadline is None or deadline - now > TIMER_SLACK:
                return  # they re-armed the timer
            self._cancel_timer()  # this callback finishes the takeover
        deadline = m.deadline
        now = self.clock()
        if deadline is not None and m.state is state.State.ACTIVE:
            if 0 < deadline - now <= TIMER_SLACK:
                # The loop's timers have millisecond grain and fire up to that early; an
                # advert a fraction of a millisecond early is due (waiting for the exact
                # instant would cost a second wake-up per tick, and gains the backups
                # nothing: their down timer is three intervals and a skew).
                now = deadline
            if now - deadline <= m.advert_interval:
                priority = m.advert_tick(now)
                if priority is not None:
                    # The steady tick: one advert, the timer again; nothing else changed,
                    # so none of _apply's bookkeeping is due.
                    self._send_advert(priority)
                    self._rearm()
                    return
        late = deadline is not None and (
            now - deadline > m.advert_interval
            if m.state is state.State.ACTIVE
            else m.state is state.State.BACKUP and now >= deadline
        )
        if late and self._advert_pending(0.0):
            # Woken more than an interval late (SIGSTOP, a frozen VM): what arrived while we
            # slept comes first. Another router that took over meanwhile is heard as a
            # lower-priority advert, which we answer by announcing before we advertise; the
            # overdue advert sent first would make it step down while the clients still
            # point at its MAC (break-before-make). Read once: a tick still due after it
            # goes on below, so a flood of datagrams cannot keep the advert back. A Backup
            # whose down timer fired late (past the slack below) reads first for the same
            # reason: a better backup's advert that arrived in time is waiting there, and
            # taking over without it would put the VIP on a second node.
            self._on_readable()
            deadline, now = self.machine.deadline, self.clock()
            if deadline is None or deadline > now:
                return  # the datagrams moved the deadline: the timer they armed decides
        if deadline is not None and 0 < deadline - now <= TIMER_SLACK:
            # At most TIMER_SLACK, once per takeover: waiting here beats a millisecond-grained
            # loop timer that would fire up to a millisecond late. Wait on the VRRP socket,
            # not a plain sleep: at 0.01 s adverts two backups' Skew_Times differ by less
            # than the slack (2 ms between priorities 150 and 100), so the better backup's
            # first advert arrives inside this wait and must stop our takeover.
            if self._advert_pending(deadline - now):
                self._on_readable()
                if self._timer is None:  # only garbage arrived: nothing re-armed us
                    self._rearm()
                return
            now = self.clock()
        self._apply(self.machine.on_timer(now), now)

    def _paced_tick(self, due: float) -> float | None:
        """The pacer's tick (its thread, the lock held): the Active's steady advert, as the
        loop's ``_timer_due`` sends it; the next due time, or None when the loop takes over.

        Anything but a steady advert goes to the loop's ``_on_timer``, which decides as it
        always does: a tick woken more than an interval late (SIGSTOP, a frozen VM) reads the
        socket before it advertises, a contest's end announces, and without a socket (a
        relink in progress) nothing can be sent from here."""
        try:
            m = self.machine
            deadline = m.deadline
            if not self._pacing_on or deadline is None or m.state is not state.State.ACTIVE:
                return None
            now = self.clock()
            if deadline - now > DUE_SLACK:
                return deadline  # the loop moved it later meanwhile
            if now - deadline <= m.advert_interval and self.transport is not None:
                priority = m.advert_tick(max(now, deadline))
                if priority is not None:
                    self._send_advert(priority)
                    return m.deadline
            self._timer_at = now  # the loop's lag is then the hand-over's
            self._to_loop(self._on_timer)
            return None
        except Exception as exc:
            self._to_loop(functools.partial(_reraise, exc))
            return None

    def _to_loop(self, fn: Callable[[], None]) -> None:
        """``fn`` on the loop's thread, soon, through ``_guarded``."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._guarded, fn)

    def _advert_pending(self, timeout: float) -> bool:
        """Block up to ``timeout`` (≤ TIMER_SLACK) for the VRRP socket; True if readable."""
        if self.transport is None:
            time.sleep(timeout)
            return False
        return self.transport.wait_readable(timeout)

    def _on_readable(self) -> None:
        assert self.transport is not None
        now = self.clock()
        # The quiet socket's adverts arrived before what woke us: they go first.
        self._catch_up()
        for item in self.transport.receive():
            if isinstance(item, packet.DecodeError):
                self.stats.invalid[item.reason] += 1
                metrics.VRRP_INVALID.labels(reason=item.reason).inc()
                continue
            self._on_datagram(item, now)

    def _on_datagram(self, dgram: Datagram, now: float) -> None:
        try:
            advert, form = packet.decode(
                dgram.message, dgram.src, dgram.dst, verify_checksum=not self.transport_v6
            )
            packet.check(advert, src=dgram.src, dst=dgram.dst, ttl=dgram.ttl, expect=self.expect)
        except packet.DecodeError as err:
            self._dropped(err, dgram.src)
            return
        self.stats.adverts_received += 1
        self.stats.checksum_forms[form] += 1
        metrics.VRRP_ADVERTS_RECEIVED.inc()
        self._saw_peer(dgram.src, now, advert.priority)
        if self._handover is not None:
            # Stopping: we only wait for a successor, the election is over for us. Backups
            # of one priority advertise together and the best-ranked of them binds (the
            # release contest, vrrp.state): that one is named.
            rank = (advert.priority, int(dgram.src))
            if advert.priority > 0:
                if rank > self._successor_rank:
                    self._successor, self._successor_rank = dgram.src, rank
                    self._handover.set()
                self._heard_stopping[dgram.src] += 1
                if self._heard_stopping[dgram.src] >= 2 and self._announced is not None:
                    # Its second advert: a vipd successor sends it right after its bind and
                    # announcement; keepalived's next one is its own adverts' cadence.
                    self._claimed_by = self._claimed_by or "advert"
                    self._announced.set()
            return
        self._last_rx_at = max(self._last_rx_at, now)
        m = self.machine
        self._apply(m.on_advert(now, dgram.src, advert.priority, advert.interval_cs), now)
        self._after_advert(dgram.src, now, advert.priority)
        if (
            self._quiet
            and m.state is state.State.BACKUP
            and m.master_ip == dgram.src
            and m.last_advert_at == now
            and m.follows_quietly(dgram.src, advert.priority)
            and dgram != self._followed
        ):
            # The master's advert restarted our down timer: its next ones, while unchanged,
            # need not wake us (vrrp.transport, "Quiet following").
            self._follow(dgram, advert, form)

    # -- quiet following (vrrp.transport) --------------------------------------------------

    def _follow(self, dgram: Datagram, advert: packet.Advert, form: str) -> None:
        t = self.transport
        if t is None or not t.can_follow:
            return
        first = not self._follow_logged
        try:
            t.follow(dgram)
            self._followed = dgram
            self._followed_as = (advert, form)
            if first:
                self._follow_logged = True
                vlog.event(self.log, logging.INFO, "following the master quietly", filter="classic")
        except OSError as exc:
            # Not fatal: every advert then wakes us, as without following.
            self._quiet = False
            self._followed = None
            vlog.event(
                self.log,
                logging.WARNING,
                "quiet following unavailable: every advert is read as it comes",
                error=exc,
            )
            with contextlib.suppress(OSError):
                t.follow(None)

    def _unfollow(self) -> None:
        if self._followed is None or self.transport is None:
            return
        self._followed = None
        try:
            self.transport.follow(None)
        except OSError as exc:
            self._quiet = False
            vlog.event(self.log, logging.ERROR, "could not stop quiet following", error=exc)

    def _catch_up(self) -> int:
        """Handle the followed master's adverts queued on the quiet socket, oldest first, each
        at its kernel receive time; how many there were.

        Copies of the followed datagram were checked when it was followed, so they go to the
        machine without being decoded again, and since a Backup's machine answers an advert
        with no action, the driver's bookkeeping runs once per run of them. A datagram there
        that is not a copy (one followed before, queued just before the filters changed) takes
        the ordinary path."""
        t = self.transport
        if self._followed is None or t is None:
            return 0
        now = self.clock()
        run: list[float] = []
        handled = 0
        for age, dgram in t.receive_quiet():
            at = now - age
            if at <= self._last_rx_at:
                # Taken by both sockets while the filters changed: handled from the polled one.
                continue
            handled += 1
            if dgram is self._followed or dgram == self._followed:
                run.append(at)
                continue
            self._copies(run)
            run = []
            self._on_datagram(dgram, at)
        self._copies(run)
        return handled

    @_locked
    def _catch_up_locked(self) -> None:
        self._catch_up()

    def _copies(self, arrivals: list[float]) -> None:
        """Copies of the followed datagram, received at ``arrivals`` (oldest first)."""
        if not arrivals or self._followed is None or self._followed_as is None:
            return
        (advert, form), src, m = self._followed_as, self._followed.src, self.machine
        actions = m.on_advert_copies(arrivals, src, advert.priority, advert.interval_cs)
        count = len(arrivals)
        last = arrivals[-1]
        self._last_rx_at = last
        self.stats.adverts_received += count
        self.stats.checksum_forms[form] += count
        metrics.VRRP_ADVERTS_RECEIVED.inc(count)
        self._saw_peer(src, last, advert.priority)
        self._apply(actions, last)
        self._after_advert(src, last, advert.priority)

    def _dropped(self, err: packet.DecodeError, src: IPAddress) -> None:
        """Count a dropped advert; say so at 1, 2, 4, 8, … of each reason.

        Other VRIDs are routine on a shared segment (debug). Anything else on our VRID is a
        peer we cannot hear — a wrong version, password, interval or address list means dual
        master — or garbage, so it is a warning, rate-limited so a flood cannot fill the log.
        """
        self.stats.invalid[err.reason] += 1
        metrics.VRRP_INVALID.labels(reason=err.reason).inc()
        level = logging.DEBUG if err.reason == "vrid" else logging.WARNING
        self._log_dropped(err.reason, level=level, reason=err.reason, src=src, detail=err)

    def _saw_peer(self, src: IPAddress, now: float, priority: int) -> None:
        """Remember a peer for /status."""
        if src not in self.peers and len(self.peers) >= MAX_PEERS:
            del self.peers[min(self.peers, key=lambda a: self.peers[a][1])]
        self.peers[src] = (priority, now)

    def _after_advert(self, src: IPAddress, now: float, priority: int) -> None:
        """Follow the master's adverts; count a claim on the VIP that we keep holding.

        VRRP backups are silent, so an advert with a priority is another node leading. When
        it makes us step down that is an ordinary preemption; when we stay leader with the
        VIP bound, two nodes claim it at once (a split brain, healing or not)."""
        m = self.machine
        if m.state is not state.State.ACTIVE:
            if m.state is state.State.BACKUP and m.master_ip == src:
                self._master_advert_at = now
            return
        held = self.controller is not None and self.controller.any_bound
        if priority > 0 and held:
            self._claimed_at = now
            self._vrrp_claim_at = now
            self._claims += 1
            metrics.DUPLICATE_CLAIMS.labels(source="vrrp").inc()
            self._log_claim(claimant=src, claimant_priority=priority)
            seen = self._foreign_seen
            if seen is not None and now - seen[0] <= SPLIT_BRAIN_ADVERTS * m.advert_interval:
                # The claim came first: a vipd peer announces just before it advertises, and
                # under loss its first adverts may be lost. A foreign host's claim is not
                # followed by adverts, so this window can be as wide as the split brain's.
                self._foreign_seen = None
                self._learn_peer(seen[1], now)
                if self._charged is not None and self._charged[0] == seen[1]:
                    self._defended_at = self._charged[1]
                    self._charged = None

    # -- foreign claims (RFC 5227 §2.4) ---------------------------------------------------

    def _start_claimwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """IPv4: watch ARP for another MAC claiming a VIP (see vipd.host.arpwatch), one watch
        per VIP. A claim on any of them is a claim on the virtual router's set: the defence
        re-announces every bound VIP of it (the claimant took them all, or will)."""
        if not self._want_claimwatch or self.family != 4:
            return
        for vip in self._vips:
            assert isinstance(vip, IPv4Address)
            watch = ClaimWatch(
                self.ifname,
                self.pre.link.mac,
                vip,
                self._on_claim,
                also_own=self.vmac.mac if self.vmac is not None else None,
            )
            self.claimwatches.append(watch)
            loop.add_reader(watch.fileno(), self._guarded, watch.on_readable)

    def _on_claim(self, mac: str) -> None:
        """Another MAC announced or answered for the VIP while we lead.

        Within ``SPLIT_BRAIN_ADVERTS`` intervals of a lower-priority advert of our VRID it is
        that peer's split brain: it bound the VIP and announced it just before our answer to
        its advert made it step down, and its gratuitous ARP can land after ours. That claim
        is answered at once (at most once per advert interval), whatever the foreign-host
        budget says: the peer is about to stop answering for the VIP, so clients left on its
        MAC would time out. A claim within ``PEER_CLAIM_WINDOW`` after such an advert, or
        one that such an advert follows within the split-brain window (a vipd peer announces
        just before it advertises, and its first adverts may be lost), shows its MAC to be
        the peer's, and that MAC's later claims are answered the same way: under VRRP
        loss its next takeover's advert may never reach us, and a budget spent on it must not
        leave the clients on a MAC about to stop answering. A defence charged to a claim that
        turns out to be a peer's is refunded. Anything else is a foreign host (RFC 5227
        §2.4 (b)): counted with the VRRP claims, logged, and defended with one burst at most
        every DEFEND_INTERVAL, CLAIM_SETTLE after it was seen and only if we still lead then:
        a returning higher-priority node announces before its preempting advert."""
        if self._announced is not None:
            # Stopping: the successor's announcement (see resign).
            self._claimed_by = self._claimed_by or "announcement"
            self._announced.set()
            return
        if self.machine.state is not state.State.ACTIVE or self._handover is not None:
            return  # a new leader's announcement after we stepped down: the normal case
        if self.controller is None or not self.controller.any_bound:
            return
        now = self.clock()
        check = self._claimants.get(mac)
        if check is not None and check.probed_at is not None:
            # The answer to our probe (see _claimant_probed): it still has the VIP. Not a
            # new claim: a peer's would be answered at once, at every probe.
            check.answered = True
            return
        m = self.machine
        recent = self._vrrp_claim_at
        if recent is not None and now - recent <= PEER_CLAIM_WINDOW:
            self._learn_peer(mac, now)
        split = recent is not None and now - recent <= SPLIT_BRAIN_ADVERTS * m.advert_interval
        if split or mac in self._peer_macs:
            # First, also inside our own lead window: that is exactly when the other
            # router's announcement, sent just before our answer reached it, lands.
            self._count_claim(now)
            self._answer_peer(mac, now)
            self._check_claimant(mac, now)
            return
        self._foreign_seen = (now, mac)
        if m.lead_pending or (m.state_since is not None and now - m.state_since < CLAIM_SETTLE):
            # We are taking over from a live master, which answers until our advert reaches
            # it (make-before-break): its replies are expected, not a claim.
            return
        if self._defence is None:
            self._defence_first = now
        elif now - self._defence_first < CLAIM_DEFER_MAX:
            # Still inside the claimant's burst (with VRRP loss we may not have heard the
            # lower-priority advert that would make it a split brain): a defence sent in the
            # middle of it is overwritten by its next frame, and the clients stay on its MAC.
            self._defence.cancel()
        else:
            return
        self._defence = self._later(CLAIM_SETTLE, lambda: self._foreign_claim(mac))

    def _learn_peer(self, mac: str, now: float) -> None:
        if mac not in self._peer_macs and len(self._peer_macs) >= MAX_PEERS:
            del self._peer_macs[min(self._peer_macs, key=self._peer_macs.__getitem__)]
        self._peer_macs[mac] = now

    def _answer_peer(self, mac: str, now: float) -> None:
        """A split-brain peer's claim: re-announce at once, at most once per interval."""
        answered = self._split_answered_at
        if answered is not None and now - answered < self.machine.advert_interval:
            return
        self._split_answered_at = now
        assert self.controller is not None
        self.controller.announce()
        vlog.event(
            self.log,
            logging.INFO,
            "re-announcing",
            reason="a lower-priority peer of our VRID announced the VIP",
            claimant_mac=mac,
        )

    def _count_claim(self, now: float) -> None:
        self._claimed_at = now
        self._claims += 1
        metrics.DUPLICATE_CLAIMS.labels(source="arp").inc()

    def _foreign_claim(self, mac: str) -> None:
        """CLAIM_SETTLE after a foreign claim: still leading, so not a preempting peer."""
        self._defence = None
        self._judge_claim(mac)

    def _judge_claim(self, mac: str) -> None:
        if self.machine.state is not state.State.ACTIVE or self._handover is not None:
            return  # it was a higher-priority node moving the clients before its advert
        if self.controller is None or not self.controller.any_bound:
            return
        now = self.clock()
        self._count_claim(now)
        if mac in self._peer_macs:  # its advert came while the defence waited
            self._answer_peer(mac, now)
            self._check_claimant(mac, now)
            return
        defend = self._defended_at is None or now - self._defended_at >= DEFEND_INTERVAL
        n = self._claims
        if defend or n & (n - 1) == 0:  # 1, 2, 4, 8, …: a storm cannot flood the log
            vlog.event(
                self.log,
                logging.WARNING,
                "a foreign host claims the VIP while we hold it",
                claimant_mac=mac,
                count=n,
                defending=defend,
                rfc="5227",
            )
        if defend:
            self._charged = (mac, self._defended_at)
            self._defended_at = now
            self._end_claimant_check(mac)  # our announcement is the clients' latest now
            self.controller.announce()
        else:
            self._check_claimant(mac, now)

    # -- a claimant whose announcement may be the clients' latest: still there? ----------

    def _leading_bound(self) -> bool:
        return (
            self.machine.state is state.State.ACTIVE
            and self._handover is None
            and self._announced is None
            and self.controller is not None
            and self.controller.any_bound
        )

    def _check_claimant(self, mac: str, now: float) -> None:
        """Follow a claimant whose announcement may be the clients' latest (a peer's we
        answered while its burst went on, or one the budget left unanswered)."""
        if mac in self._claimants or len(self._claimants) >= MAX_PEERS:
            return  # already followed; or a flood of MACs, each held to the budget alone
        gap = self.machine.advert_interval
        check = _ClaimantCheck(ends=now + DEFEND_INTERVAL, gap=gap)
        self._claimants[mac] = check
        # A peer steps down on our first advert after its claim, at most an interval later.
        check.timer = self._later(gap + CLAIM_SETTLE, lambda: self._probe_claimant(mac))

    def _claimant_due(self, mac: str) -> _ClaimantCheck | None:
        """A check's timer fired: the check, unless we no longer lead (then it is over)."""
        check = self._claimants.get(mac)
        if check is None:
            return None
        check.timer = None
        if not self._leading_bound():
            del self._claimants[mac]
            return None
        return check

    def _probe_claimant(self, mac: str) -> None:
        if (check := self._claimant_due(mac)) is None:
            return
        check.probed_at, check.answered = self.clock(), False
        if self._probe(mac):
            check.timer = self._later(CLAIMANT_PROBE_WAIT, lambda: self._claimant_probed(mac))
        else:
            self._claimant_probed(mac, asked=False)

    def _claimant_probed(self, mac: str, *, asked: bool = True) -> None:
        """CLAIMANT_PROBE_WAIT after the probe: an answer (any claim from that MAC since the
        probe went out) means it still has the VIP; none, that clients it moved are stranded."""
        if (check := self._claimant_due(mac)) is None:
            return
        for watch in self.claimwatches:
            watch.on_readable()  # a reply the loop has not read yet (timers run before I/O)
        now = self.clock()
        if asked and not check.answered:
            del self._claimants[mac]
            assert self.controller is not None
            self.controller.announce()
            vlog.event(
                self.log,
                logging.INFO,
                "re-announcing",
                reason=(
                    "a claimant of the VIP no longer answers for it: clients it moved "
                    "would time out on its MAC"
                ),
                claimant_mac=mac,
            )
            return
        check.probed_at = None
        if asked and now >= check.ends:
            # Still there DEFEND_INTERVAL on: its answer is a claim, judged as one (the
            # budget spent before the check began is renewed by now).
            del self._claimants[mac]
            self._judge_claim(mac)
            return
        check.asked += 1
        if check.asked >= CLAIMANT_PROBES_AT_ADVERT:
            check.gap = min(2 * check.gap, CLAIMANT_PROBE_MAX_GAP)
        check.timer = self._later(check.gap, lambda: self._probe_claimant(mac))

    def _probe_by_claimwatch(self, mac: str) -> bool:
        sent = False
        for watch in self.claimwatches:
            try:
                watch.probe(mac)
                sent = True
            except OSError as exc:  # the link went away meanwhile: the link watch says so
                vlog.event(self.log, logging.DEBUG, "claimant probe not sent", mac=mac, error=exc)
        return sent

    def _end_claimant_check(self, mac: str) -> None:
        check = self._claimants.pop(mac, None)
        if check is not None and check.timer is not None:
            check.timer.cancel()

    def _end_claimant_checks(self) -> None:
        for mac in list(self._claimants):
            self._end_claimant_check(mac)

    def _realtime(self) -> None:
        """Fast adverts: SCHED_RR so a busy host cannot stall the master (see vipd.host.sched)."""
        policy = sched.realtime_policy(self.vrrp.advert_interval)
        if policy is None:
            return
        problem = sched.apply(policy)
        fields = {"policy": policy.name, "rt_priority": policy.priority, "why": policy.why}
        if problem is None:
            vlog.event(self.log, logging.INFO, "real-time scheduling on", **fields)
        else:
            vlog.event(
                self.log,
                logging.WARNING,
                "real-time scheduling refused: adverts may be late under load",
                **fields,
                error=problem,
            )

    # -- observability ------------------------------------------------------------------

    def _gated_priority(self, healthy: bool) -> int:
        """The health gate and the tracked checks together (``vipd.track``), floored at 1."""
        weight = self.cfg.health.weight if self.cfg.health is not None else 0
        return track.effective_priority(self.vrrp.priority, weight, healthy, self._track)

    def _duplicate_claim(self) -> float:
        """vipd_vip_duplicate_claim, read by the HTTP thread when scraped."""
        claimed, held = self._claimed_at, self.controller is not None and self.controller.any_bound
        window = 3 * self.machine.advert_interval
        return 1.0 if held and claimed is not None and self.clock() - claimed <= window else 0.0

    def _scraped(self) -> None:
        """Before a scrape (the HTTP thread): the master's adverts queued on the quiet socket
        go to the machine and the counters first."""
        if self._followed is not None and self._loop is not None:
            if threading.get_ident() == self._loop_thread:
                self._catch_up_locked()
            else:
                with contextlib.suppress(Exception):
                    on_loop(self._loop, self._catch_up_locked, AGE_WAIT)

    def _master_advert_age(self) -> float | None:
        """vipd_vrrp_master_advert_age_seconds, read by the HTTP thread when scraped."""
        # Registry.expose ran _scraped first: the copies counted so far are in.
        if self.machine.state is state.State.ACTIVE:
            return 0.0
        master = self.machine.master_ip
        seen = self.peers.get(master) if master is not None else None
        return None if seen is None else max(0.0, self.clock() - seen[1])

    def readiness(self) -> tuple[bool, str]:
        """/readyz: does this node take part in the election right now, and if not, why."""
        if self.transport is None or self.controller is None:
            return False, "starting: sockets not open yet"
        if not self.link_up:
            return False, f"interface {self.ifname} is down: not in the election"
        if self.machine.state is state.State.INITIALIZE:
            return False, "not in the election"
        if self._send_error is not None:
            return False, f"adverts cannot be sent: {self._send_error}"
        return True, "ready"

    @_locked
    def status(self, now: float) -> dict[str, Any]:
        """The VRRP part of /status (see vipd.endpoint.status for the shape)."""
        self._catch_up()
        m = self.machine
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
                "vrid": self.vrrp.vrid,
                "version": self.vrrp.version,
                "state": m.state.value,
                "priority": m.priority,
                "advert_interval_s": self.vrrp.advert_interval,
                "master_down_interval_s": round(m.mdi, 6),
                "family": f"IPv{self.family}",
                "mode": "unicast" if self.unicast_peers else "multicast",
            },
            "master": master,
            "peers": peers,
            "counters": {
                "transitions": sum(self.stats.transitions.values()),
                "adverts_sent": self.stats.adverts_sent,
                "adverts_received": self.stats.adverts_received,
                "advert_send_errors": self.stats.send_errors,
                "invalid_adverts": dict(self.stats.invalid),
                "duplicate_claims": self._claims,
            },
        }

    @property
    def transport_v6(self) -> bool:
        return isinstance(self.source, IPv6Address)
