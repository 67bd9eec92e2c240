"""``vipd lab --kubeadm`` as a user runs it: one command, a real kubeadm cluster on real
kubelets, the JSON report.

Asserted on the report the command prints (and its exit code): the VIP first bound on n1
before ``kubeadm init`` finished, three adopt steps with the holder last, at most one VIP move
per step and none at a follower's, kubectl through the VIP failing at most once per move; the
image roll's three steps judged the same way; the rebooted holder giving the VIP away within
the failover bound; the bad-image recovery restoring the VIP from the static manifest and
handing over again; every connect through the VIP answered or the gap reported,
``/readyz`` through the VIP back within 60 s of the full power loss, a timeline that names
each step, and no problems.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kubelet.labrun import run_lab
from tests.prereq import missing
from vipd.lab.kubelet_bed.bed import usable

pytestmark = pytest.mark.kubelet


def _kubectl_saw(step: dict[str, Any]) -> bool:
    """kubectl through the VIP was at work in the step: a try began in it, or one begun just
    before was still running (a try that hangs to its 5 s timeout covers a short roll step
    whole; it is counted, failure and all, in the step it began in)."""
    return step["kubectl_tries"] > 0 or bool(step["kubectl_in_flight"])


def test_vipd_lab_kubeadm_reports_the_clusters_life() -> None:
    why = usable()
    if why is not None:
        missing(why)
    run, post_mortem = run_lab("--kubeadm", "--json", timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-1500:] + post_mortem
    report = json.loads(run.stdout)
    assert report["summary"] == {"ok": True, "problems": []}
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
        assert s["gap_s"] >= 0
        assert _kubectl_saw(s) and s["kubectl_failed"] <= s["kubectl_allowed"], shown
    rolled = report["roll"]
    assert sorted(s["node"] for s in rolled) == ["n1", "n2", "n3"]
    for s in rolled:
        shown = json.dumps(s)
        assert s["moves"] <= 1 and len(s["after"]) == 1, shown
        if s["node"] not in s["before"]:
            assert s["moves"] == 0 and s["after"] == s["before"], shown
        assert _kubectl_saw(s) and s["kubectl_failed"] <= s["kubectl_allowed"], shown
    reboot = report["reboot"]
    assert reboot["problems"] == [] and reboot["new_holder"] != [reboot["node"]]
    assert 0 < reboot["vip_left_after_s"] <= reboot["failover_bound_s"]
    bad = report["bad_image"]
    assert bad["problems"] == [] and bad["readyz_failed_without_vip"]
    assert bad["holder_on_static"] == [bad["static_on"]] and len(bad["holders_after"]) == 1
    assert 0 < report["power_loss"]["readyz_through_vip_after_s"] <= 60
    whats = [row["what"] for row in report["timeline"]]
    assert any("+VIP" in w for w in whats)
    assert sum("(adopt)" in w for w in whats) == 3, whats
    assert any(w.startswith("roll: rollout status done") for w in whats), whats
    assert any("reboot" in w for w in whats) and any("bad image" in w for w in whats), whats
