"""election.vrrp.allowed_sources: parsed into networks, off by default, each bad value a
one-line error naming the key, the rule and the value; refused with unicast_peers."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network
from typing import Any

import pytest

from tests.unit.test_config import doc, error
from vipd.config import parse


def test_off_by_default() -> None:
    assert parse(doc()).election.vrrp.allowed_sources == ()
    assert parse(doc(allowed_sources=None)).election.vrrp.allowed_sources == ()


def test_addresses_and_networks() -> None:
    v = parse(doc(allowed_sources=["10.0.0.0/24", "192.0.2.7"])).election.vrrp
    assert v.allowed_sources == (IPv4Network("10.0.0.0/24"), IPv4Network("192.0.2.7/32"))


def test_ipv6_with_an_ipv6_vip() -> None:
    data = {**doc(allowed_sources=["fe80::/64"]), "vip": "fd00::100"}
    assert parse(data).election.vrrp.allowed_sources == (IPv6Network("fe80::/64"),)


@pytest.mark.parametrize(
    ("value", "key", "words"),
    [
        ("10.0.0.0/24", "allowed_sources", "must be a list"),
        ([5], "allowed_sources[0]", "written as a string"),
        (["10.0.0.1/24"], "allowed_sources[0]", "without host bits"),
        (["nodes"], "allowed_sources[0]", "IP address or a CIDR network"),
        (["fd00::/64"], "allowed_sources[0]", "must be an IPv4 address or network"),
        (["10.0.0.0/24", "10.0.0.0/24"], "allowed_sources[1]", "listed twice"),
    ],
)
def test_bad_values_are_named(value: Any, key: str, words: str) -> None:
    e = error(doc(allowed_sources=value))
    assert f"election.vrrp.{key}" in str(e) and words in str(e), str(e)


def test_refused_with_unicast_peers() -> None:
    e = error(doc(allowed_sources=["10.0.0.0/24"], unicast_peers=["10.0.0.2"]))
    assert "election.vrrp.allowed_sources" in str(e) and "unicast_peers" in str(e), str(e)


def test_every_family_of_the_vips_is_listed() -> None:
    dual = {"vips": ["10.0.0.100", "fd00::100"]}
    ok = {**doc(allowed_sources=["10.0.0.0/24", "fe80::/64"]), **dual}
    del ok["vip"]
    assert len(parse(ok).election.vrrp.allowed_sources) == 2
    bad = {**doc(allowed_sources=["10.0.0.0/24"]), **dual}
    del bad["vip"]
    e = error(bad)
    assert "election.vrrp.allowed_sources" in str(e) and "lists no IPv6 source" in str(e), str(e)
