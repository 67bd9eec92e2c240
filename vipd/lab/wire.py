"""VRRP adverts as seen on the lab's bridge: tcpdump per bridge port, a tiny pcap reader, and an
independent check of each advert against what keepalived 2.2.7 accepts.

What it is: ``Capture`` runs one ``tcpdump -Q in`` per node port inside the lab's lan namespace
(a port's *incoming* frames are exactly what that node sent, multicast or unicast; capturing on
``br0`` itself would miss unicast frames switched between two ports). ``Capture.adverts()``
reads the pcap files back into ``WireAdvert`` records with kernel (CLOCK_REALTIME) timestamps,
so timings are wire-to-wire and free of process or log latency. ``contract_problems`` checks
one advert against what a keepalived peer accepts (RFC 9568 §5.1-§5.2 and §7.1, keepalived's
``vrrp.c`` receive checks): TTL 255, exact lengths, version, VRID, the single VIP, v2
interval/auth, and the checksum in the form keepalived verifies (v2: message only; v3/IPv4:
with the IPv4 pseudo-header; IPv6: the IPv6 pseudo-header). It is written from the RFCs and
keepalived's code, not from vipd's codec, so a shared misunderstanding cannot hide.

What it must not do: decide pass/fail for a test (it returns data and problem strings), or
touch anything outside the lab's lan namespace.
"""

from __future__ import annotations

import ipaddress
import select
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vipd.lab.topology import Lab, Node

VRRP_PROTO = 112
ETH_ARP = 0x0806
ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
ETH_VLAN = 0x8100
LINKTYPE_ETHERNET = 1
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class WireAdvert:
    """One VRRP advert as captured on the bridge port of the node that sent it."""

    ts: float  # CLOCK_REALTIME seconds (pcap timestamp)
    sender: str  # node name whose port it entered the bridge on
    src: IPAddress
    dst: IPAddress
    ttl: int  # TTL or hop limit
    ip_len_ok: bool  # IPv4: tot_len matches the captured length and IHL is 5
    version: int
    type: int
    vrid: int
    priority: int
    naddr: int
    auth_type: int  # v2 only (0 for v3)
    interval: float  # seconds (v2: whole seconds on the wire; v3: centiseconds / 100)
    addresses: tuple[IPAddress, ...]
    auth_data: bytes  # v2 only: the 8-byte trailer
    message_len: int  # the VRRP message's length (IP payload)
    checksum_ok: bool  # in the form keepalived 2.2.7 verifies (see module docstring)
    message_only_ok: bool = False  # v3/IPv4: the RFC 9568 §5.2.8 form, the message alone


def _csum(data: bytes) -> int:
    """RFC 1071 one's-complement sum, folded; 0 over data that includes a valid checksum."""
    if len(data) % 2:
        data += b"\x00"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


def _vrrp(
    ts: float, sender: str, src: IPAddress, dst: IPAddress, ttl: int, ip_len_ok: bool, msg: bytes
) -> WireAdvert | None:
    if len(msg) < 8:
        return None
    vers_type, vrid, priority, naddr = msg[0], msg[1], msg[2], msg[3]
    version, typ = vers_type >> 4, vers_type & 0x0F
    alen = 4 if src.version == 4 else 16
    if version == 2:
        auth_type, interval = msg[4], float(msg[5])
        expect_len = 8 + naddr * alen + 8
    else:
        auth_type, interval = 0, (struct.unpack("!H", msg[4:6])[0] & 0x0FFF) / 100
        expect_len = 8 + naddr * alen
    body = msg[8 : 8 + naddr * alen]
    addrs = tuple(
        ipaddress.ip_address(body[i : i + alen]) for i in range(0, len(body) - alen + 1, alen)
    )
    auth_data = msg[8 + naddr * alen : 8 + naddr * alen + 8] if version == 2 else b""
    if src.version == 6:
        pseudo = src.packed + dst.packed + struct.pack("!I3xB", len(msg), VRRP_PROTO)
        ok = _csum(pseudo + msg) == 0
    elif version == 3:
        pseudo = src.packed + dst.packed + struct.pack("!xBH", VRRP_PROTO, len(msg))
        ok = _csum(pseudo + msg) == 0
    else:
        ok = _csum(msg) == 0
    return WireAdvert(
        ts=ts,
        sender=sender,
        src=src,
        dst=dst,
        ttl=ttl,
        ip_len_ok=ip_len_ok and len(msg) == expect_len,
        version=version,
        type=typ,
        vrid=vrid,
        priority=priority,
        naddr=naddr,
        auth_type=auth_type,
        interval=interval,
        addresses=addrs,
        auth_data=auth_data,
        message_len=len(msg),
        checksum_ok=ok,
        message_only_ok=version == 3 and src.version == 4 and _csum(msg) == 0,
    )


