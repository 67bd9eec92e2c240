"""vipd.metrics: every metric is named, typed, helped and documented; the exposition is valid
and negotiated; the scrape hooks and the gauges with no sample while unknown work.

``promtool`` (Debian's prometheus package, installed by scripts/setup) checks the real
exposition; where it is missing the test is skipped with the reason, and fails under CI=true.
The types and the text formats are prometheus_client's (its own tests cover them); the
families, HELP texts and labels are held by ``test_metrics_golden.py``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from tests.prereq import promtool
from vipd import metrics
from vipd.bfd.metrics import BfdMetrics

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reference" / "metrics.md"
NAME = re.compile(r"vipd_[a-z][a-z0-9_]*")


def bfd_registry() -> CollectorRegistry:
    """BFD's families, which the agent registers only when it runs BFD (bgp mode)."""
    registry = CollectorRegistry()
    BfdMetrics(registry)
    return registry


def vipd_families() -> list[tuple[str, str, str]]:
    """(name, type, help) of every vipd_ metric family on the registry, and BFD's."""
    return [
        (family_name(fam.name, fam.type), fam.type, fam.documentation)
        for registry in (metrics.REGISTRY, bfd_registry())
        for fam in registry.collect()
        if fam.name.startswith("vipd_")
    ]


def family_name(name: str, kind: str) -> str:
    """The name vipd gives a family: prometheus_client drops a counter's _total from it."""
    return name + "_total" if kind == "counter" else name


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
    body, _ = metrics.exposition("")
    return body


def test_every_collector_is_vipd_or_process() -> None:
    for fam in metrics.REGISTRY.collect():
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
    for name, kind, _ in vipd_families():
        assert name in table, f"{name} is not in docs/reference/metrics.md"
        documented, _ = table[name]
        assert documented == kind, f"{name}: the docs say {documented}, it is a {kind}"
    for name in table:
        assert name in exposed_names(), f"the docs list {name}, which vipd does not export"


def test_docs_list_every_label_name() -> None:
    table = docs_table()
    objects: list[tuple[str, tuple[str, ...]]] = []
    for m in vars(metrics).values():
        if isinstance(m, MetricWrapperBase):
            # prometheus_client keeps the name (without a counter's _total) and the label
            # names in private attributes; describe() does not say the label names.
            objects.append((family_name(m._name, str(m._type)), tuple(m._labelnames)))
        elif isinstance(m, metrics.OptionalGauge):
            objects.append((m.name, m.labelnames))
    assert len(objects) >= 20
    for doc_name, labelnames in objects:
        documented = set(re.findall(r"`([a-z_]+)`", table[doc_name][1].split("(")[0]))
        for label in labelnames:
            assert f"`{label}`" in table[doc_name][1], (doc_name, label)
        assert documented <= set(labelnames), (doc_name, documented)
        if not labelnames:
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
    for fam in metrics.REGISTRY.collect():
        if not fam.name.startswith("vipd_"):
            continue
        for sample in fam.samples:
            if "backend" in sample.labels:
                # the election backends, and routing-table mode's (docs/reference/metrics.md)
                assert sample.labels["backend"] in ("vrrp", "lease", "routed"), (fam.name, sample)
            if fam.type == "gauge":
                assert sample.value != -1, (fam.name, sample)


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


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        ("", False),
        ("*/*", False),
        ("text/plain; version=0.0.4", False),
        ("text/plain;version=1.0.0;escaping=allow-utf-8", False),  # the text format 1.0.0
        # What Prometheus 2.x sends: OpenMetrics first, the text format as the fallback.
        (
            "application/openmetrics-text; version=1.0.0,application/openmetrics-text; "
            "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            True,
        ),
        # Prometheus 3.x (its default scrape_protocols).
        (
            "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
            "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
            "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            True,
        ),
        ("application/openmetrics-text", True),
        ("application/openmetrics-text; version=0.0.1", False),
    ],
)
def test_exposition_is_negotiated(accept: str, openmetrics: bool) -> None:
    body, ctype = metrics.exposition(accept)
    want = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
    assert ctype.startswith(want) and "charset=utf-8" in ctype, ctype
    text = body.decode()
    assert text.endswith("# EOF\n") is openmetrics
    # OpenMetrics names a counter family without its _total, the text format 0.0.4 with it.
    family = "vipd_vip_repairs" if openmetrics else "vipd_vip_repairs_total"
    assert f"# TYPE {family} counter\n" in text
    assert "\nvipd_vip_repairs_total " in text
    assert "_created" not in text  # no *_created series beside counters and histograms


def test_before_expose_hooks_run_before_each_scrape_until_forgotten() -> None:
    calls: list[str] = []

    def hook() -> None:
        calls.append("a")

    def other() -> None:
        calls.append("b")

    metrics.REGISTRY.before_expose("test-hook", hook)
    try:
        metrics.exposition("")
        metrics.REGISTRY.get_sample_value("vipd_ready")
        assert calls == ["a", "a"]
        metrics.REGISTRY.forget_before_expose("test-hook", other)  # not the one registered
        metrics.exposition("")
        assert calls == ["a", "a", "a"]
    finally:
        metrics.REGISTRY.forget_before_expose("test-hook", hook)
    metrics.exposition("")
    assert calls == ["a", "a", "a"]


def test_a_hook_brings_a_counter_up_to_date_before_the_scrape_reads_it() -> None:
    before = metrics.REGISTRY.get_sample_value("vipd_garp_frames_sent_total") or 0.0

    def hook() -> None:
        metrics.GARP_SENT.inc(2)

    metrics.REGISTRY.before_expose("test-counter", hook)
    try:
        text = generate_latest().decode()
    finally:
        metrics.REGISTRY.forget_before_expose("test-counter", hook)
    (line,) = re.findall(r"^vipd_garp_frames_sent_total .*$", text, re.M)
    assert float(line.split()[1]) == before + 2


def test_optional_gauge_has_no_sample_while_unknown() -> None:
    gauge = metrics.LEASE_RENEW_AGE
    gauge.set(None)
    assert metrics.REGISTRY.get_sample_value("vipd_lease_last_renewal_age_seconds") is None
    gauge.set(2.5)
    assert metrics.REGISTRY.get_sample_value("vipd_lease_last_renewal_age_seconds") == 2.5
    value: list[float | None] = [None]
    gauge.set_function(lambda: value[0])
    assert gauge.get() is None
    assert "\nvipd_lease_last_renewal_age_seconds " not in generate_latest().decode()
    value[0] = 4.0
    assert metrics.REGISTRY.get_sample_value("vipd_lease_last_renewal_age_seconds") == 4.0
    gauge.set(None)
    with pytest.raises(ValueError, match="takes the labels"):
        metrics.VRRP_MASTER_PRIORITY.set(1, node="x")
