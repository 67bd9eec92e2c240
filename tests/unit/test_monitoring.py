"""The alert rules and the Grafana dashboard in manifests/monitoring/.

- ``promtool check rules`` and ``promtool test rules`` (tests/monitoring/vipd-rules.test.yaml)
  pass; every alert has a test that makes it fire; the PrometheusRule carries exactly the
  groups of the plain rule file.
- Every expression (alert rules, dashboard panels, dashboard variables) uses only metrics vipd
  exports (or Prometheus' own ``up``): a renamed metric cannot leave a dead panel or an alert
  that never fires. (tests/netns/test_metrics.py also runs every one of them against a real
  Prometheus scraping real vipd nodes.)

``promtool`` comes with Debian's prometheus package (scripts/setup installs it); without it
the promtool tests skip with the reason, and fail under CI=true.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prereq import promtool
from vipd import metrics

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
RULES = MONITORING / "vipd-rules.yaml"
OPERATOR_RULES = MONITORING / "vipd-prometheusrule.yaml"
DASHBOARD = MONITORING / "vipd-dashboard.json"
RULE_TESTS = ROOT / "tests" / "monitoring" / "vipd-rules.test.yaml"
# Optional rules on FRR's sessions (frr_exporter's metrics, not vipd's): routing-table mode.
FRR_RULES = MONITORING / "vipd-routed-frr-rules.yaml"
FRR_RULE_TESTS = ROOT / "tests" / "monitoring" / "vipd-routed-frr-rules.test.yaml"
RUNBOOK = ROOT / "docs" / "operations" / "alerts.md"

# Series Prometheus makes itself for every target.
SYNTHETIC = {"up"}
# Words of PromQL that look like metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "inf", "nan", "le",
}  # fmt: skip


def exported_series() -> set[str]:
    """Every series name a vipd exposition can contain."""
    names: set[str] = set()
    for fam in metrics.REGISTRY.collect():
        if fam.type == "counter":  # prometheus_client names the family without _total
            names.add(fam.name + "_total")
        elif fam.type == "histogram":
            names |= {fam.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(fam.name)
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (no full parser: label matchers, string
    literals, durations, grouping clauses and function calls are removed first)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\$\{?\w+\}?", "1", text)  # Grafana variables
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text
    )  # label lists
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        after = text[m.end() :].lstrip()
        if after.startswith("(") or word.lower() in KEYWORDS:
            continue  # a function or aggregation, or a keyword
        if re.fullmatch(r"\d+[smhdwy]", word) or text[m.start() - 1 : m.start()].isdigit():
            continue
        names.add(word)
    return names


def test_metric_names_extractor() -> None:
    assert metric_names('sum by (vip) (vipd_vip_bound{vip=~"$vip"}) == 0') == {"vipd_vip_bound"}
    expr = (
        "histogram_quantile(0.99, sum by (le, stage) (rate(vipd_takeover_duration_seconds_bucket"
        "[$__rate_interval]))) * on (instance) group_left (node) max by (instance, node) "
        '(vipd_node_info{vip=~"$vip"}) / 2^20 and up{job="vipd"} == 0'
    )
    assert metric_names(expr) == {
        "vipd_takeover_duration_seconds_bucket",
        "vipd_node_info",
        "up",
    }


def rule_list(path: Path = RULES) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def label_values_metric(expr: str) -> str:
    m = re.fullmatch(r"label_values\((\w+),\s*\w+\)", expr)
    return m.group(1) if m else expr


# -- rules -----------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    out = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rule_list())} rules found" in out.stdout


@pytest.mark.parametrize("tests", [RULE_TESTS, FRR_RULE_TESTS], ids=lambda p: p.name)
def test_promtool_test_rules(tests: Path) -> None:
    out = subprocess.run(
        [promtool(), "test", "rules", tests.name],
        cwd=tests.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_frr_session_rules_check_and_fire_only_on_a_session_down(tmp_path: Path) -> None:
    out = subprocess.run(
        [promtool(), "check", "rules", str(FRR_RULES)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and "SUCCESS: 1 rules found" in out.stdout, out.stdout
    # The harness can fail: the alert on established sessions instead breaks the test.
    broken = FRR_RULES.read_text().replace('safi="unicast"} == 0', 'safi="unicast"} == 1')
    assert broken != FRR_RULES.read_text()
    (tmp_path / "rules.yaml").write_text(broken)
    tests = yaml.safe_load(FRR_RULE_TESTS.read_text())
    tests["rule_files"] = ["rules.yaml"]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tests))
    failed = subprocess.run(
        [promtool(), "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert failed.returncode != 0 and "VipdRoutedSessionDown" in failed.stdout + failed.stderr


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    """The harness can fail: the same tests against a rule file whose split-brain alert
    needs 3 nodes instead of 2 must not pass."""
    broken = RULES.read_text().replace(
        'vipd_role{backend="routed"}) > 1', 'vipd_role{backend="routed"}) > 2'
    )
    assert broken != RULES.read_text()
    (tmp_path / "rules.yaml").write_text(broken)
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = ["rules.yaml"]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tests))
    out = subprocess.run(
        [promtool(), "test", "rules", "t.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0 and "VipdVipOnSeveralNodes" in out.stdout + out.stderr


def test_every_alert_has_a_test_that_makes_it_fire() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == ["../../manifests/monitoring/vipd-rules.yaml"]
    fired = {
        t["alertname"]
        for case in tests["tests"]
        for t in case["alert_rule_test"]
        if t["exp_alerts"]
    }
    quiet = {
        t["alertname"]
        for case in tests["tests"]
        for t in case["alert_rule_test"]
        if not t["exp_alerts"]
    }
    alerts = {r["alert"] for r in rule_list()}
    assert alerts == fired, f"alerts never made to fire in a test: {alerts - fired}"
    assert alerts == quiet, f"alerts never checked quiet: {alerts - quiet}"


def test_the_issue_alerts_are_there() -> None:
    alerts = {r["alert"] for r in rule_list()}
    # no node holds the VIP; more than one; frequent transitions; Lease renewals failing
    assert {
        "VipdNoNodeHoldsVip",
        "VipdVipOnSeveralNodes",
        "VipdLeaderFlapping",
        "VipdLeaseRenewalsFailing",
    } <= alerts


def test_every_alert_has_severity_summary_description_and_runbook() -> None:
    for rule in rule_list():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, rule
        assert rule["alert"].startswith("Vipd")


def runbook_sections() -> dict[str, str]:
    """docs/operations/alerts.md's "## Name" sections by their anchor (GitHub's: lower case)."""
    sections: dict[str, str] = {}
    current = None
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current.lower()] = ""
        elif current is not None:
            sections[current.lower()] += line + "\n"
    return sections


def test_every_runbook_url_points_at_a_section_that_says_what_to_check_and_do() -> None:
    sections = runbook_sections()
    rules = rule_list() + rule_list(FRR_RULES)
    alerts = {r["alert"] for r in rules}
    for rule in rules:
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base.endswith("/docs/operations/alerts.md"), base
        assert anchor == rule["alert"].lower(), rule["annotations"]["runbook_url"]
        text = sections.get(anchor, "")
        assert "Check" in text and "Do:" in text, f"{rule['alert']}: no runbook section"
        severity = rule["labels"]["severity"].capitalize()
        assert text.lstrip().startswith(f"**{severity}.**"), rule["alert"]
    # One base for every alert, and no section for an alert that no longer exists.
    assert len({r["annotations"]["runbook_url"].partition("#")[0] for r in rules}) == 1
    assert set(sections) == {a.lower() for a in alerts}


def test_an_all_down_alert_fires_on_absence_at_critical() -> None:
    (rule,) = [r for r in rule_list() if r["alert"] == "VipdAllDown"]
    assert re.match(r"absent(_over_time)?\(", rule["expr"]), rule["expr"]
    assert rule["labels"]["severity"] == "critical"
    # What it watches is exported by every vipd, whatever its role or backend.
    (name,) = metric_names(rule["expr"])
    fam = next(f for f in metrics.REGISTRY.collect() if f.name == name)
    assert [s.value for s in fam.samples] == [1.0]


def test_scrape_job_matcher_works_for_static_scrapes_and_the_operator() -> None:
    """No hard-coded job="vipd": `up` is matched by a regex that accepts the static job and
    the ServiceMonitor's ("vipd") and the PodMonitor's ("<namespace>/vipd")."""
    matchers = set()
    for rule in rule_list():
        if "up" in metric_names(rule["expr"]):
            found = re.findall(r'\bup\{job=~"([^"]+)"\}', rule["expr"])
            assert found, f"{rule['alert']}: up without the job regex: {rule['expr']}"
            matchers |= set(found)
    (regex,) = matchers
    for job in ("vipd", "kube-system/vipd", "monitoring/vipd"):
        assert re.fullmatch(regex, job), job  # Prometheus anchors =~ at both ends
    for job in ("node", "vipd-exporter", "kube-system/vipd-old"):
        assert not re.fullmatch(regex, job), job


def test_prometheusrule_has_the_same_groups() -> None:
    operator = yaml.safe_load(OPERATOR_RULES.read_text())
    assert operator["apiVersion"] == "monitoring.coreos.com/v1"
    assert operator["kind"] == "PrometheusRule"
    assert operator["metadata"]["name"] == "vipd"
    assert operator["spec"] == yaml.safe_load(RULES.read_text())


@pytest.mark.parametrize("rule", rule_list(), ids=lambda r: r["alert"])
def test_rule_uses_only_exported_metrics(rule: dict[str, Any]) -> None:
    names = metric_names(rule["expr"])
    assert names, rule["expr"]
    unknown = names - exported_series() - SYNTHETIC
    assert not unknown, f"{rule['alert']} uses {unknown}, which vipd does not export"


# -- dashboard -------------------------------------------------------------------------------


def test_dashboard_is_grafana_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "vipd" and dash["title"] == "vipd"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in dash["templating"]["list"]}
    assert names == {"datasource", "vip"}
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and panel.get("description"), panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24


@pytest.mark.parametrize("expr", dashboard_exprs())
def test_dashboard_expression_uses_only_exported_metrics(expr: str) -> None:
    names = metric_names(label_values_metric(expr))
    assert names, expr
    unknown = names - exported_series() - SYNTHETIC
    assert not unknown, f"{expr!r} uses {unknown}, which vipd does not export"


def dashboard_panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_every_panel_honours_the_vip_variable() -> None:
    for panel in dashboard_panels():
        for target in panel["targets"]:
            assert '{vip=~"$vip"}' in target["expr"], (panel["title"], target["expr"])


def unit_class(expr: str) -> str:
    """What an expression's values are measured in, from its shape and metric names."""
    names = metric_names(expr)
    if "histogram_quantile" in expr or any(n.endswith("_seconds_sum") for n in names):
        return "seconds"
    if "rate(" in expr and "increase(" not in expr:
        return "cores" if any(n.endswith("_seconds_total") for n in names) else "per-second"
    if "increase(" in expr:
        return "count"
    if any(n.endswith("_seconds") for n in names):
        return "seconds"
    if any(n.endswith("_bytes") for n in names):
        return "bytes"
    return "value"


