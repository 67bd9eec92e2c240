"""vipd.log: one line per event, logfmt by default, JSON by option, never raising."""

from __future__ import annotations

import ipaddress
import json
import logging
import sys

import pytest

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
