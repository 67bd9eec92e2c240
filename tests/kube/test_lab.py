"""``vipd lab --election lease`` on the real control plane, and what it says without it.

What it tests: with the binaries, ``vipd lab --election lease --fault apidown`` (the leader's
kube-apiserver SIGKILLed, then restarted) fails over in every round and names the API server
it ran on in ``--json`` (``lab.apiserver``); ``--daemon kube-vip`` runs the real kube-vip on
the same bed, which moves the VIP on a SIGTERM in every round (the harness the Lease
benchmark compares with); without them (``VIPD_KUBE_BIN`` pointing at an
empty directory), the Lease lab exits 2 and its last line is the one command that builds them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.prereq import missing
from vipd.lab import runner
from vipd.lab.kubebed import binaries
from vipd.lab.kubebed.bed import usable

pytestmark = pytest.mark.kube


def test_lab_fault_apidown_in_lease_mode_on_kube_apiserver() -> None:
    why = usable()
    if why is not None:
        missing(why)
    report: dict[str, Any] = runner.execute(
        runner.Options(fault="apidown", rounds=2, election="lease")
    )
    assert report["summary"]["ok"], runner.render_table(report)
    assert report["lab"]["apiserver"] == binaries.version(binaries.find() / "kube-apiserver")
    assert report["lab"]["apiserver"].startswith("kube-apiserver v1.")
    for r in report["rounds"]:
        assert r["new_leader"] != r["old_leader"], r
    json.dumps(report)  # what --json prints


def test_lab_runs_kube_vip_on_the_same_control_plane_for_a_comparison() -> None:
    why = usable()
    if why is None and binaries.kube_vip(binaries.find()) is None:
        why = f"kube-vip is not built in {binaries.find()} (scripts/setup-kube says why)"
    if why is not None:
        missing(why)
    report: dict[str, Any] = runner.execute(
        runner.Options(daemon="kube-vip", fault="term", rounds=2, election="lease")
    )
    assert report["lab"]["daemon"] == "kube-vip"
    assert report["summary"]["ok"], runner.render_table(report)
    for r in report["rounds"]:
        assert r["new_leader"] != r["old_leader"], r


def test_lab_without_the_binaries_says_what_to_run(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        missing(f"needs root: the lab checks root first (running as uid {os.geteuid()})")
    env = {**os.environ, "VIPD_KUBE_BIN": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "vipd", "lab", "--election", "lease", "--rounds", "1"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc
    assert proc.stderr.strip().splitlines()[-1].endswith(binaries.BUILD_COMMAND), proc.stderr
    assert proc.stdout == ""
