"""vipd.config: every rule has a test, and every error is one line naming the key."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Mapping
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Any

import pytest
import yaml

from vipd import config
from vipd.config import Config, ConfigError, Election, Garp, Log, Vrrp, load, parse
from vipd.config.schema import walk

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "vipd.yaml"
DOCS = ROOT / "docs" / "reference" / "config.md"


def doc(**vrrp: Any) -> dict[str, Any]:
    """A minimal valid document; keyword arguments go into election.vrrp."""
    return {"node": "cp-1", "vip": "10.0.0.100", "election": {"vrrp": {"vrid": 51, **vrrp}}}


def error(
    data: object, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(data, env, hostname)
    e = info.value
    assert "\n" not in str(e)
    return e


# -- the happy path and defaults -------------------------------------------------------------


def test_minimal_document_gets_every_default() -> None:
    cfg = parse(doc())
    assert cfg == Config(
        node="cp-1",
        vips=(IPv4Address("10.0.0.100"),),
        interface=None,
        election=Election(mode="vrrp", vrrp=Vrrp(vrid=51)),
        garp=Garp(),
        log=Log(),
    )
    v = cfg.election.vrrp
    assert (v.priority, v.advert_interval, v.version, v.preempt) == (100, 1.0, 3, True)
    assert (v.preempt_delay, v.unicast_peers, v.auth_pass) == (0.0, (), None)
    assert (cfg.garp.repeat, cfg.garp.interval, cfg.garp.refresh, cfg.garp.delay) == (
        5,
        0.01,
        0.0,
        5.0,
    )
    assert (cfg.log.format, cfg.log.level) == ("logfmt", "info")


def test_result_is_frozen() -> None:
    cfg = parse(doc())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.vips = (IPv4Address("10.0.0.1"),)  # type: ignore[misc]


def test_caller_data_is_not_modified() -> None:
    data = doc()
    parse(data, env={"VIPD_VRID": "7", "VIPD_LOG_FORMAT": "json"})
    assert data == doc()


def test_every_key_set() -> None:
    data = {
        "node": "cp-2",
        "vip": "192.0.2.10",
        "interface": "eth1",
        "election": {
            "mode": "vrrp",
            "vrrp": {
                "vrid": 7,
                "priority": 150,
                "advert_interval": 3,
                "version": 2,
                "preempt": True,
                "preempt_delay": 2.5,
                "unicast_peers": ["192.0.2.2", "192.0.2.3"],
                "auth_pass": "s3cret",
            },
        },
        "garp": {"repeat": 3, "interval": 0, "refresh": 60, "delay": 0},
        "log": {"format": "json", "level": "debug"},
    }
    cfg = parse(data)
    v = cfg.election.vrrp
    assert cfg.interface == "eth1"
    assert (v.vrid, v.priority, v.advert_interval, v.version) == (7, 150, 3.0, 2)
    assert v.unicast_peers == (IPv4Address("192.0.2.2"), IPv4Address("192.0.2.3"))
    assert v.auth_pass == "s3cret"
    assert cfg.garp == Garp(repeat=3, interval=0.0, refresh=60.0, delay=0.0)
    assert cfg.log == Log(format="json", level="debug")


def test_empty_sections_take_defaults() -> None:
    data = {**doc(), "garp": None, "log": None, "interface": None}
    cfg = parse(data)
    assert cfg.garp == Garp() and cfg.log == Log() and cfg.interface is None


# -- error format ----------------------------------------------------------------------------


def test_error_is_one_line_with_key_rule_and_value() -> None:
    e = error(doc(vrid=300))
    assert str(e) == "election.vrrp.vrid: must be an integer from 1 to 255 (got 300)"
    assert e.key == "election.vrrp.vrid"
    assert e.rule == "must be an integer from 1 to 255"
    assert e.got == 300


def test_error_newlines_in_values_are_flattened() -> None:
    e = error({**doc(), "node": "cp\n1"})
    assert e.key == "node" and "\n" not in str(e)


def test_long_values_are_shortened() -> None:
    e = error({**doc(), "vip": "x" * 500})
    assert len(str(e)) < 250


# -- unknown keys and types ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "key", "allowed"),
    [
        (
            (),
            "vip_address",
            "election, garp, health, interface, ipvs, log, membership, metrics, node, notify, "
            "scripts, track, vip, vips",
        ),
        (("election",), "vrp", "mode, vrrp"),
        (
            ("election", "vrrp"),
            "prio",
            "advert_interval, allowed_sources, auth_hmac, auth_pass, checksum",
        ),
        (("garp",), "count", "delay, interval, refresh, repeat"),
        (("log",), "colour", "format, level"),
    ],
)
def test_unknown_key_is_named_with_the_allowed_ones(
    path: tuple[str, ...], key: str, allowed: str
) -> None:
    data: dict[str, Any] = doc()
    node = data
    for p in path:
        node = node.setdefault(p, {})
    node[key] = 1
    e = error(data)
    assert e.key == ".".join((*path, key))
    assert "unknown key" in str(e) and allowed in str(e)


def test_vmac_defaults_off_and_takes_a_bool() -> None:
    assert parse(doc()).election.vrrp is not None and not parse(doc()).election.vrrp.vmac
    on = parse(doc(vmac=True)).election.vrrp
    assert on is not None and on.vmac


@pytest.mark.parametrize("bad", ["yes", 1, None, [True]])
def test_vmac_must_be_a_bool(bad: object) -> None:
    e = error(doc(vmac=bad))
    assert e.key == "election.vrrp.vmac" and "true or false" in str(e)


def test_vmac_is_refused_with_ipv6_or_unicast() -> None:
    v6 = {**doc(vmac=True), "vip": "fd00::100"}
    e = error(v6)
    assert e.key == "election.vrrp.vmac" and "IPv4" in str(e)
    e = error(doc(vmac=True, unicast_peers=["10.0.0.2"]))
    assert e.key == "election.vrrp.vmac" and "multicast" in str(e)


def test_non_string_key() -> None:
    data: dict[Any, Any] = {**doc(), 1: "x"}
    e = error(data)
    assert e.key == "1" and "keys must be strings" in str(e)


@pytest.mark.parametrize("data", [[1, 2], "vip: 10.0.0.1", 5])
def test_document_must_be_a_mapping(data: object) -> None:
    assert "must be a mapping" in str(error(data))


@pytest.mark.parametrize(
    ("section", "value"), [("election", "vrrp"), ("garp", [5]), ("log", "json")]
)
def test_section_must_be_a_mapping(section: str, value: object) -> None:
    e = error({**doc(), section: value})
    assert e.key == section and "must be a mapping" in str(e)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("vrid", "51"),  # a quoted number is a string in YAML, not silently an int
        ("vrid", True),  # YAML true is not 1
        ("vrid", 51.0),
        ("priority", None),
        ("advert_interval", "1s"),
        ("advert_interval", float("nan")),
        ("advert_interval", float("inf")),
        ("version", "3"),
        ("preempt", "yes"),
        ("preempt", 1),
        ("preempt_delay", False),
        ("unicast_peers", "10.0.0.2"),
    ],
)
def test_wrong_types_are_rejected(key: str, value: object) -> None:
    assert error(doc(**{key: value})).key == f"election.vrrp.{key}"


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("garp", "repeat", 2.0),
        ("garp", "interval", "10ms"),
        ("garp", "refresh", None),
        ("garp", "delay", True),
        ("log", "format", 1),
        ("log", "level", ["info"]),
    ],
)
def test_wrong_types_in_other_sections(section: str, key: str, value: object) -> None:
    assert error({**doc(), section: {key: value}}).key == f"{section}.{key}"


# -- vip -------------------------------------------------------------------------------------


def test_vip_is_required() -> None:
    data = doc()
    del data["vip"]
    e = error(data)
    assert e.key == "vip" and "required" in str(e)


def test_vip_dns_name_is_rejected_with_the_reason() -> None:
    e = error({**doc(), "vip": "api.example.com"})
    assert str(e) == (
        "vip: must be an IP address literal, not a DNS name: the control-plane endpoint is "
        'baked into the API server\'s certificates (got "api.example.com")'
    )


@pytest.mark.parametrize("name", ["localhost", "cp-vip", "k8s-api.internal."])
def test_vip_other_names_are_dns_names(name: str) -> None:
    assert "not a DNS name" in str(error({**doc(), "vip": name}))


@pytest.mark.parametrize("bad", ["10.0.0.300", "10.0.0", "fd00:::1", ""])
def test_vip_malformed_literal(bad: str) -> None:
    e = error({**doc(), "vip": bad})
    assert e.key == "vip" and "must be an IP address literal" in str(e)
    assert "DNS" not in str(e)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("10.0.0.100/24", "without a prefix length"),
        ("fe80::1%eth0", "zone"),
        ("::ffff:10.0.0.100", "IPv4 form"),
        (167772260, "written as a string"),
    ],
)
def test_vip_literal_forms(value: object, words: str) -> None:
    e = error({**doc(), "vip": value})
    assert e.key == "vip" and words in str(e)


@pytest.mark.parametrize(
    ("vip", "words"),
    [
        ("0.0.0.0", "0.0.0.0/8"),
        ("0.1.2.3", "0.0.0.0/8"),
        ("127.0.0.1", "loopback"),
        ("127.1.2.3", "loopback"),
        ("169.254.10.10", "link-local"),
        ("224.0.0.18", "multicast"),
        ("239.1.1.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
    ],
)
def test_vip_ipv4_must_be_reachable_unicast(vip: str, words: str) -> None:
    e = error({**doc(), "vip": vip})
    assert e.key == "vip" and words in str(e)


@pytest.mark.parametrize(
    ("vip", "words"),
    [
        ("fe80::100", "link-local"),
        ("ff02::12", "unicast"),
        ("::1", "clients"),
        ("::", "clients"),
        ("fec0::1", "global unicast"),  # deprecated site-local
        ("64:ff9b::1", "global unicast"),  # outside 2000::/3
    ],
)
def test_vip_ipv6_must_be_global_or_ula(vip: str, words: str) -> None:
    e = error({**doc(), "vip": vip})
    assert e.key == "vip" and "global unicast (2000::/3) or unique local" in str(e)
    assert words in str(e)


@pytest.mark.parametrize("vip", ["2001:db8::100", "2a01:4f8::1", "fd00::100", "fc00::5"])
def test_vip_ipv6_global_and_ula_accepted(vip: str) -> None:
    assert parse({**doc(), "vip": vip}).vip == IPv6Address(vip)


@pytest.mark.parametrize("vip", ["10.0.0.100", "192.168.1.5", "203.0.113.7", " 10.0.0.100 "])
def test_vip_ipv4_accepted(vip: str) -> None:
    assert parse({**doc(), "vip": vip}).vip == IPv4Address(vip.strip())


# -- node ------------------------------------------------------------------------------------


def test_node_from_file() -> None:
    assert parse(doc(), env={"NODE_NAME": "env-node"}, hostname="host").node == "cp-1"


def test_node_falls_back_to_node_name_then_hostname() -> None:
    data = doc()
    del data["node"]
    assert parse(data, env={"NODE_NAME": "env-node"}, hostname="host").node == "env-node"
    assert parse(data, hostname="host").node == "host"
    assert parse({**data, "node": None}, hostname="host").node == "host"


def test_vipd_node_overrides_the_file() -> None:
    assert parse(doc(), env={"VIPD_NODE": "override", "NODE_NAME": "x"}).node == "override"


def test_node_unset_is_an_error() -> None:
    data = doc()
    del data["node"]
    e = error(data)
    assert e.key == "node" and "NODE_NAME" in str(e)


@pytest.mark.parametrize("bad", ["", "cp 1", "a/b", "x" * 254, 5])
def test_node_must_be_a_name(bad: object) -> None:
    assert error({**doc(), "node": bad}).key == "node"


def test_node_error_names_its_source() -> None:
    data = doc()
    del data["node"]
    assert "(from NODE_NAME)" in str(error(data, env={"NODE_NAME": "bad name"}))
    assert "(from hostname)" in str(error(data, hostname="bad name"))


# -- interface -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["eth0", "enp0s31f6", "bond0.100", "x" * 15, "veth-a_b"])
def test_interface_names_accepted(name: str) -> None:
    assert parse({**doc(), "interface": name}).interface == name


@pytest.mark.parametrize("bad", ["", "x" * 16, "eth0:1", "a/b", "eth 0", ".", "..", 0])
def test_interface_must_be_a_linux_name(bad: object) -> None:
    e = error({**doc(), "interface": bad})
    assert e.key == "interface" and "Linux interface name" in str(e)


# -- election --------------------------------------------------------------------------------


def test_mode_lease_needs_no_vrrp_section() -> None:
    cfg = parse({"node": "cp-1", "vip": "10.0.0.100", "election": {"mode": "lease"}})
    assert cfg.election.mode == "lease" and cfg.election.lease == config.Lease()
    assert cfg.election.vrrp_section is None
    with pytest.raises(AttributeError, match=r"election\.mode is lease"):
        cfg.election.vrrp  # noqa: B018


def test_mode_other_values() -> None:
    data = doc()
    data["election"]["mode"] = "raft"
    e = error(data)
    assert e.key == "election.mode" and '(got "raft")' in str(e)


def test_vrid_is_required() -> None:
    for data in (doc(vrid=None), {"node": "n", "vip": "10.0.0.100"}, {**doc(), "election": {}}):
        e = error(data)
        assert e.key == "election.vrrp.vrid" and "required" in str(e)


@pytest.mark.parametrize("vrid", [1, 51, 255])
def test_vrid_range_accepted(vrid: int) -> None:
    assert parse(doc(vrid=vrid)).election.vrrp.vrid == vrid


@pytest.mark.parametrize("vrid", [0, 256, -1, 300])
def test_vrid_range_rejected(vrid: int) -> None:
    assert str(error(doc(vrid=vrid))) == (
        f"election.vrrp.vrid: must be an integer from 1 to 255 (got {vrid})"
    )


@pytest.mark.parametrize("priority", [1, 100, 254])
def test_priority_range_accepted(priority: int) -> None:
    assert parse(doc(priority=priority)).election.vrrp.priority == priority


def test_priority_255_explains_the_address_owner() -> None:
    e = error(doc(priority=255))
    assert e.key == "election.vrrp.priority"
    assert "owns the address" in str(e) and "must not be a node address" in str(e)


@pytest.mark.parametrize("priority", [0, 256, -5])
def test_priority_range_rejected(priority: int) -> None:
    e = error(doc(priority=priority))
    assert e.key == "election.vrrp.priority" and "from 1 to 254" in str(e)
    assert "owns" not in str(e)


@pytest.mark.parametrize(
    ("value", "cs"), [(0.01, 1), (0.1, 10), (1, 100), (1.0, 100), (2.5, 250), (40.95, 4095)]
)
def test_advert_interval_v3_accepted(value: float, cs: int) -> None:
    v = parse(doc(advert_interval=value)).election.vrrp
    assert v.advert_interval_cs == cs
    assert v.advert_interval == cs / 100


@pytest.mark.parametrize("value", [0, 0.005, 0.015, 1.234, 40.96, 41, -1])
def test_advert_interval_v3_rejected(value: float) -> None:
    e = error(doc(advert_interval=value))
    assert e.key == "election.vrrp.advert_interval"
    assert "0.01 to 40.95 in steps of 0.01" in str(e)


@pytest.mark.parametrize("value", [1, 1.0, 3, 255])
def test_advert_interval_v2_accepted(value: float) -> None:
    v = parse(doc(version=2, advert_interval=value)).election.vrrp
    assert v.advert_interval == value and v.advert_interval_cs == value * 100


@pytest.mark.parametrize("value", [0.5, 1.5, 0, 256])
def test_advert_interval_v2_whole_seconds(value: float) -> None:
    e = error(doc(version=2, advert_interval=value))
    assert e.key == "election.vrrp.advert_interval" and "whole number of seconds" in str(e)


@pytest.mark.parametrize("version", [1, 4, 0])
def test_version_2_or_3(version: int) -> None:
    assert str(error(doc(version=version))) == (
        f"election.vrrp.version: must be 2 or 3 (got {version})"
    )


def test_version_2_needs_ipv4() -> None:
    e = error({**doc(version=2), "vip": "fd00::100"})
    assert e.key == "election.vrrp.version" and "VRRPv2 has no IPv6" in str(e)


def test_version_3_ipv6_accepted() -> None:
    assert parse({**doc(), "vip": "fd00::100"}).election.vrrp.version == 3


def test_preempt_false() -> None:
    assert parse(doc(preempt=False)).election.vrrp.preempt is False


@pytest.mark.parametrize("value", [0, 0.5, 1000])
def test_preempt_delay_accepted(value: float) -> None:
    assert parse(doc(preempt_delay=value)).election.vrrp.preempt_delay == value


@pytest.mark.parametrize("value", [-0.1, 1000.5])
def test_preempt_delay_range(value: float) -> None:
    e = error(doc(preempt_delay=value))
    assert e.key == "election.vrrp.preempt_delay" and "0 to 1000" in str(e)


def test_preempt_delay_without_preempt_is_pointed_out() -> None:
    e = error(doc(preempt=False, preempt_delay=2))
    assert e.key == "election.vrrp.preempt_delay" and "no effect" in str(e)


# -- unicast peers ---------------------------------------------------------------------------


def test_unicast_peers_parsed() -> None:
    v = parse(doc(unicast_peers=["10.0.0.2", "10.0.0.3"])).election.vrrp
    assert v.unicast_peers == (IPv4Address("10.0.0.2"), IPv4Address("10.0.0.3"))


def test_unicast_peers_ipv6_link_local_allowed() -> None:
    data = {**doc(unicast_peers=["fe80::2", "fd00::3"]), "vip": "fd00::100"}
    assert parse(data).election.vrrp.unicast_peers == (
        IPv6Address("fe80::2"),
        IPv6Address("fd00::3"),
    )


@pytest.mark.parametrize(
    ("peers", "key", "words"),
    [
        (["10.0.0.2", "api.example.com"], "[1]", "IP address literal"),
        (["10.0.0.2", 5], "[1]", "written as a string"),
        (["fd00::2"], "[0]", "IPv4 address, the family of the VIP"),
        (["10.0.0.2", "10.0.0.2"], "[1]", "listed twice (first as election.vrrp.unicast_peers[0])"),
        (["10.0.0.100"], "[0]", "must not be the VIP itself"),
        (["224.0.0.18"], "[0]", "unicast address"),
        (["127.0.0.1"], "[0]", "unicast address"),
        (["0.0.0.0"], "[0]", "unicast address"),
        (["10.0.0.0/24"], "[0]", "prefix length"),
    ],
)
def test_unicast_peer_rules(peers: list[object], key: str, words: str) -> None:
    e = error(doc(unicast_peers=peers))
    assert e.key == "election.vrrp.unicast_peers" + key
    assert words in str(e)


# -- auth_pass -------------------------------------------------------------------------------


def test_auth_pass_with_version_2() -> None:
    assert parse(doc(version=2, auth_pass="12345678")).election.vrrp.auth_pass == "12345678"


def test_auth_pass_needs_version_2() -> None:
    e = error(doc(auth_pass="secret"))  # version defaults to 3
    assert e.key == "election.vrrp.auth_pass" and "version: 2" in str(e)


@pytest.mark.parametrize("bad", ["", "123456789", "pässwd", "tab\there", 12345678])
def test_auth_pass_1_to_8_printable_ascii(bad: object) -> None:
    e = error(doc(version=2, auth_pass=bad))
    assert e.key == "election.vrrp.auth_pass"
    assert not bad or str(bad) not in str(e)  # a password is never echoed into a log
    assert "characters, not shown" in str(e)


# -- garp and log ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        *[("repeat", 0), ("repeat", 101), ("interval", -0.01), ("interval", 1.5)],
        *[("refresh", 0.5), ("refresh", -1), ("refresh", 86401), ("delay", -1), ("delay", 3601)],
    ],
)
def test_garp_ranges(key: str, value: float) -> None:
    e = error({**doc(), "garp": {key: value}})
    assert e.key == f"garp.{key}" and f"(got {value})" in str(e)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        *[("repeat", 1), ("repeat", 100), ("interval", 0), ("interval", 1), ("refresh", 0)],
        *[("refresh", 1), ("refresh", 30.5), ("delay", 0), ("delay", 0.5), ("delay", 3600)],
    ],
)
def test_garp_edges_accepted(key: str, value: float) -> None:
    assert getattr(parse({**doc(), "garp": {key: value}}).garp, key) == value


@pytest.mark.parametrize(
    ("key", "value"), [("format", "text"), ("format", "JSON"), ("level", "warn")]
)
def test_log_choices(key: str, value: str) -> None:
    e = error({**doc(), "log": {key: value}})
    assert e.key == f"log.{key}" and "must be one of" in str(e)


# -- environment overrides -------------------------------------------------------------------


def test_env_overrides_every_variable() -> None:
    env = {
        "VIPD_VIP": "192.0.2.50",
        "VIPD_INTERFACE": "eth9",
        "VIPD_NODE": "cp-9",
        "VIPD_VRID": "9",
        "VIPD_PRIORITY": "200",
        "VIPD_ADVERT_INTERVAL": "0.5",
        "VIPD_LOG_FORMAT": "json",
    }
    cfg = parse(doc(), env=env)
    assert (cfg.vip, cfg.interface, cfg.node) == (IPv4Address("192.0.2.50"), "eth9", "cp-9")
    v = cfg.election.vrrp
    assert (v.vrid, v.priority, v.advert_interval, cfg.log.format) == (9, 200, 0.5, "json")
    assert set(env) == set(config.ENV_OVERRIDES)


def test_env_alone_is_a_config() -> None:
    cfg = parse(None, env={"VIPD_VIP": "fd00::100", "VIPD_VRID": "7", "NODE_NAME": "n1"})
    assert (cfg.vip, cfg.election.vrrp.vrid, cfg.node) == (IPv6Address("fd00::100"), 7, "n1")


def test_env_empty_counts_as_unset() -> None:
    assert parse(doc(), env={"VIPD_VRID": "", "VIPD_VIP": ""}).election.vrrp.vrid == 51


def test_env_override_of_a_null_section() -> None:
    data = {**doc(), "log": None}
    assert parse(data, env={"VIPD_LOG_FORMAT": "json"}).log.format == "json"


def test_env_whole_number_interval() -> None:
    cfg = parse(doc(version=2), env={"VIPD_ADVERT_INTERVAL": "2"})
    assert cfg.election.vrrp.advert_interval == 2.0


VRID_RULE = "must be an integer from 1 to 255"


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("VIPD_VRID", "300", f"election.vrrp.vrid (from VIPD_VRID): {VRID_RULE} (got 300)"),
        ("VIPD_VRID", "abc", f'election.vrrp.vrid (from VIPD_VRID): {VRID_RULE} (got "abc")'),
        ("VIPD_VRID", "5.0", f'election.vrrp.vrid (from VIPD_VRID): {VRID_RULE} (got "5.0")'),
        ("VIPD_PRIORITY", "0", "election.vrrp.priority (from VIPD_PRIORITY): must be an integer"),
        ("VIPD_VIP", "api.example.com", "vip (from VIPD_VIP): must be an IP address literal"),
        ("VIPD_NODE", "a b", "node (from VIPD_NODE): "),
        ("VIPD_INTERFACE", "eth0:1", "interface (from VIPD_INTERFACE): "),
        ("VIPD_ADVERT_INTERVAL", "0.015", "advert_interval (from VIPD_ADVERT_INTERVAL): "),
        ("VIPD_ADVERT_INTERVAL", "1s", '(got "1s")'),
        ("VIPD_LOG_FORMAT", "xml", "log.format (from VIPD_LOG_FORMAT): must be one of"),
    ],
)
def test_env_errors_name_the_variable(var: str, value: str, expected: str) -> None:
    e = error(doc(), env={var: value})
    assert e.source == var
    assert expected in str(e)


def test_file_errors_do_not_blame_the_environment() -> None:
    e = error(doc(vrid=0), env={"VIPD_PRIORITY": "10"})
    assert e.source is None and str(e).startswith("election.vrrp.vrid: ")


def test_env_is_not_applied_through_a_malformed_section() -> None:
    e = error({**doc(), "election": "vrrp"}, env={"VIPD_VRID": "5"})
    assert e.key == "election" and "must be a mapping" in str(e)


# -- load ------------------------------------------------------------------------------------


def test_load_file(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text("vip: 10.0.0.100\nelection:\n  vrrp:\n    vrid: 5\n")
    cfg = load(str(path), hostname="h")
    assert (cfg.vip, cfg.election.vrrp.vrid, cfg.node) == (IPv4Address("10.0.0.100"), 5, "h")


def test_load_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert str(info.value) == f"{path}: cannot read the config file: No such file or directory"
    assert info.value.file == str(path)


def test_load_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text("vip: 10.0.0.100\nelection:\n  vrrp: {vrid: 5\nlog: x\n")
    with pytest.raises(ConfigError) as info:
        load(str(path))
    e = info.value
    assert e.file == str(path) and e.line is not None
    assert re.fullmatch(rf"{re.escape(str(path))}:\d+: invalid YAML: .+", str(e))


def test_load_tab_indentation_error(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text("vip: 10.0.0.100\nelection:\n\tvrrp: 1\n")
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert str(info.value).startswith(f"{path}:3: invalid YAML")


def test_load_duplicate_key_is_an_error(tmp_path: Path) -> None:
    # Plain YAML loaders keep the last one silently; two vrids in one file is a mistake.
    path = tmp_path / "vipd.yaml"
    path.write_text("vip: 10.0.0.100\nelection:\n  vrrp:\n    vrid: 5\n    vrid: 6\n")
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert info.value.line == 5
    assert "'vrid' is written twice (first on line 4)" in str(info.value)


def test_load_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text(
        "vip: 10.0.0.100\nnode: n\nelection:\n  vrrp:\n    <<: {vrid: 5, priority: 10}\n"
        "    priority: 20\n"
    )
    assert load(str(path)).election.vrrp.priority == 20


def test_load_empty_file_uses_env(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text("# nothing\n")
    cfg = load(str(path), env={"VIPD_VIP": "10.0.0.100", "VIPD_VRID": "3"}, hostname="h")
    assert cfg.election.vrrp.vrid == 3


def test_load_validation_errors_are_plain_key_errors(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text("vip: 10.0.0.100\nnode: n\nelection: {vrrp: {vrid: 300}}\n")
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert str(info.value) == "election.vrrp.vrid: must be an integer from 1 to 255 (got 300)"


def test_yaml_bools_and_quoting(tmp_path: Path) -> None:
    # YAML 1.1: `yes` is a boolean, `"51"` a string
    path = tmp_path / "vipd.yaml"
    path.write_text('vip: 10.0.0.100\nnode: n\nelection: {vrrp: {vrid: "51"}}\n')
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert str(info.value) == 'election.vrrp.vrid: must be an integer from 1 to 255 (got "51")'
    path.write_text("vip: 10.0.0.100\nnode: n\nelection: {vrrp: {vrid: 5, preempt: no}}\n")
    assert load(str(path)).election.vrrp.preempt is False


# -- the example file and the docs -----------------------------------------------------------


# Every declared key (vipd.config.schema), sections by their keys. "track" is a list: its
# items' keys are track[].<key>. "vip" is the one-address spelling of the field vips.
ALL_KEYS = {
    k.dotted
    for k in walk(Config)
    if (k.spec.section is None or k.spec.many) and "[]" not in k.dotted
} | {"vip"}


def test_docs_name_every_key_of_a_track_item() -> None:
    text = DOCS.read_text()
    for f in dataclasses.fields(config.Track):
        if f.name != "fault":  # written as weight: fault
            assert f"`track[].{f.name}`" in text, f.name


def test_example_parses() -> None:
    cfg = load(str(EXAMPLE), hostname="cp-1")
    assert cfg.vip == IPv4Address("10.0.0.100") and cfg.election.vrrp.vrid == 51


def test_example_is_the_defaults() -> None:
    cfg = load(str(EXAMPLE), hostname="cp-1")
    assert cfg.election.vrrp == Vrrp(vrid=51)
    assert (cfg.garp, cfg.log, cfg.interface) == (Garp(), Log(), None)


def uncommented(text: str) -> str:
    """The example with its off-by-default sections ("#: " lines) turned on."""
    return re.sub(r"(?m)^(\s*)#: ?", r"\1", text)


def test_example_has_every_key() -> None:
    data = yaml.safe_load(uncommented(EXAMPLE.read_text()))
    found = set()

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, Mapping) and f"{prefix}{k}" not in ALL_KEYS:
                walk(v, f"{prefix}{k}.")
            else:
                found.add(f"{prefix}{k}")

    walk(data, "")
    # vip and vips are the two spellings of one key, never both in one file: the example
    # writes vip, and vips is shown in the reference.
    assert "vip" in found and "vips" not in found
    assert found | {"vips"} == ALL_KEYS


def test_example_with_its_commented_sections_parses(tmp_path: Path) -> None:
    text = uncommented(EXAMPLE.read_text())
    assert text != EXAMPLE.read_text()
    path = tmp_path / "vipd.yaml"
    path.write_text(text)
    a = load(str(path), hostname="cp-1").election.vrrp.auth_hmac
    assert a is not None and a.keys == ((1, "/etc/vipd/vrrp-key-1"),) and a.send_key == 1


def docs_table() -> dict[str, str]:
    """key -> its env-override cell, from the table in docs/reference/config.md."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        m = re.match(r"\| `([a-z_.]+)` \|.*\| ([^|]*) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_docs_table_has_every_key_and_variable() -> None:
    text = DOCS.read_text()
    for key in ALL_KEYS:
        assert f"`{key}`" in text, key
    for var in config.ENV_OVERRIDES:
        assert f"`{var}`" in text, var


