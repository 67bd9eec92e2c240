"""The ``announce.bgp`` section (vipd.config.bgp): defaults, the ASN and hold-time ranges,
peers (required keys, duplicates, families against the VIPs), and bgp mode's needs; and the
password files (vipd.routed.bgp_password) that start and ``vipd check`` read."""

from __future__ import annotations

import os
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Any

import pytest

from vipd import config
from vipd.config.bgp import BgpPeer
from vipd.routed.bgp_password import PasswordFileError, read_password
from vipd.startup import check_bgp_passwords

PEER = {"address": "10.78.1.0", "asn": 65000}
BGP: dict[str, Any] = {
    "vip": "10.79.0.100",
    "node": "n1",
    "announce": {"mode": "bgp", "bgp": {"local_asn": 65100, "peers": [PEER]}},
    "health": None,
}


def parse(doc: dict[str, Any]) -> config.Config:
    return config.parse(doc, env={}, hostname="h")


def with_bgp(**bgp: Any) -> dict[str, Any]:
    return {**BGP, "announce": {"mode": "bgp", "bgp": {**BGP["announce"]["bgp"], **bgp}}}


def error_of(doc: dict[str, Any]) -> str:
    with pytest.raises(config.ConfigError) as info:
        parse(doc)
    return str(info.value)


def test_bgp_mode_reads_the_section_with_its_defaults() -> None:
    cfg = parse(BGP)
    a = cfg.announce
    assert a.mode == "bgp" and a.routed and a.speaker
    assert cfg.election.mode == "none"
    assert a.bgp.local_asn == 65100
    assert a.bgp.router_id is None  # the node's IPv4 source address, at start
    assert a.bgp.hold_time == 9
    assert a.bgp.peers == (BgpPeer(IPv4Address("10.78.1.0"), 65000, 179, None),)


def test_routing_table_mode_is_not_a_speaker() -> None:
    cfg = parse({**BGP, "announce": {"mode": "routing-table"}})
    assert cfg.announce.routed and not cfg.announce.speaker


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {**BGP, "announce": {"mode": "bgp", "bgp": {"peers": [PEER]}}},
            "announce.bgp.local_asn: is required with announce.mode: bgp",
        ),
        (with_bgp(peers=[]), "announce.bgp.peers: needs at least one router"),
        (with_bgp(local_asn=0), "announce.bgp.local_asn: must be"),
        (with_bgp(local_asn=4294967295), "announce.bgp.local_asn: must be"),
        (with_bgp(local_asn=23456), "announce.bgp.local_asn: must not be 23456"),
        (with_bgp(local_asn="65100"), "announce.bgp.local_asn: must be"),
        (with_bgp(hold_time=0), "announce.bgp.hold_time: must be"),
        (with_bgp(hold_time=2), "announce.bgp.hold_time: must be"),
        (with_bgp(hold_time=65536), "announce.bgp.hold_time: must be"),
        (with_bgp(router_id="fd00::1"), "announce.bgp.router_id: must be a non-zero IPv4"),
        (with_bgp(router_id="0.0.0.0"), "announce.bgp.router_id: must be a non-zero IPv4"),
        (with_bgp(peers=[{"asn": 65000}]), "announce.bgp.peers[0].address: is required"),
        (with_bgp(peers=[{"address": "10.78.1.0"}]), "announce.bgp.peers[0].asn: is required"),
        (with_bgp(peers=[{**PEER, "asn": 23456}]), "announce.bgp.peers[0].asn: must not be"),
        (with_bgp(peers=[{**PEER, "port": 0}]), "announce.bgp.peers[0].port: must be"),
        (with_bgp(peers=[{**PEER, "extra": 1}]), "announce.bgp.peers[0]"),
        (with_bgp(peers=[PEER, PEER]), "announce.bgp.peers[1].address: is listed twice"),
        (
            with_bgp(peers=[{**PEER, "address": "224.0.0.5"}]),
            "announce.bgp.peers[0].address: must be a unicast address",
        ),
        (
            with_bgp(peers=[{**PEER, "password_file": "secret"}]),
            "announce.bgp.peers[0].password_file: must be an absolute path",
        ),
        (
            with_bgp(peers=[{**PEER, "address": "fd00::1"}]),
            "announce.bgp.peers: has no IPv4 router",
        ),
        (
            with_bgp(peers=[PEER, {**PEER, "address": "fd00::1"}]),
            "announce.bgp.peers[1].address: is IPv6, and no VIP is",
        ),
        ({**BGP, "health": "drop"}, "health: is required with announce.mode: bgp"),
        ({**BGP, "election": {"mode": "vrrp"}}, "election: must be absent with announce.mode: bgp"),
    ],
)
def test_errors_are_one_line_naming_the_key(doc: dict[str, Any], message: str) -> None:
    if doc.get("health") == "drop":
        doc = {k: v for k, v in doc.items() if k != "health"}
    err = error_of(doc)
    assert message in err and "\n" not in err


