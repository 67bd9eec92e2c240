"""Wire timestamps for bench/failover.py: VRRP and ARP on the lab's bridge, per fault round.

What it is:

- ``BridgeCapture``: one ``tcpdump -i br0`` in the lab's ``<prefix>-lan`` namespace, writing
  ``ip proto 112 or arp or icmp6`` to a pcap file with kernel (CLOCK_REALTIME) timestamps at ns
  precision. Multicast snooping is off on ``br0`` and the bench runs VRRP over multicast, so
  every advert and every broadcast gratuitous ARP is flooded up to ``br0`` itself; ``-p`` keeps
  the bridge out of promiscuous mode, so the prober's unicast TCP is not copied up to it too.
  (Unicast VRRP would be switched port to port and missed here: vipd/lab/wire.py's
  per-port ``Capture`` is the tool for that.) It records the offset CLOCK_REALTIME −
  CLOCK_MONOTONIC (the clock the lab's rounds and the prober use) when the capture starts and
  when it stops, each the tightest of several bracketed reads, and tcpdump's own packet and
  kernel-drop counts.
- ``read_capture``: the pcap back as VRRP adverts (decoded by vipd/lab/wire.py's
  ``parse_frame``, the interop tests' decoder) and address announcements (gratuitous ARP:
  sender IP = target IP; unsolicited Neighbour Advertisements for IPv6), each attributed to a
  lab node by source address or MAC.
- ``analyse_round``: one fault round's timeline from the wire, on the monotonic clock:

  ``kill`` (node death): the dead master's last advert, the new master's first advert and its
  first gratuitous ARP for the VIP. **Takeover lateness** = (first GARP − dead master's last
  advert) − Master_Down_Interval(new master's priority): what the new master adds to the RFC
  timer (timer slack, scheduling, binding the address, sending). **Phase-corrected outage** =
  client outage + (start of the client's outage − dead master's last advert) = end of the
  client's outage − the last advert: the outage as if every fault had struck right after an
  advert, which removes the uniform 0..Adv spread that the random strike phase adds. The
  client's outage start (its last successful connect before the fault, 2 ms resolution) is
  used as the fault instant because the lab's own fault time is taken before ``ip link set
  down`` is spawned; the variant with the lab's fault time is kept in the JSON too.

  ``term`` (SIGTERM): SIGTERM → the old master's priority-0 advert, and from that advert to
  the new master's first advert and first GARP (the RFC wait there is Skew_Time).

What it must not do: judge (it returns numbers and notes), or touch anything outside the lab's
lan namespace.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import select
import struct
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vipd.lab.runner import Round
from vipd.lab.topology import VIP4, VIP6, Lab

# The lab's VRRP decoder, shared with the interop tests.
from vipd.lab.wire import WireAdvert, iter_pcap, parse_frame

ETH_ARP = 0x0806
ETH_IPV6 = 0x86DD
ETH_VLAN = 0x8100
ICMPV6 = 58
ND_NEIGHBOR_ADVERT = 136
CAPTURE_FILTER = "ip proto 112 or arp or icmp6"
OFFSET_READS = 9
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


# -- clocks ---------------------------------------------------------------------------------


def clock_offset(reads: int = OFFSET_READS) -> dict[str, float]:
    """CLOCK_REALTIME − CLOCK_MONOTONIC in seconds, from the tightest of ``reads`` brackets.

    Each read is monotonic, realtime, monotonic; the realtime read happened somewhere inside
    the bracket, so the offset is known to within half its width (``uncertainty_s``).
    """
    best: tuple[int, int] | None = None
    for _ in range(reads):
        m0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        r = time.clock_gettime_ns(time.CLOCK_REALTIME)
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best is None or m1 - m0 < best[1]:
            best = (r - (m0 + m1) // 2, m1 - m0)
    assert best is not None
    return {"offset_s": best[0] / 1e9, "uncertainty_s": best[1] / 2e9}


# -- capture --------------------------------------------------------------------------------


class BridgeCapture:
    """``tcpdump -i br0`` in the lab's lan namespace for the duration of the rounds."""

    def __init__(self, lab: Lab, path: Path) -> None:
        self.lab = lab
        self.path = path
        self.proc: subprocess.Popen[str] | None = None
        self.offset_start: dict[str, float] | None = None
        self.offset_end: dict[str, float] | None = None
        self.stats: dict[str, int] = {}
        self.stderr_tail = ""

    def start(self, timeout: float = 5.0) -> None:
        self.proc = self.lab.spawn(
            self.lab.lan_ns,
            [
                "tcpdump",
                "-i",
                "br0",
                "-p",  # no promiscuous bridge: only flooded frames (VRRP, ARP) come up
                "-n",
                "--immediate-mode",
                "-U",
                "--time-stamp-precision=nano",
                "-s",
                "256",
                "-w",
                str(self.path),
                CAPTURE_FILTER,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        ready, _, _ = select.select([self.proc.stderr], [], [], timeout)
        line = self.proc.stderr.readline() if ready else "(nothing within the timeout)"
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"tcpdump did not start: {line.strip()!r}")
        self.offset_start = clock_offset()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            time.sleep(0.05)  # let the last frames of the round reach the file
            proc.terminate()
        try:
            _, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=5)
        self.offset_end = clock_offset()
        self.stderr_tail = err.strip()[-500:]
        for line in err.splitlines():
            words = line.split()
            # "12 packets captured", "14 packets received by filter", "0 packets dropped by
            # kernel" (tcpdump's summary on exit)
            if len(words) >= 3 and words[0].isdigit() and words[1] == "packets":
                self.stats["_".join(words[2:])] = int(words[0])

    def info(self) -> dict[str, Any]:
        drift = None
        if self.offset_start is not None and self.offset_end is not None:
            drift = self.offset_end["offset_s"] - self.offset_start["offset_s"]
        return {
            "interface": "br0",
            "filter": CAPTURE_FILTER,
            "offset_start": self.offset_start,
            "offset_end": self.offset_end,
            "offset_drift_s": drift,
            "tcpdump": self.stats,
            "tcpdump_stderr": self.stderr_tail,
        }


