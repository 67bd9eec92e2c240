"""Where a config comes from: the YAML text (`load`, `read_text`), the environment overrides
(`ENV_OVERRIDES`, declared with their keys) and the entry points `parse` and `errors`.

What it must not do: read ``os.environ`` or the hostname by itself (the caller passes ``env``
and ``hostname``), or check the host (``vipd.preflight``). Reading the file in `load` is the
one I/O here, and it happens before anything is validated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import yaml

from vipd.config.document import Config, read_config
from vipd.config.error import UNSET, ConfigError
from vipd.config.schema import Check, kind, walk

__all__ = ["ENV_OVERRIDES", "errors", "load", "parse", "read_text"]

# variable -> (dotted key, kind), from the keys' declarations (``spec(env=...)``). The kind
# decides how the string is converted before the normal validation runs; a string that
# doesn't convert is kept, so the error is the key's ordinary type error, with the variable
# named. An override sets a key's first spelling (``vip``, not ``vips``).
ENV_OVERRIDES: Mapping[str, tuple[str, Literal["str", "int", "float"]]] = {
    k.spec.env[0]: (k.written, k.spec.env[1]) for k in walk(Config) if k.spec.env is not None
}

# Valid values for required keys, used by `errors` after reporting a missing or bad one.
_STAND_INS: Mapping[str, object] = {
    k.written: k.spec.stand_in for k in walk(Config) if k.spec.stand_in is not UNSET
}


def load(path: str, env: Mapping[str, str] | None = None, hostname: str | None = None) -> Config:
    """Read and validate the YAML file at ``path``; see `parse` for ``env`` and ``hostname``.

    An unreadable file, a YAML syntax error or a key written twice in one mapping (which plain
    YAML loaders resolve silently, last one wins) is a `ConfigError` naming the file and line.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError("", f"cannot read the config file: {reason}", file=path) from None
    return parse(read_text(text, path), env, hostname)


def read_text(text: str, name: str) -> object:
    """YAML text → data, with the checks of `load` (duplicate keys, syntax) and errors naming
    ``name`` (a path, or ``$VIPD_CONFIG`` for a config passed in the environment)."""
    path = name
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # SafeConstructor: safe
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = e.problem or e.context or "invalid YAML"
        raise ConfigError("", f"invalid YAML: {problem}", file=path, line=line) from None
    except yaml.YAMLError as e:
        raise ConfigError("", f"invalid YAML: {e}", file=path) from None
    return data


