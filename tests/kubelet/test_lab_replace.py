"""``vipd lab --kubeadm --replace`` as a user runs it: the control plane replaced machine by
machine on real kubelets, the JSON report.

Asserted on the report the command prints (and its exit code): for n1, n2, n3 in turn a join
step of its successor (n4, n5, n6) that never moved the VIP, then a removal step that moved it
at most once (only when the old node held it), each with one holder after it, kubectl's
``/readyz`` through the VIP answering in it and failing at most once per move; every old
node's etcd member gone after ``kubeadm reset`` (by reset itself, or by the flow's ``etcdctl
member remove``, which the report says); at the end the Nodes and the etcd members are n4, n5,
n6, one of them holds the VIP, and no problems (never two holders beyond the make-before-break
overlap). Then the scale-down to one machine (the single-node start grew to three by ``kubeadm
init`` and two joins): n4 and n5 removed the same way, n6 alone the Node, the etcd member and
the holder.

In the three modes, a bed each (5-8 minutes a run on the 2-core machine): VRRP multicast,
Lease, and VRRP unicast with the peers following the cluster (``--unicast``: n1..n3 the
static start set, ``election.vrrp.unicast_peers_from: [endpointslices, nodes]``), the mode
membership exists for: n4..n6 are in no config, and at the end each of their vipds says
(``/metrics``: ``vipd_membership_peers``, ``vipd_membership_held``) it follows the static
three and the two other new machines, read from the cluster, and is not held out.
"""

from __future__ import annotations

import json

import pytest

from tests.kubelet.labrun import run_lab
from tests.prereq import missing
from vipd.lab.kubelet_bed.bed import usable

pytestmark = pytest.mark.kubelet

PAIRS = [("n1", "n4"), ("n2", "n5"), ("n3", "n6")]


@pytest.mark.parametrize(
    ("election", "unicast"),
    [("vrrp", True), ("vrrp", False), ("lease", False)],
    ids=["vrrp-unicast-followed", "vrrp-multicast", "lease"],
)
def test_vipd_lab_kubeadm_replace_keeps_the_vip_through_a_machine_by_machine_replacement(
    election: str, unicast: bool
) -> None:
    why = usable()
    if why is not None:
        missing(why)
    argv = ["--kubeadm", "--replace", "--election", election, "--json"]
    run, post_mortem = run_lab(*argv, *(["--unicast"] if unicast else []), timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:] + post_mortem
    report = json.loads(run.stdout)
    assert report["summary"] == {"ok": True, "problems": []}
    assert report["lab"]["replace"] is True and report["lab"]["unicast"] is unicast
    steps = report["replace"]["steps"]
    assert [(s["kind"], s["node"]) for s in steps] == [
        (kind, node) for old, new in PAIRS for kind, node in (("join", new), ("remove", old))
    ]
    for s in steps:
        print(f"{s['kind']} {s['node']}: peers believed {s['peers']}")
        shown = json.dumps(s)
        assert len(s["after"]) == 1 and s["moves"] <= 1, shown
        if s["kind"] == "join" or s["node"] not in s["before"]:
            assert s["moves"] == 0 and s["after"] == s["before"], shown
        else:
            assert s["after"] != [s["node"]], shown  # the removed node gave the VIP away
        assert s["kubectl_tries"] > s["kubectl_failed"], shown  # /readyz answered in it
        assert s["kubectl_failed"] <= s["kubectl_allowed"], shown
    for r in report["replace"]["removals"]:
        assert r["old"] in r["etcd_before"] and r["problems"] == [], r
        assert r["new"] in r["etcd_before"], r
    end = report["replace"]["end"]
    assert end["nodes"] == {"n4": True, "n5": True, "n6": True}
    assert end["etcd_members"] == ["n4", "n5", "n6"]
    assert len(end["holders"]) == 1 and end["holders"][0] in ("n4", "n5", "n6")
    assert end["members"] == ["n4", "n5", "n6"]
    if unicast:
        # each new vipd follows the static three and the two other new machines, none held out
        want = {n: {"peers": 5, "held": 0} for n in ("n4", "n5", "n6")}
        assert end["membership"] == want, end
    # Then back down to one machine (the single-node start grew to three by init and two
    # joins): n4 and n5 removed, n6 the Node, etcd member and holder left.
    down = report["replace"]["scale_down"]
    assert [(s["kind"], s["node"]) for s in down["steps"]] == [("remove", "n4"), ("remove", "n5")]
    for s in down["steps"]:
        shown = json.dumps(s)
        assert len(s["after"]) == 1 and s["moves"] <= 1, shown
        if s["node"] not in s["before"]:
            assert s["moves"] == 0 and s["after"] == s["before"], shown
        assert s["kubectl_tries"] > s["kubectl_failed"], shown
        assert s["kubectl_failed"] <= s["kubectl_allowed"], shown
    for r in down["removals"]:
        assert r["problems"] == [] and r["old"] in r["etcd_before"], r
    assert down["end"] == {"nodes": {"n6": True}, "etcd_members": ["n6"], "holders": ["n6"]}
    whats = [row["what"] for row in report["timeline"]]
    for old, new in PAIRS:
        assert any(w.startswith(f"{new}: kubeadm join --control-plane") for w in whats), whats
        assert any(w.startswith(f"{old}: kubeadm reset -f") for w in whats), whats
