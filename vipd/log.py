"""Structured logs: logfmt by default, JSON by option, one line per event.

What it is: a ``logging.Formatter`` that renders ``ts``, ``level``, ``msg`` and the fields of
an event, ``setup()`` that installs it on stderr, and two helpers every module logs with:
``event(logger, level, msg, **fields)`` (one event with its fields) and `Sparse` (a
rate-limited event: the 1st, 2nd, 4th, 8th, … occurrence, then every ``every``-th, each
with its running count, so a storm shows its start and its size without flooding the log).

Under systemd, when stderr is the journal (``$JOURNAL_STREAM`` names stderr's device and
inode, systemd.exec(5)), each line starts with its syslog priority, ``<3>`` (error) to ``<7>``
(debug), which journald strips and stores (sd-daemon(3)): ``journalctl -p warning -u vipd``
then shows the warnings and errors. Anywhere else the lines carry no prefix.

What it must not do: buffer (a line is written when it is logged, so an operator tailing the
log during a failover sees it), or raise on a field it cannot render (it falls back to repr).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
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


# syslog(3) priorities for the levels vipd logs at; a level in between takes the next one up.
PRIORITIES = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def priority(levelno: int) -> int:
    """The syslog priority of a logging level (``<N>`` on a journal line)."""
    for level in sorted(PRIORITIES, reverse=True):
        if levelno >= level:
            return PRIORITIES[level]
    return PRIORITIES[logging.DEBUG]


def is_journal(env: Mapping[str, str], st_dev: int, st_ino: int) -> bool:
    """True if ``$JOURNAL_STREAM`` ("DEVICE:INODE") names the file with this device and inode:
    then that file (stderr) is connected to the journal, not a copy redirected elsewhere."""
    dev, sep, ino = env.get("JOURNAL_STREAM", "").partition(":")
    try:
        return bool(sep) and (int(dev), int(ino)) == (st_dev, st_ino)
    except ValueError:
        return False


def stderr_is_journal(env: Mapping[str, str] | None = None) -> bool:
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):  # closed, or not a real file (captured in a test)
        return False
    return is_journal(os.environ if env is None else env, st.st_dev, st.st_ino)


class StructuredFormatter(logging.Formatter):
    """Renders a record as logfmt or JSON; ``journal=True`` puts its priority in front."""

    def __init__(self, fmt: str = "logfmt", journal: bool = False) -> None:
        super().__init__()
        if fmt not in ("logfmt", "json"):
            raise ValueError(f"log format must be logfmt or json (got {fmt!r})")
        self.fmt = fmt
        self.journal = journal

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
            line = json.dumps(fields, default=str)
        else:
            line = " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())
        return f"<{priority(record.levelno)}>{line}" if self.journal else line


def setup(fmt: str = "logfmt", level: str = "info") -> logging.Logger:
    """Install the structured formatter on stderr for the ``vipd`` logger."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter(fmt, journal=stderr_is_journal()))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return logger


def get() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


def event(logger: logging.Logger, level: int, msg: str, /, **fields: Any) -> None:
    """Log ``msg`` with ``fields`` (rendered after ``msg``, in the order given)."""
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={"fields": fields})


def sparse(n: int, every: int) -> bool:
    """Whether the ``n``-th occurrence is logged: a power of two, or a multiple of ``every``."""
    return n > 0 and (n & (n - 1) == 0 or n % every == 0)


class Sparse:
    """A rate-limited event, counted per key (e.g. the reason of a dropped packet)."""

    def __init__(
        self, logger: logging.Logger, msg: str, level: int = logging.WARNING, every: int = 1000
    ) -> None:
        self.logger = logger
        self.msg = msg
        self.level = level
        self.every = every
        self.counts: dict[str, int] = {}

    def __call__(self, key: str = "", /, level: int | None = None, **fields: Any) -> int:
        """Count one occurrence of ``key``; log it (with ``count``) if it is due. Returns the
        count so far."""
        n = self.counts[key] = self.counts.get(key, 0) + 1
        if sparse(n, self.every):
            event(self.logger, self.level if level is None else level, self.msg, **fields, count=n)
        return n