def parse(
    data: object, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> Config:
    """Validate already-loaded config data (a mapping, or None for an empty file).

    ``env`` holds the environment to take overrides from (see `ENV_OVERRIDES`); the
    caller passes ``os.environ`` or nothing, this module never reads it. ``hostname`` is the
    last fallback for ``node``; the caller passes ``socket.gethostname()`` or nothing.
    """
    env = env or {}
    if data is None:
        data = {}  # an empty file: everything may still come from the environment
    if not isinstance(data, Mapping):
        raise ConfigError("", f"must be a mapping of keys to values, not a {kind(data)}")
    data, sources = _apply_env(data, env)
    return read_config(Check(sources), data, env, hostname)


def errors(
    data: object, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> list[ConfigError]:
    """Every error of a document, not only the first (``vipd check --offline``).

    `parse` stops at the first error. This runs it again and again, each time without the
    key (or the environment variable) that the last error named, so that the next error
    shows; a key whose removal gives an error on that same key (a required one) ends the
    search, as does an error of the document as a whole. An empty list: `parse` accepts it.
    """
    env = dict(env or {})
    found: list[ConfigError] = []
    seen: set[tuple[str, str | None]] = set()
    items: set[tuple[str, str]] = set()
    while len(found) < 100:
        try:
            parse(data, env, hostname)
            break
        except ConfigError as exc:
            # A list item's index names another item once the one before it is removed.
            again = (exc.key, exc.source) in seen and not (
                exc.key.endswith("]") and (exc.key, exc.rule) not in items
            )
            items.add((exc.key, exc.rule))
            if again:
                # The key is required: go on with a stand-in, so the keys that depend on it
                # (the VIP's family, the mode's section) are still checked.
                stand_in = _STAND_INS.get(exc.key)
                if stand_in is None or not isinstance(data, Mapping):
                    break
                data = _set_key(data, exc.key, stand_in)
                if data is None:
                    break
                continue
            seen.add((exc.key, exc.source))
            found.append(exc)
            if exc.source is not None and exc.source in env:
                del env[exc.source]
                continue
            if not exc.key or not isinstance(data, Mapping):
                break
            pruned = _without(data, exc.key)
            if pruned is None:
                break
            data = pruned
    return found


def _set_key(data: Mapping[Any, Any], key: str, value: object) -> Mapping[Any, Any] | None:
    out: dict[Any, Any] = dict(data)
    return out if _set_path(out, key.split("."), value) else None


def _without(data: Mapping[Any, Any], key: str) -> Mapping[Any, Any] | None:
    """A copy of ``data`` without the dotted ``key`` (``a.b[2].c``), or None if it isn't there."""
    parts = [p for p in re.split(r"\.|(\[\d+\])", key) if p]
    if not parts:
        return None

    def drop(node: object, rest: list[str]) -> object:
        head = rest[0]
        m = re.fullmatch(r"\[(\d+)\]", head)
        if m is not None:
            i = int(m.group(1))
            if not isinstance(node, list) or i >= len(node):
                raise KeyError(key)
            if len(rest) == 1:
                return node[:i] + node[i + 1 :]
            return [*node[:i], drop(node[i], rest[1:]), *node[i + 1 :]]
        if not isinstance(node, Mapping) or head not in node:
            raise KeyError(key)
        out = dict(node)
        if len(rest) == 1:
            del out[head]
        else:
            out[head] = drop(node[head], rest[1:])
        return out

    try:
        result = drop(data, parts)
    except KeyError:
        return None
    assert isinstance(result, Mapping)
    return result


try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # a PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


class _StrictLoader(_SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping. On libyaml's parser
    (``CSafeLoader``: 10-20x faster than the pure-Python one, ~7 ms less per start on the
    example config) where PyYAML was built with it, as every wheel is; the same safe
    constructor either way."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` then overriding a key is the point of merge keys
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key; the base class reports that
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is written twice (first on line {first})",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


# -- environment overrides -------------------------------------------------------------------


def _apply_env(
    data: Mapping[Any, Any], env: Mapping[str, str]
) -> tuple[Mapping[Any, Any], dict[str, str]]:
    """Return ``data`` with the overrides set (copy-on-write) and key -> variable sources."""
    out: dict[Any, Any] = dict(data)
    sources: dict[str, str] = {}
    for var, (key, how) in ENV_OVERRIDES.items():
        raw = env.get(var, "")
        if raw == "":
            continue
        if _set_path(out, key.split("."), _convert(raw, how)):
            sources[key] = var
    return out, sources


def _convert(raw: str, how: str) -> object:
    text = raw.strip()
    if how == "int" and re.fullmatch(r"[+-]?[0-9]+", text):
        return int(text)
    if how == "float":
        try:
            value = float(text)
        except ValueError:
            return raw
        return int(value) if re.fullmatch(r"[+-]?[0-9]+", text) else value
    return raw if how != "str" else text


def _set_path(root: dict[Any, Any], parts: list[str], value: object) -> bool:
    """Set root[p0][p1]... = value, copying the nested dicts on the way (the caller's data is
    never modified). A missing or null section is created; a section of the wrong type is left
    alone (validation reports it) and False is returned."""
    node = root
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = {}
        elif isinstance(child, Mapping):
            child = dict(child)
        else:
            return False
        node[part] = child
        node = child
    node[parts[-1]] = value
    return True
