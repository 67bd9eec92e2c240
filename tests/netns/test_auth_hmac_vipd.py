"""Two vipd nodes with ``election.vrrp.auth_hmac`` and an attacker without the key, in network
namespaces (no keepalived needed: this runs in CI).

What it tests: vipd n1 (priority 150) and n2 (100), VRRPv3 at 0.1 s, multicast, enforce mode,
one key file. They agree on one holder (n2 hears n1's signed adverts; if it dropped them it
would hold the VIP too). The attacker in the lab's client namespace sends priority-254
adverts built with ``vipd.vrrp.packet`` through a raw socket: unsigned ones, and ones signed
with another key. Neither moves the VIP (an unsigned priority-254 advert makes a node without
auth step down at once), and both nodes count them in ``vipd_vrrp_auth_failures_total``
(``missing``, ``bad-hmac``). n2 restarted while n1 holds the VIP joins as a backup (its start
probe reads the signed adverts). Then n1 dies and n2 takes over.

Needs root (skips with the reason otherwise, fails under CI=true).
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import sys
import time
from collections.abc import Callable

from tests.netns.test_attacks import attack, forged
from vipd.lab.daemons import VrrpSpec, make_daemon
from vipd.lab.responder import Responder
from vipd.lab.topology import CLIENT4, VIP4, Lab
from vipd.lab.watch import HolderWatch
from vipd.vrrp import auth
from vipd.vrrp.packet import GROUP_V4

PRIORITIES = (150, 100)
INTERVAL = 0.1
KEY = bytes(range(32))  # a test key: it protects nothing
WRONG_KEY = bytes(range(200, 232))
FORGED = 20
AUTH_RE = re.compile(r'^vipd_vrrp_auth_failures_total\{reason="([^"]+)"\} ([0-9.e+]+)$')


def auth_counts(lab: Lab, ns: str) -> dict[str, int]:
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
    counts = {}
    for line in proc.stdout.splitlines():
        m = AUTH_RE.match(line.strip())
        if m:
            counts[m.group(1)] = int(float(m.group(2)))
    assert counts, f"no vipd_vrrp_auth_failures_total in /metrics of {ns}"
    return counts


def key_section(lab: Lab) -> dict[str, object]:
    path = lab.workdir / "vrrp-key-1"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"hex:{KEY.hex()}\n")
    return {"keys": {1: str(path)}, "mode": "enforce"}


def signed_with(key: bytes, message_hex: str, src: str) -> str:
    message = bytes.fromhex(message_hex)
    keys = auth.KeyRing({1: key}, 1)
    trailer = auth.sign(
        message,
        src=ipaddress.IPv4Address(src),
        keys=keys,
        sequence=auth.clock_sequence(time.time()),
    )
    return (message + trailer).hex()


def failed(lab: Lab, before: dict[str, dict[str, int]], reason: str) -> dict[str, int]:
    return {
        n.name: auth_counts(lab, n.ns).get(reason, 0) - before[n.name].get(reason, 0)
        for n in lab.nodes
    }


def test_signed_vipd_nodes_agree_and_drop_unsigned_or_wrongly_signed_adverts(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(2)
    spec = VrrpSpec(vip=VIP4, advert_interval=INTERVAL, auth_hmac=key_section(lab))
    daemons = [make_daemon("vipd", lab, n, spec) for n in lab.nodes]
    for n in lab.nodes:
        Responder(lab, n).start()
    for d, prio in zip(daemons, PRIORITIES, strict=True):
        d.start(prio)
    deadline = time.monotonic() + spec.master_down_interval(PRIORITIES[1]) + 5.0
    while lab.holders(spec.vip) != ["n1"] and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(10 * INTERVAL)
    # One holder: n2 hears n1's signed adverts (dropping them, it would hold the VIP too).
    assert lab.holders(spec.vip) == ["n1"], lab.holders(spec.vip)
    group = str(GROUP_V4)
    with HolderWatch(lab, spec.vip) as watch:
        before = {n.name: auth_counts(lab, n.ns) for n in lab.nodes}
        assert before["n1"].get("bad-hmac") == 0 and before["n2"].get("missing") == 0
        t0 = time.monotonic()
        unsigned = forged(254, 10, CLIENT4, group)
        attack(lab, "multicast", CLIENT4, 255, [(group, unsigned)] * FORGED)
        time.sleep(1.0)
        assert failed(lab, before, "missing") == {"n1": FORGED, "n2": FORGED}
        wrong = [(group, signed_with(WRONG_KEY, unsigned, CLIENT4)) for _ in range(FORGED)]
        attack(lab, "multicast", CLIENT4, 255, wrong)
        time.sleep(1.0)
        assert failed(lab, before, "bad-hmac") == {"n1": FORGED, "n2": FORGED}
        tl = watch.timeline()
        assert tl.changes_between(t0, time.monotonic()) == [], tl.changes
        assert lab.holders(spec.vip) == ["n1"]
        # The right key from the wrong source does not verify either: the source is signed.
        stolen = signed_with(KEY, unsigned, "10.77.0.99")
        attack(lab, "multicast", CLIENT4, 255, [(group, stolen)])
        time.sleep(0.5)
        assert failed(lab, before, "bad-hmac") == {"n1": FORGED + 1, "n2": FORGED + 1}
        assert lab.holders(spec.vip) == ["n1"]
    # n2 restarts while n1 holds the VIP: its start probe hears n1's signed adverts, so n1
    # is a VRRP router and not a foreign host, and n2 joins as a backup.
    daemons[1].stop()
    daemons[1].start(PRIORITIES[1])
    deadline = time.monotonic() + 10.0
    while daemons[1].state() != "BACKUP" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemons[1].state() == "BACKUP", daemons[1].log_text()[-2000:]
    assert lab.holders(spec.vip) == ["n1"]
    # n1 dies: n2 takes over.
    daemons[0].stop(signal.SIGKILL)
    deadline = time.monotonic() + spec.master_down_interval(PRIORITIES[1]) + 5.0
    while lab.holders(spec.vip) != ["n2"] and time.monotonic() < deadline:
        time.sleep(0.05)
    holders = lab.holders(spec.vip)
    # SIGKILL leaves n1's VIP bound (nothing releases it): n2 must hold it.
    assert "n2" in holders, holders
