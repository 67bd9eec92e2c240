"""vipd.log: one line per event, logfmt by default, JSON by option, never raising."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vipd import log as vlog
from vipd.log import Sparse, StructuredFormatter, event, sparse


def record(
    msg: str, fields: dict[str, object] | None = None, exc: bool = False
) -> logging.LogRecord:
    rec = logging.LogRecord("vipd", logging.INFO, __file__, 1, msg, None, None)
    if fields is not None:
        rec.fields = fields
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            rec.exc_info = sys.exc_info()
    return rec


FIELDS: dict[str, object] = {
    "vrid": 51,
    "reason": 'master-down: last advert from 10.0.0.11 (prio 200) 0.34 s ago, "quoted"',
    "priority": 150,
    "master_down_interval_s": 0.341406,
    "active": True,
    "empty": "",
    "multi": "a\nb",
    "peer": None,
}


def test_logfmt_is_one_line_with_every_field_quoted_as_needed() -> None:
    line = StructuredFormatter("logfmt").format(record("became active", FIELDS))
    assert "\n" not in line
    assert line.startswith("ts=") and " level=info " in line
    assert ' msg="became active" vrid=51 ' in line
    assert (
        'reason="master-down: last advert from 10.0.0.11 (prio 200) 0.34 s ago, \\"quoted\\""'
        in line
    )
    assert " priority=150 master_down_interval_s=0.341406 active=true " in line
    assert ' empty="" multi="a\\nb" peer=None' in line


def test_json_is_one_object_per_line() -> None:
    line = StructuredFormatter("json").format(record("became active", FIELDS))
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["msg"] == "became active" and doc["level"] == "info"
    assert doc["reason"] == FIELDS["reason"] and doc["priority"] == 150
    assert doc["master_down_interval_s"] == 0.341406 and doc["active"] is True


def test_exceptions_and_odd_values_do_not_raise() -> None:
    odd = {"obj": object(), "ip": ipaddress.ip_address("fd00::1")}
    for fmt in ("logfmt", "json"):
        line = StructuredFormatter(fmt).format(record("crashed", odd, exc=True))
        assert "fd00::1" in line and "ValueError: boom" in line


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError):
        StructuredFormatter("xml")


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(StructuredFormatter("logfmt"))

    def emit(self, rec: logging.LogRecord) -> None:
        self.lines.append(self.format(rec).split(" ", 1)[1])  # without the timestamp


@pytest.fixture
def captured() -> tuple[logging.Logger, Capture]:
    logger = logging.getLogger("vipd.test_log")
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    cap = Capture()
    logger.addHandler(cap)
    return logger, cap


def test_event_renders_its_fields_in_order(captured: tuple[logging.Logger, Capture]) -> None:
    logger, cap = captured
    event(logger, logging.WARNING, "VIP held", problem="two holders", probes=3, **{"from": "a"})
    assert cap.lines == ['level=warning msg="VIP held" problem="two holders" probes=3 from=a']


def test_event_below_the_level_costs_nothing(captured: tuple[logging.Logger, Capture]) -> None:
    logger, cap = captured
    logger.setLevel(logging.INFO)
    event(logger, logging.DEBUG, "quiet", n=1)
    assert cap.lines == []


def test_sparse_logs_powers_of_two_then_every_nth() -> None:
    assert [n for n in range(1, 40) if sparse(n, 10)] == [1, 2, 4, 8, 10, 16, 20, 30, 32]
    assert not sparse(0, 10)


def test_sparse_event_counts_per_key(captured: tuple[logging.Logger, Capture]) -> None:
    logger, cap = captured
    dropped = Sparse(logger, "advert dropped", every=1000)
    counts = [dropped("vrid", reason="vrid") for _ in range(5)]
    dropped("auth", level=logging.ERROR, reason="auth")
    assert counts == [1, 2, 3, 4, 5]
    assert cap.lines == [
        'level=warning msg="advert dropped" reason=vrid count=1',
        'level=warning msg="advert dropped" reason=vrid count=2',
        'level=warning msg="advert dropped" reason=vrid count=4',
        'level=error msg="advert dropped" reason=auth count=1',
    ]


# -- journald priorities ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "prefix"),
    [
        (logging.CRITICAL, "<2>"),
        (logging.ERROR, "<3>"),
        (logging.WARNING, "<4>"),
        (logging.INFO, "<6>"),
        (logging.DEBUG, "<7>"),
    ],
)
@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_journal_lines_start_with_the_syslog_priority(level: int, prefix: str, fmt: str) -> None:
    rec = record("became leader", {"vrid": 51})
    rec.levelno, rec.levelname = level, logging.getLevelName(level)
    line = StructuredFormatter(fmt, journal=True).format(rec)
    assert line.startswith(prefix) and "\n" not in line
    plain = StructuredFormatter(fmt).format(rec)
    assert line == prefix + plain and not plain.startswith("<")


def test_journal_stream_must_name_this_very_file(tmp_path: Path) -> None:
    st = os.stat(tmp_path)
    assert vlog.is_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, st.st_dev, st.st_ino)
    # stderr redirected to a file by hand keeps the inherited variable: no prefixes then.
    assert not vlog.is_journal({"JOURNAL_STREAM": f"{st.st_dev}:1"}, st.st_dev, st.st_ino)
    assert not vlog.is_journal({}, st.st_dev, st.st_ino)
    assert not vlog.is_journal({"JOURNAL_STREAM": "garbage"}, st.st_dev, st.st_ino)


def test_setup_prefixes_only_when_stderr_is_the_journal(tmp_path: Path) -> None:
    code = (
        "import logging, sys\nfrom vipd import log\n"
        "log.setup().warning('peer misconfigured', extra={'fields': {'vrid': 51}})\n"
    )
    err = tmp_path / "stderr"
    with err.open("wb") as f:
        st = os.fstat(f.fileno())
        for stream, expect in ((f"{st.st_dev}:{st.st_ino}", "<4>"), ("1:2", "ts=")):
            f.seek(0)
            f.truncate()
            env = {**os.environ, "JOURNAL_STREAM": stream}
            subprocess.run([sys.executable, "-c", code], stderr=f, env=env, check=True)
            assert err.read_text().startswith(expect), (stream, err.read_text())
