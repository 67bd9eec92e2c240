"""A host on the lab segment that sends VRRP adverts it should not: forged, spoofed, replayed.

What it is: the attacker of the lab's attack tests and of ``bench/attacks.py``, in the
client namespace (``Lab.client_ns``), with no keys of its own. `SENDER` is the program it
runs there (a raw socket; ``spoof`` writes its own IPv4 header, IP_HDRINCL, so the source
and the TTL are whatever the attack needs, to a unicast address or to the VRRP group);
`forged` and `password_advert` build adverts with ``vipd.vrrp.packet``, `signed` appends an
auth_hmac trailer with a key the attacker claims (``vipd.vrrp.auth``), `captured` reads
real adverts back from a ``vipd.lab.wire.Capture`` pcap so they can be replayed byte for byte,
and `metric_counts` reads a counter's labels from a node's /metrics.

What it must not do: send anything outside the lab's namespaces, or hold a key a test did not
hand it. IPv4 only: the attacks it serves are IPv4 ones.
"""

from __future__ import annotations

import ipaddress
import re
import struct
import sys
import textwrap
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from vipd.lab.nsthread import in_netns
from vipd.lab.topology import CLIENT4, Lab
from vipd.lab.wire import ETH_IPV4, VRRP_PROTO, iter_pcap
from vipd.vrrp import auth
from vipd.vrrp.packet import Advert, encode

__all__ = [
    "SENDER",
    "Captured",
    "attack",
    "captured",
    "forged",
    "metric_counts",
    "password_advert",
    "signed",
]

SENDER = textwrap.dedent(
    r"""
    import socket, struct, sys, time

    mode, src, ttl, gap, via = (sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
                                sys.argv[5])
    jobs = [(dst, bytes.fromhex(msg)) for dst, msg in (a.split("=") for a in sys.argv[6:])]
    if mode == "spoof":
        # IP_HDRINCL: our own IPv4 header, with a source that is not ours and the given TTL;
        # to the group, out of the interface that has ``via``.
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(via))
        def send(dst, msg):
            head = struct.pack("!BBHHHBBH4s4s", 0x45, 0xC0, 20 + len(msg), 0, 0, ttl, 112, 0,
                               socket.inet_aton(src), socket.inet_aton(dst))
            s.sendto(head + msg, (dst, 0))
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 112)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        def send(dst, msg):
            s.sendto(msg, (dst, 0))
    start = time.monotonic()
    for i, (dst, msg) in enumerate(jobs):
        if i and gap:
            # Paced on the start, not on the last send: a slow send does not slow the rate.
            time.sleep(max(0.0, start + i * gap - time.monotonic()))
        send(dst, msg)
    print(len(jobs))
    """
)


def forged(
    priority: int,
    interval_cs: int,
    src: str,
    dst: str,
    vip: str,
    *,
    vrid: int = 51,
    version: int = 3,
) -> str:
    """A VRRP advert for ``vip`` from ``src`` to ``dst``, as hex (v2: no authentication)."""
    advert = Advert(version, vrid, priority, interval_cs, (ipaddress.IPv4Address(vip),))
    return encode(advert, ipaddress.IPv4Address(src), ipaddress.IPv4Address(dst)).hex()


def password_advert(
    priority: int, interval_cs: int, src: str, dst: str, vip: str, password: str, *, vrid: int = 51
) -> str:
    """A VRRPv2 advert with the simple password (RFC 3768 §5.3.6.1, auth type 1), as hex:
    what anyone who ever heard one advert on the segment can send."""
    advert = Advert(
        2,
        vrid,
        priority,
        interval_cs,
        (ipaddress.IPv4Address(vip),),
        auth_type=1,
        auth_data=password.encode().ljust(8, b"\0")[:8],
    )
    return encode(advert, ipaddress.IPv4Address(src), ipaddress.IPv4Address(dst)).hex()


def signed(
    message_hex: str, src: str, key: bytes, *, key_id: int = 1, now: float | None = None
) -> str:
    """``message_hex`` with an auth_hmac trailer from ``src`` signed with ``key`` as
    ``key_id``, its sequence the clock's (fresh for any time window)."""
    message = bytes.fromhex(message_hex)
    sequence = auth.clock_sequence(time.time() if now is None else now)
    trailer = auth.sign(
        message,
        src=ipaddress.IPv4Address(src),
        keys=auth.KeyRing({key_id: key}, key_id),
        sequence=sequence,
    )
    return (message + trailer).hex()


def attack(
    lab: Lab,
    mode: str,
    src: str,
    ttl: int,
    jobs: list[tuple[str, str]],
    *,
    gap: float,
    via: str = CLIENT4,
    timeout: float = 120.0,
) -> None:
    """Send ``jobs`` ((destination, message hex), in order, ``gap`` seconds apart) from the
    client namespace: ``mode`` ``multicast`` (the kernel's header, from ``src``, which must be
    the client's) or ``spoof`` (our header: source ``src``, TTL ``ttl``)."""
    argv = [sys.executable, "-c", SENDER, mode, src, str(ttl), str(gap), via]
    argv += [f"{dst}={msg}" for dst, msg in jobs]
    out = lab.exec(lab.client_ns, argv, timeout=timeout).stdout.strip()
    if out != str(len(jobs)):
        raise RuntimeError(f"the attacker sent {out!r} of {len(jobs)} adverts")


@dataclass(frozen=True, slots=True)
class Captured:
    """One IPv4 VRRP datagram as it entered the bridge: its IP payload, trailer included."""

    ts: float  # CLOCK_REALTIME seconds (pcap timestamp)
    src: str
    dst: str
    payload: bytes

    @property
    def priority(self) -> int:
        return self.payload[2]


def captured(path: Path) -> list[Captured]:
    """Every IPv4 VRRP datagram of a ``Capture`` pcap, in file order."""
    out = []
    for ts, frame in iter_pcap(path):
        if len(frame) < 34 or struct.unpack("!H", frame[12:14])[0] != ETH_IPV4:
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        tot_len = struct.unpack("!H", ip[2:4])[0]
        if ip[9] != VRRP_PROTO or tot_len > len(ip):
            continue
        src = str(ipaddress.IPv4Address(ip[12:16]))
        dst = str(ipaddress.IPv4Address(ip[16:20]))
        out.append(Captured(ts, src, dst, bytes(ip[ihl:tot_len])))
    return out


def metric_counts(lab: Lab, ns: str, metric: str, label: str = "reason") -> dict[str, int]:
    """``metric``'s samples on vipd's /metrics in ``ns`` by the value of ``label`` (an
    unlabelled counter: under ""). Read from a thread inside ``ns`` (no process to start, so
    a loaded host does not stretch the time between two reads); retries for up to 10 s: the
    endpoint comes up with the daemon, and a busy host can make that late."""

    def fetch() -> str:
        with urllib.request.urlopen("http://127.0.0.1:2112/metrics", timeout=5) as r:
            return str(r.read().decode())

    deadline = time.monotonic() + 10.0
    while True:
        try:
            text = in_netns(ns, fetch)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no /metrics from {ns} ({lab.prefix}): {e}") from None
            time.sleep(0.2)
    pattern = re.compile(
        rf'^{re.escape(metric)}(?:\{{{re.escape(label)}="([^"]*)"\}})? ([0-9.e+]+)$'
    )
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = pattern.match(line.strip())
        if m:
            counts[m.group(1) or ""] = int(float(m.group(2)))
    return counts