def test_docs_table_rows_are_real_keys_with_their_variables() -> None:
    rows = docs_table()
    sections = {key.rsplit(".", 1)[0] for key in ALL_KEYS if "." in key}
    assert set(rows) >= ALL_KEYS, ALL_KEYS - set(rows)
    assert set(rows) <= ALL_KEYS | sections, set(rows) - ALL_KEYS - sections
    by_key = {key: var for var, (key, _) in config.ENV_OVERRIDES.items()}
    for key, cell in rows.items():
        assert cell == (f"`{by_key[key]}`" if key in by_key else "—"), (key, cell)


# -- metrics ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        ("0.0.0.0:2112", "0.0.0.0", 2112),
        ("127.0.0.1:9100", "127.0.0.1", 9100),
        ("[::]:2112", "::", 2112),
        ("[fd00::1]:1", "fd00::1", 1),
    ],
)
def test_metrics_listen(listen: str, host: str, port: int) -> None:
    cfg = parse({**doc(), "metrics": {"listen": listen}})
    assert (cfg.metrics.listen, cfg.metrics.host, cfg.metrics.port) == (listen, host, port)


def test_metrics_listen_default() -> None:
    assert parse(doc()).metrics.listen == "0.0.0.0:2112"
    assert parse({**doc(), "metrics": None}).metrics.listen == "0.0.0.0:2112"


