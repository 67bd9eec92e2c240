"""vipd.lab.kubelet_bed.podlogs: a vipd pod's log lines are kept after the kubelet deletes it."""

from __future__ import annotations

import shutil
from pathlib import Path

from vipd.lab.kubelet_bed.podlogs import PodLogKeeper, cri_time, parse


def line(stamp: str, text: str) -> str:
    return f"{stamp} stderr F {text}\n"


def test_lines_written_just_before_the_pods_deletion_are_kept(tmp_path: Path) -> None:
    n1, n2 = tmp_path / "n1", tmp_path / "n2"
    pod = n1 / "var/log/pods/kube-system_vipd-abcde_uid1/vipd"
    pod.mkdir(parents=True)
    other = n1 / "var/log/pods/kube-system_etcd-n1_uid2/etcd"
    other.mkdir(parents=True)
    (other / "0.log").write_text(line("2026-12-02T01:42:43.000000000Z", "etcd"))
    log = pod / "0.log"
    log.write_text(line("2026-12-02T01:42:43.100000000Z", 'msg="became leader"'))
    keeper = PodLogKeeper({"n1": n1, "n2": n2})
    keeper.poll()
    with log.open("a") as f:
        f.write(line("2026-12-02T01:42:43.300000000Z", 'msg="VIP removed"'))
        f.write("2026-12-02T01:42:43.4")  # a line still being written
    shutil.rmtree(n1 / "var/log/pods/kube-system_vipd-abcde_uid1")  # the pod is gone
    keeper.poll()
    keeper.stop()
    kept = keeper.around(["n1"], 0.0, 2e9)
    assert [(ln.pod, ln.text) for ln in kept] == [
        ("kube-system_vipd-abcde_uid1", 'msg="became leader"'),
        ("kube-system_vipd-abcde_uid1", 'msg="VIP removed"'),
    ]
    assert keeper.around(["n2"], 0.0, 2e9) == []
    t = cri_time("2026-12-02T01:42:43.300000000Z")
    assert t is not None
    assert [ln.text for ln in keeper.around(["n1"], t - 0.1, t + 0.1)] == ['msg="VIP removed"']


def test_a_line_that_is_not_cri_is_skipped() -> None:
    assert parse("n1", "p", "garbage") is None
    assert parse("n1", "p", "yesterday stderr F text") is None
    got = parse("n1", "p", "2026-12-02T01:42:43Z stdout F a b c")
    assert got is not None and got.text == "a b c" and got.at == cri_time("2026-12-02T01:42:43Z")
