"""vipd.metrics: every metric is named, typed, helped and documented; the exposition is valid.

``promtool`` (Debian's prometheus package, installed by scripts/setup) checks the real
exposition; where it is missing the test is skipped with the reason, and fails under CI=true.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.prereq import promtool
from vipd import metrics
from vipd.exposition import Family

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reference" / "metrics.md"
NAME = re.compile(r"vipd_[a-z][a-z0-9_]*")


def vipd_families() -> list[tuple[str, str, str]]:
    """(name, type, help) of every vipd_ metric family on the registry."""
    return [
        (fam.name, fam.kind, fam.documentation)
        for fam in metrics.REGISTRY.families()
        if fam.name.startswith("vipd_")
    ]


def exposed_names() -> set[str]:
    return {name for name, _, _ in vipd_families()}


def docs_table() -> dict[str, tuple[str, str]]:
    """metric -> (type, labels) from the table in docs/reference/metrics.md."""
    rows: dict[str, tuple[str, str]] = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `(vipd_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3).strip())
    return rows


def generate_latest() -> bytes:
    return metrics.REGISTRY.expose()


def test_every_collector_is_vipd_or_process() -> None:
    for fam in metrics.REGISTRY.families():
        assert fam.name.startswith(("vipd_", "process_")), fam.name


@pytest.mark.parametrize(("name", "kind", "help_text"), vipd_families())
def test_metric_is_named_and_helped(name: str, kind: str, help_text: str) -> None:
    assert NAME.fullmatch(name), name
    # Help that says how to read the number, not just its name.
    assert len(help_text) >= 40, f"{name}: help text too short: {help_text!r}"
    # A counter, and only a counter, is named ..._total (the text format's convention).
    assert name.endswith("_total") == (kind == "counter"), name
    if "seconds" in name:
        assert kind in ("gauge", "histogram", "counter")
    assert not re.search(r"_(ms|milliseconds|minutes|bytes_kb)\b", name), name


def test_docs_document_every_metric_with_its_type_and_labels() -> None:
    table = docs_table()
    for fam in metrics.REGISTRY.families():
        if not fam.name.startswith("vipd_"):
            continue
        assert fam.name in table, f"{fam.name} is not in docs/reference/metrics.md"
        kind, _ = table[fam.name]
        assert kind == fam.kind, f"{fam.name}: the docs say {kind}, it is a {fam.kind}"
    for name in table:
        assert name in exposed_names(), f"the docs list {name}, which vipd does not export"


def test_docs_list_every_label_name() -> None:
    table = docs_table()
    objects = [m for m in vars(metrics).values() if isinstance(m, Family)]
    assert len(objects) >= 20
    for metric in objects:
        doc_name = metric.name
        documented = set(re.findall(r"`([a-z_]+)`", table[doc_name][1].split("(")[0]))
        for label in metric.labelnames:
            assert f"`{label}`" in table[doc_name][1], (doc_name, label)
        assert documented <= set(metric.labelnames), (doc_name, documented)
        if not metric.labelnames:
            assert table[doc_name][1] == "—", doc_name


def test_set_role_leaves_exactly_one_role() -> None:
    for role in metrics.ROLES:
        metrics.set_role("vrrp", role, "10.0.0.100")
        values = {
            r: metrics.REGISTRY.get_sample_value(
                "vipd_role", {"backend": "vrrp", "role": r, "vip": "10.0.0.100"}
            )
            for r in metrics.ROLES
        }
        assert values == {r: (1.0 if r == role else 0.0) for r in metrics.ROLES}


def test_roles_of_two_vips_are_apart() -> None:
    """Two virtual routers (an IPv4 and an IPv6 VIP): leading one, following the other."""
    metrics.set_role("vrrp", "leader", "10.0.0.100")
    metrics.set_role("vrrp", "follower", "fd00::100")
    get = metrics.REGISTRY.get_sample_value
    assert get("vipd_role", {"backend": "vrrp", "role": "leader", "vip": "10.0.0.100"}) == 1
    assert get("vipd_role", {"backend": "vrrp", "role": "leader", "vip": "fd00::100"}) == 0
    assert get("vipd_role", {"backend": "vrrp", "role": "follower", "vip": "fd00::100"}) == 1


def test_set_master_keeps_one_series_per_vip() -> None:
    metrics.set_master("10.0.0.1", 200, "10.0.0.100")
    metrics.set_master("10.0.0.2", 150, "10.0.0.100")
    metrics.set_master("fe80::2", 120, "fd00::100")
    text = generate_latest().decode()
    found = re.findall(
        r'^vipd_vrrp_master_info\{address="([^"]+)",vip="([^"]+)"\} 1\.0$', text, re.M
    )
    assert sorted(found) == [("10.0.0.2", "10.0.0.100"), ("fe80::2", "fd00::100")]
    get = metrics.REGISTRY.get_sample_value
    assert get("vipd_vrrp_master_priority", {"vip": "10.0.0.100"}) == 150
    assert get("vipd_vrrp_master_priority", {"vip": "fd00::100"}) == 120
    metrics.set_master(None, None, "10.0.0.100")
    metrics.set_master(None, None, "fd00::100")
    assert "vipd_vrrp_master_info{" not in generate_latest().decode()
    # Unknown is an absent series (no sample), not a -1 a query would have to leave out.
    assert get("vipd_vrrp_master_priority", {"vip": "10.0.0.100"}) is None
    exposition = generate_latest().decode()
    assert not re.search(r"^vipd_vrrp_master_priority", exposition, re.M)


def test_one_meaning_per_label_name_and_no_minus_one_for_unknown() -> None:
    """``backend`` is the election backend wherever it appears (the API servers vipd checks
    are ``target``); no vipd gauge says "unknown" with -1."""
    metrics.init_vrrp(node="cp-1", vips=["10.0.0.100"], interface="eth0", priority=150)
    metrics.init_lease(node="cp-1", vips=["10.0.0.100"], interface="eth0")
    metrics.HEALTH_BACKEND_HEALTHY.labels(target="10.0.0.12", local="false").set(0)
    metrics.HEALTH_CHECKS.labels(target="10.0.0.12", result="ok").inc()
    for fam in metrics.REGISTRY.families():
        if not fam.name.startswith("vipd_"):
            continue
        for sample in fam.samples():
            _, pairs, value = sample
            labels = dict(pairs)
            if "backend" in labels:
                assert labels["backend"] in ("vrrp", "lease"), (fam.name, sample)
            if fam.kind == "gauge":
                assert value != -1, (fam.name, sample)


def test_duplicate_claims_are_split_by_source() -> None:
    metrics.init_vrrp(node="cp-1", vips=["10.0.0.100"], interface="eth0", priority=150)
    for source in ("vrrp", "arp"):
        value = metrics.REGISTRY.get_sample_value(
            "vipd_vip_duplicate_claims_total", {"source": source}
        )
        assert value is not None, source


def test_init_creates_the_known_series_at_zero() -> None:
    metrics.init_vrrp(node="cp-1", vips=["10.0.0.100"], interface="eth0", priority=150)
    get = metrics.REGISTRY.get_sample_value
    for reason in metrics.INVALID_REASONS:
        assert get("vipd_vrrp_adverts_invalid_total", {"reason": reason}) is not None
    assert get("vipd_reconcile_errors_total", {"actuator": "address"}) is not None
    assert get("vipd_vip_bound", {"vip": "10.0.0.100"}) == 0
    assert get("vipd_role", {"backend": "vrrp", "role": "init", "vip": "10.0.0.100"}) == 1
    assert get("vipd_vrrp_priority", {"vip": "10.0.0.100"}) == 150
    labels = {"node": "cp-1", "vip": "10.0.0.100", "interface": "eth0", "backend": "vrrp"}
    assert get("vipd_node_info", labels) == 1


def test_invalid_reasons_are_the_decoders() -> None:
    """The pre-created reasons are exactly the decoder's (the docs and packet.DecodeError)."""
    text = (ROOT / "vipd" / "vrrp" / "packet.py").read_text()
    reasons = set(re.findall(r'DecodeError\(\s*"([a-z-]+)"', text))
    assert len(reasons) >= 8, reasons  # the pattern still finds the raises
    assert reasons <= set(metrics.INVALID_REASONS), reasons - set(metrics.INVALID_REASONS)


def test_promtool_check_metrics_is_clean() -> None:
    tool = promtool()
    metrics.init_vrrp(node="cp-1", vips=["10.0.0.100"], interface="eth0", priority=150)
    metrics.TAKEOVER_DURATION.labels(stage="bound").observe(0.0003)
    metrics.TRANSITIONS.labels(backend="vrrp", role="leader", reason="master-down").inc()
    out = subprocess.run(
        [tool, "check", "metrics"],
        input=generate_latest(),
        capture_output=True,
        check=False,
    )
    # promtool prints lint problems and exits 3 (or 1) when there are any.
    assert out.returncode == 0, (out.stdout + out.stderr).decode()
    assert out.stdout.strip() == b"" and out.stderr.strip() == b"", out
