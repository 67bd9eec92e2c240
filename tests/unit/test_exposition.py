"""vipd.exposition: the metric types and both text formats, checked against Prometheus' own
parsers.

- The text format 0.0.4 is written out by hand from the format's documentation for a small
  registry (escaping, label order, ``+Inf``, empty families) and compared byte for byte.
- The round trip goes through Prometheus' code: ``promtool tsdb create-blocks-from
  openmetrics`` parses the OpenMetrics exposition (with the OpenMetrics parser of the
  Prometheus server) into a TSDB block, ``promtool tsdb dump`` prints every series back, and
  the labels and values must be the ones that went in, however odd the label values. The
  text format's sample lines are the same lines (asserted), and ``promtool check metrics``
  (the text format parser and linter) must be clean on it.
- The process metrics are read from a fake ``/proc`` with known numbers, and from the real one.

``promtool`` is Debian's prometheus package (scripts/setup); where it is missing the tests that
need it skip with the reason, and fail under CI=true.
"""

from __future__ import annotations

import math
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.prereq import promtool
from vipd.exposition import (
    Counter,
    Gauge,
    Histogram,
    OptionalGauge,
    ProcessMetrics,
    Registry,
    format_value,
    negotiate,
)

# Label values a parser gets wrong first: the three escapes, the separators of the sample
# line, a literal backslash-n, non-ASCII, the empty string.
ODD = [
    "",
    'say "hi"',
    "back\\slash",
    "two\nlines",
    "literal \\n, not a newline",
    "a,b=c}d{",
    "é ü ß 日本",
    "trailing\\",
    "  spaces  ",
]
VALUES = [0.0, 1.0, -0.0, 0.5, 1e-7, 123456789012.0, 1e21, -3.25, math.inf, -math.inf, math.nan]


def small_registry() -> Registry:
    reg = Registry()
    c = Counter("t_requests_total", 'Requests by "code".\nSecond line \\ here.', ["code"], reg)
    c.labels(code="200").inc(3)
    c.labels("500").inc()
    g = Gauge("t_temperature", "A gauge.", ["zone", "area"], reg)
    g.labels(zone='a"b', area="x\\y\nz").set(-1.5)
    Gauge("t_ready", "Unlabelled gauges have a sample from the start.", registry=reg)
    Counter("t_empty_total", "A labelled counter with no series yet.", ["kind"], reg)
    OptionalGauge("t_unknown", "No sample while unknown.", reg, ("vip",)).set(None, vip="v")
    h = Histogram("t_latency_seconds", "A histogram.", ["stage"], [0.1, 1.0], reg)
    h.labels(stage="s").observe(0.1)
    h.labels(stage="s").observe(7)
    return reg


def test_the_text_format_byte_for_byte() -> None:
    want = (
        '# HELP t_requests_total Requests by "code".\\nSecond line \\\\ here.\n'
        "# TYPE t_requests_total counter\n"
        't_requests_total{code="200"} 3.0\n'
        't_requests_total{code="500"} 1.0\n'
        "# HELP t_temperature A gauge.\n"
        "# TYPE t_temperature gauge\n"
        't_temperature{area="x\\\\y\\nz",zone="a\\"b"} -1.5\n'
        "# HELP t_ready Unlabelled gauges have a sample from the start.\n"
        "# TYPE t_ready gauge\n"
        "t_ready 0.0\n"
        "# HELP t_empty_total A labelled counter with no series yet.\n"
        "# TYPE t_empty_total counter\n"
        "# HELP t_unknown No sample while unknown.\n"
        "# TYPE t_unknown gauge\n"
        "# HELP t_latency_seconds A histogram.\n"
        "# TYPE t_latency_seconds histogram\n"
        't_latency_seconds_bucket{le="0.1",stage="s"} 1.0\n'
        't_latency_seconds_bucket{le="1.0",stage="s"} 1.0\n'
        't_latency_seconds_bucket{le="+Inf",stage="s"} 2.0\n'
        't_latency_seconds_count{stage="s"} 2.0\n'
        't_latency_seconds_sum{stage="s"} 7.1\n'
    )
    assert small_registry().expose().decode() == want


def test_openmetrics_differs_only_where_the_spec_says() -> None:
    """Counter families lose _total (the samples keep it), HELP escapes quotes, # EOF ends."""
    text = small_registry().expose().decode().splitlines()
    om = small_registry().expose(openmetrics=True).decode().splitlines()
    assert om[-1] == "# EOF"
    assert [line for line in text if not line.startswith("#")] == [
        line for line in om if not line.startswith("#")
    ]
    assert om[0] == '# HELP t_requests Requests by \\"code\\".\\nSecond line \\\\ here.'
    assert om[1] == "# TYPE t_requests counter"
    assert "# TYPE t_empty counter" in om


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
        (1, "1.0"),
        (-0.0, "-0.0"),
        (0.1, "0.1"),
        (1e-7, "1e-07"),
        (1e21, "1e+21"),
    ],
)
def test_values(value: float, text: str) -> None:
    assert format_value(value) == text


