"""Lease mode gives way to a healthy peer, never a lone node: real vipd processes in network
namespaces, the real ``kubernetes`` client against the Lease API emulator (5/3/1 profile),
and each node's stand-in API server (``vipd.lab.responder`` with its HTTPS ``/readyz``), which
the tests make fail.

What it tests:

- 3 nodes, each checking its own stand-in and its 2 peers' (``health.peers``, written by the
  lab), with ``health.path: /readyz?exclude=etcd``: the leader's API server dies (killed) or
  answers 500 → the leader releases the Lease and a healthy node holds the VIP within
  ``fall × interval + timeout`` (noticing) + 0.25 s (the loop's poll) + ``retry_period`` (the
  peer's next read) + a margin; nobody else moves, and the VIP does not come back when the
  API server recovers (no preemption in Lease mode); never two leaders at once;
- a lone node with no API server at all (``kubeadm init``) creates the Lease, takes the VIP
  and keeps it past several lease durations;
- the unreachable-store rule with its evidence, the peers' ``/readyz`` (path ``/readyz``, the
  stand-in's failing answer names the etcd check as kube-apiserver's does): the leader's
  calls fail with 503 while its peers answer ready → it steps down at the renew deadline
  and a peer takes over (the failure was this node's only); every API server's etcd check
  fails and every call answers 503 → the leader keeps the VIP past three durations and
  nobody takes it, and renews when the store is back; the same with writes only failing and
  another holder written into the Lease → the leader lets go at its next read.

(``vipd lab --election lease --fault apidown`` now runs on the real control plane:
tests/kube/test_lab.py.)
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.netns.test_lease import NAME, NS, LeaseCluster, wait_for
from vipd.lab import faults
from vipd.lab.daemons import HealthSpec, LeaseSpec, VipdDaemon, VrrpSpec
from vipd.lab.fakes.lease_emulator import Emulator, serve_in_netns
from vipd.lab.responder import Responder
from vipd.lab.topology import CLIENT4, VIP4, Lab

PORT = 16443
D, R, P = 5, 3.0, 1.0
# fall 3 rather than the lab's 2: 6 helpers share 2 cores, and a peer (or the new leader)
# that misses two 0.15 s checks in a row would really give way, which is not under test here.
HEALTH = HealthSpec(path="/readyz?exclude=etcd", interval=0.2, timeout=0.15, rise=2, fall=3)
POLL = 0.25  # vipd.lease.driver.MAX_SLEEP: the loop sees a health change within this
MARGIN = 1.5  # scheduling slack on a shared, loaded 2-core machine


class Gated(LeaseCluster):
    api: dict[str, Responder]


@pytest.fixture
def gated_lease(make_lab: Callable[..., Lab]) -> Iterator[Callable[..., Gated]]:
    made: list[Gated] = []

    def build(nodes: int, api: bool = True, health: HealthSpec = HEALTH) -> Gated:
        lab = make_lab(nodes)
        emu = Emulator(lab.workdir, [n.name for n in lab.nodes], host=CLIENT4, port=PORT)
        for n in lab.nodes:
            emu.kubeconfig(n.name)
        serve_in_netns(emu, lab.client_ns)
        spec = VrrpSpec(
            vip=VIP4, lease=LeaseSpec(f"https://{CLIENT4}:{PORT}", D, R, P), health=health
        )
        daemons = {n.name: VipdDaemon(lab, n, spec, lab.nodes) for n in lab.nodes}
        c = Gated(lab, emu, daemons)
        c.api = {n.name: Responder(lab, n, 6443, health.port) for n in lab.nodes}
        made.append(c)
        if api:
            for r in c.api.values():
                r.start()
        c.record()
        for d in daemons.values():
            d.start()
        assert wait_for(lambda: all(c.started(n) for n in daemons), 30, step=0.05) is not None, (
            c.logs()
        )
        return c

    try:
        yield build
    finally:
        for c in made:
            c.stop_recording()
            for d in c.daemons.values():
                d.stop(signal.SIGKILL, timeout=5)
            for r in c.api.values():
                r.stop(signal.SIGKILL)
            c.emu.stop()


def fetch(c: Gated, node: str, path: str) -> str:
    """GET http://127.0.0.1:2112/<path> inside ``node`` (vipd's metrics endpoint)."""
    code = (
        "import urllib.request as u; "
        f"print(u.urlopen('http://127.0.0.1:2112/{path}', timeout=5).read().decode())"
    )
    return c.lab.exec(c.lab.node(node).ns, ["python3", "-c", code]).stdout


