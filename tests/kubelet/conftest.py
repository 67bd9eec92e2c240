"""Fixtures for the tests on real kubelets (``vipd.lab.kubelet_bed``).

What it is: ``cluster``, one ``KubeletBed`` per test module and election mode (VRRP, then
Lease: its static pod on n1 renders ``--super-admin`` for ``kubeadm init`` and is switched back
to admin.conf after it), bootstrapped as a user would
(vipd's static pod, ``kubeadm init`` through the VIP on n1, n2 and n3 joined as control-plane
nodes), with the VIP's holder timeline recorded (``ip monitor`` per node) from before
``kubeadm init`` on and the 2 ms TCP prober through the VIP from the client namespace after
the joins; torn down after the module.

What it must not do: skip silently (a missing binary, tool or root skips with the reason
printed, and fails under CI=true, by ``tests.prereq``), or leave a bed behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.prereq import missing
from vipd.lab.addrwatch import AddressWatch
from vipd.lab.kubelet_bed.bed import Election, KubeletBed, usable


@dataclass
class Cluster:
    bed: KubeletBed
    watch: AddressWatch
    init_started: float  # POSIX seconds, the clock of ``ip -ts monitor``
    init_done: float


@pytest.fixture(scope="module", params=["vrrp", "lease"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One bed per election mode: every test of the module runs on the VRRP bed, then on
    the Lease bed (pytest orders a module-scoped parameter's tests by its value)."""
    why = usable()
    if why is not None:
        missing(why)
    election: Election = "lease" if request.param == "lease" else "vrrp"
    # VIPD_LAB_KEEP=1 keeps the work directory (every node's kubelet, containerd and
    # kubeadm logs) for a post-mortem; it is printed at the start.
    with KubeletBed(election, keep=os.environ.get("VIPD_LAB_KEEP") == "1") as bed:
        print(f"\nkubelet bed in {bed.lab.workdir}")
        watch = AddressWatch(bed.lab, bed.vip)
        watch.start()
        try:
            started = time.time()
            bed.init()
            done = time.time()
            bed.join("n2")
            bed.join("n3")
            bed.start_client()
            yield Cluster(bed, watch, started, done)
        finally:
            watch.stop()
