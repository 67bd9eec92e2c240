"""The start-up probe of a VRRP node: does a foreign host have the VIP, or one of our routers?

What it is: ``check(cfg, pre)``, run before the election (``vipd check`` and ``vipd run``):
for each VIP, an RFC 5227 / DAD probe on the wire (``vipd.host.arpwatch.probe``) while our
VRID's adverts that carry the VIP are listened for from the first probe on, for up to 4
advert intervals when someone answered (a backup's longest Master_Down_Interval is 3
intervals + Skew_Time < 1 interval); answered and heard ends the probe at once. Heard: the
VIP is VRRP-managed (the current leader, vipd or keepalived, answers too), go on. Not heard:
a foreign host has it (``vipd.host.conflict.Conflict.foreign``), and vipd refuses to claim it
(``vipd check`` exits 2 and says who; ``vipd run`` waits and probes again). VRRP mode only:
in Lease mode the current holder is another vipd that sends no adverts.

What it must not do: join the election or hold a socket past the check: every listener is
closed before it returns.
"""

from __future__ import annotations

import contextlib
import select
import time
from ipaddress import IPv4Address, IPv6Address

from vipd.config import Config
from vipd.host.arpwatch import probe
from vipd.host.conflict import Conflict
from vipd.preflight import Preflight
from vipd.vrrp import packet
from vipd.vrrp.transport import Transport


class Adverts:
    """Our VRID's adverts carrying one VIP, heard on its family's virtual router."""

    def __init__(self, cfg: Config, pre: Preflight, vip: IPv4Address | IPv6Address) -> None:
        self.vrid = cfg.election.vrrp.vrid
        self.vip = vip
        # auth_hmac: peers' adverts carry a trailer, split off unverified here (hearing one
        # only lets this node join the election, where it is verified).
        self.auth = cfg.election.vrrp.auth_hmac is not None
        self.heard: list[str] = []
        self.transport = Transport(
            ifname=pre.link.name,
            ifindex=pre.link.index,
            source=pre.source_for(vip.version),
            unicast_peers=pre.peers_for(vip.version),
        )

    def fileno(self) -> int:
        return self.transport.fileno()

    def read(self) -> None:
        for item in self.transport.receive():
            if isinstance(item, packet.DecodeError):
                continue
            message, trailer = item.message, None
            if self.auth:
                from vipd.vrrp import auth  # hashlib: only where auth_hmac is set

                message, trailer = auth.split(message, ipv6=self.vip.version == 6)
            try:
                # IPv6: with a trailer the checksum covers it too (the kernel checked it)
                check = trailer is None or self.vip.version == 4
                advert, _ = packet.decode(message, item.src, item.dst, verify_checksum=check)
            except packet.DecodeError:
                continue
            ours = advert.vrid == self.vrid and self.vip in advert.addresses
            if ours and advert.priority and str(item.src) not in self.heard:
                self.heard.append(str(item.src))

    def close(self) -> None:
        self.transport.close()


def vrrp_routers(
    cfg: Config,
    pre: Preflight,
    timeout: float,
    vip: IPv4Address | IPv6Address | None = None,
    adverts: Adverts | None = None,
) -> list[str]:
    """Sources of valid-looking adverts of our VRID carrying ``vip`` (default: the first
    VIP), heard in ``timeout`` on its family's virtual router (on ``adverts``, which may
    have heard some already, when given)."""
    listener = (
        adverts if adverts is not None else Adverts(cfg, pre, cfg.vip if vip is None else vip)
    )
    try:
        end = time.monotonic() + timeout
        while not listener.heard and (left := end - time.monotonic()) > 0:
            select.select([listener], [], [], left)
            listener.read()
    finally:
        if adverts is None:
            listener.close()
    return list(listener.heard)


def check(cfg: Config, pre: Preflight) -> Conflict:
    """Probe for each VIP; if someone answers, see whether a VRRP router of ours explains it.
    The first foreign conflict is returned, else the first VIP that was answered (held by
    one of our routers), else the first VIP's empty result.

    The adverts are listened for from the first probe on, not after the probe: the holder's
    next advert (up to one interval away) then arrives during the probe window instead of
    after it, and the bound on listening (4 intervals) counts from the first probe."""
    results: list[Conflict] = []
    vrrp = cfg.election.mode == "vrrp"
    for vip in cfg.vips:
        adverts: Adverts | None = None
        if vrrp:
            with contextlib.suppress(OSError):  # then listened for after the probe, as before
                adverts = Adverts(cfg, pre, vip)
        try:
            started = time.monotonic()
            macs = tuple(probe(pre.link.name, pre.link.mac, vip, adverts))
            heard: tuple[str, ...] = ()
            if macs and vrrp:
                bound = 4 * cfg.election.vrrp.advert_interval
                if adverts is not None:
                    bound = max(0.0, bound - (time.monotonic() - started))
                heard = tuple(vrrp_routers(cfg, pre, bound, vip, adverts))
        finally:
            if adverts is not None:
                adverts.close()
        found = Conflict(vip, pre.link.name, macs, heard)
        if found.foreign:
            return found
        results.append(found)
    return next((r for r in results if r.macs), results[0])
