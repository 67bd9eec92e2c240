"""Who else has the VIP: an ARP/DAD probe on the wire, and a watch while leading.

What it is: the wire side of ``vipd.host.conflict`` (RFC 5227 / RFC 4862 §5.4):

- ``probe(ifname, mac, vip, adverts)``: send ``PROBES`` probes ``PROBE_GAP`` apart on the
  VIP's interface and collect, for ``WAIT`` more, the MACs of hosts other than this one that
  answer for the VIP. IPv4 and IPv6 (a DAD Neighbor Solicitation from ``::``). ``adverts``,
  when given, is read meanwhile and ends the probe as soon as someone answered and it heard
  someone (the start-up check of a VRRP node passes its VRID's adverts:
  ``vipd.vrrp.startprobe``, which decides what an answer means).
- ``ClaimWatch``: while running (IPv4), a packet socket on the interface for ARP; every
  ARP frame whose sender IP is the VIP and whose sender MAC is not ours (a gratuitous ARP
  or a reply from another host) is handed to a callback, which counts and logs it when
  this node leads. Frames this node sends itself are skipped. ``probe(mac)`` asks one
  claimant, by a unicast ARP probe, whether it still has the VIP: its answer, if any, comes
  back to the callback as a claim.

What it must not do: decide leadership or what an answer means (the callers do), import
the election or the config, or keep a probe running: it is bounded (``PROBES`` ×
``PROBE_GAP`` + ``WAIT``), and the watch only reads. IPv6 while running is not watched: a
packet socket would see every IPv6 frame on the node (document, not pretend).
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address, IPv6Address
from typing import Protocol

from vipd.host.conflict import format_mac, parse_claim, probe_frame
from vipd.host.neighbor import ETH_P_ARP, ETH_P_IPV6, parse_mac

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


class Listener(Protocol):
    """Something else heard while probing (the VRRP adverts of our VRID, ``vipd.vrrp.startprobe``):
    readable like a socket; ``heard`` is non-empty once it explains an answer."""

    heard: list[str]

    def fileno(self) -> int: ...
    def read(self) -> None: ...


def probe(
    ifname: str,
    mac: str,
    vip: IPv4Address | IPv6Address,
    adverts: Listener | None = None,
) -> list[str]:
    """MACs (other than ``mac``) that answered for ``vip`` on ``ifname``. With ``adverts``,
    it is read meanwhile, and the probe ends as soon as someone answered and ``adverts``
    heard someone: the verdict (not foreign) cannot change after that, whoever else answers,
    so waiting out the window would only delay the start."""
    own = parse_mac(mac)
    frame = probe_frame(own, vip)
    ethertype = ETH_P_ARP if isinstance(vip, IPv4Address) else ETH_P_IPV6
    found: list[str] = []
    with contextlib.closing(_open(ifname, ethertype)) as sock:
        end = time.monotonic() + PROBES * PROBE_GAP + WAIT
        sent, next_probe = 0, time.monotonic()
        readable: list[socket.socket | Listener] = [sock] if adverts is None else [sock, adverts]
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