def node_addresses(lab: Lab) -> tuple[dict[IPAddress, str], dict[str, str]]:
    """Each node's own addresses (not the VIPs) and eth0 MAC → node name."""
    vips = {ipaddress.ip_address(VIP4), ipaddress.ip_address(VIP6)}
    by_ip: dict[IPAddress, str] = {}
    by_mac: dict[str, str] = {}
    for node in lab.nodes:
        for link in json.loads(lab.ip(node.ns, "-j", "addr", "show", "dev", "eth0") or "[]"):
            by_mac[str(link["address"]).lower()] = node.name
            for a in link.get("addr_info", []):
                ip = ipaddress.ip_address(a["local"])
                if ip not in vips:
                    by_ip[ip] = node.name
    return by_ip, by_mac


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Announce:
    """One gratuitous ARP (or unsolicited Neighbour Advertisement) seen on the bridge."""

    ts: float  # CLOCK_REALTIME seconds (pcap timestamp)
    sender: str | None  # the node whose MAC sent it
    mac: str
    address: IPAddress
    kind: str  # "garp-request", "garp-reply" or "na"


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def parse_announce(ts: float, frame: bytes, by_mac: dict[str, str]) -> Announce | None:
    """A gratuitous ARP (sender IP = target IP) or an unsolicited NA, or None."""
    if len(frame) < 14:
        return None
    ethertype, off = struct.unpack("!H", frame[12:14])[0], 14
    if ethertype == ETH_VLAN and len(frame) >= 18:
        ethertype, off = struct.unpack("!H", frame[16:18])[0], 18
    body = frame[off:]
    if ethertype == ETH_ARP and len(body) >= 28:
        htype, ptype, hlen, plen, op = struct.unpack("!HHBBH", body[:8])
        if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4) or op not in (1, 2):
            return None
        sha, spa, tpa = body[8:14], body[14:18], body[24:28]
        if spa != tpa:
            return None  # an ordinary request or reply, not an announcement
        mac = _mac(sha)
        return Announce(
            ts=ts,
            sender=by_mac.get(mac),
            mac=mac,
            address=ipaddress.IPv4Address(spa),
            kind="garp-request" if op == 1 else "garp-reply",
        )
    if ethertype == ETH_IPV6 and len(body) >= 40 + 24:
        if body[6] != ICMPV6 or body[40] != ND_NEIGHBOR_ADVERT:
            return None
        if ipaddress.IPv6Address(body[24:40]) != ipaddress.IPv6Address("ff02::1"):
            return None  # solicited: sent to the asker, not to everyone
        mac = _mac(frame[6:12])
        return Announce(
            ts=ts,
            sender=by_mac.get(mac),
            mac=mac,
            address=ipaddress.IPv6Address(body[48:64]),
            kind="na",
        )
    return None


def read_capture(
    path: Path, by_ip: dict[IPAddress, str], by_mac: dict[str, str]
) -> tuple[list[WireAdvert], list[Announce], int]:
    """Adverts (``sender`` = the node owning the source address, else ``?``), announcements,
    and how many frames were neither."""
    adverts: list[WireAdvert] = []
    announces: list[Announce] = []
    other = 0
    for ts, frame in iter_pcap(path):
        advert = parse_frame(ts, "?", frame)
        if advert is not None:
            adverts.append(dataclasses.replace(advert, sender=by_ip.get(advert.src, "?")))
            continue
        ann = parse_announce(ts, frame, by_mac)
        if ann is not None:
            announces.append(ann)
        else:
            other += 1
    return adverts, announces, other


