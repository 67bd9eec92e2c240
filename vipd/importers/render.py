"""The YAML an importer prints: a vipd config whose every key carries a comment saying where
its value came from, and which vipd's own loader must accept.

What it is
    `Doc` collects ``(dotted key, value, comment)`` in the order the keys should appear and
    `Doc.text` writes them as block YAML, a list of mappings (``track``) as one block item
    per entry. Scalars are written bare when YAML reads them back as the same string, else
    JSON-quoted (a JSON string is a YAML string). `finish` loads the text back with
    `vipd.config` and turns its refusal into an error naming the key.

What it must not do: read or write files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from vipd import config
from vipd.importers import Dropped, Imported

__all__ = ["Doc", "finish", "scalar"]

_BARE = re.compile(r"^[A-Za-z0-9_./:@+-]+$")


def scalar(value: object) -> str:
    """One value as YAML text (a flow list for a list)."""
    if isinstance(value, str):
        if _BARE.match(value) and yaml.safe_load(value) == value:
            return value
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {scalar(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


@dataclass
class Doc:
    """A vipd config being built: ``header`` lines, then the keys in insertion order."""

    header: list[str] = field(default_factory=list)
    tree: dict[str, Any] = field(default_factory=dict)
    notes: dict[tuple[str, ...], str] = field(default_factory=dict)

    def set(self, key: str, value: object, note: str = "") -> None:
        path = tuple(key.split("."))
        node = self.tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        if note:
            self.notes[path] = note

    def append(self, key: str, item: Mapping[str, object], note: str = "") -> None:
        """One mapping appended to the list at ``key`` (``track``, ``announce.bgp.peers``)."""
        path = tuple(key.split("."))
        node = self.tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        items = node.setdefault(path[-1], [])
        self.notes[(*path, str(len(items)))] = note
        items.append(dict(item))

    def has(self, key: str) -> bool:
        node: Any = self.tree
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def text(self) -> str:
        out = [f"# {h}" if h else "#" for h in self.header]
        self._emit(self.tree, (), 0, out)
        return "\n".join(out) + "\n"

    def _emit(
        self, node: Mapping[str, Any], path: tuple[str, ...], depth: int, out: list[str]
    ) -> None:
        pad = "  " * depth
        for key, value in node.items():
            here = (*path, key)
            note = self.notes.get(here, "")
            if isinstance(value, dict):
                out.append(f"{pad}{key}:" + (f"  # {note}" if note else ""))
                self._emit(value, here, depth + 1, out)
            elif isinstance(value, list) and value and isinstance(value[0], dict):
                out.append(f"{pad}{key}:")
                for n, item in enumerate(value):
                    item_note = self.notes.get((key, str(n)), "")
                    if item_note:
                        out.append(f"{pad}  # {item_note}")
                    first = True
                    for k, v in item.items():
                        lead = "- " if first else "  "
                        out.append(f"{pad}  {lead}{k}: {scalar(v)}")
                        first = False
            else:
                out.append(f"{pad}{key}: {scalar(value)}" + (f"  # {note}" if note else ""))


def finish(doc: Doc, dropped: Sequence[Dropped], errors: Sequence[str]) -> Imported:
    """The `Imported` of a finished `Doc`: its text when vipd's loader accepts it."""
    if errors:
        return Imported("", (), tuple(errors))
    text = doc.text()
    try:
        config.parse(yaml.safe_load(text), env={}, hostname="import")
    except config.ConfigError as e:
        return Imported("", (), (f"vipd would refuse the result: {e}",))
    return Imported(text, tuple(dropped), ())
