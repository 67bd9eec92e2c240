"""Who else has the VIP: an ARP/DAD probe before vipd claims it, and a watch while it leads.

What it is: the driver for ``vipd.host.conflict`` (RFC 5227 / RFC 4862 §5.4):

- ``check(cfg, pre)``: before the election (``vipd check`` and ``vipd run``), send
  ``PROBES`` probes ``PROBE_GAP`` apart on the VIP's interface and collect, for ``WAIT``
  more, the MACs of hosts other than this one that answer for the VIP. A VRRP router
  holding the VIP (the current leader, vipd or keepalived) answers too, so when someone
  answered, listen for VRRP adverts of our VRID that carry the VIP for up to 4 advert
  intervals (a backup's longest Master_Down_Interval is 3 intervals + Skew_Time < 1
  interval; the VRRP socket is opened before the probe, so adverts sent during it count):
  heard → the VIP is VRRP-managed, go on; not heard → a foreign host has it,
  and vipd refuses to claim it (``vipd check`` exits 2 and says who; ``vipd run`` waits
  and probes again). IPv4 and IPv6 (a DAD Neighbor Solicitation from ``::``). VRRP mode
  only: in Lease mode the current holder is another vipd that sends no adverts.
- ``ClaimWatch``: while running (IPv4), a packet socket on the interface for ARP; every
  ARP frame whose sender IP is the VIP and whose sender MAC is not ours (a gratuitous ARP
  or a reply from another host) is handed to a callback, which counts and logs it when
  this node leads. Frames this node sends itself are skipped.

What it must not do: decide leadership, or keep a probe running: the start-up check is
bounded (``PROBES`` × ``PROBE_GAP`` + ``WAIT``, plus at most 4 intervals when someone
answered), and the watch only reads. IPv6 while running is not watched: a packet socket
would see every IPv6 frame on the node (document, not pretend).
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address

from vipd.config import Config
from vipd.host.conflict import Conflict, format_mac, parse_claim, probe_frame
from vipd.host.neighbor import ETH_P_ARP, ETH_P_IPV6, parse_mac
from vipd.preflight import Preflight
from vipd.vrrp import packet
from vipd.vrrp.transport import Transport

# RFC 5227 spaces 3 probes 1-2 s apart for slow or sleeping hosts; a node start cannot wait
# that long, and on a LAN a host that has the address answers within a millisecond. The
# whole probe adds ~0.1 s to a start; a host too slow for it is caught later by ClaimWatch.
PROBES = 2
PROBE_GAP = 0.02
WAIT = 0.08  # after the last probe
PACKET_OUTGOING = 4  # sll_pkttype of frames this host sent


def _open(ifname: str, ethertype: int) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ethertype))
    try:
        sock.bind((ifname, ethertype))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _frames(sock: socket.socket) -> Iterator[bytes]:
    """Drain the socket; frames this host sent are skipped."""
    while True:
        try:
            data, addr = sock.recvfrom(2048)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            # ENETDOWN once when the link goes down (a packet socket reports it as an error
            # on the next read): nothing to read, and the watch must not end the daemon.
            return
        if len(addr) > 2 and addr[2] == PACKET_OUTGOING:
            continue
        yield data


def probe(
    ifname: str,
    mac: str,
    vip: IPv4Address | packet.IPAddress,
    explained: Callable[[], bool] | None = None,
    watch: int | None = None,
) -> list[str]:
    """MACs (other than ``mac``) that answered for ``vip`` on ``ifname``.

    ``explained`` (with ``watch``, a descriptor to wake on as well): called on every wake-up;
    once someone answered and it returns True (a VRRP router of ours was heard), the verdict
    cannot change (`Conflict.foreign`), so the probe ends early."""
    own = parse_mac(mac)
    frame = probe_frame(own, vip)
    ethertype = ETH_P_ARP if isinstance(vip, IPv4Address) else ETH_P_IPV6
    found: list[str] = []
    with contextlib.closing(_open(ifname, ethertype)) as sock:
        fds: list[int] = [sock.fileno()] if watch is None else [sock.fileno(), watch]
        end = time.monotonic() + PROBES * PROBE_GAP + WAIT
        sent, next_probe = 0, time.monotonic()
        while True:
            now = time.monotonic()
            if sent < PROBES and now >= next_probe:
                sock.send(frame)
                sent += 1
                next_probe = now + PROBE_GAP
            if now >= end:
                break
            wake = min(end, next_probe) if sent < PROBES else end
            select.select(fds, [], [], max(0.0, wake - now))
            for data in _frames(sock):
                claimant = parse_claim(data, vip)
                if claimant is not None and claimant != own:
                    text = format_mac(claimant)
                    if text not in found:
                        found.append(text)
            if explained is not None and explained() and found:
                break
    return found


def _vrrp_listener(pre: Preflight) -> Transport:
    return Transport(
        ifname=pre.link.name,
        ifindex=pre.link.index,
        source=pre.source,
        unicast_peers=pre.unicast_peers,
    )


def _adverts_heard(cfg: Config, transport: Transport, heard: list[str]) -> None:
    """Add the sources of the queued adverts of our VRID that carry the VIP to ``heard``."""
    for item in transport.receive():
        if isinstance(item, packet.DecodeError):
            continue
        try:
            advert, _ = packet.decode(item.message, item.src, item.dst)
        except packet.DecodeError:
            continue
        src = str(item.src)
        if (
            advert.vrid == cfg.election.vrrp.vrid
            and cfg.vip in advert.addresses
            and advert.priority
            and src not in heard
        ):
            heard.append(src)


def vrrp_routers(
    cfg: Config, pre: Preflight, timeout: float, listener: Transport | None = None
) -> list[str]:
    """Sources of valid-looking adverts of our VRID carrying the VIP, heard in ``timeout``.

    ``listener``: a VRRP socket opened earlier (and closed by the caller), whose queue
    already holds the adverts that arrived meanwhile; read first, waited on only if empty."""
    heard: list[str] = []
    transport = listener if listener is not None else _vrrp_listener(pre)
    try:
        end = time.monotonic() + timeout
        while True:
            _adverts_heard(cfg, transport, heard)
            if heard or (left := end - time.monotonic()) <= 0:
                break
            select.select([transport.fileno()], [], [], left)
    finally:
        if listener is None:
            transport.close()
    return heard


def check(cfg: Config, pre: Preflight) -> Conflict:
    """Probe for the VIP; if someone answers, see whether a VRRP router of ours explains it.

    In VRRP mode the VRRP socket opens before the probe and is read while it runs: a
    master's adverts sent meanwhile count, and once the master has answered and been heard
    the probe ends (nothing later can make the VIP foreign). A restarting backup at a short
    advert interval so knows in a few milliseconds, not the probe's whole window."""
    if cfg.election.mode != "vrrp":
        return Conflict(cfg.vip, pre.link.name, tuple(probe(pre.link.name, pre.link.mac, cfg.vip)))
    listener = _vrrp_listener(pre)
    heard: list[str] = []
    try:

        def explained() -> bool:
            _adverts_heard(cfg, listener, heard)
            return bool(heard)

        macs = tuple(probe(pre.link.name, pre.link.mac, cfg.vip, explained, listener.fileno()))
        if macs and not heard:
            timeout = 4 * cfg.election.vrrp.advert_interval
            heard = vrrp_routers(cfg, pre, timeout, listener)
    finally:
        listener.close()
    return Conflict(cfg.vip, pre.link.name, macs, tuple(heard) if macs else ())


class ClaimWatch:
    """ARP frames from other MACs that claim the VIP (IPv4), for the event loop's reader."""

    def __init__(
        self,
        ifname: str,
        mac: str,
        vip: IPv4Address,
        on_claim: Callable[[str], None],
        also_own: str | None = None,
    ) -> None:
        self.own = parse_mac(mac)
        # The virtual MAC (vipd.host.vmac) is ours too: our own announcements are sent from it.
        self.also_own = parse_mac(also_own) if also_own else None
        self.vip = vip
        self.on_claim = on_claim
        self.sock = _open(ifname, ETH_P_ARP)

    def fileno(self) -> int:
        return self.sock.fileno()

    def on_readable(self) -> None:
        for data in _frames(self.sock):
            claimant = parse_claim(data, self.vip)
            if claimant is not None and claimant not in (self.own, self.also_own):
                self.on_claim(format_mac(claimant))

    def close(self) -> None:
        self.sock.close()
