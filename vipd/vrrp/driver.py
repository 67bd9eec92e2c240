"""The asyncio shell: runs one VRRP instance for the VIP and shuts it down in order.

What it is: the driver that glues the pure core to the host. It feeds the VRRP state machine
with time.monotonic() and the adverts from the transport, executes the actions the
machine returns (send an advert, become leader, step down, re-announce), and hands roles to the
controller, which converges the VIP. It also watches the interface: down is a Shutdown
event, up a Startup event (RFC 9568 §6.4). Signal handlers only set an event. On
SIGTERM/SIGINT: stop electing (priority-0 advert, RFC 9568 §6.4.3), keep the VIP until the
successor is heard or no successor can still come (make-before-break, bounded), remove it,
close the sockets, exit 0. On a crash: the same ordered cleanup, exit 1.

What it must not do: decide anything itself (``vrrp.state`` decides), decode packets
(``vrrp.packet``), or let a malformed packet from the wire raise into the loop: every decode
error is counted by reason and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import select
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from vipd import __version__, metrics
from vipd import log as vlog
from vipd.config import Config
from vipd.controller import Controller, GarpPolicy
from vipd.endpoint.server import Endpoint
from vipd.health import gate
from vipd.health.checker import HealthChecker
from vipd.health.tracker import BackendHealth, Outcome
from vipd.host import sched, sdnotify
from vipd.host.address import AddressActuator
from vipd.host.announce import Announcer
from vipd.host.arpwatch import ClaimWatch
from vipd.host.linkwatch import LinkWatch
from vipd.host.neighbor import announcement, parse_mac
from vipd.host.vmaclink import VmacLink
from vipd.ipvs.runtime import IpvsRuntime
from vipd.preflight import Preflight
from vipd.vrrp import packet, state
from vipd.vrrp.transport import Datagram, Transport

IPAddress = IPv4Address | IPv6Address

# How early a Backup's down timer is armed on the loop (see _rearm).
TIMER_SLACK = 0.002
EXIT_OK = 0
# RFC 5227 §2.4 (b): defend the address at most once per DEFEND_INTERVAL seconds.
DEFEND_INTERVAL = 10.0
EXIT_CRASH = 1
# Peers remembered for the status document (multicast: anyone on our VRID could show up).
MAX_PEERS = 64
# Role names shared by every election backend (vipd.metrics.ROLES).
ROLE_OF_STATE = {
    state.State.ACTIVE: "leader",
    state.State.BACKUP: "follower",
    state.State.INITIALIZE: "init",
}


@dataclass
class VrrpStats:
    adverts_sent: int = 0
    adverts_received: int = 0
    send_errors: int = 0
    invalid: Counter[str] = field(default_factory=Counter)
    checksum_forms: Counter[str] = field(default_factory=Counter)
    transitions: Counter[str] = field(default_factory=Counter)
    garp_sent: int = 0


class VrrpInstance:
    """One VRID on one interface: transport + state machine + controller."""

    def __init__(self, cfg: Config, pre: Preflight, endpoint: Endpoint | None = None) -> None:
        self.cfg = cfg
        self.endpoint = endpoint
        self.pre = pre
        self.log = vlog.get()
        v = cfg.election.vrrp
        self.vrrp = v
        self.source: IPAddress = pre.source
        self.ifname = pre.link.name
        self.ifindex = pre.link.index
        self.stats = VrrpStats()
        auth = (v.auth_pass or "").encode()
        self.auth_type = 1 if v.auth_pass else 0
        self.auth_data = auth.ljust(8, b"\x00")[:8] if auth else b""
        self.expect = packet.Expectation(
            version=v.version,
            vrid=v.vrid,
            addresses=frozenset({cfg.vip}),
            auth_type=self.auth_type,
            auth_data=self.auth_data,
            interval_cs=v.advert_interval_cs if v.version == 2 else None,
            unicast_peers=frozenset(pre.unicast_peers),
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
        self._encoded: dict[int, list[tuple[bytes, IPAddress]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._fatal: asyncio.Future[None] | None = None
        self.transport: Transport | None = None
        # election.vrrp.vmac: the macvlan and its send-only socket (the leader's adverts).
        self.vmac: VmacLink | None = None
        self.sender: Transport | None = None
        self.controller: Controller | None = None
        self.address: AddressActuator | None = None
        self.announcer: Announcer | None = None
        self.linkwatch: LinkWatch | None = None
        self.claimwatch: ClaimWatch | None = None
        self._defended_at: float | None = None
        self.health: HealthChecker | None = None
        self.ipvs: IpvsRuntime | None = None
        self._handover: asyncio.Event | None = None
        self._successor: IPAddress | None = None
        # The slowest possible successor is a priority-1 backup, Skew_Time(1) after our
        # priority-0 advert; one more interval covers a lost advert and scheduling.
        self.handover_bound = (
            state.skew_time(v.version, 1, v.advert_interval_cs) + v.advert_interval
        )
        # Observability (vipd.metrics, /status): who we heard, and what went wrong lately.
        self.peers: dict[IPAddress, tuple[int, float]] = {}  # address -> (priority, seen at)
        self._claimed_at: float | None = None  # last advert claiming the VIP while we held it
        self._claims = 0
        self._master_advert_at: float | None = None  # the followed master's last advert
        self._send_error: str | None = None  # the last advert send failure, until one succeeds
        self._stopping = False
        self._master_seen: tuple[IPAddress | None, int | None, int] = (None, None, -1)

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
                addresses=(self.cfg.vip,),
                auth_type=self.auth_type,
                auth_data=self.auth_data,
            )
            cached = [
                (packet.encode(advert, self.source, dst), dst)
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
                if self.stats.send_errors in (1, 10, 100) or self.stats.send_errors % 1000 == 0:
                    self.log.warning(
                        "advert send failed",
                        extra={
                            "fields": {"dst": dst, "error": exc, "count": self.stats.send_errors}
                        },
                    )

    # -- the machine's actions -----------------------------------------------------------

    def _apply(self, actions: list[state.Action], now: float) -> None:
        assert self.controller is not None
        for action in actions:
            if isinstance(action, state.SendAdvert):
                self._send_advert(action.priority)
            elif isinstance(action, state.BecomeActive):
                self.controller.set_leader(True, now)
                if self.ipvs is not None:
                    self.ipvs.set_leader(True)
                self._log_transition("active", action.reason)
            elif isinstance(action, state.BecomeBackup):
                self.controller.set_leader(False, now)
                if self.ipvs is not None:
                    self.ipvs.set_leader(False)
                self._log_transition("backup", action.reason)
            elif isinstance(action, state.Announce):
                self.controller.announce()
                self.log.info("re-announcing", extra={"fields": {"reason": action.reason}})
        self._rearm()
        m = self.machine
        if (m.master_ip, m.master_priority, m.priority) != self._master_seen:
            # Cheap, but not per advert: only when the master or our priority changed.
            self._master_seen = (m.master_ip, m.master_priority, m.priority)
            metrics.set_master(m.master_ip, m.master_priority)
            metrics.VRRP_PRIORITY.set(m.priority)

    def _log_transition(self, role: str, reason: str) -> None:
        self.stats.transitions[role] += 1
        m = self.machine
        self._observe_transition(reason)
        self.log.info(
            f"became {role}",
            extra={
                "fields": {
                    "vrid": self.vrrp.vrid,
                    "reason": reason,
                    "priority": m.priority,
                    "master": m.master_ip,
                    "master_priority": m.master_priority,
                    "master_adver_interval_s": m.master_adver_interval_cs / 100,
                    "master_down_interval_s": m.mdi,
                }
            },
        )

    def _observe_transition(self, reason: str) -> None:
        """Metrics of a role change; runs after the VIP was bound/removed and announced."""
        role = ROLE_OF_STATE[self.machine.state]
        metrics.set_role("vrrp", role)
        metrics.TRANSITIONS.labels(
            backend="vrrp", role=role, reason=state.reason_label(reason)
        ).inc()
        metrics.VRRP_PRIORITY.set(self.machine.priority)
        if role == "leader" and self._master_advert_at is not None:
            since = time.monotonic() - self._master_advert_at
            metrics.TAKEOVER_SINCE_ADVERT.observe(max(0.0, since))
        if role != "follower":
            self._master_advert_at = None
        self._publish(time.monotonic())

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.machine.deadline
        if deadline is not None:
            # The machine's clock is time.monotonic(), not loop.time(): uvloop's clock has
            # millisecond resolution and is cached per loop iteration. A Backup's down timer
            # is the takeover itself, so it is armed a little early and finished precisely
            # in _on_timer; the Active's advert timer needs no such care.
            early = TIMER_SLACK if self.machine.state is state.State.BACKUP else 0.0
            delay = max(0.0, deadline - time.monotonic() - early)
            self._timer = asyncio.get_running_loop().call_later(
                delay, self._guarded, self._on_timer
            )

    def _guarded(self, fn: Any, *args: Any) -> None:
        """Loop callbacks run through here so that a bug ends the run instead of vanishing."""
        try:
            fn(*args)
        except Exception as exc:
            if self._fatal is not None and not self._fatal.done():
                self._fatal.set_exception(exc)

    def _on_timer(self) -> None:
        self._timer = None
        deadline = self.machine.deadline
        now = time.monotonic()
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
            now = time.monotonic()
        self._apply(self.machine.on_timer(now), now)

    def _advert_pending(self, timeout: float) -> bool:
        """Block up to ``timeout`` (≤ TIMER_SLACK) for the VRRP socket; True if readable."""
        if self.transport is None:
            time.sleep(timeout)
            return False
        readable, _, _ = select.select([self.transport.fileno()], [], [], timeout)
        return bool(readable)

    def _on_readable(self) -> None:
        assert self.transport is not None
        now = time.monotonic()
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
            # Stopping: we only wait for a successor, the election is over for us.
            if advert.priority > 0:
                self._successor = dgram.src
                self._handover.set()
            return
        self._apply(
            self.machine.on_advert(now, dgram.src, advert.priority, advert.interval_cs), now
        )
        self._after_advert(dgram.src, now, advert.priority)

    def _dropped(self, err: packet.DecodeError, src: IPAddress) -> None:
        """Count a dropped advert; say so at 1, 10, 100, … of each reason.

        Other VRIDs are routine on a shared segment (debug). Anything else on our VRID is a
        peer we cannot hear — a wrong version, password, interval or address list means dual
        master — or garbage, so it is a warning, rate-limited so a flood cannot fill the log.
        """
        count = self.stats.invalid[err.reason] = self.stats.invalid[err.reason] + 1
        metrics.VRRP_INVALID.labels(reason=err.reason).inc()
        if count & (count - 1) == 0 or count in (10, 100, 1000) or count % 10000 == 0:
            level = logging.DEBUG if err.reason == "vrid" else logging.WARNING
            self.log.log(
                level,
                "advert dropped",
                extra={"fields": {"reason": err.reason, "src": src, "count": count, "detail": err}},
            )

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
        if m.state is state.State.BACKUP and m.master_ip == src:
            self._master_advert_at = now
        held = self.controller is not None and self.controller.bound
        if priority > 0 and held and m.state is state.State.ACTIVE:
            self._claimed_at = now
            self._claims += 1
            metrics.DUPLICATE_CLAIMS.inc()
            n = self._claims
            if n & (n - 1) == 0 or n % 1000 == 0:
                self.log.warning(
                    "another node claims the VIP while we hold it",
                    extra={"fields": {"claimant": src, "claimant_priority": priority, "count": n}},
                )

    # -- observability ------------------------------------------------------------------

    def _duplicate_claim(self) -> float:
        """vipd_vip_duplicate_claim, read by the HTTP thread when scraped."""
        claimed, held = self._claimed_at, self.controller is not None and self.controller.bound
        window = 3 * self.machine.advert_interval
        return 1.0 if held and claimed is not None and time.monotonic() - claimed <= window else 0.0

    def _master_advert_age(self) -> float:
        """vipd_vrrp_master_advert_age_seconds, read by the HTTP thread when scraped."""
        if self.machine.state is state.State.ACTIVE:
            return 0.0
        master = self.machine.master_ip
        seen = self.peers.get(master) if master is not None else None
        return -1.0 if seen is None else max(0.0, time.monotonic() - seen[1])

    def readiness(self) -> tuple[bool, str]:
        """/readyz: does this node take part in the election right now, and if not, why."""
        if self._stopping:
            return False, "stopping: left the election"
        if self.transport is None or self.controller is None:
            return False, "starting: sockets not open yet"
        if self.linkwatch is not None and not self.linkwatch.state:
            return False, f"interface {self.ifname} is down: not in the election"
        if self.machine.state is state.State.INITIALIZE:
            return False, "not in the election"
        if self._send_error is not None:
            return False, f"adverts cannot be sent: {self._send_error}"
        return True, "ready"

    def _status_backends(self) -> list[dict[str, Any]]:
        """The ``backends`` of /status and `vipd status`: every health-check target (the
        local API server first, then the IPVS backends) with its health and last check."""
        if self.health is None:
            return []
        local = self.health.local
        out: list[dict[str, Any]] = []
        snap = self.health.snapshot()
        for addr in sorted(snap, key=lambda a: (a != local, a.version, int(a))):
            h = snap[addr]
            detail = h.error or (f"HTTP {h.status}" if h.status is not None else "not checked yet")
            out.append(
                {
                    "name": "local" if addr == local else "backend",
                    "address": str(addr),
                    "url": self.health.url(addr),
                    "healthy": h.healthy,
                    "detail": detail,
                    "checks": h.checks,
                    "last_check_ms": None if h.duration is None else round(h.duration * 1e3, 3),
                }
            )
        return out

    def status(self, now: float) -> dict[str, Any]:
        """The /status document (see vipd.endpoint.status for its shape); built on the loop."""
        m = self.machine
        master: dict[str, Any] | None = None
        if m.master_ip is not None:
            leading = m.state is state.State.ACTIVE
            seen = None if leading else self.peers.get(m.master_ip)
            master = {
                "address": str(m.master_ip),
                "priority": m.master_priority,
                "self": leading,
                "advert_age_s": None if seen is None else round(now - seen[1], 6),
            }
        peers = [
            {"address": str(a), "priority": p, "last_seen_s": round(now - t, 6)}
            for a, (p, t) in sorted(self.peers.items(), key=lambda kv: kv[1][1], reverse=True)
        ]
        return {
            "node": self.cfg.node,
            "version": __version__,
            "vip": str(self.cfg.vip),
            "interface": self.ifname,
            "source": str(self.source),
            "backend": "vrrp",
            "role": ROLE_OF_STATE[m.state],
            "role_since_s": None if m.state_since is None else round(now - m.state_since, 6),
            "last_reason": m.last_reason,
            "vip_bound": bool(self.controller is not None and self.controller.bound),
            "duplicate_claim": self._duplicate_claim() == 1.0,
            "interface_up": bool(self.linkwatch is not None and self.linkwatch.state),
            "vrrp": {
                "vrid": self.vrrp.vrid,
                "version": self.vrrp.version,
                "state": m.state.value,
                "priority": m.priority,
                "advert_interval_s": self.vrrp.advert_interval,
                "master_down_interval_s": round(m.mdi, 6),
                "mode": "unicast" if self.pre.unicast_peers else "multicast",
            },
            "master": master,
            "peers": peers,
            "backends": self._status_backends(),
            "counters": {
                "transitions": sum(self.stats.transitions.values()),
                "adverts_sent": self.stats.adverts_sent,
                "adverts_received": self.stats.adverts_received,
                "advert_send_errors": self.stats.send_errors,
                "invalid_adverts": dict(self.stats.invalid),
                "garp_sent": self.stats.garp_sent,
                "duplicate_claims": self._claims,
            },
        }

    def _publish(self, now: float) -> None:
        """Hand the status and readiness to the HTTP thread; a bug here must not kill the
        election, so it is logged instead."""
        if self.endpoint is None:
            return
        try:
            ready, reason = self.readiness()
            self.endpoint.publish(self.status(now), ready, reason)
        except Exception:
            self.log.exception("could not publish the status")

    @property
    def transport_v6(self) -> bool:
        return isinstance(self.source, IPv6Address)

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set (exit 0) or something breaks (exit 1)."""
        loop = asyncio.get_running_loop()
        self._fatal = loop.create_future()
        worker: asyncio.Task[None] | None = None
        heart: asyncio.Task[None] | None = None
        code = EXIT_OK
        metrics.init_vrrp(
            node=self.cfg.node,
            vip=str(self.cfg.vip),
            interface=self.ifname,
            priority=self.vrrp.priority,
        )
        metrics.DUPLICATE_CLAIM.set_function(self._duplicate_claim)
        metrics.VRRP_MASTER_ADVERT_AGE.set_function(self._master_advert_age)
        if self.endpoint is not None:
            self.endpoint.beat(time.monotonic())
            heart = loop.create_task(self.endpoint.heartbeat(self._publish), name="heartbeat")
        try:
            vip_ifname, vip_ifindex, vip_mac = self.ifname, self.ifindex, self.pre.link.mac
            if self.vrrp.vmac:
                self.vmac = VmacLink(self.ifname, self.ifindex, self.vrrp.vrid)
                # In a thread: pyroute2's IPRoute runs an asyncio loop of its own, which
                # cannot start inside this (running) one. Start-up only.
                vip_ifindex = await asyncio.to_thread(self.vmac.start)
                vip_ifname, vip_mac = self.vmac.name, self.vmac.mac
                self.log.info(
                    "virtual MAC on",
                    extra={
                        "fields": {
                            "link": vip_ifname,
                            "mac": vip_mac,
                            "parent": self.ifname,
                            "reused_leftover": self.vmac.reused,
                        }
                    },
                )
            mac = parse_mac(vip_mac)
            frame = announcement(mac, self.cfg.vip)
            self.announcer = Announcer(vip_ifname, frame, self._count_garp)
            self.address = AddressActuator(vip_ifindex, self.cfg.vip)
            self.controller = Controller(
                address=self.address,
                announcer=self.announcer,
                garp=GarpPolicy.from_config(self.cfg.garp),
                log=self.log,
            )
            worker = loop.create_task(self.controller.run(), name="controller")
            self.transport = Transport(
                ifname=self.ifname,
                ifindex=self.ifindex,
                source=self.source,
                unicast_peers=self.pre.unicast_peers,
            )
            if self.vmac is not None:
                self.sender = Transport(
                    ifname=vip_ifname, ifindex=vip_ifindex, source=self.source, receive=False
                )
            loop.add_reader(self.transport.fileno(), self._guarded, self._on_readable)
            self.linkwatch = LinkWatch(self.ifindex, self._on_link)
            self._start_health()
            self._start_ipvs()
            loop.add_reader(self.linkwatch.fileno(), self._guarded, self.linkwatch.on_readable)
            self._start_claimwatch(loop)
            metrics.INTERFACE_UP.labels(interface=self.ifname).set(1 if self.linkwatch.state else 0)
            if self.linkwatch.state:
                now = time.monotonic()
                self._apply(self.machine.start(now), now)
            else:
                self.log.warning(
                    "interface is down: waiting for it before joining the election",
                    extra={"fields": {"interface": self.ifname}},
                )
            self.log.info(
                "vrrp started",
                extra={
                    "fields": {
                        "node": self.cfg.node,
                        "vip": self.cfg.vip,
                        "interface": self.ifname,
                        "source": self.source,
                        "vrid": self.vrrp.vrid,
                        "version": self.vrrp.version,
                        "priority": self.vrrp.priority,
                        "advert_interval_s": self.vrrp.advert_interval,
                        "mode": "unicast" if self.pre.unicast_peers else "multicast",
                    }
                },
            )
            sdnotify.notify("READY=1")  # in the election (or waiting for its link)
            # Everything allocated so far lives as long as the process: move it out of the
            # collector's sight, so a collection never walks pyroute2's import-time objects
            # in the middle of a takeover.
            gc.collect()
            gc.freeze()
            # After the collection: a real-time process must not spend tens of ms in it.
            self._realtime()
            stopper = loop.create_task(stop.wait(), name="stop-signal")
            waiters: set[asyncio.Future[Any]] = {stopper, self._fatal, worker}
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            for fut in done:
                if fut is not stopper and (exc := fut.exception()) is not None:
                    raise exc
            if worker in done:
                raise RuntimeError("the controller stopped unexpectedly")
        except Exception:
            self.log.exception("crashed: releasing the VIP and exiting")
            code = EXIT_CRASH
        self._stopping = True
        self._publish(time.monotonic())
        await self._shutdown(worker)
        if heart is not None:
            heart.cancel()
            with contextlib.suppress(BaseException):
                await heart
        return code

    # -- health gating -------------------------------------------------------------------

    def _start_health(self) -> None:
        """Check the local API server; gate the priority on it (vipd.health.gate).

        The node joins the election at its unhealthy priority: a node whose API server is
        not up yet must not preempt a healthy leader, and a lone node still takes the VIP
        after its down interval (kubeadm init needs the VIP before its API server is up).
        """
        h = self.cfg.health
        if h is None:
            return
        self.health = HealthChecker(
            [],
            h,
            lambda addr, s: self._guarded(self._on_health, addr, s),
            log=self.log,
            on_check=self._count_health_check,
        )
        for addr in self.health.targets():
            metrics.HEALTH_BACKEND_HEALTHY.labels(
                backend=str(addr), local=str(addr == h.local).lower()
            ).set(0)
        if h.weight > 0:
            now = time.monotonic()
            self._apply(self.machine.set_priority(now, self._gated_priority(False)), now)
        self.log.info(
            "health gating on" if h.weight > 0 else "health checks on, leadership not gated",
            extra={
                "fields": {
                    "url": self.health.url(h.local),
                    "priority_healthy": self.vrrp.priority,
                    "priority_unhealthy": self._gated_priority(False),
                    "interval_s": h.interval,
                    "timeout_s": h.timeout,
                    "rise": h.rise,
                    "fall": h.fall,
                    "tls": "verify chain" if h.ca_file else "no verification",
                }
            },
        )
        self.health.start()

    def _gated_priority(self, healthy: bool) -> int:
        assert self.cfg.health is not None
        return gate.effective_priority(self.vrrp.priority, self.cfg.health.weight, healthy)

    def _count_health_check(self, addr: IPAddress, outcome: Outcome) -> None:
        metrics.HEALTH_CHECKS.labels(backend=str(addr), result="ok" if outcome.ok else "fail").inc()
        metrics.HEALTH_CHECK_DURATION.labels(backend=str(addr)).observe(outcome.duration)

    def _on_health(self, addr: IPAddress, health: BackendHealth) -> None:
        local = self.cfg.health is not None and addr == self.cfg.health.local
        metrics.HEALTH_BACKEND_HEALTHY.labels(backend=str(addr), local=str(local).lower()).set(
            1 if health.healthy else 0
        )
        h = self.cfg.health
        if h is None or addr != h.local or h.weight == 0:
            return
        now = time.monotonic()
        priority = self._gated_priority(health.healthy)
        old = self.machine.priority
        self.log.info(
            "local API server healthy: priority restored"
            if health.healthy
            else "local API server unhealthy: priority lowered",
            extra={
                "fields": {
                    "priority_from": old,
                    "priority_to": priority,
                    "state": self.machine.state.value,
                    "error": health.error,
                }
            },
        )
        self._apply(self.machine.set_priority(now, priority), now)

    # -- IPVS (vipd.ipvs) -----------------------------------------------------------------

    def _start_ipvs(self) -> None:
        """IPVS on the leader only (vipd.ipvs.runtime); config guarantees health is on."""
        if not self.cfg.ipvs.enabled or self.health is None:
            return
        self.ipvs = IpvsRuntime(self.cfg, self.source, self.log)
        self.ipvs.start(self.health, self.machine.state is state.State.ACTIVE)

    async def _stop_ipvs(self) -> None:
        if self.ipvs is not None:
            await self.ipvs.stop()

    # -- foreign claims (RFC 5227 §2.4) ---------------------------------------------------

    def _start_claimwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """IPv4: watch ARP for another MAC claiming the VIP (see vipd.host.arpwatch)."""
        if not isinstance(self.cfg.vip, IPv4Address):
            return
        self.claimwatch = ClaimWatch(
            self.ifname,
            self.pre.link.mac,
            self.cfg.vip,
            self._on_claim,
            also_own=self.vmac.mac if self.vmac is not None else None,
        )
        loop.add_reader(self.claimwatch.fileno(), self._guarded, self.claimwatch.on_readable)

    def _on_claim(self, mac: str) -> None:
        """Another MAC announced or answered for the VIP. While we lead, that is a duplicate
        claim (a foreign host, or a split brain): count it with the VRRP ones, log it, and
        defend the address with one announcement burst at most every DEFEND_INTERVAL."""
        if self.machine.state is not state.State.ACTIVE or self._handover is not None:
            return  # a new leader's announcement after we stepped down: the normal case
        if self.controller is None or not self.controller.bound:
            return
        now = time.monotonic()
        self._claimed_at = now
        self._claims += 1
        metrics.DUPLICATE_CLAIMS.inc()
        defend = self._defended_at is None or now - self._defended_at >= DEFEND_INTERVAL
        n = self._claims
        if defend or n & (n - 1) == 0:
            self.log.warning(
                "a foreign host claims the VIP while we hold it",
                extra={
                    "fields": {
                        "claimant_mac": mac,
                        "count": n,
                        "defending": defend,
                        "rfc": "5227",
                    }
                },
            )
        if defend:
            self._defended_at = now
            self.controller.announce()

    def _realtime(self) -> None:
        """Fast adverts: SCHED_RR so a busy host cannot stall the master (see vipd.host.sched)."""
        policy = sched.realtime_policy(self.vrrp.advert_interval)
        if policy is None:
            return
        problem = sched.apply(policy)
        fields = {"policy": policy.name, "rt_priority": policy.priority, "why": policy.why}
        if problem is None:
            self.log.info("real-time scheduling on", extra={"fields": fields})
        else:
            self.log.warning(
                "real-time scheduling refused: adverts may be late under load",
                extra={"fields": {**fields, "error": problem}},
            )

    def _on_link(self, up: bool) -> None:
        """RFC 9568 §6.4: interface down is a Shutdown event, interface up a Startup event."""
        now = time.monotonic()
        metrics.INTERFACE_UP.labels(interface=self.ifname).set(1 if up else 0)
        if up:
            self.log.info(
                "interface is up: joining the election",
                extra={"fields": {"interface": self.ifname}},
            )
            if self.machine.state is state.State.INITIALIZE:
                self._apply(self.machine.start(now), now)
        else:
            self.log.warning(
                "interface is down: leaving the election and releasing the VIP",
                extra={"fields": {"interface": self.ifname, "state": self.machine.state.value}},
            )
            # The priority-0 advert cannot leave a down link: peers time out instead, so it is
            # not sent, and the step-down says why.
            actions: list[state.Action] = [
                state.BecomeBackup(f"interface-down: {self.ifname} is down, leaving the election")
                if isinstance(a, state.BecomeBackup)
                else a
                for a in self.machine.shutdown(now)
                if not isinstance(a, state.SendAdvert)
            ]
            self._apply(actions, now)
            if not any(isinstance(a, state.BecomeBackup) for a in actions):
                # A follower leaves without a step-down action: its role changes all the same.
                self._observe_transition(f"interface-down: {self.ifname} is down")

    def _count_garp(self, n: int) -> None:
        self.stats.garp_sent += n
        metrics.GARP_SENT.inc(n)

    async def _shutdown(self, worker: asyncio.Task[None] | None) -> None:
        """Priority 0 first so a backup starts its Skew timer, then the VIP, then sockets.

        Make-before-break: a leader keeps the VIP bound (without announcing it again) until it
        hears the new leader's first advert, which that node sends just before it binds the VIP
        and announces it, or until no backup can still be coming (``handover_bound``). Clients
        keep being answered here until the ARP announcement moves them, so a graceful stop
        costs them next to nothing instead of a whole Skew_Time.
        """
        loop = asyncio.get_running_loop()
        sdnotify.notify("STOPPING=1")
        if self._timer is not None:
            self._timer.cancel()
        if self.health is not None:
            self.health.stop()
        was_active = self.machine.state is state.State.ACTIVE
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(BaseException):
                await worker
        if self.controller is not None:
            self.controller.quiesce()
        resigned = False
        if self.transport is not None:
            with contextlib.suppress(Exception):
                for action in self.machine.shutdown(time.monotonic()):
                    if isinstance(action, state.SendAdvert):
                        self._handover = asyncio.Event()
                        self._send_advert(action.priority)
                        resigned = True
                    elif isinstance(action, state.BecomeBackup):
                        self.log.info("resigned", extra={"fields": {"reason": action.reason}})
                        metrics.set_role("vrrp", "init")
                        metrics.TRANSITIONS.labels(
                            backend="vrrp", role="init", reason=state.reason_label(action.reason)
                        ).inc()
        if resigned and self._handover is not None and self.linkwatch and self.linkwatch.state:
            started = time.monotonic()
            try:
                await asyncio.wait_for(self._handover.wait(), self.handover_bound)
                self.log.info(
                    "new leader heard: releasing the VIP",
                    extra={
                        "fields": {
                            "after_s": round(time.monotonic() - started, 6),
                            "leader": self._successor,
                        }
                    },
                )
            except TimeoutError:
                self.log.info(
                    "no new leader heard: releasing the VIP",
                    extra={"fields": {"waited_s": self.handover_bound}},
                )
        if self.controller is not None:
            try:
                self.controller.release()
            except Exception as exc:
                self.log.error("could not remove the VIP", extra={"fields": {"error": exc}})
        await self._stop_ipvs()
        if self.linkwatch is not None:
            with contextlib.suppress(Exception):
                loop.remove_reader(self.linkwatch.fileno())
            self.linkwatch.close()
        if self.claimwatch is not None:
            with contextlib.suppress(Exception):
                loop.remove_reader(self.claimwatch.fileno())
            self.claimwatch.close()
        if self.transport is not None:
            with contextlib.suppress(Exception):
                loop.remove_reader(self.transport.fileno())
            self.transport.close()
        if self.sender is not None:
            self.sender.close()
        if self.announcer is not None:
            self.announcer.close()
        if self.address is not None:
            self.address.close()
        if self.vmac is not None:
            try:
                await asyncio.to_thread(self.vmac.stop)
            except Exception as exc:
                self.log.error(
                    "could not remove the virtual MAC link",
                    extra={"fields": {"link": self.vmac.name, "error": exc}},
                )
        self.log.info(
            "stopped",
            extra={
                "fields": {
                    "was_active": was_active,
                    "adverts_sent": self.stats.adverts_sent,
                    "adverts_received": self.stats.adverts_received,
                    "invalid": dict(self.stats.invalid),
                    "garp_sent": self.stats.garp_sent,
                }
            },
        )


def install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def serve(cfg: Config, pre: Preflight, endpoint: Endpoint | None = None) -> int:
    stop = asyncio.Event()
    install_signal_handlers(stop)
    if cfg.election.mode == "lease":
        from vipd.lease.driver import LeaseInstance

        return await LeaseInstance(cfg, pre, endpoint=endpoint).run(stop)
    return await VrrpInstance(cfg, pre, endpoint).run(stop)


def run(cfg: Config, pre: Preflight, endpoint: Endpoint | None = None) -> int:
    """Run the daemon on uvloop when it is installed, else on asyncio's default loop.

    ``endpoint`` is the HTTP endpoint, already bound by the caller (the port is the per-node
    lock, taken before joining the election); it serves while the daemon runs."""
    if endpoint is not None:
        endpoint.start()
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(serve(cfg, pre, endpoint))
        return uvloop.run(serve(cfg, pre, endpoint))
    finally:
        if endpoint is not None:
            endpoint.close()
