"""The config schema: how a section's keys, defaults and rules are declared, once, on its
dataclass, and the one reader that validates a YAML mapping against that declaration.

What it is
    A config section is a frozen dataclass. A field that is a YAML key carries
    ``metadata=spec(rule, ...)``: the field's name is the key (``yaml=`` when they differ),
    its dataclass default is the key's default (written nowhere else), and ``rule`` checks
    the YAML value and returns the field's value or fails with a one-line `ConfigError`. A
    field that is no key of its own but follows from one carries ``metadata=derived(fn)``.

    `read` validates a mapping against such a class: unknown keys first (with the closest
    allowed one as a hint), then every key in field order, a field's ``needs`` before it
    (a rule that depends on another key's value), its ``then`` (a rule across keys) right
    after it. An absent key's rule sees the default as YAML would write it (``null`` for an
    empty list or a section), so a default obeys the rules like any value; ``absent=`` makes
    a default that depends on other keys. `walk` lists every declared key with its dotted
    name, for the environment overrides, the reference test and ``vipd check``.

Adding a key
    One field on its section's dataclass, e.g. in ``sections.py``::

        # seconds a scrape may take
        timeout: float = field(default=5.0, metadata=spec(seconds(0.1, 60)))

    with a rule from here (`integer`, `number`, `seconds`, `choice`, `flag`), from
    ``rules.py``/``kubeapi.py``, or a function ``(check, key, value, got) -> value`` written
    beside the dataclass that calls ``check.fail(key, rule, value)``; a rule that reads another
    key of the section lists it in ``needs=`` (or runs as ``then=`` on the later one). Then a
    row in ``docs/reference/config.md`` with the same default and the key in
    ``examples/vipd.yaml`` (tests/unit/test_config_schema.py and test_config.py check both).
    A new section is a dataclass like these plus a field of `vipd.config.Config` with
    ``metadata=spec(section=TheClass)``.

What it must not do: know any particular key (the section modules declare them), read the
environment or do any I/O.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Any, Literal, NoReturn, TypeGuard, TypeVar

from vipd.config.error import UNSET, ConfigError

__all__ = [
    "NOT_IMPLEMENTED",
    "Check",
    "Key",
    "Rule",
    "Spec",
    "Then",
    "choice",
    "derived",
    "fields_of",
    "flag",
    "integer",
    "is_int",
    "is_number",
    "join",
    "keys_of",
    "kind",
    "number",
    "read",
    "read_key",
    "seconds",
    "spec",
    "walk",
    "yaml_form",
]

T = TypeVar("T")
EnvKind = Literal["str", "int", "float"]
# rule(check, dotted key, YAML value, the section's values read so far) -> the field's value
Rule = Callable[["Check", str, Any, Mapping[str, Any]], Any]
# then(check, the section's dotted key, its values read so far, its YAML mapping)
Then = Callable[["Check", str, Mapping[str, Any], Mapping[str, Any]], None]
Absent = Callable[["Check", Mapping[str, Any]], object]

# Keys of features that are designed but not built. They are rejected like any unknown key,
# with a hint, so that nobody believes a feature is running. One dotted key per line: each
# lands with its own feature and leaves this list on its own line.
NOT_IMPLEMENTED: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Spec:
    """What a dataclass field declares about its YAML key (see the module docstring)."""

    rule: Rule
    env: tuple[str, EnvKind] | None = None  # an environment variable that overrides it
    needs: tuple[str, ...] = ()  # fields (attribute names) read before this one
    then: Then | None = None  # a rule across keys, run once this field is read
    absent: Absent | None = None  # the default when it depends on other keys
    yaml: str | None = None  # the key, when it is not the attribute's name
    aliases: tuple[str, ...] = ()  # other spellings (checked by the section's own reader)
    section: type | None = None  # the value is a section (a mapping) of this class...
    many: bool = False  # ...or a list of them
    stand_in: object = UNSET  # a valid value of a required key, for `vipd.config.errors`


def spec(
    rule: Rule | None = None,
    *,
    env: tuple[str, EnvKind] | None = None,
    needs: tuple[str, ...] = (),
    then: Then | None = None,
    absent: Absent | None = None,
    yaml: str | None = None,
    aliases: tuple[str, ...] = (),
    section: type | None = None,
    many: bool = False,
    stand_in: object = UNSET,
) -> dict[str, object]:
    """The ``metadata`` of a field that is a YAML key. A ``section`` without a ``rule`` is
    read with `read` (a list of them with ``many``: that needs a rule of its own)."""
    if rule is None:
        assert section is not None and not many, "a key needs a rule"
        rule = _nested(section)
    s = Spec(rule, env, needs, then, absent, yaml, aliases, section, many, stand_in)
    return {"spec": s}


def _nested(cls: type) -> Rule:
    return lambda c, key, value, _: read(c, key, cls, value)


def derived(fn: Callable[[Mapping[str, Any]], object]) -> dict[str, object]:
    """The ``metadata`` of a field computed from the section's YAML mapping, not a key."""
    return {"derived": fn}