# -- per round ------------------------------------------------------------------------------


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def analyse_round(
    rnd: Round,
    *,
    since: float,
    offset: float,
    adverts: Sequence[WireAdvert],
    announces: Sequence[Announce],
    vip: str,
    vrid: int,
    mdi: float,
    skew: float,
) -> dict[str, Any]:
    """One round's wire timeline; every time on the monotonic clock (pcap time − ``offset``).

    ``since``: where this round's window opens (when the previous round restored its node,
    or the capture's start); it closes when this round restores its node. ``mdi`` and
    ``skew``: the new master's Master_Down_Interval and Skew_Time in seconds.
    """
    until = rnd.t_restore if rnd.t_restore is not None else float("inf")
    want = ipaddress.ip_address(vip)
    adv = [
        (a.ts - offset, a)
        for a in adverts
        if a.vrid == vrid and since <= a.ts - offset <= until and a.type == 1
    ]
    ann = [(x.ts - offset, x) for x in announces if x.address == want and since <= x.ts - offset]
    ann = [(t, x) for t, x in ann if t <= until]
    old, new = rnd.old_leader, rnd.new_leader
    out: dict[str, Any] = {
        "round": rnd.number,
        "fault": rnd.fault,
        "old_leader": old,
        "new_leader": new,
        "mdi_ms": _ms(mdi),
        "skew_ms": _ms(skew),
        "adverts_in_window": len(adv),
        "notes": [],
    }
    notes: list[str] = out["notes"]
    outage = rnd.failover
    client_ms = _ms(outage.outage) if outage is not None and outage.recovered else None
    out["client_outage_ms"] = client_ms
    if new is None or new == old:
        notes.append("no new leader: nothing to time")
        return out
    if rnd.fault == "term":
        zero = [(t, a) for t, a in adv if a.sender == old and a.priority == 0 and t >= rnd.t_fault]
        if not zero:
            notes.append(f"no priority-0 advert from {old} after the fault")
            return out
        ref = zero[0][0]
        out["priority0_advert"] = ref
        out["sigterm_to_priority0_ms"] = _ms(ref - rnd.t_fault)
        out["priority0_adverts"] = len(zero)
    else:
        last = [(t, a) for t, a in adv if a.sender == old and a.priority > 0]
        if not last:
            notes.append(f"no advert from {old} in the round's window")
            return out
        ref = last[-1][0]
        out["dead_last_advert"] = ref
        out["fault_minus_last_advert_ms"] = _ms(rnd.t_fault - ref)
        if outage is not None and outage.gap_start is not None:
            # The client's last success before the outage started before the link went down,
            # and so did the dead master's last advert: a gap here beyond the probe interval
            # would mean the two clocks do not line up.
            out["outage_start_minus_last_advert_ms"] = _ms(outage.gap_start - ref)
            if outage.gap_end is not None and outage.recovered:
                out["phase_corrected_outage_ms"] = _ms(outage.gap_end - ref)
        if client_ms is not None:
            out["phase_corrected_outage_lab_fault_ms"] = round(
                client_ms + (rnd.t_fault - ref) * 1000, 3
            )
    first_adv = [(t, a) for t, a in adv if a.sender == new and a.priority > 0 and t > ref]
    first_ann = [(t, x) for t, x in ann if x.sender == new and t > ref]
    if first_adv:
        out["new_first_advert"] = first_adv[0][0]
        out["to_first_advert_ms"] = _ms(first_adv[0][0] - ref)
        wait = skew if rnd.fault == "term" else mdi
        out["advert_lateness_ms"] = _ms(first_adv[0][0] - ref - wait)
    else:
        notes.append(f"no advert from the new leader {new}")
    if first_ann:
        wait = skew if rnd.fault == "term" else mdi
        out["new_first_garp"] = first_ann[0][0]
        out["to_first_garp_ms"] = _ms(first_ann[0][0] - ref)
        out["takeover_lateness_ms"] = _ms(first_ann[0][0] - ref - wait)
        out["garps_from_new_leader"] = len(first_ann)
        if first_adv:
            out["first_advert_to_first_garp_ms"] = _ms(first_ann[0][0] - first_adv[0][0])
    else:
        notes.append(f"no gratuitous ARP for {vip} from the new leader {new}")
    others = sorted({a.sender for t, a in adv if t > ref and a.sender not in (old, new)})
    if others:
        notes.append(f"adverts from other nodes too: {', '.join(others)}")
    garp_others = sorted(
        {x.sender or x.mac for t, x in ann if t > ref and x.sender not in (old, new)}
    )
    if garp_others:
        notes.append(f"gratuitous ARPs for the VIP from others too: {', '.join(garp_others)}")
    return out