def test_histogram_buckets_count_values_up_to_and_including_le() -> None:
    reg = Registry()
    h = Histogram("h_seconds", "A histogram.", buckets=[0.5, 1.0, 2.0], registry=reg)
    for v in (0.5, 0.50001, 1.0, 3.0, -1.0):
        h.observe(v)
    get = reg.get_sample_value
    assert [get("h_seconds_bucket", {"le": le}) for le in ("0.5", "1.0", "2.0", "+Inf")] == [
        2.0,
        4.0,
        4.0,
        5.0,
    ]
    assert get("h_seconds_count") == 5.0
    assert get("h_seconds_sum") == pytest.approx(0.5 + 0.50001 + 1.0 + 3.0 - 1.0)


def test_misuse_is_an_error() -> None:
    reg = Registry()
    c = Counter("c_total", "A counter.", ["a"], reg)
    with pytest.raises(ValueError, match="only goes up"):
        c.labels(a="x").inc(-1)
    with pytest.raises(ValueError, match="takes the labels"):
        c.labels(b="x")
    with pytest.raises(ValueError, match="takes the labels"):
        c.labels("x", "y")
    with pytest.raises(ValueError, match=r"use \.labels"):
        c.inc()
    with pytest.raises(ValueError, match="already registered"):
        Counter("c_total", "Again.", registry=reg)
    with pytest.raises(ValueError, match="_total"):
        Counter("c", "A counter without the suffix.", registry=reg)
    with pytest.raises(ValueError, match="increasing"):
        Histogram("h", "Unsorted buckets.", buckets=[1.0, 0.5], registry=reg)


def test_remove_clear_and_functions() -> None:
    reg = Registry()
    g = Gauge("g", "A gauge.", ["a", "b"], reg)
    g.labels(a="1", b="2").set(5)
    g.labels(a="3", b="4").set_function(lambda: 7.0)
    assert reg.get_sample_value("g", {"a": "3", "b": "4"}) == 7.0
    g.remove("1", "2")
    assert reg.get_sample_value("g", {"a": "1", "b": "2"}) is None
    g.labels(a="3", b="4").set(1)  # a set replaces the function
    assert reg.get_sample_value("g", {"a": "3", "b": "4"}) == 1.0
    g.clear()
    assert list(g.samples()) == []
    o = OptionalGauge("o", "An optional gauge.", reg, ("vip",))
    o.set_function(lambda: None, vip="v")
    assert o.get(vip="v") is None and reg.get_sample_value("o", {"vip": "v"}) is None


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        ("", False),
        ("*/*", False),
        ("text/plain; version=0.0.4", False),
        # Prometheus 2.x
        (
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
            "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            True,
        ),
        # Prometheus 3.x
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
def test_negotiation(accept: str, openmetrics: bool) -> None:
    got, ctype = negotiate(accept)
    assert got is openmetrics
    want = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
    assert ctype.startswith(want) and "charset=utf-8" in ctype


def odd_registry() -> Registry:
    reg = Registry()
    c = Counter("odd_total", 'Help with "quotes", a \\ and\na newline.', ["v", "i"], reg)
    g = Gauge("odd_value", "Values of every kind.", ["i"], reg)
    h = Histogram("odd_seconds", "A histogram.", ["v"], [0.001, 0.25, 10.0], reg)
    for i, text in enumerate(ODD):
        c.labels(v=text, i=str(i)).inc(i)
        h.labels(v=text).observe(i / 10)
    for i, value in enumerate(VALUES):
        g.labels(i=str(i)).set(value)
    return reg


def go_unquote(text: str) -> str:
    """A Go %q string's contents (``promtool tsdb dump`` prints label values that way)."""
    simple = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
        elif text[i + 1] in simple:
            out.append(simple[text[i + 1]])
            i += 2
        else:
            width = {"x": 2, "u": 4, "U": 8}[text[i + 1]]
            out.append(chr(int(text[i + 2 : i + 2 + width], 16)))
            i += 2 + width
    return "".join(out)


DUMP = re.compile(r"^\{(?P<labels>.*)\} (?P<value>\S+) (?P<ts>\d+)$")
PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def dump_series(blocks: Path) -> dict[frozenset[tuple[str, str]], str]:
    (blocks / "wal").mkdir(exist_ok=True)  # dump opens the directory as a whole TSDB
    out = subprocess.run(
        [promtool(), "tsdb", "dump", str(blocks)], capture_output=True, text=True, check=True
    )
    series: dict[frozenset[tuple[str, str]], str] = {}
    for line in out.stdout.splitlines():
        m = DUMP.match(line)
        assert m, line
        pairs = frozenset((k, go_unquote(v)) for k, v in PAIR.findall(m.group("labels")))
        series[pairs] = m.group("value")
    return series