@dataclass(frozen=True, slots=True)
class Key:
    """One declared key: its dotted name (``track[].name`` for a list item's), the name of
    its first spelling (``vip`` for ``vips``), its field and declaration."""

    dotted: str
    written: str
    field: dataclasses.Field[Any]
    spec: Spec

    @property
    def default(self) -> object:
        return self.field.default


@functools.cache
def fields_of(cls: type) -> tuple[tuple[dataclasses.Field[Any], Spec], ...]:
    return tuple((f, f.metadata["spec"]) for f in dataclasses.fields(cls) if "spec" in f.metadata)


@functools.cache
def keys_of(cls: type) -> tuple[str, ...]:
    """The YAML keys of a section, in declaration order (an alias before its key)."""
    return tuple(k for f, s in fields_of(cls) for k in (*s.aliases, s.yaml or f.name))


def walk(cls: type, prefix: str = "") -> Iterator[Key]:
    """Every declared key under ``cls``, sections included and then their keys."""
    for f, s in fields_of(cls):
        dotted = join(prefix, s.yaml or f.name)
        yield Key(dotted, join(prefix, (*s.aliases, s.yaml or f.name)[0]), f, s)
        if s.section is not None:
            yield from walk(s.section, dotted + ("[]" if s.many else ""))


def yaml_form(default: object) -> object:
    """A default as a YAML document would write it, for the key's rule to read."""
    if default is dataclasses.MISSING or isinstance(default, tuple):
        return None  # required, an empty list, or a section of defaults: null
    if dataclasses.is_dataclass(default):
        return None
    if isinstance(default, IPv4Address | IPv6Address):
        return str(default)
    return default


def read(c: Check, key: str, cls: type[T], value: object) -> T:
    """Validate one section's mapping against ``cls``'s declaration; null is all defaults."""
    section: type = cls
    sec = c.section(key, value, keys_of(section))
    got: dict[str, Any] = {}
    for f, _ in fields_of(section):
        read_key(c, key, section, f.name, sec, got)
    for f in dataclasses.fields(section):
        if "derived" in f.metadata:
            got[f.name] = f.metadata["derived"](sec)
    return cls(**got)


def read_key(
    c: Check, key: str, cls: type, name: str, sec: Mapping[str, Any], got: dict[str, Any]
) -> Any:
    """Read the field ``name`` of ``cls`` from the section ``sec`` (dotted key ``key``) into
    ``got``, its ``needs`` first, and return it; for a section whose reader is its own."""
    if name in got:
        return got[name]
    f, s = fields_by_name(cls)[name]
    for need in s.needs:
        read_key(c, key, cls, need, sec, got)
    yaml = s.yaml or f.name
    if yaml in sec:
        raw = sec[yaml]
    elif s.absent is not None:
        raw = s.absent(c, got)
    else:
        raw = yaml_form(f.default)
    got[name] = s.rule(c, join(key, yaml), raw, got)
    if s.then is not None:
        s.then(c, key, got, sec)
    return got[name]