def status(c: Gated, node: str) -> dict[str, Any]:
    return dict(json.loads(fetch(c, node, "status")))


def all_healthy(c: Gated) -> bool:
    """Every vipd has seen every API server healthy (3 targets each: local + 2 peers)."""
    return all(d.log_text().count('msg="API server healthy"') >= 3 for d in c.daemons.values())


@pytest.mark.parametrize("failure", ["killed", "fail"])
def test_the_vip_leaves_a_lease_leader_whose_api_server_fails(
    gated_lease: Callable[..., Gated], failure: str
) -> None:
    c = gated_lease(3)
    old = c.leader()
    assert wait_for(lambda: all_healthy(c), 10.0, step=0.05) is not None, c.logs()
    log = c.daemons[old].log_text()
    assert "lease: health gating on" in log and "exclude=etcd" in log, log
    t0 = time.time()
    if failure == "killed":
        faults.apidown(c.lab, faults.NodeRig(c.lab.node(old), c.daemons[old], c.api[old]))
    else:
        c.api[old].set_health("fail")  # HTTP 500
    bound = HEALTH.detection_bound() + POLL + P + MARGIN
    seen: list[str] = []

    def moved_to_one() -> bool:
        seen[:] = c.holders()
        return len(seen) == 1 and seen != [old]

    took = wait_for(moved_to_one, bound)
    assert took is not None, f"after {bound:.2f} s: holders {c.holders()}\n{c.logs()}"
    (new,) = seen
    assert "gave the Lease up for the peer to take over" in c.daemons[old].log_text(), c.logs()
    got = c.became_leader_after(t0, exclude=old)
    assert got is not None and got[0] == new and got[1] - t0 <= bound, (got, c.logs())
    # What the old leader's /status says (vipd status): it gave way, once, and why.
    # /status is a snapshot the loop publishes every 0.5 s: wait for one after the change.
    snaps: list[dict[str, Any]] = []

    def published() -> bool:
        snaps[:] = [status(c, old)]
        return bool(snaps[0]["role"] == "follower")

    fresh = wait_for(published, 3.0, step=0.1)
    st = snaps[0]
    assert fresh is not None and st["lease"]["gave_way"] == 1, st
    assert st["lease"]["local_healthy"] is False and st["lease"]["peer_healthy"] is True, st
    names = sorted((b["name"], b["healthy"]) for b in st["backends"])
    assert [n for n, _ in names] == ["local", "peer", "peer"], st["backends"]
    assert ("local", False) in names and ("peer", True) in names, st["backends"]
    metrics = fetch(c, old, "metrics")
    assert 'vipd_health_backend_healthy{local="true",target="127.0.0.1"} 0.0' in metrics
    gave_way = r'vipd_role_transitions_total\{[^}]*reason="unhealthy"[^}]*\} 1\.0'
    assert re.search(gave_way, metrics), metrics
    # It stays there, also once the old leader's API server is back: no preemption.
    if failure == "killed":
        c.api[old].start()
    else:
        c.api[old].set_health("ok")
    moved = wait_for(lambda: c.holders() != [new], D + 2 * P, step=0.05)
    assert moved is None, f"the VIP moved to {c.holders()}\n{c.logs()}"
    assert c.leaders_now() == [new]
    c.stop_recording()
    c.check_invariant()


def test_a_lone_lease_node_without_an_api_server_takes_and_keeps_the_vip(
    gated_lease: Callable[..., Gated],
) -> None:
    c = gated_lease(1, api=False)  # kubeadm init: no API server on the node yet
    took = wait_for(lambda: c.holders() == ["n1"], P + 2.0 + MARGIN)
    assert took is not None, c.logs()
    log = c.daemons["n1"].log_text()
    assert "no peers listed: this node never gives way" in log, log
    assert 'msg="API server healthy"' not in log  # it never was
    lost = wait_for(lambda: c.holders() != ["n1"], 2 * D + P, step=0.05)
    assert lost is None, f"holders {c.holders()}\n{c.logs()}"
    assert c.daemons["n1"].log_text().count("became leader") == 1


