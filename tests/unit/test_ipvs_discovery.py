"""vipd.ipvs.discovery (pure part) and the ``ipvs.discovery`` config keys."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest

from vipd.config import ConfigError, IpvsDiscovery, parse
from vipd.ipvs.discovery import backends_from_slices, merge

A = IPv4Address


def slice_(kind: str, *endpoints: dict[str, Any]) -> dict[str, Any]:
    return {"addressType": kind, "endpoints": list(endpoints)}


def test_ready_addresses_of_the_vips_family() -> None:
    data = {
        "items": [
            slice_(
                "IPv4",
                {"addresses": ["10.0.0.12"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.11"]},  # no conditions: ready
                {"addresses": ["10.0.0.13"], "conditions": {"ready": False}},
                {"addresses": ["not-an-ip"]},
            ),
            slice_("IPv6", {"addresses": ["fd00::11"]}),
            slice_("FQDN", {"addresses": ["cp-1.example.com"]}),
            "garbage",
        ]
    }
    assert backends_from_slices(data, 4) == (A("10.0.0.11"), A("10.0.0.12"))
    assert backends_from_slices(data, 6) == (IPv6Address("fd00::11"),)
    assert backends_from_slices({}, 4) == ()
    assert backends_from_slices({"items": None}, 4) == ()


def test_merge_keeps_static_first_and_adds_the_rest_sorted() -> None:
    static = (A("10.0.0.12"), A("10.0.0.11"))
    found = (A("10.0.0.14"), A("10.0.0.11"), A("10.0.0.13"))
    assert merge(static, found) == (
        A("10.0.0.12"),
        A("10.0.0.11"),
        A("10.0.0.13"),
        A("10.0.0.14"),
    )


def doc(**discovery: Any) -> dict[str, Any]:
    return {
        "node": "cp-1",
        "vip": "10.0.0.100",
        "election": {"vrrp": {"vrid": 51}},
        "health": None,
        "ipvs": {"enabled": True, "backends": ["10.0.0.11"], "discovery": discovery},
    }


def test_discovery_defaults_and_values() -> None:
    assert parse(doc()).ipvs.discovery == IpvsDiscovery()
    d = parse(doc(enabled=True, interval=30, kubeconfig="/k.conf", api_server=None))
    assert d.ipvs.discovery == IpvsDiscovery(True, 30.0, "/k.conf", None)


@pytest.mark.parametrize(
    ("section", "key", "words"),
    [
        ({"enabled": 1}, "ipvs.discovery.enabled", "true or false"),
        ({"interval": 0.5}, "ipvs.discovery.interval", "from 1 to 3600"),
        ({"kubeconfig": ""}, "ipvs.discovery.kubeconfig", "path of a kubeconfig"),
        ({"api_server": "http://x:6443"}, "ipvs.discovery.api_server", "https:// URL"),
        ({"namespace": "x"}, "ipvs.discovery.namespace", "unknown key"),
    ],
)
def test_discovery_config_errors(section: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(doc(**section))
    assert info.value.key == key and words in str(info.value)
