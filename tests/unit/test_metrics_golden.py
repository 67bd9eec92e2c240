"""The /metrics scrape against a golden copy: the families, types, HELP texts, label names
and the series present at start must not change without the fixture changing with them.

The fixture (``tests/unit/golden/metrics.txt``, text format 0.0.4, and
``tests/unit/golden/metrics.openmetrics.txt``, OpenMetrics 1.0) is a scrape of a fresh
interpreter's registry after ``populate()``: every series a VRRP, a Lease and a routed node
create at start for two VIPs (``init_vrrp``, ``init_lease``, ``init_routed``, the IPVS
reconciler's), plus one series of each family that only gets series from events (a
transition, a health check, a track, a hook, a Lease error and holder, a VRRP master, an
interface), so that every family and every label name shows in the scrape. A fresh
interpreter, because the registry is global and other tests in this process add series to it.

What the comparison checks, per format: the set of families; each one's TYPE and HELP (the
escaped text exactly as written); the set of its samples, each by sample name and label set
(label names and values, ``le`` included, exactly); and the value of every ``vipd_`` sample
(as a number). It ignores, and why:

- the values of the ``process_*`` samples: time, memory and file descriptors of the process;
- the label values of ``vipd_build_info`` (``version``, ``python``): they change with a
  release and with the interpreter, not with the exposition (its label names are checked);
- the order of families, of samples in a family and of labels in a sample: a scraper reads
  them as sets (Prometheus' data model has no order), and the text formats allow any order;
- how a value is spelled (``1`` and ``1.0`` are the same number): only the number counts;
- the content type: ``test_metrics.py`` and ``test_httpd.py`` check the negotiation.

Run ``python -m tests.unit.test_metrics_golden --write`` to rewrite the fixture, only for a
change to the metrics that is meant (and documented in docs/reference/metrics.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
FORMATS = {"text": "metrics.txt", "openmetrics": "metrics.openmetrics.txt"}

VIPS = ("10.0.0.100", "fd00::100")

# One sample: name, optional {labels}, value (no timestamps: vipd writes none).
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')

Series = tuple[str, frozenset[tuple[str, str]]]


def populate() -> None:
    """The registry as vipd's start leaves it, plus one series of each event-only family."""
    from vipd import metrics

    metrics.init_vrrp(node="cp-1", vips=VIPS, interface="eth0", priority=150, auth=True)
    metrics.init_lease(node="cp-1", vips=VIPS, interface="eth0")
    metrics.init_routed(node="cp-1", vips=VIPS, interface="eth0", bgp_peers=["192.0.2.254"])
    # vipd.ipvs.reconciler.Reconciler.__init__
    for state in metrics.IPVS_STATES:
        metrics.IPVS_REAL_SERVERS.labels(state=state).set(0)
    for op in metrics.IPVS_OPS:
        metrics.IPVS_CHANGES.labels(op=op)
    metrics.RECONCILE_ERRORS.labels(actuator="ipvs")
    metrics.IPVS_SERVICE.set(0)
    # vipd.membership.follower.MembershipFollower.__init__ (a followed list and its sources)
    metrics.MEMBERSHIP_PEERS.labels(list="election.vrrp.unicast_peers").set(2)
    metrics.MEMBERSHIP_READ_FAILURES.labels(list="election.vrrp.unicast_peers")
    for source in metrics.MEMBERSHIP_SOURCES:
        metrics.MEMBERSHIP_DROPPED.labels(source=source)
    # vipd.agent at start: the interface, the health targets (every one starts unhealthy).
    metrics.INTERFACE_UP.labels(interface="eth0").set(1)
    metrics.HEALTH_BACKEND_HEALTHY.labels(target="10.0.0.11", local="true").set(0)
    metrics.HEALTH_BACKEND_HEALTHY.labels(target="10.0.0.12", local="false").set(0)
    # The families that get their first series from an event.
    metrics.TRANSITIONS.labels(backend="vrrp", role="follower", reason="start").inc()
    metrics.HEALTH_CHECKS.labels(target="10.0.0.11", result="ok").inc()
    metrics.HEALTH_CHECK_DURATION.labels(target="10.0.0.11").observe(0.003)
    metrics.TRACK_UP.labels(track="haproxy").set(1)
    metrics.TRACK_CHECKS.labels(track="haproxy", result="up").inc()
    metrics.NOTIFY.labels(hook="backup", result="ok").inc()
    metrics.LEASE_ERRORS.labels(kind="conflict").inc()
    metrics.set_lease_holder("cp-2")
    metrics.set_master("10.0.0.2", 200, VIPS[0])
    # The gauges with no sample while unknown (their drivers read a clock when scraped).
    metrics.VRRP_MASTER_ADVERT_AGE.set(0.25, vip=VIPS[0])
    metrics.LEASE_RENEW_AGE.set(1.5)