def test_a_dual_stack_pair_of_vips_needs_a_router_of_each_family() -> None:
    dual = {**with_bgp(peers=[PEER, {"address": "fd00:78::", "asn": 65000}])}
    dual["vips"] = ["10.79.0.100", "fd00:79::100"]
    del dual["vip"]
    cfg = parse(dual)
    assert {p.address for p in cfg.announce.bgp.peers} == {
        IPv4Address("10.78.1.0"),
        IPv6Address("fd00:78::"),
    }
    dual["announce"]["bgp"]["peers"] = [PEER]
    assert "has no IPv6 router" in error_of(dual)


def test_the_section_is_validated_but_unused_in_another_mode() -> None:
    doc = {**with_bgp(), "announce": {"mode": "routing-table", "bgp": {"hold_time": 30}}}
    assert parse(doc).announce.bgp.hold_time == 30
    bad = {**doc, "announce": {"mode": "routing-table", "bgp": {"hold_time": 1}}}
    assert "announce.bgp.hold_time" in error_of(bad)


def private(tmp_path: Path, data: bytes, mode: int = 0o600) -> str:
    path = tmp_path / "pw"
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def test_a_password_file_is_read_without_its_trailing_newline(tmp_path: Path) -> None:
    assert read_password(private(tmp_path, b"s3cret\n")) == b"s3cret"
    assert read_password(private(tmp_path, b"s3cret\r\n")) == b"s3cret"
    assert read_password(private(tmp_path, b"x" * 80, 0o400)) == b"x" * 80


@pytest.mark.parametrize(
    ("data", "mode", "rule"),
    [
        (b"s3cret", 0o640, "gives group or others access"),
        (b"s3cret", 0o604, "gives group or others access"),
        (b"\n", 0o600, "must hold 1 to 80 bytes"),
        (b"x" * 81, 0o600, "must hold 1 to 80 bytes"),
    ],
)
def test_a_password_file_others_can_read_or_of_a_bad_size_is_refused(
    tmp_path: Path, data: bytes, mode: int, rule: str
) -> None:
    path = private(tmp_path, data, mode)
    with pytest.raises(PasswordFileError) as info:
        read_password(path)
    assert rule in str(info.value) and path in str(info.value)
    assert b"s3cret".decode() not in str(info.value)  # never the password itself


def test_a_password_file_of_another_owner_or_missing_is_refused(tmp_path: Path) -> None:
    path = private(tmp_path, b"s3cret")
    with pytest.raises(PasswordFileError, match="owned by uid"):
        read_password(path, owners=frozenset({os.geteuid() + 1}))
    with pytest.raises(PasswordFileError, match="cannot open"):
        read_password(str(tmp_path / "absent"))
    with pytest.raises(PasswordFileError, match="not a regular file"):
        read_password(str(tmp_path))


def test_start_checks_the_password_files_and_names_the_key(tmp_path: Path) -> None:
    good = private(tmp_path, b"s3cret")
    check_bgp_passwords(parse(with_bgp(peers=[{**PEER, "password_file": good}])))
    os.chmod(good, 0o644)
    cfg = parse(with_bgp(peers=[{**PEER, "password_file": good}]))
    with pytest.raises(config.ConfigError) as info:
        check_bgp_passwords(cfg)
    assert str(info.value).startswith("announce.bgp.peers[0].password_file: ")
    assert "s3cret" not in str(info.value)
