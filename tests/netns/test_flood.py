"""10^5 bad VRRP packets thrown at live vipd clusters: no crash, no role change, each counted.

What it tests: a client on the lab's segment sends 100,000 VRRP packets that every vipd
must drop (60,000 multicast to a 3-node multicast cluster, seen by all three; 40,000
unicast to the nodes of a 3-node unicast cluster), at a paced rate, through a raw socket
with packets built here with ``struct`` (an encoder independent of vipd's). Each kind is
a would-be winner — priority 254 for our VRID and VIP — broken in exactly one way:

    truncated (5 bytes) · version 5 · type 2 · bad checksum · length (3 bytes too many)
    · TTL 1 · VRID 52 · another VIP in the address list · interval 0 · (unicast cluster)
    a source that is not a configured peer

If any of them were accepted, the node that got it would step down (or a backup would
stop its down timer) and the timeline would show a role change. The test asserts: every
daemon still runs, the VIP stayed on n1 alone the whole time (``HolderWatch``), no
``became`` line was logged during the flood, and each node's
``vipd_vrrp_adverts_invalid_total{reason=…}`` (scraped from its :2112/metrics) rose by
exactly the number of packets of that kind it received — the kernel's receive-queue drops
for vipd's socket (``/proc/net/raw``) are read as well, and must be zero for the exact
count to be meaningful. Needs root.
"""

from __future__ import annotations

import re
import sys
import textwrap
import time
from collections.abc import Callable

from vipd.lab.daemons import VrrpSpec, make_daemon
from vipd.lab.responder import Responder
from vipd.lab.topology import CLIENT4, VIP4, Lab
from vipd.lab.watch import HolderWatch

PER_KIND_MULTICAST = 6_000  # × 10 kinds = 60,000, each received by 3 nodes
PER_NODE_UNICAST = 13_334  # × 3 nodes ≈ 40,000
CHUNK, PAUSE = 100, 0.03  # paced: ≤ 3,300 packets/s (see the module docstring)

SENDER = textwrap.dedent(
    r"""
    import ipaddress, socket, struct, sys, time

    def csum(data):
        if len(data) % 2:
            data += b"\0"
        s = sum(struct.unpack(f"!{len(data) // 2}H", data))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        return ~s & 0xFFFF

    def advert(src, dst, *, vrid=51, prio=254, interval=10, vips=("10.77.0.100",),
               first=0x31, good_sum=True):
        addrs = b"".join(ipaddress.IPv4Address(a).packed for a in vips)
        head = struct.pack("!BBBBH", first, vrid, prio, len(vips), interval & 0x0FFF)
        msg = head + b"\0\0" + addrs
        pseudo = (ipaddress.IPv4Address(src).packed + ipaddress.IPv4Address(dst).packed
                  + struct.pack("!BBH", 0, 112, len(msg)))
        c = csum(pseudo + msg)
        if not good_sum:
            c ^= 0x5A5A
        return head + struct.pack("!H", c) + addrs

    mode, per = sys.argv[1], int(sys.argv[2])
    chunk, pause = int(sys.argv[3]), float(sys.argv[4])
    src = "10.77.0.2"
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 112)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
    plan = []  # (name, packet, destination, multicast ttl)
    if mode == "multicast":
        g = "224.0.0.18"
        good = advert(src, g)
        plan = [
            ("truncated", good[:5], g, 255),
            ("version", bytes([0x51]) + good[1:], g, 255),
            ("type", advert(src, g, first=0x32), g, 255),
            ("checksum", advert(src, g, good_sum=False), g, 255),
            ("length", good + b"\0\0\0", g, 255),
            ("ttl", good, g, 1),
            ("vrid", advert(src, g, vrid=52), g, 255),
            ("address-list", advert(src, g, vips=("10.77.0.101",)), g, 255),
            ("interval", advert(src, g, interval=0), g, 255),
            # A second "address-list" kind: two addresses, ours among them.
            ("address-list", advert(src, g, vips=("10.77.0.100", "10.77.0.101")), g, 255),
        ]
    else:
        for node in sys.argv[5:]:
            plan.append(("source", advert(src, node), node, 255))
    sent = {}
    n = 0
    for name, pkt, dst, ttl in plan:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        for _ in range(per):
            while True:
                try:
                    s.sendto(pkt, (dst, 0))
                    break
                except OSError:  # ENOBUFS: the send queue is full, wait for it
                    time.sleep(0.001)
            n += 1
            if n % chunk == 0:
                time.sleep(pause)
        sent[name] = sent.get(name, 0) + per
    print(" ".join(f"{k}={v}" for k, v in sent.items()))
    """
)

INVALID_RE = re.compile(r'^vipd_vrrp_adverts_invalid_total\{reason="([^"]+)"\} ([0-9.e+]+)$')