# The store rule's tests check the etcd check: the whole of /readyz, as kube-apiserver's.
STORE_HEALTH = HealthSpec(path="/readyz", interval=0.2, timeout=0.15, rise=2, fall=3)


def store_down_everywhere(c: Gated, writes_only: bool = False) -> None:
    """Every API server answers /readyz 500 naming etcd, then every Lease call 503."""
    for r in c.api.values():
        r.set_health("fail")
    time.sleep(4 * STORE_HEALTH.interval)  # every vipd has checked every peer since
    c.emu.set_errors(1.0, 503, writes_only=writes_only)


def test_leader_calls_fail_but_peers_are_ready_it_steps_down_at_the_renew_deadline(
    gated_lease: Callable[..., Gated],
) -> None:
    c = gated_lease(3, health=STORE_HEALTH)
    old = c.leader()
    assert wait_for(lambda: all_healthy(c), 10.0, step=0.05) is not None, c.logs()
    t0 = time.time()
    c.emu.partition(old, mode="status", code=503)  # only this node's API server fails
    gone = wait_for(lambda: old not in c.leaders_now(), R + MARGIN + 1)
    assert gone is not None, c.logs()
    assert "keeping the VIP" not in c.daemons[old].log_text(), c.logs()
    got = wait_for(lambda: len(c.holders()) == 1 and c.holders() != [old], D + P + MARGIN + 1)
    assert got is not None, f"holders {c.holders()}\n{c.logs()}"
    new = c.became_leader_after(t0, exclude=old)
    assert new is not None, c.logs()
    c.stop_recording()
    c.check_invariant()


def test_store_down_everywhere_the_leader_keeps_the_vip(
    gated_lease: Callable[..., Gated],
) -> None:
    c = gated_lease(3, health=STORE_HEALTH)
    old = c.leader()
    assert wait_for(lambda: all_healthy(c), 10.0, step=0.05) is not None, c.logs()
    store_down_everywhere(c)
    t0 = time.time()
    time.sleep(3 * D)  # three lease durations
    log = c.daemons[old].log_text()
    assert "keeping the VIP" in log and "answers not ready" in log, c.logs()
    assert c.leaders_now() == [old]
    out = [(t, h) for t, h in c.samples if t > t0 and h != [old]]
    assert not out, out[:5]  # the VIP never left it, never appeared elsewhere
    # The leader's own API server first: with the peers' back first, the leader (its own
    # still unhealthy for ``rise`` checks) would give way to them, which is health gating,
    # not the store rule under test here.
    c.api[old].set_health("ok")
    time.sleep((STORE_HEALTH.rise + 1) * STORE_HEALTH.interval + STORE_HEALTH.timeout)
    for r in c.api.values():
        r.set_health("ok")
    c.emu.heal()
    assert wait_for(lambda: "store reachable again" in c.daemons[old].log_text(), 2 * P + MARGIN)
    time.sleep(D)  # the followers count the record from their first good read: nobody steals
    assert c.leaders_now() == [old] and c.holders() == [old], c.logs()
    assert c.became_leader_after(t0, exclude=old) is None, c.logs()
    c.stop_recording()
    c.check_invariant()


def test_store_down_then_another_holder_appears_the_leader_lets_go_at_once(
    gated_lease: Callable[..., Gated],
) -> None:
    c = gated_lease(3, health=STORE_HEALTH)
    old = c.leader()
    assert wait_for(lambda: all_healthy(c), 10.0, step=0.05) is not None, c.logs()
    store_down_everywhere(c, writes_only=True)  # reads still served, writes fail
    assert wait_for(lambda: "keeping the VIP" in c.daemons[old].log_text(), R + P + MARGIN)
    assert c.holders() == [old]
    obj = c.emu.store.get(NS, NAME)
    assert obj is not None
    spec = {**obj["spec"], "holderIdentity": "intruder"}
    t0 = time.time()
    c.emu.store.put_raw(NS, NAME, spec)  # e.g. a node whose writes got through
    assert wait_for(lambda: old not in c.leaders_now(), P + MARGIN) is not None, c.logs()
    assert wait_for(lambda: c.holders() == [], 2) is not None, c.holders()
    assert time.time() - t0 <= P + MARGIN + 2
    assert "held by intruder" in c.daemons[old].log_text()
    c.stop_recording()
    c.check_invariant()