@functools.cache
def fields_by_name(cls: type) -> Mapping[str, tuple[dataclasses.Field[Any], Spec]]:
    return {f.name: (f, s) for f, s in fields_of(cls)}


# -- the checks every rule fails through ---------------------------------------------------


class Check:
    """One validation run: the environment sources of the keys (so an error names the
    variable) and what the rules of later sections need from earlier ones."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)
        self.vips: tuple[IPv4Address | IPv6Address, ...] = ()
        self.election: Any = None  # vipd.config.Election, once read
        self.health: Any = None  # vipd.config.Health or None, once read
        self.index = 0  # the list item being read (track[index])

    def fail(self, key: str, rule: str, got: object = UNSET) -> NoReturn:
        raise ConfigError(key, rule, got, source=self.sources.get(key))

    def section(self, key: str, value: object, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        """A mapping with only ``allowed`` keys; null (an empty YAML section) is empty."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(
                key or "config", f"must be a mapping with the keys {', '.join(allowed)}", value
            )
        for k in value:
            if not isinstance(k, str):
                self.fail(join(key, str(k)), "keys must be strings", k)
            if k not in allowed:
                full = join(key, k)
                hint = " (not implemented in this version)" if full in NOT_IMPLEMENTED else ""
                import difflib  # only on this error: it is ~0.2 MiB every daemon would carry

                close = difflib.get_close_matches(k, allowed, n=1, cutoff=0.6)
                if close:
                    hint += f' (did you mean "{close[0]}"?)'
                self.fail(full, f"unknown key{hint}; allowed here: {', '.join(sorted(allowed))}")
        return value

    def integer(self, key: str, value: object, lo: int, hi: int, extra: str = "") -> int:
        if not is_int(value) or not lo <= value <= hi:
            self.fail(key, f"must be an integer from {lo} to {hi}{extra}", value)
        return value

    def number(
        self, key: str, value: object, rule: str, ok: Callable[[float], bool] = lambda _: True
    ) -> float:
        """A finite int or float for which ``ok`` holds; the error shows the value as written."""
        if not is_number(value) or not ok(value):
            self.fail(key, rule, value)
        return float(value)

    def choice(self, key: str, value: object, allowed: tuple[str, ...]) -> str:
        if value not in allowed or not isinstance(value, str):
            self.fail(key, "must be one of " + ", ".join(f'"{a}"' for a in allowed), value)
        return value


# -- rule builders for the common kinds of value -------------------------------------------


def integer(lo: int, hi: int, extra: str = "") -> Rule:
    """An integer from ``lo`` to ``hi``; ``extra`` follows the range in the error."""
    return lambda c, key, value, _: c.integer(key, value, lo, hi, extra)


def number(rule: str, ok: Callable[[float], bool]) -> Rule:
    """A finite number for which ``ok`` holds, as a float; ``rule`` is the error's text."""
    return lambda c, key, value, _: c.number(key, value, rule, ok)


def seconds(lo: float, hi: float) -> Rule:
    """A duration from ``lo`` to ``hi`` seconds, both included."""
    return number(f"must be a number of seconds from {lo} to {hi}", lambda v: lo <= v <= hi)


def choice(*allowed: str) -> Rule:
    return lambda c, key, value, _: c.choice(key, value, allowed)


def flag() -> Rule:
    def rule(c: Check, key: str, value: object, _: Mapping[str, Any]) -> bool:
        if not isinstance(value, bool):
            c.fail(key, "must be true or false", value)
        return value

    return rule


def join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list | tuple):
        return "list"
    return type(value).__name__


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # YAML true is not 1


def is_number(value: object) -> TypeGuard[int | float]:
    # .nan and .inf are floats in YAML; neither is a duration
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)
