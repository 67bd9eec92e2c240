"""Interfaces that come and go, in Lease mode on the real bed (``vipd.lab.kubebed``).

What it tests: a node's eth0 deleted and made again with the same name (``Lab.replug``: a
new index and MAC, on the bridge, with its address), as a rebuilt bond or a re-plugged NIC
would, while etcd, kube-apiserver and vipd keep running there:

1. the leader's: it leaves (its interface is unusable: an unhealthy local node, giving way
   to a healthy peer if it can still tell one), and once the interface is back it is an
   ordinary candidate on fresh sockets; the VIP ends on exactly one node;
2. a follower's: it rejoins on fresh sockets (``interface re-created`` in its log) and is the
   one that takes over when the leader's vipd stops and the third node's is gone.

Each asserts the bed's invariant over the scenario and the recovery (``Window.check``):
never two holders beyond the graceful overlap, never no holder beyond duration + retry
period plus slack.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.kube.conftest import TIMING, Window
from vipd.lab.kubebed.bed import KubeBed

pytestmark = pytest.mark.kube

D, R, P = TIMING.duration, TIMING.renew_deadline, TIMING.retry_period


def test_1_leader_interface_re_created(bed: KubeBed, window: Window) -> None:
    old = bed.wait_one_holder(10)
    window.mark(f"eth0 of {old} deleted and made again")
    bed.lab.replug(bed.node(old))
    time.sleep(D + R + 2 * P)
    holder = bed.wait_one_holder(10)
    text = bed.procs[old].vipd.log_text()
    assert "interface unusable: leaving the election" in text, bed.vipd_report()
    assert "interface re-created: fresh sockets on it" in text, bed.vipd_report()
    window.mark(f"{holder} holds the VIP")
    window.check()


def test_2_follower_interface_re_created_then_it_takes_over(bed: KubeBed, window: Window) -> None:
    leader = bed.wait_one_holder(10)
    follower, third = (n for n in sorted(bed.procs) if n != leader)
    window.mark(f"eth0 of {follower} (follower) deleted and made again")
    bed.lab.replug(bed.node(follower))
    time.sleep(2 * P + 2)
    assert "interface re-created" in bed.procs[follower].vipd.log_text(), bed.vipd_report()
    assert bed.wait_one_holder(10) == leader
    window.mark(f"SIGTERM vipd on {third} (follower), then on {leader} (leader)")
    bed.procs[third].vipd.stop(signal.SIGTERM, timeout=15)
    bed.procs[leader].vipd.stop(signal.SIGTERM, timeout=15)
    assert bed.wait_one_holder(D + R + 2 * P, among=[follower]) == follower
    time.sleep(P)
    window.check(gap_limit=P + 1.5)