@pytest.mark.parametrize(
    "listen",
    [":2112", "2112", "localhost:2112", "0.0.0.0:0", "0.0.0.0:65536", "::1:2112", "[1.2.3.4]:80",
     "[fe80::1%eth0]:2112", "0.0.0.0:21a", 2112, None, ""],
)  # fmt: skip
def test_metrics_listen_rejected(listen: object) -> None:
    e = error({**doc(), "metrics": {"listen": listen}})
    assert e.key == "metrics.listen" and "HOST:PORT" in str(e)


# -- purity ----------------------------------------------------------------------------------


def test_config_module_is_pure() -> None:
    tree = ast.parse(Path(config.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"asyncio", "socket", "pyroute2", "time", "select", "subprocess", "os"}


def test_a_misspelt_key_gets_the_closest_allowed_one() -> None:
    data: dict[str, Any] = doc()
    data["election"]["vrrp"]["prority"] = 5
    assert 'did you mean "priority"?' in str(error(data))
    data = doc()
    data["zzz"] = 1  # nothing close: no guess
    assert "did you mean" not in str(error(data))


def test_errors_lists_every_error_and_an_empty_list_for_a_good_file() -> None:
    assert config.errors(doc()) == []
    data: dict[str, Any] = doc()
    data["vip"] = "10.0.0.300"
    data["election"]["vrrp"]["vrid"] = 0
    data["garp"] = {"repeat": 0, "interval": 2}
    found = config.errors(data)
    assert [e.key for e in found] == ["vip", "election.vrrp.vrid", "garp.repeat", "garp.interval"]
    # the same first error as parse
    assert str(found[0]) == str(error(data))


def test_errors_names_an_env_variable_and_goes_on() -> None:
    found = config.errors(doc(), env={"VIPD_VRID": "abc", "VIPD_PRIORITY": "0"})
    assert [(e.key, e.source) for e in found] == [
        ("election.vrrp.vrid", "VIPD_VRID"),
        ("election.vrrp.priority", "VIPD_PRIORITY"),
    ]


def test_errors_of_a_list_item() -> None:
    data: dict[str, Any] = doc()
    data["election"]["vrrp"]["unicast_peers"] = ["10.0.0.2", "nope", "10.0.0.100"]
    keys = [e.key for e in config.errors(data)]
    assert keys[0] == "election.vrrp.unicast_peers[1]"
    assert len(keys) == 2 and keys[1].startswith("election.vrrp.unicast_peers[")


def test_checksum_option() -> None:
    assert parse(doc()).election.vrrp.checksum == "pseudo-header"
    assert parse(doc(checksum="message-only")).election.vrrp.checksum == "message-only"
    assert error(doc(checksum="both")).key == "election.vrrp.checksum"
    assert "only applies to VRRPv3 over IPv4" in str(
        error(doc(checksum="message-only", version=2, advert_interval=1))
    )
    v6 = {**doc(checksum="message-only"), "vip": "fd00::100"}
    assert error(v6).key == "election.vrrp.checksum"