def parse_frame(ts: float, sender: str, frame: bytes) -> WireAdvert | None:
    """An Ethernet frame → its VRRP advert, or None if it carries none."""
    if len(frame) < 14:
        return None
    ethertype, off = struct.unpack("!H", frame[12:14])[0], 14
    if ethertype == ETH_VLAN:
        ethertype, off = struct.unpack("!H", frame[16:18])[0], 18
    ip = frame[off:]
    if ethertype == ETH_IPV4 and len(ip) >= 20:
        ihl = (ip[0] & 0x0F) * 4
        tot_len = struct.unpack("!H", ip[2:4])[0]
        if ip[9] != VRRP_PROTO or tot_len > len(ip):
            return None
        src = ipaddress.IPv4Address(ip[12:16])
        dst = ipaddress.IPv4Address(ip[16:20])
        # Ethernet pads short frames: tot_len is what the receiver's kernel keeps.
        return _vrrp(ts, sender, src, dst, ip[8], ihl == 20, ip[ihl:tot_len])
    if ethertype == ETH_IPV6 and len(ip) >= 40:
        if ip[6] != VRRP_PROTO:  # no extension headers expected on VRRP
            return None
        plen = struct.unpack("!H", ip[4:6])[0]
        src6 = ipaddress.IPv6Address(ip[8:24])
        dst6 = ipaddress.IPv6Address(ip[24:40])
        return _vrrp(ts, sender, src6, dst6, ip[7], plen <= len(ip) - 40, ip[40 : 40 + plen])
    return None


def gratuitous_arp(frame: bytes) -> ipaddress.IPv4Address | None:
    """The address a gratuitous ARP (sender IP = target IP, RFC 5227 §3) announces, or None."""
    if len(frame) < 42 or struct.unpack("!H", frame[12:14])[0] != ETH_ARP:
        return None
    spa, tpa = frame[28:32], frame[38:42]
    return ipaddress.IPv4Address(spa) if spa == tpa else None


