"""kubeadm with vipd's static pod, on real kubelets and containerd (the kubelet bed).

Asserted: the VIP is bound on n1 (by vipd, started by the kubelet from its static manifest)
before ``kubeadm init`` finished, and ``init`` with ``controlPlaneEndpoint: VIP:6443`` and both
control-plane joins through the VIP succeed; every node's own containerd runs vipd, etcd and
the control plane; from then on the VIP is on exactly one node, never two at once; the rendered
DaemonSet, placed by a node label, takes over node by node with the leader last, each step
moving the VIP at most once (only the leader's does), kubectl through the VIP failing at most
once per move; an image roll (``rollout status``) does the same node by node; the rebooted
holder gives the VIP away within the failover bound and comes back (its vipd and API server
running, /readyz through the VIP answering); DaemonSet pods that cannot start (a missing
image) leave no VIP until vipd-pod.yaml is copied back on one node, and fixing the image hands
over from it again (docs/operations.md); and after all three nodes lose power at once and
boot again (nothing done by hand), every node's vipd and API server run again and
``kubectl get --raw /readyz`` through the VIP answers within 60 s.
"""

from __future__ import annotations

import time

import pytest

from tests.kubelet.conftest import Cluster
from vipd.lab.kubeadm_flow import (
    POWER_LOSS_LIMIT,
    Step,
    adopt_all,
    bad_image_recovery,
    handover_bound,
    reboot_leader,
    roll,
)
from vipd.lab.kubelet_bed.bed import VIPD_IMAGE, VIPD_IMAGE_NEXT
from vipd.lab.timeline import OVERLAP_LIMIT, OVERLAP_NOISE

pytestmark = pytest.mark.kubelet

CONTROL_PLANE = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "vipd"]


@pytest.fixture
def began() -> float:
    """When the test began (POSIX time, the address watch's clock): each test judges the
    overlaps of its own steps; the module's cluster lives on from test to test."""
    return time.time()


def _no_two_holders(cluster: Cluster, since: float) -> None:
    seen = [o for o in cluster.watch.overlaps() if o.end >= since]
    for o in seen:
        print(f"two holders {sorted(o.nodes)} for {o.duration * 1e3:.0f} ms")
    bad = [o for o in seen if o.duration > OVERLAP_LIMIT + OVERLAP_NOISE]
    logs = cluster.bed.pod_logs
    assert logs is not None
    assert not bad, f"two holders: {bad}\nvipd around it:\n" + "\n".join(
        f"{ln.node} {ln.pod}: {ln.text}"
        for o in bad
        for ln in logs.around(o.nodes, o.start - 2.0, o.end + 1.0)
    )


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
    _no_two_holders(cluster, 0.0)  # the whole life so far: init and the joins


def _show(steps: list[Step]) -> None:
    for s in steps:
        print(f"\n{s.kind} {s.node} in {s.took_s:.1f} s: holder {s.before} -> {s.after}, "
              f"{s.moves} VIP move(s) (claims {s.claims}), client-seen longest gap "
              f"{s.gap_s * 1000:.0f} ms, {s.failed} failed connects, kubectl through the VIP "
              f"{s.kubectl_failed}/{s.kubectl_tries} failed")  # fmt: skip
        if s.static_exit is not None:
            print(f"  static vipd exited {s.static_exit}; the DaemonSet vipd started "
                  f"{s.static_to_daemonset_s} s after it")  # fmt: skip
        for error in s.kubectl_errors:
            print(f"  kubectl failed {error}")


def _judge(steps: list[Step]) -> None:
    for s in steps:
        # kubectl through the VIP was at work in the step: a try began in it, or one begun
        # just before was still running (a try that hangs to its 5 s timeout covers a short
        # roll step whole; it is counted, failure and all, in the step it began in).
        assert s.kubectl_tries > 0 or s.kubectl_in_flight, s
        assert len(s.after) == 1, s
        assert s.moves <= 1, s
        if s.node not in s.before:
            assert s.after == s.before, f"a follower's step moved the VIP: {s}"
        assert s.kubectl_failed <= s.kubectl_allowed(), f"kubectl failed too often: {s}"
    assert [p for s in steps for p in s.problems()] == []


def test_daemonset_adopts_node_by_node_leader_last(cluster: Cluster, began: float) -> None:
    bed = cluster.bed
    (leader,) = bed.holders()
    steps = adopt_all(bed, cluster.watch)
    _show(steps)
    assert [s.node for s in steps][-1] == leader
    assert sorted(s.node for s in steps) == ["n1", "n2", "n3"]
    _judge(steps)
    for s in steps:
        # The static vipd stopped gracefully before the DaemonSet's started on that node:
        # the per-node lock (the metrics port) and adopt's wait, on the real kubelet.
        assert s.static_exit == 0, s
        assert s.static_to_daemonset_s is not None and s.static_to_daemonset_s >= 0, s
    (moved,) = [s for s in steps if s.moves]
    # The leader's handover is graceful: the client's longest gap in that step is shorter
    # than any takeover by timeout (VRRP: Master_Down_Interval; Lease: the retry after a
    # release, where an unreleased Lease takes its whole duration).
    assert moved.gap_s < handover_bound(bed), moved
    assert set(bed.vipd_pods()) == {"n1", "n2", "n3"}
    for name in ("n1", "n2", "n3"):
        assert not bed.static_manifest(name).exists()
    _no_two_holders(cluster, began)


def test_image_roll_behaves_like_adopt(cluster: Cluster, began: float) -> None:
    bed = cluster.bed
    steps = roll(bed, cluster.watch, VIPD_IMAGE_NEXT)
    _show(steps)
    assert sorted(s.node for s in steps) == ["n1", "n2", "n3"]
    _judge(steps)
    # The VIP moved only at the steps of the node that held it when the step began.
    assert sum(s.moves for s in steps) == sum(1 for s in steps if s.after != s.before)
    for s in steps:
        if s.moves:
            assert s.gap_s < handover_bound(bed), f"not a graceful handover: {s}"
    pods = bed.vipd_pods()
    assert {n: p["spec"]["containers"][0]["image"] for n, p in pods.items()} == {
        n: VIPD_IMAGE_NEXT for n in ("n1", "n2", "n3")
    }
    _no_two_holders(cluster, began)


def test_rebooted_leader_gives_the_vip_away_and_the_cluster_goes_on(
    cluster: Cluster, began: float
) -> None:
    r = reboot_leader(cluster.bed, cluster.watch)
    print(f"\n{r}")
    assert r.problems == []
    assert r.vip_left_after_s is not None and r.vip_left_after_s <= r.failover_bound_s
    assert r.new_holder != [r.node] and len(r.new_holder) == 1
    assert r.readyz_after_s is not None and r.back_after_s is not None
    assert "vipd" in cluster.bed.running_containers(r.node)
    _no_two_holders(cluster, began)


def test_bad_image_recovery_as_documented(cluster: Cluster, began: float) -> None:
    bed = cluster.bed
    r = bad_image_recovery(bed, "n1")
    print(f"\n{r}")
    assert r.problems == []
    assert r.readyz_failed_without_vip
    assert r.holder_on_static == ["n1"]
    assert not bed.static_manifest("n1").exists()
    assert len(r.holders_after) == 1
    pods = bed.vipd_pods()
    assert {n: p["spec"]["containers"][0]["image"] for n, p in pods.items()} == {
        n: VIPD_IMAGE for n in ("n1", "n2", "n3")
    }
    _no_two_holders(cluster, began)


def test_full_power_loss_comes_back_without_a_manual_step(cluster: Cluster, began: float) -> None:
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
    _no_two_holders(cluster, began)
