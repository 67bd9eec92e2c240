"""The ``announce`` section: defaults, its rules, and what routing-table mode asks of the
other sections (vipd.config.announce, vipd.config.document)."""

from __future__ import annotations

from typing import Any

import pytest

from vipd import config

BASE: dict[str, Any] = {"vip": "10.79.0.100", "node": "n1"}
ROUTED: dict[str, Any] = {**BASE, "announce": {"mode": "routing-table"}, "health": None}


def parse(doc: dict[str, Any]) -> config.Config:
    return config.parse(doc, env={}, hostname="h")


def test_default_is_arp_and_the_election_runs() -> None:
    cfg = parse({**BASE, "election": {"vrrp": {"vrid": 7}}})
    assert cfg.announce == config.Announce()
    assert cfg.announce.mode == "arp" and not cfg.announce.routed
    assert (cfg.announce.table, cfg.announce.protocol, cfg.announce.drain) == (198, 248, 2.0)
    assert cfg.election.mode == "vrrp"


def test_routing_table_needs_no_election_and_takes_peers() -> None:
    cfg = parse({**ROUTED, "health": {"peers": ["10.78.2.1", "10.78.3.1"]}})
    assert cfg.announce.routed
    assert cfg.election.mode == "none"
    assert cfg.health is not None and len(cfg.health.peers) == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"election": {"mode": "lease"}}, "election: must be absent with announce.mode"),
        ({"health": "drop"}, "health: is required with announce.mode: routing-table"),
        (
            {"ipvs": {"enabled": True, "backends": ["10.78.2.1"]}},
            "ipvs.enabled: must be false with announce.mode: routing-table",
        ),
        ({"announce": {"mode": "bgp"}}, "announce.bgp.local_asn: is required"),
        ({"announce": {"mode": "ospf"}}, "announce.mode: must be one of"),
        ({"announce": {"mode": "routing-table", "table": 254}}, "announce.table: must not be"),
        ({"announce": {"mode": "routing-table", "table": 0}}, "announce.table: must be an int"),
        ({"announce": {"mode": "routing-table", "protocol": 4}}, "announce.protocol: must be"),
        ({"announce": {"mode": "routing-table", "drain": -1}}, "announce.drain: must be"),
        ({"announce": {"mode": "routing-table", "pool": "first"}}, "announce.pool: must be one"),
    ],
)
def test_routed_errors_are_one_line_naming_the_key(change: dict[str, Any], message: str) -> None:
    doc = {**ROUTED, **change}
    if change.get("health") == "drop":
        del doc["health"]
    with pytest.raises(config.ConfigError) as err:
        parse(doc)
    text = str(err.value)
    assert message in text and "\n" not in text


def test_peers_still_refused_with_vrrp() -> None:
    with pytest.raises(config.ConfigError, match=r"health\.peers: is only used with"):
        parse({**BASE, "election": {"vrrp": {"vrid": 1}}, "health": {"peers": ["10.78.2.1"]}})


LEADER: dict[str, Any] = {**BASE, "announce": {"mode": "routing-table", "pool": "leader"}}


def test_pool_leader_runs_the_election_without_health() -> None:
    cfg = parse({**LEADER, "election": {"vrrp": {"vrid": 7}}})
    assert cfg.announce.routed and not cfg.announce.ecmp and cfg.announce.pool == "leader"
    assert cfg.election.mode == "vrrp" and cfg.health is None
    lease = parse({**LEADER, "election": {"mode": "lease"}, "health": {"peers": ["10.78.2.1"]}})
    assert lease.election.mode == "lease" and lease.health is not None


def test_pool_leader_still_refuses_ipvs() -> None:
    doc = {**LEADER, "election": {"vrrp": {"vrid": 7}}, "health": None}
    doc["ipvs"] = {"enabled": True, "backends": ["10.78.2.1"]}
    with pytest.raises(config.ConfigError, match=r"ipvs\.enabled: must be false .*pool: leader"):
        parse(doc)


BGP_LEADER: dict[str, Any] = {
    **BASE,
    "announce": {
        "mode": "bgp",
        "pool": "leader",
        "bgp": {"local_asn": 65100, "peers": [{"address": "10.78.1.0", "asn": 65000}]},
    },
    "election": {"vrrp": {"vrid": 7}},
}


def test_pool_leader_runs_the_election_in_bgp_mode() -> None:
    cfg = parse(BGP_LEADER)
    assert cfg.announce.speaker and not cfg.announce.ecmp and cfg.announce.pool == "leader"
    assert cfg.election.mode == "vrrp" and cfg.health is None


def test_pool_leader_in_bgp_mode_refuses_bfd() -> None:
    doc = {**BGP_LEADER, "announce": {**BGP_LEADER["announce"]}}
    doc["announce"]["bgp"] = {**doc["announce"]["bgp"], "bfd": {"enabled": True}}
    with pytest.raises(config.ConfigError) as err:
        parse(doc)
    text = str(err.value)
    assert "announce.bgp.bfd.enabled: must be false with announce.pool: leader" in text
    assert "\n" not in text
    doc["announce"]["pool"] = "ecmp"
    del doc["election"]
    doc["health"] = None
    assert parse(doc).announce.bgp.bfd.enabled