UNITS = {
    "seconds": {"s"},
    "per-second": {"pps", "ops"},
    "cores": {"short"},
    "count": {"short"},
    "bytes": {"bytes"},
    "value": {"short"},
}


def test_unit_classes_tell_apart_what_one_axis_must_not_mix() -> None:
    cpu = "rate(process_cpu_seconds_total[5m])"
    assert unit_class(cpu) != unit_class("process_resident_memory_bytes")
    assert unit_class("vipd_vip_duplicate_claim") != unit_class(
        "increase(vipd_vip_duplicate_claims_total[5m])"
    )
    assert unit_class(cpu) != unit_class("rate(vipd_vrrp_adverts_sent_total[5m])")


def test_no_panel_mixes_units_on_one_axis() -> None:
    for panel in dashboard_panels():
        if panel["type"] != "timeseries":
            continue
        classes = {unit_class(t["expr"]) for t in panel["targets"]}
        assert len(classes) == 1, f"{panel['title']} mixes {classes}"
        (cls,) = classes
        unit = panel["fieldConfig"]["defaults"].get("unit")
        assert unit in UNITS[cls], f"{panel['title']}: unit {unit} for {cls}"
        for override in panel["fieldConfig"].get("overrides", []):
            props = {p["id"] for p in override.get("properties", [])}
            assert not props & {"unit", "custom.axisPlacement"}, panel["title"]


def test_dashboard_shows_the_core_metrics() -> None:
    used = set().union(*(metric_names(label_values_metric(e)) for e in dashboard_exprs()))
    for name in (
        "vipd_vip_bound",
        "vipd_role",
        "vipd_role_transitions_total",
        "vipd_takeover_duration_seconds_bucket",
        "vipd_vip_duplicate_claim",
        "vipd_vrrp_adverts_invalid_total",
        "vipd_ready",
    ):
        assert name in used, name
