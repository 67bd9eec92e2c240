"""Structured logs: logfmt by default, JSON by option, one line per event.

What it is: a ``logging.Formatter`` that renders ``ts``, ``level``, ``msg`` and the fields
passed as ``extra={"fields": {...}}``, and ``setup()`` that installs it on stderr.

What it must not do: buffer (a line is written when it is logged, so an operator tailing the
log during a failover sees it), or raise on a field it cannot render (it falls back to repr).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LOGGER_NAME = "vipd"


def _logfmt_value(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if text == "" or any(c in text for c in ' "=\\') or any(ord(c) < 32 for c in text):
        return json.dumps(text)
    return text


class StructuredFormatter(logging.Formatter):
    """Renders a record as logfmt or JSON."""

    def __init__(self, fmt: str = "logfmt") -> None:
        super().__init__()
        if fmt not in ("logfmt", "json"):
            raise ValueError(f"log format must be logfmt or json (got {fmt!r})")
        self.fmt = fmt

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        fields: dict[str, Any] = {
            "ts": ts + "Z",
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            fields.update(extra)
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        if self.fmt == "json":
            return json.dumps(fields, default=str)
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())


def setup(fmt: str = "logfmt", level: str = "info") -> logging.Logger:
    """Install the structured formatter on stderr for the ``vipd`` logger."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter(fmt))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return logger


def get() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)
