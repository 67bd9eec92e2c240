"""vipd.config.schema: every key is declared once, with its default, and the reference says
the same; the reader honours a declaration's parts (needs, then, absent, derived).

What it checks that test_config.py does not:

- Every declared key has a row in ``docs/reference/config.md`` whose default cell is the
  declared default (or "required", or one of the few defaults computed from other keys), and
  every row is a declared key.
- No module of ``vipd/config/`` writes a key's default a second time as
  ``mapping.get("key", literal)`` (the form the defaults used to be repeated in).
- An empty section reads as the dataclass's defaults, so a default computed by ``absent=``
  agrees with the declared one.
- The environment overrides, now read from the declarations, are exactly the documented ones.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Any

import pytest
import yaml

from vipd import config, kube
from vipd.config import Config, ConfigError, Election, Health, Vrrp
from vipd.config.bgp import BgpPeer
from vipd.config.schema import Check, Key, derived, integer, read, spec, walk, yaml_form

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "reference" / "config.md"
PACKAGE = ROOT / "vipd" / "config"

KEYS = list(walk(Config))
LEAVES = [k for k in KEYS if k.spec.section is None]
# Defaults that follow from other keys (absent=..., or resolved by the document's reader).
COMPUTED = {"node", "vips", "health.timeout", "track[].name", "track[].timeout"}


def reference_rows() -> dict[str, str]:
    """key -> its default cell, from every table of the reference that lists keys."""
    rows = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[1].startswith("`") and cells[1].endswith("`"):
            rows[cells[1].strip("`")] = cells[3]
    return rows


def documented(cell: str) -> object:
    """The value a default cell states: its first code span, or null/—; else a marker."""
    if cell.startswith("null") or cell.startswith("—"):
        return None
    if cell.startswith("`"):
        return yaml.safe_load(cell.split("`")[1])
    return cell


def same(doc: object, declared: object) -> bool:
    def norm(v: object) -> object:
        v = yaml_form(v) if not isinstance(v, tuple) else list(v)
        return None if v == [] else v

    return norm(doc) == norm(declared)


def test_the_walk_and_the_reference_are_read() -> None:
    assert len(LEAVES) >= 60 and len(reference_rows()) >= 60
    assert {"election.vrrp.vrid", "ipvs.discovery.api_server", "track[].weight"} <= {
        k.dotted for k in LEAVES
    }


@pytest.mark.parametrize("key", LEAVES, ids=lambda k: k.dotted)
def test_every_declared_key_is_documented_with_its_default(key: Key) -> None:
    rows = reference_rows()
    assert key.dotted in rows, f"{key.dotted} is declared but not in {DOCS.name}"
    cell = rows[key.dotted]
    if key.dotted in COMPUTED:
        assert key.spec.absent is not None or key.dotted in {"node", "vips"}
        return
    if key.default is dataclasses.MISSING and cell.startswith("required"):
        return
    assert same(documented(cell), key.default), (key.dotted, cell, key.default)


def test_every_documented_key_is_declared() -> None:
    declared = {k.dotted for k in KEYS} | {"vip"}
    assert set(reference_rows()) <= declared, set(reference_rows()) - declared


def test_the_default_check_can_fail() -> None:
    assert same(documented("`[]` (multicast)"), ())
    assert same(documented("null (auto)"), None) and same(documented("`10`"), 10.0)
    assert same(documented("`127.0.0.1`"), IPv4Address("127.0.0.1"))
    assert not same(documented("`100`"), 101) and not same(documented("`rr`"), "wrr")
    assert not same(documented("null"), "kubernetes")


# -- defaults are declared once ------------------------------------------------------------


def repeated_defaults(source: str, names: set[str]) -> list[str]:
    """``x.get("key", literal)`` calls for a declared key: a default written again."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in names
        ):
            try:
                ast.literal_eval(node.args[1])
            except ValueError:
                continue  # a name or an expression: a value read before, not a literal
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


NAMES = {k.dotted.rpartition(".")[2] for k in KEYS} | {"vip"}


def test_the_repeated_default_finder_finds_them() -> None:
    text = 'a = sec.get("priority", 100)\nb = sec.get("renew_deadline", renew)\nc = d.get("x", 1)'
    assert repeated_defaults(text, NAMES) == ['line 1: sec.get("priority", 100)'.replace('"', "'")]


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_no_default_is_written_twice(path: Path) -> None:
    assert not repeated_defaults(path.read_text(encoding="utf-8"), NAMES)


def context() -> Check:
    c = Check({})
    c.vips = (IPv4Address("10.0.0.100"),)
    c.election = Election(mode="vrrp", vrrp=Vrrp(vrid=1))
    c.health = Health()
    return c


SECTIONS = sorted(
    {k.spec.section for k in KEYS if k.spec.section not in (None, Election)}, key=repr
)


