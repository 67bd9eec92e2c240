"""vipd.log: one line per event, logfmt by default, JSON by option, never raising."""

from __future__ import annotations

import ipaddress
import json
import logging
import sys

import pytest

from vipd.log import StructuredFormatter


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