def test_round_trip_through_prometheus_parser(tmp_path: Path) -> None:
    reg = odd_registry()
    om = reg.expose(openmetrics=True).decode()
    # Backfilling needs a timestamp on every sample (OpenMetrics allows one after the value).
    stamped = "".join(
        line + ("\n" if line.startswith("#") else " 1700000000\n") for line in om.splitlines()
    )
    (tmp_path / "in.om").write_text(stamped)
    subprocess.run(
        [promtool(), "tsdb", "create-blocks-from", "openmetrics", "in.om", "blocks"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    got = dump_series(tmp_path / "blocks")
    want: dict[frozenset[tuple[str, str]], float] = {}
    for family in reg.families():
        for name, pairs, value in family.samples():
            # An empty label value is no label at all to Prometheus (its data model).
            key = frozenset({("__name__", name), *((k, v) for k, v in pairs if v)})
            want[key] = value
    assert len(want) == len(ODD) * (1 + 6) + len(VALUES)
    assert set(got) == set(want), set(want) ^ set(got)
    for key, value in want.items():
        # Go prints the shortest text that reads back as the same float (3, 1e-07, +Inf).
        back = float(got[key])
        assert back == value or (math.isnan(back) and math.isnan(value)), (key, got[key])


def test_promtool_check_metrics_on_odd_values() -> None:
    out = subprocess.run(
        [promtool(), "check", "metrics"],
        input=odd_registry().expose(),
        capture_output=True,
        check=False,
    )
    assert out.returncode == 0, (out.stdout + out.stderr).decode()
    assert out.stdout.strip() == b"" and out.stderr.strip() == b"", out


def fake_proc(root: Path, comm: str = "py (x) y") -> Path:
    (root / "self" / "fd").mkdir(parents=True)
    for fd in range(5):
        (root / "self" / "fd" / str(fd)).touch()
    # proc(5): field 14 utime, 15 stime, 22 starttime, 23 vsize, 24 rss (pages).
    fields = ["S"] + ["0"] * 49
    fields[14 - 3], fields[15 - 3] = "250", "50"
    fields[22 - 3], fields[23 - 3], fields[24 - 3] = "1000", "123456789", "300"
    (root / "self" / "stat").write_text(f"42 ({comm}) " + " ".join(fields) + "\n")
    (root / "self" / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            1024                 524288               files     \n"
    )
    (root / "stat").write_text("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n")
    return root


def test_process_metrics_from_a_fake_proc(tmp_path: Path) -> None:
    reg = Registry()
    proc = ProcessMetrics(reg, proc=str(fake_proc(tmp_path)))
    ticks, page = proc._ticks, proc._page
    get = reg.get_sample_value
    assert get("process_cpu_seconds_total") == 300 / ticks
    assert get("process_start_time_seconds") == 1700000000 + 1000 / ticks
    assert get("process_virtual_memory_bytes") == 123456789
    assert get("process_resident_memory_bytes") == 300 * page
    assert get("process_open_fds") == 5
    assert get("process_max_fds") == 1024
    kinds = {f.name: f.kind for f in reg.families()}
    assert kinds["process_cpu_seconds_total"] == "counter"
    assert {k for n, k in kinds.items() if n != "process_cpu_seconds_total"} == {"gauge"}


def test_process_metrics_without_proc(tmp_path: Path) -> None:
    reg = Registry()
    ProcessMetrics(reg, proc=str(tmp_path / "none"))
    assert [line for line in reg.expose().decode().splitlines() if not line.startswith("#")] == []


def test_process_metrics_of_this_process() -> None:
    reg = Registry()
    ProcessMetrics(reg)
    get = reg.get_sample_value
    rss = get("process_resident_memory_bytes")
    assert rss is not None and 1 << 20 < rss < 1 << 34
    start = get("process_start_time_seconds")
    assert start is not None and start <= time.time()
    fds = get("process_open_fds")
    assert fds is not None and fds >= 3


def test_scrapes_while_the_loop_adds_series() -> None:
    """The HTTP thread reads while the loop creates series: no 'dict changed size' error."""
    reg = Registry()
    c = Counter("busy_total", "Series added while scraped.", ["n"], reg)
    h = Histogram("busy_seconds", "Observed while scraped.", ["n"], [0.1], reg)
    stop = threading.Event()
    errors: list[BaseException] = []

    def scrape() -> None:
        try:
            while not stop.is_set():
                reg.expose()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=scrape)
    t.start()
    try:
        for n in range(20_000):
            c.labels(n=str(n)).inc()
            h.labels(n=str(n % 50)).observe(0.05)
    finally:
        stop.set()
        t.join(10)
    assert errors == []
    assert reg.get_sample_value("busy_total", {"n": "19999"}) == 1.0