# The keys a section cannot do without, and what its reader makes of the rest.
MINIMAL: dict[type, tuple[dict[str, Any], dict[str, Any]]] = {
    Vrrp: ({"vrid": 1}, {"vrid": 1}),
    config.Track: ({"file": "/f"}, {"file": "/f", "name": "track-0"}),
    config.AuthHmac: ({"keys": {1: "/k"}}, {"keys": ((1, "/k"),), "send_key": 1}),
    BgpPeer: (
        {"address": "192.0.2.1", "asn": 65000},
        {"address": IPv4Address("192.0.2.1"), "asn": 65000},
    ),
}


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_an_empty_section_is_the_declared_defaults(cls: type) -> None:
    written, expected = MINIMAL.get(cls, ({}, {}))
    assert read(context(), "s", cls, written or None) == cls(**expected)


def test_env_overrides_are_the_documented_ones() -> None:
    assert dict(config.ENV_OVERRIDES) == {
        "VIPD_VIP": ("vip", "str"),
        "VIPD_INTERFACE": ("interface", "str"),
        "VIPD_NODE": ("node", "str"),
        "VIPD_VRID": ("election.vrrp.vrid", "int"),
        "VIPD_PRIORITY": ("election.vrrp.priority", "int"),
        "VIPD_ADVERT_INTERVAL": ("election.vrrp.advert_interval", "float"),
        "VIPD_LOG_FORMAT": ("log.format", "str"),
    }


# -- the Kubernetes access both sections declare -------------------------------------------


def test_lease_and_discovery_share_the_access_and_its_rules() -> None:
    assert kube.Access is config.KubeAccess
    lease, disc = config.Lease().access, config.IpvsDiscovery().access
    assert (lease.key, disc.key) == ("election.lease.kubeconfig", "ipvs.discovery.kubeconfig")
    assert disc.tls_server_name == lease.tls_server_name == "kubernetes"
    base = {"node": "n", "vip": "10.0.0.100"}
    errors = [
        config.errors({**base, "election": {"mode": "lease", "lease": {"kubeconfig": ""}}}),
        config.errors(
            {**base, "election": {"vrrp": {"vrid": 1}}, "ipvs": {"discovery": {"kubeconfig": 5}}}
        ),
    ]
    rules = [e.rule for found in errors for e in found]
    assert len(rules) == 2 and rules[0] == rules[1]


# -- the reader honours the parts of a declaration -----------------------------------------


def _double(c: Check, key: str, value: object, got: Mapping[str, Any]) -> int:
    return 2 * c.integer(key, value, 0, 10)


def _below(c: Check, key: str, value: object, got: Mapping[str, Any]) -> int:
    return c.integer(key, value, 0, got["top"] - 1)


calls: list[str] = []


def _order(c: Check, p: str, got: Mapping[str, Any], sec: Mapping[str, Any]) -> None:
    calls.append(",".join(got))


@dataclass(frozen=True, slots=True)
class Toy:
    low: int = field(default=1, metadata=spec(_below, needs=("top",)))
    top: int = field(default=5, metadata=spec(_double, then=_order))
    tail: int = field(
        default=0, metadata=spec(integer(0, 3), absent=lambda c, got: got["top"] // 4)
    )
    echo: bool = field(default=False, metadata=derived(lambda sec: "tail" in sec))


def test_a_declared_section_is_read_in_dependency_order() -> None:
    calls.clear()
    assert read(Check({}), "toy", Toy, {"low": 3}) == Toy(low=3, top=10, tail=2, echo=False)
    assert calls == ["top"]  # `then` ran right after top, which `low` needs first
    assert read(Check({}), "toy", Toy, {"tail": 3}).echo is True
    with pytest.raises(ConfigError) as e:
        read(Check({}), "toy", Toy, {"low": 10})
    assert str(e.value) == "toy.low: must be an integer from 0 to 9 (got 10)"
    with pytest.raises(ConfigError) as e:
        read(Check({}), "toy", Toy, {"tale": 1})
    assert str(e.value) == (
        'toy.tale: unknown key (did you mean "tail"?); allowed here: low, tail, top'
    )


def test_a_default_that_breaks_its_rule_is_an_error_like_a_written_one() -> None:
    # absent= gives top // 4 = 5 for top: 20 (from 10 doubled), outside 0..3
    with pytest.raises(ConfigError) as e:
        read(Check({}), "toy", Toy, {"top": 10})
    assert e.value.key == "toy.tail"


def test_v6_vips_are_read_too() -> None:
    c = context()
    c.vips = (IPv6Address("fd00::100"),)
    with pytest.raises(ConfigError) as e:
        read(c, "election.vrrp", Vrrp, {"vrid": 1, "version": 2})
    assert e.value.key == "election.vrrp.version"


@pytest.mark.parametrize("cls", [Config, Election, *SECTIONS], ids=lambda c: c.__name__)
def test_every_field_of_a_section_is_declared(cls: type) -> None:
    """A field without ``spec`` or ``derived`` would be no key and never read: its default
    would be all a user ever gets, silently."""
    for f in dataclasses.fields(cls):
        assert "spec" in f.metadata or "derived" in f.metadata, f"{cls.__name__}.{f.name}"
