"""``vipd import keepalived|kube-vip FILE``: the shell around the converters.

What it is: reads FILE (``-``: standard input) and, for keepalived, the files its
``include``s name (glob patterns with ``{a,b}`` braces, as keepalived's glob(3) with
GLOB_BRACE expands them); prints the vipd config on stdout and each dropped setting on
stderr, one line each; returns the exit code of `vipd.importers.Imported`.

What it must not do: convert anything itself (that is ``keepalived`` and ``kubevip``).
"""

from __future__ import annotations

import glob
import sys
from collections.abc import Sequence
from typing import TextIO

from vipd.importers import EXIT_IMPORT_ERROR, Imported, keepalived, kubevip
from vipd.importers.kaconf import Files

__all__ = ["SOURCES", "braces", "run"]

SOURCES = ("keepalived", "kube-vip")


def braces(pattern: str) -> list[str]:
    """``a{b,c}d`` → ``[abd, acd]``, the first brace pair first, recursively."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth = 0
    parts: list[str] = []
    last = start + 1
    for i in range(start, len(pattern)):
        ch = pattern[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                parts.append(pattern[last:i])
                head, tail = pattern[:start], pattern[i + 1 :]
                return [x for p in parts for x in braces(head + p + tail)]
        elif ch == "," and depth == 1:
            parts.append(pattern[last:i])
            last = i + 1
    return [pattern]  # an unclosed brace is a literal one


def _glob(pattern: str) -> list[str]:
    out: list[str] = []
    for p in braces(pattern):
        out += sorted(glob.glob(p))
    return out


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def run(
    source: str,
    path: str,
    instances: Sequence[str] = (),
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
) -> int:
    try:
        text = sys.stdin.read() if path == "-" else _read(path)
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        print(f"vipd import: cannot read {path}: {reason}", file=stderr)
        return EXIT_IMPORT_ERROR
    name = "<stdin>" if path == "-" else path
    result: Imported
    if source == "keepalived":
        result = keepalived.convert(text, name, Files(_read, _glob), instances)
    elif instances:
        print("vipd import: error: --instance is keepalived's (vrrp_instance names)", file=stderr)
        return EXIT_IMPORT_ERROR
    else:
        result = kubevip.convert(text, name)
    for d in result.dropped:
        print(f"vipd import: {d.line()}", file=stderr)
    for error in result.errors:
        print(f"vipd import: error: {error}", file=stderr)
    stdout.write(result.yaml)
    return result.exit_code
