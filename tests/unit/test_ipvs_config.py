"""The `ipvs` config section (every rule, one-line errors) and preflight's direct-routing
exception (the VIP on lo)."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_address
from typing import Any

import pytest

from vipd.config import ConfigError, Ipvs, parse

N1, N2 = IPv4Address("10.0.0.11"), IPv4Address("10.0.0.12")


# -- config ----------------------------------------------------------------------------------


def doc(**ipvs: Any) -> dict[str, Any]:
    return {
        "node": "cp-1",
        "vip": "10.0.0.100",
        "election": {"vrrp": {"vrid": 51}},
        "health": None,  # on, with its defaults
        "ipvs": ipvs,
    }


def err(**ipvs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(doc(**ipvs))
    assert "\n" not in str(info.value)
    return info.value


def test_ipvs_defaults_and_full_section() -> None:
    assert parse(doc()).ipvs == Ipvs()
    cfg = parse(doc(enabled=True, port=443, scheduler="wlc", forwarding="dr",
                    backends=["10.0.0.11", "10.0.0.12"]))  # fmt: skip
    assert cfg.ipvs == Ipvs(True, 443, "wlc", "dr", (N1, N2))


@pytest.mark.parametrize(
    ("section", "key", "words"),
    [
        ({"enabled": "yes"}, "ipvs.enabled", "true or false"),
        ({"port": 0}, "ipvs.port", "from 1 to 65535"),
        ({"port": 70000}, "ipvs.port", "from 1 to 65535"),
        ({"scheduler": "roundrobin"}, "ipvs.scheduler", "must be one of"),
        ({"forwarding": "tun"}, "ipvs.forwarding", '"nat", "dr"'),
        ({"enabled": True}, "ipvs.backends", "must list"),
        ({"backends": "10.0.0.11"}, "ipvs.backends", "must be a list"),
        ({"backends": ["cp-1.example.com"]}, "ipvs.backends[0]", "IP address literal"),
        ({"backends": ["10.0.0.11/24"]}, "ipvs.backends[0]", "without a prefix"),
        ({"backends": ["fd00::11"]}, "ipvs.backends[0]", "IPv4 address, the family of the VIP"),
        ({"backends": ["10.0.0.11", "10.0.0.100"]}, "ipvs.backends[1]", "not be the VIP"),
        (
            {"backends": ["10.0.0.11", "10.0.0.11"]},
            "ipvs.backends[1]",
            "listed twice (first as ipvs.backends[0])",
        ),
        ({"backends": ["127.0.0.1"]}, "ipvs.backends[0]", "unicast address"),
        ({"backends": ["224.0.0.18"]}, "ipvs.backends[0]", "unicast address"),
        ({"weights": {}}, "ipvs.weights", "unknown key"),
    ],
)
def test_ipvs_config_errors(section: dict[str, Any], key: str, words: str) -> None:
    e = err(**section)
    assert e.key == key and words in str(e), str(e)


def test_ipvs_needs_health_checks() -> None:
    data = doc(enabled=True, backends=["10.0.0.11"])
    del data["health"]
    with pytest.raises(ConfigError) as info:
        parse(data)
    assert info.value.key == "ipvs.enabled" and "needs the health section" in str(info.value)


def test_ipvs_v6_backends_with_a_v6_vip() -> None:
    data = doc(enabled=True, backends=["fd00::11"])
    data["vip"] = "fd00::100"
    assert parse(data).ipvs.backends == (ip_address("fd00::11"),)


# -- preflight: direct routing needs the VIP on lo -------------------------------------------


def test_vip_on_lo_is_accepted_only_for_direct_routing() -> None:
    from ipaddress import ip_interface

    from vipd.preflight import HostAddress, HostLink, HostView, check_host

    lo = HostLink("lo", 1, True, True, "", (HostAddress(ip_interface("10.0.0.100/32"), 0x80),))
    eth = HostLink("eth0", 2, True, False, "02:00:00:00:00:02",
                   (HostAddress(ip_interface("10.0.0.11/24"), 0x80),))  # fmt: skip
    host = HostView((lo, eth))
    dr = parse(doc(enabled=True, forwarding="dr", backends=["10.0.0.11"]))
    assert check_host(dr, host).link.name == "eth0"
    for c in (parse(doc(enabled=True, backends=["10.0.0.11"])), parse(doc())):
        with pytest.raises(ConfigError, match="already an address of this node"):
            check_host(c, host)
