"""``vipd lab --kubeadm --election lease --from kube-vip``: from kube-vip to vipd on real
kubelets, as a user runs it.

What it tests: the cluster bootstrapped through kube-vip's static pod (the real kube-vip that
``scripts/setup-kube`` builds, its manifest as ``kube-vip manifest pod`` prints it), then
vipd's DaemonSet, rendered from what ``vipd import kube-vip`` made of that manifest (kube-vip's
own Lease ``plndr-cp-lock``), adopting node by node: each DaemonSet pod's ``adopt`` removes
kube-vip's static manifest and waits for kube-vip to let go of :2112 before vipd starts, the
holder's node last. Asserted on the JSON report and the exit code: the VIP first bound on n1
before ``kubeadm init`` finished; three steps, the holder last; no VIP move at a follower's
step, at most one at the holder's; kube-vip gone before vipd started on each node (never both
on one node); kubectl through the VIP failing at most once per move; never two holders
beyond a make-before-break handover (the lab's summary).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.prereq import missing
from vipd.lab.kubebed import binaries
from vipd.lab.kubelet_bed.bed import usable
from vipd.lab.topology import python_argv

pytestmark = pytest.mark.kubelet


def test_vipd_lab_moves_a_kube_vip_cluster_node_by_node() -> None:
    why = usable()
    if why is not None:
        missing(why)
    if not os.access(binaries.find() / binaries.KUBE_VIP, os.X_OK):
        missing("kube-vip is not built (scripts/setup-kube builds it)")
    run = subprocess.run(
        python_argv("vipd", "lab", "--kubeadm", "--election", "lease", "--from", "kube-vip",
                    "--json"),
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    print(run.stderr[-3000:])
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    report = json.loads(run.stdout)
    assert report["summary"] == {"ok": True, "problems": []}
    assert report["lab"]["from"] == "kube-vip" and "roll" not in report
    init = report["init"]
    assert init["vip_first_bound_on"] == "n1"
    assert init["vip_first_bound_after_s"] < init["kubeadm_init_s"]
    steps = report["adopt"]
    assert sorted(s["node"] for s in steps) == ["n1", "n2", "n3"]
    holder = steps[0]["before"]
    assert len(holder) == 1 and steps[-1]["node"] == holder[0]  # the holder last
    for s in steps:
        shown = json.dumps(s)
        assert s["moves"] <= 1 and len(s["after"]) == 1, shown
        if s["node"] != holder[0]:
            assert s["moves"] == 0 and s["after"] == s["before"], shown
        # kube-vip had exited (v1.0.0 exits 2 when the kubelet stops it) before vipd started
        assert s["static_program"] == "kube-vip" and s["static_exit"] is not None, shown
        assert s["static_to_daemonset_s"] is not None and s["static_to_daemonset_s"] >= 0, shown
        assert s["kubectl_failed"] <= s["kubectl_allowed"], shown
    print("\n" + "\n".join(
        f"{s['node']}: {s['moves']} move(s), client gap {s['gap_s'] * 1000:.0f} ms"
        for s in steps
    ))  # fmt: skip