def iter_pcap(path: Path) -> Iterator[tuple[float, bytes]]:
    """(timestamp, Ethernet frame) of every whole record of a classic pcap file.

    A file that is missing or has no header yet yields nothing; a last record that tcpdump is
    still writing is left out.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    if len(data) < 24:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a pcap file (magic {magic.hex()})")
    scale = 1e9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e6
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != LINKTYPE_ETHERNET:
        raise ValueError(f"{path}: link type {linktype}, expected Ethernet")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(endian + "IIII", data[off : off + 16])
        if off + 16 + incl > len(data):
            return
        yield sec + frac / scale, data[off + 16 : off + 16 + incl]
        off += 16 + incl


def read_pcap(path: Path, sender: str) -> list[WireAdvert]:
    """Every VRRP advert in a (possibly still growing) classic pcap file."""
    out: list[WireAdvert] = []
    for ts, frame in iter_pcap(path):
        advert = parse_frame(ts, sender, frame)
        if advert is not None:
            out.append(advert)
    return out


class Capture:
    """``tcpdump -Q in`` on the bridge ports of ``nodes``, one pcap file per node; with
    ``arp`` the ARP frames too, so the order of gratuitous ARPs and adverts can be read."""

    def __init__(self, lab: Lab, nodes: list[Node], *, arp: bool = False) -> None:
        self.lab = lab
        self.nodes = nodes
        self.arp = arp
        self.paths = {n.name: lab.workdir / f"wire-{n.name}.pcap" for n in nodes}
        self._procs: list[subprocess.Popen[Any]] = []

    def start(self, timeout: float = 5.0) -> None:
        for node in self.nodes:
            proc = self.lab.spawn(
                self.lab.lan_ns,
                [
                    "tcpdump",
                    "-i",
                    node.port,
                    "-Q",
                    "in",
                    "--immediate-mode",  # no TPACKET_V3 block timeout: the test reads live
                    "-U",  # and write every packet to the file as it comes
                    "-n",
                    "-s",
                    "256",
                    "-w",
                    str(self.paths[node.name]),
                    "ip proto 112 or ip6 proto 112" + (" or arp" if self.arp else ""),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            self._procs.append(proc)
        deadline = time.monotonic() + timeout
        for proc in self._procs:
            assert proc.stderr is not None
            # "listening on nX, link-type EN10MB …" once the capture is armed.
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([proc.stderr], [], [], left)
            line = proc.stderr.readline() if ready else "(nothing within the timeout)"
            if "listening on" not in line:
                raise RuntimeError(f"tcpdump did not start: {line.strip()!r}")

    def adverts(self) -> list[WireAdvert]:
        """All adverts captured so far, from every port, in time order."""
        found = [a for name, path in self.paths.items() for a in read_pcap(path, name)]
        return sorted(found, key=lambda a: a.ts)

    def gratuitous_arps(self, vip: str) -> list[tuple[float, str]]:
        """(timestamp, sender node) of every gratuitous ARP for ``vip``, in time order."""
        want = ipaddress.ip_address(vip)
        found = [
            (ts, name)
            for name, path in self.paths.items()
            for ts, frame in iter_pcap(path)
            if gratuitous_arp(frame) == want
        ]
        return sorted(found)

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=2)
            if proc.stderr is not None:
                proc.stderr.close()


def contract_problems(
    a: WireAdvert,
    *,
    version: int,
    vrid: int,
    vip: str,
    interval: float,
    auth_pass: str | None,
    unicast_dst: IPAddress | None,
) -> list[str]:
    """Why keepalived 2.2.7 (or the RFC) would reject this advert; empty if it is fine.

    ``unicast_dst``: the address a unicast advert from this sender must go to (the peer's
    ``unicast_src_ip``), or None in multicast mode.
    """
    p: list[str] = []
    if a.version != version:
        p.append(f"version {a.version}, want {version}")
    if a.type != 1:
        p.append(f"type {a.type}, want 1 (advertisement)")
    if a.vrid != vrid:
        p.append(f"vrid {a.vrid}, want {vrid}")
    if a.ttl != 255:
        p.append(f"TTL/hop limit {a.ttl}, want 255")
    if not a.ip_len_ok:
        p.append(f"length mismatch (VRRP message {a.message_len} bytes, naddr {a.naddr})")
    if not a.checksum_ok:
        p.append("checksum not in keepalived's form")
    if a.addresses != (ipaddress.ip_address(vip),):
        p.append(f"addresses {[str(x) for x in a.addresses]}, want [{vip}]")
    if abs(a.interval - interval) > 1e-9:
        p.append(f"interval {a.interval:g} s, want {interval:g} s")
    if version == 2:
        want_type = 1 if auth_pass else 0
        want_data = (auth_pass or "").encode().ljust(8, b"\x00")[:8]
        if a.auth_type != want_type:
            p.append(f"auth type {a.auth_type}, want {want_type}")
        if a.auth_data != want_data:
            p.append(f"auth data {a.auth_data!r}, want {want_data!r}")
    if unicast_dst is None:
        group = "224.0.0.18" if a.src.version == 4 else "ff02::12"
        if a.dst != ipaddress.ip_address(group):
            p.append(f"dst {a.dst}, want {group}")
        if a.src.version == 6 and not a.src.is_link_local:
            p.append(f"IPv6 source {a.src} is not link-local (RFC 9568 §5.1.2.1)")
    elif a.dst != unicast_dst:
        p.append(f"dst {a.dst}, want the peer's unicast_src_ip {unicast_dst}")
    return p
