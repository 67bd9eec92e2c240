"""kubeadm with vipd's static pod, on real kubelets and containerd (the kubelet bed).

Asserted: the VIP is bound on n1 (by vipd, started by the kubelet from its static manifest)
before ``kubeadm init`` finished, and ``init`` with ``controlPlaneEndpoint: VIP:6443`` and both
control-plane joins through the VIP succeed; every node's own containerd runs vipd, etcd and
the control plane; from then on the VIP is on exactly one node, never two at once; the rendered
DaemonSet, placed by a node label, takes over node by node with the leader last, each step
moving the VIP at most once (only the leader's does); and after
all three nodes lose power at once and boot again (nothing done by hand), every node's vipd
and API server run again and ``kubectl get --raw /readyz`` through the VIP answers within 60 s.
"""

from __future__ import annotations

import time

import pytest

from tests.kubelet.conftest import Cluster
from vipd.lab.kubeadm_flow import OVERLAP_LIMIT, POWER_LOSS_LIMIT, client_gap, withdrawn

pytestmark = pytest.mark.kubelet

CONTROL_PLANE = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "vipd"]


def _no_two_holders(cluster: Cluster) -> None:
    bad = [o for o in cluster.watch.overlaps() if o.duration > OVERLAP_LIMIT]
    assert not bad, f"two holders: {bad}"


def test_kubeadm_init_and_joins_through_the_vip(cluster: Cluster) -> None:
    bed = cluster.bed
    added = [e for e in cluster.watch.events if e.added]
    assert added, "the VIP was never bound"
    first = min(added, key=lambda e: e.at)
    print(
        f"\nVIP first bound on {first.node} {first.at - cluster.init_started:.1f} s after "
        f"kubeadm init started; init took {cluster.init_done - cluster.init_started:.1f} s"
    )
    assert first.node == "n1"
    assert first.at < cluster.init_done
    ready = bed.nodes_ready()
    assert sorted(ready) == ["n1", "n2", "n3"]
    for name in ("n1", "n2", "n3"):
        running = bed.running_containers(name)
        assert running == CONTROL_PLANE, f"{name} runs {running}"
        conf = (bed.machines[name].root / "etc/kubernetes/admin.conf").read_text()
        assert f"server: https://{bed.endpoint}" in conf
    assert len(bed.holders()) == 1
    _no_two_holders(cluster)


def test_daemonset_adopts_node_by_node_leader_last(cluster: Cluster) -> None:
    bed = cluster.bed
    bed.apply_daemonset()
    (leader,) = bed.holders()
    order = [n for n in ("n1", "n2", "n3") if n != leader] + [leader]
    for name in order:
        before = bed.holders()
        t0_wall, t0 = time.time(), time.monotonic()
        took = bed.adopt(name)
        time.sleep(1)  # the prober's last attempts finish (timeout 0.5 s)
        after = bed.holders()
        events = [e for e in cluster.watch.events if e.at >= t0_wall]
        claims = [e for e in events if e.added]
        moves = [e for e in claims if not withdrawn(e, events)]
        assert bed.prober is not None
        gap, failed = client_gap(bed.prober, t0, time.monotonic())
        print(f"\nadopt {name} in {took:.1f} s: holder {before} -> {after}, "
              f"{len(moves)} VIP move(s) ({len(claims)} claim(s): "
              f"{[(e.node, round(e.at - t0_wall, 3)) for e in claims]}), "
              f"client-seen longest gap {gap * 1000:.0f} ms, {failed} failed connects")  # fmt: skip
        assert len(after) == 1, after
        assert len(moves) <= 1, claims
        if name != leader:
            assert after == before, "a follower's handover moved the VIP"
    assert set(bed.vipd_pods()) == {"n1", "n2", "n3"}
    for name in ("n1", "n2", "n3"):
        assert not (bed.machines[name].root / "etc/kubernetes/manifests/vipd.yaml").exists()
    _no_two_holders(cluster)


def test_full_power_loss_comes_back_without_a_manual_step(cluster: Cluster) -> None:
    bed = cluster.bed
    bed.power_off_all()
    assert bed.holders() == []
    t0 = time.monotonic()
    bed.boot_all()
    answered = bed.wait_readyz(POWER_LOSS_LIMIT - (time.monotonic() - t0))
    elapsed = time.monotonic() - t0
    print(f"\n/readyz through the VIP {elapsed:.1f} s after power came back")
    assert elapsed <= POWER_LOSS_LIMIT, f"{answered:.1f} s"
    deadline = time.monotonic() + POWER_LOSS_LIMIT
    while time.monotonic() < deadline:
        running = {n: bed.running_containers(n) for n in ("n1", "n2", "n3")}
        if all(r == CONTROL_PLANE for r in running.values()):
            break
        time.sleep(1)
    assert all(r == CONTROL_PLANE for r in running.values()), running
    assert len(bed.holders()) == 1
    _no_two_holders(cluster)
