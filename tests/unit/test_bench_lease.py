"""The Lease benchmark's arithmetic (bench/lease.py): the request rate from scraped
counters (a restarted vipd's counter starts again at zero), the kubectl outage from its
attempts, and the discovery recorder's reader (vipd.lab.kubebed.discovery)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tests.unit import benches
from vipd.lab.kubebed import discovery

bench = benches.load("lease")

PAGE = """# HELP vipd_lease_requests_total Lease API calls
# TYPE vipd_lease_requests_total counter
vipd_lease_requests_total{purpose="read",result="ok"} 10.0
vipd_lease_requests_total{purpose="renew",result="ok"} 4.0
vipd_lease_requests_created{purpose="read",result="ok"} 1.7e9
vipd_lease_errors_total{kind="conflict"} 3.0
"""


def test_parse_requests_takes_the_counter_series_only() -> None:
    got = bench.parse_requests(PAGE)
    assert got == {'purpose="read",result="ok"': 10.0, 'purpose="renew",result="ok"': 4.0}


def test_request_rate_counts_a_restart_from_zero_and_skips_failed_scrapes() -> None:
    r = 'purpose="read",result="ok"'
    samples = [
        (0.0, {r: 10.0}),
        (2.0, {r: 12.0}),  # +2 over 2 s
        (4.0, None),  # vipd down: neither pair around it counts
        (6.0, {r: 1.0}),
        (8.0, {r: 3.0}),  # +2 over 2 s
        (10.0, {r: 1.0}),  # restarted between scrapes: +1 over 2 s
    ]
    got = bench.request_rate(samples)
    assert got["requests"] == 5.0
    assert got["seconds"] == 6.0
    assert abs(got["per_s"] - 5 / 6) < 1e-9
    assert got["by_purpose_per_s"] == {"read": 5 / 6}


def test_kubectl_outage_is_the_largest_gap_across_the_fault() -> None:
    attempts = [
        (0.0, 0.1, True),
        (0.3, 0.4, True),
        (0.6, 1.6, False),  # the dead holder: the request timed out
        (1.8, 2.9, True),
        (3.1, 3.2, True),
    ]
    assert bench.kubectl_outage(attempts, 0.5, 10.0) == 2.9 - 0.4
    assert bench.kubectl_outage(attempts, 0.05, 10.0) is None  # no answer before
    assert bench.kubectl_outage(attempts, 5.0, 10.0) is None  # none after
    assert abs(bench.answer_period(attempts) - 0.3) < 1e-9  # median of 0.3, 2.5, 0.3


def test_discovery_reader_keeps_whole_json_lines(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"t": 1.0, "using": "in-cluster"}\nTraceback\n{"t": 2.0, "backends": []}\n{"t"')
    assert discovery.read(p) == [{"t": 1.0, "using": "in-cluster"}, {"t": 2.0, "backends": []}]


def test_the_table_names_the_daemon_of_each_row() -> None:
    row = {
        "daemon": "kube-vip",
        "profile": "5/3/1",
        "fault": "term",
        "rounds_ok": 3,
        "rounds_asked": 3,
        "tcp": {"min": 2.4, "p50": 2.5, "p90": 2.6, "max": 2.7},
        "kubectl": None,
        "kubectl_answer_period_s": 0.33,
        "target_s": 1.1,
        "within_target": False,
        "requests": {"n1": {"per_s": None}},
        "requests_leader": "n1",
        "lab": {"apiserver": "kube-apiserver v1.37.2"},
    }
    text = bench.render([{**row, "daemon": "vipd"}, row])
    assert "| 5/3/1 | SIGTERM | vipd | 3/3 | 2.400 / 2.500 / 2.600 / 2.700 |" in text
    assert "| 5/3/1 | SIGTERM | kube-vip | 3/3 |" in text


def test_lease_lab_options_take_kube_vip_with_a_lease_only() -> None:
    import pytest

    from vipd.lab.runner import Options

    assert Options(daemon="kube-vip", election="lease").spec().lease is not None
    with pytest.raises(ValueError, match="--daemon kube-vip runs with --election lease"):
        Options(daemon="kube-vip").spec()
    with pytest.raises(ValueError, match="--election lease runs vipd or kube-vip"):
        Options(daemon="keepalived", election="lease").spec()


def test_kube_vip_on_the_bed_gets_the_beds_lease_timing_in_whole_seconds(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    import pytest

    from vipd.lab.kubebed.bed import BedKubeVip, Timing
    from vipd.lab.topology import VIP4, LabError, Node

    node = Node(name="n2", index=2, ns="x-n2", ipv4="10.77.0.12", ipv6="fd77::12", port="x-p2")
    bed: Any = SimpleNamespace(
        lab=SimpleNamespace(workdir=tmp_path, nodes=[node]),
        bins=Path("/kube"),
        timing=Timing(5, 3.0, 1.0),
    )
    argv = BedKubeVip(bed, node).argv(Path("/k/config"))
    assert argv[:2] == ["/kube/kube-vip", "manager"]
    assert {"--controlplane", "--arp", "--leaderElection"} <= set(argv)
    opts = dict(itertools.pairwise(argv))
    assert opts["--address"] == VIP4 and opts["--interface"] == "eth0"
    timing = (opts["--leaseDuration"], opts["--leaseRenewDuration"], opts["--leaseRetry"])
    assert timing == ("5", "3", "1")
    assert opts["--nodeName"] == "n2" and opts["--k8sConfigPath"] == "/k/config"
    bed.timing = Timing(5, 3.0, 0.5)
    with pytest.raises(LabError, match="whole seconds"):
        BedKubeVip(bed, node).argv(Path("/k/config"))
