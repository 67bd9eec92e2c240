"""The Lease when someone else writes it, on the real bed, with the wire backstop out of play.

What it tests: ``kubectl patch`` naming a peer, ``kubectl delete``, and ``kubectl patch``
emptying the holder, each while the Lease is held, at several points of the holder's
renewal cycle (5/3/1), on the bed of ``vipd.lab.kubebed`` with its bridge dropping every
gratuitous ARP for the VIP (``vipd.lab.faults.drop_gratuitous_arp``: a LAN that drops them,
or an IPv6 VIP, which vipd does not watch on the wire), so that no node yields to another's
announcement: only the Lease rules can keep the holders apart. Judged on the ``ip monitor
address`` timeline: never two holders beyond 0.1 s, and a holder again within the takeover
bound (docs/design/lease.md, "When someone else writes the Lease").

Then a brownout of the leader's API server (SIGSTOP 2.5 s, SIGCONT 0.5 s, repeatedly): a
renewal it was sent while stopped is served after vipd gave up on it, and the no-holder span
is judged against the bound the design doc derives for it.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import pytest

from tests.kube.conftest import MARGIN, TIMING, Window
from vipd.lab.faults import drop_gratuitous_arp, gratuitous_arp_dropped, pass_gratuitous_arp
from vipd.lab.kubebed.bed import LEASE, KubeBed
from vipd.lab.topology import VIP4

pytestmark = pytest.mark.kube

D, R, P = TIMING.duration, TIMING.renew_deadline, TIMING.retry_period
# Into the holder's renewal cycle (renewals every P): early, middle, late.
PHASES = (0.15, 0.5, 0.85)


@pytest.fixture
def no_garp(bed: KubeBed) -> Iterator[None]:
    drop_gratuitous_arp(bed.lab, VIP4)
    try:
        yield
    finally:
        pass_gratuitous_arp(bed.lab)


def renewed_at(bed: KubeBed, holder: str, within: float = 5.0) -> float:
    """The monotonic time just after the holder's next renewal shows in the Lease."""
    first = bed.lease().get("renewTime")
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        spec = bed.lease()
        if spec.get("holderIdentity") == holder and spec.get("renewTime") != first:
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"{holder} did not renew within {within} s")


def rounds(bed: KubeBed, window: Window, what: str, act: object) -> None:
    assert callable(act)
    for phase in PHASES:
        old = bed.wait_one_holder(D + P + 5)
        peer = next(n.name for n in bed.nodes if n.name != old)
        t = renewed_at(bed, old)
        time.sleep(max(0.0, t + phase * P - time.monotonic()))
        window.mark(f"{what} (held by {old}, {phase:.2f} of a renewal period in)")
        act(old, peer)
        time.sleep(D + 2 * P)
    assert gratuitous_arp_dropped(bed.lab) > 0  # the wire was out of play for real


def test_lease_patched_to_name_a_peer_while_held(
    bed: KubeBed, window: Window, no_garp: None
) -> None:
    def patch(old: str, peer: str) -> None:
        body = json.dumps({"spec": {"holderIdentity": peer}})
        bed.kubectl("patch", "lease", "-n", LEASE[0], LEASE[1], "--type=merge", "-p", body)

    rounds(bed, window, "kubectl patch: holderIdentity = a peer", patch)
    window.check()


def test_lease_deleted_while_held(bed: KubeBed, window: Window, no_garp: None) -> None:
    def delete(old: str, peer: str) -> None:
        bed.kubectl("delete", "lease", "-n", LEASE[0], LEASE[1], "--wait=false")

    rounds(bed, window, "kubectl delete lease", delete)
    window.check()


def test_lease_holder_emptied_by_hand_while_held(
    bed: KubeBed, window: Window, no_garp: None
) -> None:
    def empty(old: str, peer: str) -> None:
        body = json.dumps({"spec": {"holderIdentity": None}})
        bed.kubectl("patch", "lease", "-n", LEASE[0], LEASE[1], "--type=merge", "-p", body)

    rounds(bed, window, "kubectl patch: holderIdentity removed", empty)
    window.check()


# The brownout: the leader's API server stopped STOP s, running RUN s, for a while.
STOP, RUN, SPELL = 2.5, 0.5, 12.0


def test_leader_apiserver_brownout(bed: KubeBed, window: Window, no_garp: None) -> None:
    old = bed.wait_one_holder(10)
    api = bed.procs[old].apiserver
    window.mark(f"brownout of kube-apiserver on {old}: stopped {STOP} s, running {RUN} s")
    end = time.monotonic() + SPELL
    try:
        while time.monotonic() < end:
            api.signal(signal.SIGSTOP)
            time.sleep(STOP)
            api.signal(signal.SIGCONT)
            time.sleep(RUN)
    finally:
        api.signal(signal.SIGCONT)
    window.mark("brownout over")
    bed.settle()
    time.sleep(D + P)
    # docs/design/lease.md, "A write served late": a write the old leader sent before its
    # step-down may be served up to STOP later, and the others count D from seeing it:
    # no holder for at most STOP + RP + D + 2 round trips after the old leader let go.
    window.check(gap_limit=STOP + P + D + MARGIN)