def scrape() -> dict[str, str]:
    """Both expositions of the populated registry, by format."""
    from vipd import metrics

    populate()
    text, _ = metrics.exposition("")
    openmetrics, _ = metrics.exposition("application/openmetrics-text; version=1.0.0")
    return {"text": text.decode(), "openmetrics": openmetrics.decode()}


def parse(text: str) -> dict[str, dict[str, object]]:
    """family -> {"type", "help", "samples": {(name, labels): value}}; fails on a line that
    is neither a comment the formats define nor a sample of a family declared before it."""
    families: dict[str, dict[str, object]] = {}
    current: dict[str, object] | None = None
    for line in text.splitlines():
        if line == "# EOF":
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, kind, name, rest = [*line.split(" ", 3), ""][:4]
            current = families.setdefault(name, {"samples": {}})
            current["help" if kind == "HELP" else "type"] = rest
            continue
        m = _SAMPLE.fullmatch(line)
        assert m and current is not None, f"not a sample line: {line!r}"
        name, labels, value = m.groups()
        pairs = _LABEL.findall(labels or "")
        assert "".join(f'{k}="{v}",' for k, v in pairs).rstrip(",") == (labels or ""), line
        samples = current["samples"]
        assert isinstance(samples, dict)
        key: Series = (name, frozenset(pairs))
        assert key not in samples, f"a sample twice: {line!r}"
        samples[key] = float(value)
    return families


def comparable(families: dict[str, dict[str, object]]) -> dict[str, object]:
    """What the comparison keeps of a parsed exposition (see the module docstring)."""
    out: dict[str, object] = {}
    for name, fam in families.items():
        samples = fam["samples"]
        assert isinstance(samples, dict)
        kept = set()
        for (sample, labels), value in samples.items():
            if name == "vipd_build_info":
                labels = frozenset((k, "*") for k, _ in labels)
            kept.add((sample, labels, None if name.startswith("process_") else value))
        out[name] = {"type": fam.get("type"), "help": fam.get("help"), "samples": kept}
    return out


def fresh_scrape() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.unit.test_metrics_golden"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    scraped = json.loads(out.stdout)
    assert isinstance(scraped, dict)
    return scraped


@pytest.fixture(scope="module")
def scraped() -> dict[str, str]:
    return fresh_scrape()


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_the_scrape_matches_the_golden_copy(fmt: str, scraped: dict[str, str]) -> None:
    want = comparable(parse((GOLDEN / FORMATS[fmt]).read_text()))
    got = comparable(parse(scraped[fmt]))
    assert sorted(got) == sorted(want), "families differ"
    for name in want:
        assert got[name] == want[name], name


def test_every_family_has_a_sample_in_the_golden_copy() -> None:
    """The fixture shows every family's labels: none is there by its HELP alone."""
    for fmt, path in FORMATS.items():
        for name, fam in parse((GOLDEN / path).read_text()).items():
            assert fam["samples"], (fmt, name)
            assert fam.get("help") and fam.get("type"), (fmt, name)


def test_the_comparison_sees_a_change() -> None:
    """A renamed label, a changed HELP, a dropped family or a new series each fail it."""
    text = (GOLDEN / FORMATS["text"]).read_text()
    want = comparable(parse(text))
    changes = [
        text.replace('vipd_vip_bound{vip="10.0.0.100"}', 'vipd_vip_bound{address="10.0.0.100"}'),
        text.replace("# HELP vipd_ready 1 when", "# HELP vipd_ready 1 if"),
        "\n".join(line for line in text.splitlines() if "vipd_vip_repairs_total" not in line),
        text.replace("# TYPE vipd_ready gauge", "# TYPE vipd_ready untyped"),
        text + 'vipd_vip_bound{vip="10.0.0.101"} 0.0\n',
        text.replace('vipd_vip_bound{vip="10.0.0.100"} 0.0', 'vipd_vip_bound{vip="10.0.0.100"} 1'),
    ]
    for changed in changes:
        assert changed != text
        assert comparable(parse(changed)) != want


if __name__ == "__main__":
    result = scrape()
    if sys.argv[1:] == ["--write"]:
        GOLDEN.mkdir(exist_ok=True)
        for fmt, path in FORMATS.items():
            (GOLDEN / path).write_text(result[fmt])
    else:
        print(json.dumps(result))