def invalid_counts(lab: Lab, ns: str) -> dict[str, int]:
    code = (
        "import urllib.request;"
        "print(urllib.request.urlopen('http://127.0.0.1:2112/metrics', timeout=5).read()"
        ".decode())"
    )
    deadline = time.monotonic() + 10.0
    while True:  # the endpoint comes up with the daemon; a busy host can make that late
        proc = lab.exec(ns, [sys.executable, "-c", code], check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert proc.returncode == 0, f"no /metrics from {ns}: {proc.stderr.strip()[-300:]}"
    out = proc.stdout
    counts: dict[str, int] = {}
    for line in out.splitlines():
        m = INVALID_RE.match(line.strip())
        if m:
            counts[m.group(1)] = int(float(m.group(2)))
    assert counts, f"no vipd_vrrp_adverts_invalid_total in /metrics of {ns}:\n{out[:2000]}"
    return counts


def raw_drops(lab: Lab, ns: str) -> int:
    """Datagrams the kernel dropped at the namespace's protocol-112 raw sockets."""
    out = lab.exec(ns, ["cat", "/proc/net/raw"]).stdout.splitlines()
    drops = 0
    for line in out[1:]:
        cols = line.split()
        # local_address is "ADDR:PORT" with the protocol in the port field (hex 0070 = 112)
        if len(cols) >= 13 and cols[1].endswith(":0070"):
            drops += int(cols[-1])
    return drops


def flood(lab: Lab, mode: str, per: int, targets: list[str]) -> dict[str, int]:
    argv = [sys.executable, "-c", SENDER, mode, str(per), str(CHUNK), str(PAUSE), *targets]
    out = lab.exec(lab.client_ns, argv, timeout=180).stdout.strip()
    return {k: int(v) for k, v in (item.split("=") for item in out.split())}


def run_cluster(make_lab: Callable[..., Lab], spec: VrrpSpec, mode: str) -> None:
    lab = make_lab(3)
    daemons = {n.name: make_daemon("vipd", lab, n, spec) for n in lab.nodes}
    for n in lab.nodes:
        Responder(lab, n).start()
    with HolderWatch(lab, spec.vip) as watch:
        for d in daemons.values():
            d.start()
        deadline = time.monotonic() + spec.master_down_interval(100) + 5.0
        while lab.holders(spec.vip) != ["n1"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lab.holders(spec.vip) == ["n1"], lab.holders(spec.vip)
        time.sleep(4 * spec.advert_interval)  # settled: every backup follows n1
        logs_before = {n: d.log_text().count('msg="became') for n, d in daemons.items()}
        before = {n.name: invalid_counts(lab, n.ns) for n in lab.nodes}
        drops_before = {n.name: raw_drops(lab, n.ns) for n in lab.nodes}
        t0 = time.monotonic()
        if mode == "multicast":
            sent = flood(lab, mode, PER_KIND_MULTICAST, [])
            expected = {n.name: sent for n in lab.nodes}  # the group reaches every node
        else:
            sent = flood(lab, mode, PER_NODE_UNICAST, [n.ipv4 for n in lab.nodes])
            expected = {n.name: {"source": PER_NODE_UNICAST} for n in lab.nodes}
        t1 = time.monotonic()
        time.sleep(4 * spec.advert_interval + 0.5)  # let the daemons drain their queues
        tl = watch.timeline()
        assert tl.changes_between(t0, time.monotonic()) == [], tl.changes
        assert lab.holders(spec.vip) == ["n1"]
        total = sum(sent.values())
        print(f"\n{mode}: sent {total} packets in {t1 - t0:.1f} s: {sent}")
        for node in lab.nodes:
            d = daemons[node.name]
            assert d.running(), f"{node.name} died\n{d.log_tail()}"
            assert d.log_text().count('msg="became') == logs_before[node.name], d.log_tail()
            after = invalid_counts(lab, node.ns)
            drops = raw_drops(lab, node.ns) - drops_before[node.name]
            delta = {
                r: after.get(r, 0) - before[node.name].get(r, 0)
                for r in after
                if after.get(r, 0) != before[node.name].get(r, 0)
            }
            print(f"{node.name}: counted {delta}, kernel drops {drops}")
            assert drops == 0, f"{node.name}: the kernel dropped {drops} datagrams"
            assert delta == expected[node.name], (node.name, delta, expected[node.name])


def test_100k_bad_packets_change_nothing_and_are_counted_by_reason(
    make_lab: Callable[..., Lab],
) -> None:
    run_cluster(make_lab, VrrpSpec(vip=VIP4, advert_interval=0.1), "multicast")
    run_cluster(make_lab, VrrpSpec(vip=VIP4, advert_interval=0.1, unicast=True), "unicast")
    assert CLIENT4 == "10.77.0.2"  # the sender's source above: not a configured peer
    assert 10 * PER_KIND_MULTICAST + 3 * PER_NODE_UNICAST >= 100_000
