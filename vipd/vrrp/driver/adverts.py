"""Adverts in and out of a VRRP virtual router.

What it is: the driver's advert path. Out: the encoded advert (cached per priority, RFC 9568
§5.1/§5.2) to each destination, from the virtual MAC's socket where there is one (§7.3: the
Active router's source MAC is the virtual MAC), counted, a failure kept for /readyz. In: every
datagram of the VRRP socket decoded and checked (``vrrp.packet``: §7.1's receive checks),
counted by checksum form or dropped by reason, and handed to the machine, or while stopping
to the handover; then the claim defence hears of a lower-priority advert while we lead, and
following of the master's. With ``election.vrrp.auth_hmac`` (``driver.signing``): the trailer
is split off before the decode, verified after the receive checks (a drop counted in
``vipd_vrrp_auth_failures_total`` by reason), and one trailer is signed per logical advert and
appended to each copy (the checksum, per copy, is outside the HMAC). With
``election.vrrp.allowed_sources`` (multicast), an advert from another source is counted as
``not-allowed`` and dropped after the receive checks. While Active, an advert the machine
would answer at once (RFC 9568 §6.4.3) over its source's budget (``driver.defence``) is
dropped before the machine (still a claim on the VIP).

What it must not do: decide (``vrrp.state`` does), or let a malformed datagram raise into
the loop: every decode error is counted by reason and dropped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vipd import log as vlog
from vipd import metrics
from vipd.vrrp import packet, state
from vipd.vrrp.driver.wire import AdvertCache, IPAddress
from vipd.vrrp.transport import Datagram

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection
    from vipd.vrrp.driver.signing import AdvertAuth


class AdvertIO:
    """The advert path of one virtual router (see the module docstring)."""

    def __init__(
        self, owner: VrrpElection, cache: AdvertCache, auth: AdvertAuth | None = None
    ) -> None:
        self.owner = owner
        self.log = owner.log
        self.cache = cache
        self.auth = auth
        self.send_error: str | None = None  # the last send failure, until one succeeds
        self._log_send_error = vlog.Sparse(self.log, "advert send failed")
        self._log_dropped = vlog.Sparse(self.log, "advert dropped", every=10000)
        self._log_auth = vlog.Sparse(self.log, "advert failed authentication", every=10000)
        self._log_skew = vlog.Sparse(self.log, "peer clock skew approaching the auth window")
        # Multicast only (the config refuses it with unicast peers, which play its part).
        family = owner.family
        self.allowed = tuple(n for n in owner.vrrp.allowed_sources if n.version == family)

    def send(self, priority: int) -> None:
        o = self.owner
        assert o.transport is not None
        # Only a leader (or a leader resigning) sends adverts, so with a virtual MAC they all
        # leave from it (RFC 9568 §7.3: the Active router's source MAC is the virtual MAC).
        sender = o.sender or o.transport
        messages = self.cache.messages(priority, o.source, o.transport.destinations)
        if self.auth is not None and messages:
            # Signed from the address the kernel puts in the IP header (o.source: the
            # transport pins it), once: every copy carries the same sequence.
            tail = self.auth.trailer(messages[0][0], o.source)
            messages = [(message + tail, dst) for message, dst in messages]
        for message, dst in messages:
            try:
                sender.send(message, dst)
                o.stats.adverts_sent += 1
                metrics.VRRP_ADVERTS_SENT.inc()
                self.send_error = None
            except OSError as exc:
                # A down link must not stop the loop: the next tick retries.
                o.stats.send_errors += 1
                metrics.VRRP_SEND_ERRORS.inc()
                self.send_error = f"{exc} (to {dst})"
                self._log_send_error(dst=dst, error=exc)

    def on_readable(self) -> None:
        o = self.owner
        assert o.transport is not None
        now = o.clock()
        # The quiet socket's adverts arrived before what woke us: they go first.
        o.follower.catch_up()
        for item in o.transport.receive():
            if isinstance(item, packet.DecodeError):
                o.stats.invalid[item.reason] += 1
                metrics.VRRP_INVALID.labels(reason=item.reason).inc()
                continue
            self.on_datagram(item, now)

    def on_datagram(self, dgram: Datagram, now: float) -> None:
        o = self.owner
        message, trailer = dgram.message, None
        if self.auth is not None:
            message, trailer = self.auth.split(message, ipv6=o.transport_v6)
        try:
            advert, form = packet.decode(
                message, dgram.src, dgram.dst, verify_checksum=not o.transport_v6
            )
            packet.check(advert, src=dgram.src, dst=dgram.dst, ttl=dgram.ttl, expect=o.expect)
        except packet.DecodeError as err:
            self._dropped(err, dgram.src)
            return
        if self.allowed and not any(dgram.src in net for net in self.allowed):
            o.stats.invalid["not-allowed"] += 1
            metrics.VRRP_INVALID.labels(reason="not-allowed").inc()
            detail = "source not in election.vrrp.allowed_sources"
            self._log_dropped("not-allowed", reason="not-allowed", src=dgram.src, detail=detail)
            return
        if self.auth is not None:
            verdict = self.auth.verify(message, trailer, dgram.src)
            if not verdict.accept:
                o.stats.auth_failures[verdict.reason] += 1
                metrics.VRRP_AUTH_FAILURES.labels(reason=verdict.reason).inc()
                # A peer with another key or without auth_hmac is a dual master in waiting.
                self._log_auth(
                    verdict.reason, reason=verdict.reason, src=dgram.src, key_id=verdict.key_id
                )
                return
            if verdict.skew is not None and 2 * abs(verdict.skew) > self.auth.window:
                # keepalived's warning too: past the window this peer's adverts go stale.
                self._log_skew(str(dgram.src), src=dgram.src, skew_s=verdict.skew)
        o.stats.adverts_received += 1
        o.stats.checksum_forms[form] += 1
        metrics.VRRP_ADVERTS_RECEIVED.inc()
        o.observe.saw_peer(dgram.src, now, advert.priority)
        if o.handover is not None:
            # Stopping: we only wait for a successor, the election is over for us.
            o.handover.on_advert(dgram.src, advert.priority)
            return
        if not o.defence.may_answer(dgram.src, advert.priority, now):
            # As if lost on the wire: the periodic adverts answer it soon enough.
            self.after_advert(dgram.src, now, advert.priority)
            return
        o.follower.last_rx_at = max(o.follower.last_rx_at, now)
        actions = o.machine.on_advert(now, dgram.src, advert.priority, advert.interval_cs)
        o.apply(actions, now, cause=dgram.src)
        self.after_advert(dgram.src, now, advert.priority)
        # The master's advert that restarted our down timer: its next ones, while unchanged,
        # need not wake us (following).
        o.follower.after_advert(dgram, advert, form, now)

    def _dropped(self, err: packet.DecodeError, src: IPAddress) -> None:
        """Count a dropped advert; say so at 1, 2, 4, 8, … of each reason.

        Other VRIDs are routine on a shared segment (debug). Anything else on our VRID is a
        peer we cannot hear — a wrong version, password, interval or address list means dual
        master — or garbage, so it is a warning, rate-limited so a flood cannot fill the log.
        """
        o = self.owner
        o.stats.invalid[err.reason] += 1
        metrics.VRRP_INVALID.labels(reason=err.reason).inc()
        level = logging.DEBUG if err.reason == "vrid" else logging.WARNING
        self._log_dropped(err.reason, level=level, reason=err.reason, src=src, detail=err)

    def after_advert(self, src: IPAddress, now: float, priority: int) -> None:
        """Follow the master's adverts; count a claim on the VIP that we keep holding.

        VRRP backups are silent, so an advert with a priority is another node leading. When
        it makes us step down that is an ordinary preemption; when we stay leader with the
        VIP bound, two nodes claim it at once (a split brain, healing or not)."""
        o = self.owner
        m = o.machine
        if m.state is not state.State.ACTIVE:
            if m.state is state.State.BACKUP and m.master_ip == src:
                o.observe.master_advert_at = now
            return
        held = o.controller is not None and o.controller.any_bound
        if priority > 0 and held:
            o.defence.on_advert(src, now, priority)
