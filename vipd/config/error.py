"""`ConfigError`: the one-line error every config rule raises, and how it shows a value.

What it is: the exception ``vipd.config`` raises (exit code 2 in the CLI). ``str()`` is one
line naming the dotted key, the rule and the offending value::

    election.vrrp.vrid: must be an integer from 1 to 255 (got 300)

What it must not do: know any key or rule (those are in `vipd.config.schema` and the section
modules), or do I/O.
"""

from __future__ import annotations

import json

__all__ = ["UNSET", "ConfigError", "Secret", "Unset", "show"]


class Unset:
    """Marker for "no offending value to show" (None is a legitimate value: YAML null)."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = Unset()


class ConfigError(Exception):
    """A configuration that vipd refuses to run with. ``str()`` is a single line.

    ``key`` is the dotted path (``election.vrrp.vrid``, ``election.vrrp.unicast_peers[1]``;
    empty for a problem with the file as a whole), ``rule`` what the value must be, ``got``
    the offending value when there is one, ``source`` the environment variable (or
    ``"hostname"``) the value came from, and ``file``/``line`` where a file-level problem is.
    """

    def __init__(
        self,
        key: str,
        rule: str,
        got: object = UNSET,
        *,
        source: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        self.key = key
        self.rule = rule
        self.got = got
        self.source = source
        self.file = file
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        head = self.key or "config"
        if self.source:
            head = f"{head} (from {self.source})"
        if self.file is not None:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
            head = where if not self.key else f"{where}: {head}"
        text = f"{head}: {self.rule}"
        if not isinstance(self.got, Unset):
            text += f" (got {show(self.got)})"
        # one line, always: YAML problem texts and odd values can carry newlines
        return " ".join(text.split())

    def __str__(self) -> str:
        return self._render()


def show(value: object) -> str:
    """Render a value the way it would be written in YAML/JSON, shortened."""
    if isinstance(value, Secret):
        return str(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. a float NaN inside a container
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Secret:
    """Stands in for a password in an error message: show its length, never its text."""

    def __init__(self, text: str) -> None:
        self.length = len(text)

    def __str__(self) -> str:
        return f"{self.length} characters, not shown"
