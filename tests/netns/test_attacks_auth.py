"""Attacks on vipd nodes that sign their adverts (``election.vrrp.auth_hmac``, enforce mode):
replays of real adverts, a wrong key, an old key after a rotation; and a key rotation done
one node at a time without a flag day.

What it tests: three real vipd nodes at VRRPv3 0.1 s (priorities 150/100/50, n1 holds the
VIP), multicast, and an attacker in the lab's client namespace (``vipd.lab.attacker``) that
holds no current key. Judged on the holder timeline (``HolderWatch``, from the nodes' address
events) and on each node's ``vipd_vrrp_auth_failures_total{reason}``:

- replays, in both anti-replay modes (``time``, window 20 s; ``monotonic``): n1's adverts
  are captured on the bridge while n1 holds the VIP, resigns (its priority-0 advert) and takes
  the VIP back. Replayed with n1's source address, n1's priority-0 advert while n1 holds the
  VIP (unauthenticated, it would make a backup take over at once), and n1's priority-150
  adverts while n1 is stopped and n2 holds it (they would make n2 step down and leave the VIP
  unheld), both inside the window and after it: no holder change; the backups count them as
  ``replay`` inside the window, and after it as ``stale`` (time) or ``replay`` (monotonic: the
  sequence is all there is). n1's own adverts sent back to n1 never reach vipd (the kernel
  drops a packet from a local address as a martian).
- a priority-254 advert signed with a key the nodes do not have: ``bad-hmac`` on every node.
- a key rotation (key ids 1 = A, 2 = B): {A} everywhere, then {A, B} sending A (n3 restarted,
  n2 and n1 reloaded with SIGHUP), then {A, B} sending B (reloads), then {B} (reloads), one
  node at a time: no holder change and no auth failure at all among the three. Afterwards a
  priority-254 advert signed with A is refused as ``unknown-key``.

Needs root (skips with the reason otherwise, fails under CI=true).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from vipd.lab.attacker import Captured, attack, captured, forged, metric_counts, signed
from vipd.lab.daemons import Daemon, VipdDaemon, VrrpSpec, make_daemon
from vipd.lab.responder import Responder
from vipd.lab.topology import CLIENT4, VIP4, Lab
from vipd.lab.watch import HolderWatch
from vipd.lab.wire import Capture
from vipd.vrrp import auth
from vipd.vrrp.packet import GROUP_V4

pytestmark = pytest.mark.netns

PRIORITIES = (150, 100, 50)
INTERVAL = 0.1
WINDOW = 20  # time mode: room for n1's restart between the capture and the replay
KEY_A = bytes(range(32))  # test keys: they protect nothing
KEY_B = bytes(range(64, 96))
WRONG_KEY = bytes(range(200, 232))
FORGED = 20
AUTH = "vipd_vrrp_auth_failures_total"
RECEIVED = "vipd_vrrp_adverts_received_total"
GROUP = str(GROUP_V4)


def key_file(lab: Lab, key_id: int, key: bytes) -> str:
    path = lab.workdir / f"vrrp-key-{key_id}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"hex:{key.hex()}\n")
    return str(path)


def until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def cluster(lab: Lab, section: dict[str, Any]) -> list[Daemon]:
    spec = VrrpSpec(vip=VIP4, advert_interval=INTERVAL, auth_hmac=section)
    daemons = [make_daemon("vipd", lab, n, spec) for n in lab.nodes]
    for n in lab.nodes:
        Responder(lab, n).start()
    for d, prio in zip(daemons, PRIORITIES, strict=True):
        d.start(prio)
    assert until(lambda: lab.holders(VIP4) == ["n1"], 10.0), lab.holders(VIP4)
    time.sleep(10 * INTERVAL)  # settled: every backup follows n1
    assert lab.holders(VIP4) == ["n1"], lab.holders(VIP4)
    return daemons


def failures(lab: Lab, names: tuple[str, ...] = ("n1", "n2", "n3")) -> dict[str, dict[str, int]]:
    return {name: metric_counts(lab, lab.node(name).ns, AUTH) for name in names}


def delta(lab: Lab, before: dict[str, dict[str, int]], reason: str) -> dict[str, int]:
    now = failures(lab, tuple(before))
    return {n: now[n].get(reason, 0) - before[n].get(reason, 0) for n in before}


def replay(lab: Lab, adverts: list[Captured], dst: str = GROUP) -> None:
    """The captured bytes again, from their own source address (the attacker's header)."""
    (src,) = {a.src for a in adverts}
    attack(lab, "spoof", src, 255, [(dst, a.payload.hex()) for a in adverts], gap=0.005)


def quiet(watch: HolderWatch, t0: float, seconds: float) -> None:
    """No holder change from ``t0`` on, watched ``seconds`` more."""
    time.sleep(seconds)
    tl = watch.timeline()
    assert tl.changes_between(t0, time.monotonic()) == [], tl.changes


@pytest.mark.parametrize("anti_replay", ["time", "monotonic"])
def test_replayed_adverts_move_nothing_and_are_counted(
    make_lab: Callable[..., Lab], anti_replay: str
) -> None:
    lab = make_lab(3)
    section: dict[str, Any] = {"keys": {1: key_file(lab, 1, KEY_A)}, "anti_replay": anti_replay}
    if anti_replay == "time":
        section["window"] = WINDOW
    d1, _d2, _d3 = cluster(lab, section)
    n1 = lab.node("n1")

    # The wire: n1 holding the VIP, resigning (priority 0), and taking it back.
    cap = Capture(lab, [n1])
    cap.start()
    try:
        time.sleep(1.0)
        d1.stop()
        assert until(lambda: lab.holders(VIP4) == ["n2"], 5.0), lab.holders(VIP4)
        d1.start(PRIORITIES[0])
        assert until(lambda: lab.holders(VIP4) == ["n1"], 15.0), lab.holders(VIP4)
        time.sleep(10 * INTERVAL)
    finally:
        cap.stop()
    ours = [a for a in captured(cap.paths["n1"]) if a.src == n1.ipv4]
    assert all(len(a.payload) == 12 + auth.TRAILER_LEN for a in ours), ours[:3]
    resigns = [a for a in ours if a.priority == 0]
    assert resigns, [a.priority for a in ours]
    resign = resigns[-1]
    old = [a for a in ours if a.priority == PRIORITIES[0] and a.ts < resign.ts][-5:]
    new = [a for a in ours if a.priority == PRIORITIES[0] and a.ts > resign.ts][-5:]
    assert len(old) == 5 and len(new) == 5, len(ours)

    with HolderWatch(lab, VIP4) as watch:
        # Row 1: n1's resignation again while it holds the VIP, inside the window.
        assert time.time() - resign.ts < WINDOW - 2, "n1's restart took the window up"
        before = failures(lab)
        t0 = time.monotonic()
        replay(lab, [resign] * 3)
        quiet(watch, t0, 1.0)
        assert lab.holders(VIP4) == ["n1"]
        got = delta(lab, before, "replay")
        assert (got["n2"], got["n3"]) == (3, 3), got
        # Row 2: n1's own current adverts sent back to n1 (and to the others). n1 never
        # reads them: its kernel drops a packet from one of its own addresses (a martian
        # source), so n1 counts neither a failure nor an advert received.
        heard = metric_counts(lab, n1.ns, RECEIVED)
        assert "" in heard, heard
        t0 = time.monotonic()
        replay(lab, new)
        quiet(watch, t0, 1.0)
        assert lab.holders(VIP4) == ["n1"]
        got = delta(lab, before, "replay")
        assert (got["n2"], got["n3"]) == (3 + 5, 3 + 5), got
        assert sum(failures(lab, ("n1",))["n1"].values()) == sum(before["n1"].values())
        assert metric_counts(lab, n1.ns, RECEIVED) == heard

    # n1 stops: n2 holds the VIP; n1's captured priority-150 adverts would outrank it.
    d1.stop()
    assert until(lambda: lab.holders(VIP4) == ["n2"], 5.0), lab.holders(VIP4)
    time.sleep(10 * INTERVAL)
    with HolderWatch(lab, VIP4) as watch:
        # Row 3: inside the window.
        assert time.time() - new[-1].ts < WINDOW - 2
        before = failures(lab, ("n2", "n3"))
        t0 = time.monotonic()
        replay(lab, old + new)
        quiet(watch, t0, 1.0)
        assert lab.holders(VIP4) == ["n2"]
        got = delta(lab, before, "replay")
        assert (got["n2"], got["n3"]) == (10, 10), got
        # Row 4: all of them again once the window has passed.
        wait = resign.ts + WINDOW + 1 - time.time()
        wait = max(wait, new[-1].ts + WINDOW + 1 - time.time())
        time.sleep(max(0.0, wait))
        before = failures(lab, ("n2", "n3"))
        t0 = time.monotonic()
        replay(lab, [*old, resign, *new])
        quiet(watch, t0, 1.0)
        assert lab.holders(VIP4) == ["n2"]
        reason = "stale" if anti_replay == "time" else "replay"
        got = delta(lab, before, reason)
        assert (got["n2"], got["n3"]) == (11, 11), (reason, got)


def rewrite(d: Daemon, keys: dict[int, str], send_key: int, *, reload: bool) -> None:
    """``d`` with the key files ``keys`` signing with ``send_key``: reloaded (SIGHUP, its
    new config applied live) or restarted."""
    section = {"keys": keys, "send_key": send_key, "mode": "enforce"}
    d.spec = dataclasses.replace(d.spec, auth_hmac=section)
    if not reload:
        d.stop()
        d.start()
        assert until(lambda: d.state() == "BACKUP", 10.0), d.log_tail()
        return
    assert isinstance(d, VipdDaemon)
    done = d.log_text().count("msg=reloaded")
    d.config_path.write_text(yaml.safe_dump(d.config(), sort_keys=False))
    assert d.pid is not None
    os.kill(d.pid, signal.SIGHUP)
    assert until(lambda: d.log_text().count("msg=reloaded") > done, 5.0), d.log_tail()
    assert "election.vrrp.auth_hmac" in d.log_tail(3), d.log_tail(3)


def test_key_rotation_one_node_at_a_time_and_keys_the_nodes_do_not_have(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(3)
    a, b = key_file(lab, 1, KEY_A), key_file(lab, 2, KEY_B)
    d1, d2, d3 = cluster(lab, {"keys": {1: a}, "mode": "enforce"})
    attacker = forged(254, 10, CLIENT4, GROUP, VIP4)
    with HolderWatch(lab, VIP4) as watch:
        # Another key: refused by every node.
        before = failures(lab)
        t0 = time.monotonic()
        jobs = [(GROUP, signed(attacker, CLIENT4, WRONG_KEY)) for _ in range(FORGED)]
        attack(lab, "multicast", CLIENT4, 255, jobs, gap=INTERVAL / 2)
        quiet(watch, t0, 1.0)
        assert delta(lab, before, "bad-hmac") == {"n1": FORGED, "n2": FORGED, "n3": FORGED}

        # The rotation. n3's counters restart with it: it goes first, from zero.
        t0 = time.monotonic()
        rewrite(d3, {1: a, 2: b}, 1, reload=False)
        before = failures(lab)
        before["n3"] = {}
        for d in (d2, d1):
            rewrite(d, {1: a, 2: b}, 1, reload=True)
            time.sleep(5 * INTERVAL)
        for d in (d1, d2, d3):
            rewrite(d, {1: a, 2: b}, 2, reload=True)
            time.sleep(5 * INTERVAL)
        for d in (d3, d1, d2):
            rewrite(d, {2: b}, 2, reload=True)
            time.sleep(5 * INTERVAL)
        quiet(watch, t0, 1.0)
        assert lab.holders(VIP4) == ["n1"]
        after = failures(lab)
        assert all(not sum(after[n].values()) - sum(before[n].values()) for n in after), (
            before,
            after,
        )
        # Every node sends B now, and A is gone: n2 would have taken over if it could not
        # read n1's adverts. A node left with A alone is refused.
        before = after
        t0 = time.monotonic()
        jobs = [(GROUP, signed(attacker, CLIENT4, KEY_A)) for _ in range(FORGED)]
        attack(lab, "multicast", CLIENT4, 255, jobs, gap=INTERVAL / 2)
        quiet(watch, t0, 1.0)
        assert delta(lab, before, "unknown-key") == {"n1": FORGED, "n2": FORGED, "n3": FORGED}
        assert lab.holders(VIP4) == ["n1"]
