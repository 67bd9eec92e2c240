"""Who else has the VIP: an ARP/DAD probe before vipd claims it, and a watch while it leads.

What it is: the driver for ``vipd.host.conflict`` (RFC 5227 / RFC 4862 §5.4):

- ``check(cfg, pre)``: before the election (``vipd check`` and ``vipd run``), send
  ``PROBES`` probes ``PROBE_GAP`` apart on the VIP's interface and collect, for ``WAIT``
  more, the MACs of hosts other than this one that answer for the VIP. A VRRP router
  holding the VIP (the current leader, vipd or keepalived) answers too, so VRRP adverts of
  our VRID that carry the VIP are listened for from the first probe on, for up to 4 advert
  intervals when someone answered (a backup's longest Master_Down_Interval is 3 intervals +
  Skew_Time < 1 interval); answered and heard ends the probe at once (the verdict cannot
  change): heard → the VIP is VRRP-managed, go on; not heard → a foreign host has it,
  and vipd refuses to claim it (``vipd check`` exits 2 and says who; ``vipd run`` waits
  and probes again). IPv4 and IPv6 (a DAD Neighbor Solicitation from ``::``). VRRP mode
  only: in Lease mode the current holder is another vipd that sends no adverts.
- ``ClaimWatch``: while running (IPv4), a packet socket on the interface for ARP; every
  ARP frame whose sender IP is the VIP and whose sender MAC is not ours (a gratuitous ARP
  or a reply from another host) is handed to a callback, which counts and logs it when
  this node leads. Frames this node sends itself are skipped. ``probe(mac)`` asks one
  claimant, by a unicast ARP probe, whether it still has the VIP: its answer, if any, comes
  back to the callback as a claim.

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
from ipaddress import IPv4Address, IPv6Address

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
    # Opened with protocol 0, so it takes no frame until bind names the interface and the
    # ethertype: a packet socket opened with its protocol is hooked to every interface at
    # once, and re-binding it waits out an RCU grace period (synchronize_net in
    # net/packet/af_packet.c, packet_do_bind): 8-11 ms per socket here, at every start.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
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


class _Adverts:
    """Our VRID's adverts carrying one VIP, heard on its family's virtual router."""

    def __init__(self, cfg: Config, pre: Preflight, vip: IPv4Address | IPv6Address) -> None:
        self.vrid = cfg.election.vrrp.vrid
        self.vip = vip
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
            try:
                advert, _ = packet.decode(item.message, item.src, item.dst)
            except packet.DecodeError:
                continue
            ours = advert.vrid == self.vrid and self.vip in advert.addresses
            if ours and advert.priority and str(item.src) not in self.heard:
                self.heard.append(str(item.src))

    def close(self) -> None:
        self.transport.close()


def probe(
    ifname: str,
    mac: str,
    vip: IPv4Address | packet.IPAddress,
    adverts: _Adverts | None = None,
) -> list[str]:
    """MACs (other than ``mac``) that answered for ``vip`` on ``ifname``. With ``adverts``,
    our VRID's adverts are listened for meanwhile, and the probe ends as soon as someone
    answered and a VRRP router advertises the VIP: the verdict (not foreign) cannot change
    after that, whoever else answers, so waiting out the window would only delay the start."""
    own = parse_mac(mac)
    frame = probe_frame(own, vip)
    ethertype = ETH_P_ARP if isinstance(vip, IPv4Address) else ETH_P_IPV6
    found: list[str] = []
    with contextlib.closing(_open(ifname, ethertype)) as sock:
        end = time.monotonic() + PROBES * PROBE_GAP + WAIT
        sent, next_probe = 0, time.monotonic()
        readable: list[socket.socket | _Adverts] = [sock] if adverts is None else [sock, adverts]
        while True:
            now = time.monotonic()
            if sent < PROBES and now >= next_probe:
                sock.send(frame)
                sent += 1
                next_probe = now + PROBE_GAP
            if now >= end or (found and adverts is not None and adverts.heard):
                break
            wake = min(end, next_probe) if sent < PROBES else end
            select.select(readable, [], [], max(0.0, wake - now))
            if adverts is not None:
                adverts.read()
            for data in _frames(sock):
                claimant = parse_claim(data, vip)
                if claimant is not None and claimant != own:
                    text = format_mac(claimant)
                    if text not in found:
                        found.append(text)
    return found


def vrrp_routers(
    cfg: Config,
    pre: Preflight,
    timeout: float,
    vip: IPv4Address | IPv6Address | None = None,
    adverts: _Adverts | None = None,
) -> list[str]:
    """Sources of valid-looking adverts of our VRID carrying ``vip`` (default: the first
    VIP), heard in ``timeout`` on its family's virtual router (on ``adverts``, which may
    have heard some already, when given)."""
    listener = (
        adverts if adverts is not None else _Adverts(cfg, pre, cfg.vip if vip is None else vip)
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
        adverts: _Adverts | None = None
        if vrrp:
            with contextlib.suppress(OSError):  # then listened for after the probe, as before
                adverts = _Adverts(cfg, pre, vip)
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

    def probe(self, mac: str) -> None:
        """A unicast ARP probe for the VIP to ``mac`` (OSError if it cannot be sent)."""
        self.sock.send(probe_frame(self.own, self.vip, to=parse_mac(mac)))

    def close(self) -> None:
        self.sock.close()
