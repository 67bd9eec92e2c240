"""election.vrrp.auth_hmac: the section's rules (vipd.config.auth_hmac) and the start-up and
reload check of its key files (vipd.startup.check_auth_keys): one line naming the key id and
the file, never the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vipd import config
from vipd.config import auth_hmac as cfg_auth
from vipd.startup import check_auth_keys, reloader
from vipd.vrrp import auth

KEY = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"


def doc(**vrrp: Any) -> dict[str, Any]:
    return {
        "node": "n1",
        "vip": "10.0.0.100",
        "interface": "eth0",
        "election": {"vrrp": {"vrid": 51, **vrrp}},
    }


def error(d: dict[str, Any]) -> config.ConfigError:
    with pytest.raises(config.ConfigError) as e:
        config.parse(d)
    return e.value


def key_file(tmp: Path, text: str = f"hex:{KEY}\n", mode: int = 0o600) -> str:
    path = tmp / "key"
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_off_by_default() -> None:
    assert config.parse(doc()).election.vrrp.auth_hmac is None


def test_defaults_and_the_window_from_the_interval() -> None:
    v = config.parse(doc(auth_hmac={"keys": {7: "/etc/k7"}})).election.vrrp
    assert v.auth_hmac == cfg_auth.AuthHmac(keys=((7, "/etc/k7"),), send_key=7)
    assert (v.auth_hmac.mode, v.auth_hmac.anti_replay, v.auth_hmac.window) == (
        "enforce",
        "time",
        None,
    )
    assert v.auth_window == auth.default_window(1.0) == 5
    slow = config.parse(doc(advert_interval=4, auth_hmac={"keys": {1: "/k"}})).election.vrrp
    assert slow.auth_window == 12
    set_ = config.parse(doc(auth_hmac={"keys": {1: "/k"}, "window": 30})).election.vrrp
    assert set_.auth_window == 30


@pytest.mark.parametrize("interval", [0.01, 1, 1.5, 4, 40.95, 100, 255])
def test_the_config_window_is_the_codec_s(interval: float) -> None:
    assert cfg_auth.window_for(interval) == auth.default_window(interval)
    assert (cfg_auth.WINDOW_MIN, cfg_auth.WINDOW_MAX) == (auth.WINDOW_MIN, auth.WINDOW_MAX)


def test_send_key_must_be_one_of_the_keys() -> None:
    two = {1: "/k1", 2: "/k2"}
    assert config.parse(doc(auth_hmac={"keys": two, "send_key": 2})).election.vrrp.auth_hmac
    e = error(doc(auth_hmac={"keys": two}))
    assert e.key == "election.vrrp.auth_hmac.send_key" and "required" in str(e)
    e = error(doc(auth_hmac={"keys": two, "send_key": 3}))
    assert e.key == "election.vrrp.auth_hmac.send_key" and "(1, 2)" in str(e)


@pytest.mark.parametrize(
    ("keys", "where"),
    [
        ({0: "/k"}, "keys.0"),
        ({256: "/k"}, "keys.256"),
        ({"1": "/k"}, "keys.1"),
        ({1: "relative/k"}, "keys.1"),
        ({1: 42}, "keys.1"),
        ({}, "keys"),
        (None, "keys"),
        (["/k"], "keys"),
    ],
)
def test_key_ids_are_1_to_255_and_paths_absolute(keys: object, where: str) -> None:
    e = error(doc(auth_hmac={"keys": keys}))
    assert e.key == f"election.vrrp.auth_hmac.{where}", str(e)


def test_modes_replay_and_window_rules() -> None:
    for mode in ("enforce", "permissive", "receive-only"):
        a = config.parse(doc(auth_hmac={"keys": {1: "/k"}, "mode": mode})).election.vrrp
        assert a.auth_hmac is not None and a.auth_hmac.mode == mode
    assert error(doc(auth_hmac={"keys": {1: "/k"}, "mode": "strict"})).key.endswith(".mode")
    bad = {"keys": {1: "/k"}, "anti_replay": "counter"}
    assert error(doc(auth_hmac=bad)).key.endswith(".anti_replay")
    for window in (0, 301, 2.5, "5"):
        e = error(doc(auth_hmac={"keys": {1: "/k"}, "window": window}))
        assert e.key == "election.vrrp.auth_hmac.window"
    e = error(doc(auth_hmac={"keys": {1: "/k"}, "anti_replay": "monotonic", "window": 10}))
    assert e.key == "election.vrrp.auth_hmac.window" and "anti_replay: time" in str(e)


def test_refused_together_with_auth_pass() -> None:
    e = error(doc(version=2, advert_interval=1, auth_pass="s3cret", auth_hmac={"keys": {1: "/k"}}))
    assert e.key == "election.vrrp.auth_hmac" and "auth_pass" in str(e)
    assert "s3cret" not in str(e) and "\n" not in str(e)


def test_v2_with_auth_hmac() -> None:
    v = config.parse(doc(version=2, auth_hmac={"keys": {1: "/k"}})).election.vrrp
    assert v.version == 2 and v.auth_hmac is not None


def test_unknown_key_in_the_section() -> None:
    e = error(doc(auth_hmac={"keys": {1: "/k"}, "key": "x"}))
    assert e.key == "election.vrrp.auth_hmac.key"


# -- the key files, at start and on a reload -------------------------------------------------


def test_a_good_key_file_passes(tmp_path: Path) -> None:
    check_auth_keys(config.parse(doc(auth_hmac={"keys": {3: key_file(tmp_path)}})))


@pytest.mark.parametrize(
    ("text", "mode", "rule"),
    [
        (None, 0o600, "cannot open"),
        (f"hex:{KEY}\n", 0o644, "group or others"),
        ("hex:zz\n", 0o600, "not a hex digit"),
        ("short\n", 0o600, "must be 32..64"),
    ],
)
def test_a_bad_key_file_is_one_line_naming_key_and_file(
    tmp_path: Path, text: str | None, mode: int, rule: str
) -> None:
    path = str(tmp_path / "missing") if text is None else key_file(tmp_path, text, mode)
    cfg = config.parse(doc(auth_hmac={"keys": {9: path}}))
    with pytest.raises(config.ConfigError) as e:
        check_auth_keys(cfg)
    msg = str(e.value)
    assert e.value.key == "election.vrrp.auth_hmac.keys.9" and path in msg and rule in msg
    assert "\n" not in msg and KEY not in msg


def test_lease_mode_does_not_read_a_vrrp_section_s_keys(tmp_path: Path) -> None:
    d = doc(auth_hmac={"keys": {1: str(tmp_path / "missing")}})
    d["election"]["mode"] = "lease"
    check_auth_keys(config.parse(d))


def test_a_reload_re_reads_the_key_files(tmp_path: Path) -> None:
    key = key_file(tmp_path)
    conf = tmp_path / "vipd.yaml"
    conf.write_text(
        "node: n1\nvip: 10.0.0.100\ninterface: eth0\n"
        f"election:\n  vrrp:\n    vrid: 51\n    auth_hmac:\n      keys: {{1: {key}}}\n"
    )
    load = reloader(str(conf))
    assert load is not None
    assert load().election.vrrp.auth_hmac is not None
    os.chmod(key, 0o640)
    with pytest.raises(config.ConfigError) as e:
        load()
    assert e.value.key == "election.vrrp.auth_hmac.keys.1"


def test_vipd_check_exits_2_naming_the_key_and_the_file(tmp_path: Path) -> None:
    key = key_file(tmp_path, mode=0o604)
    conf = tmp_path / "vipd.yaml"
    conf.write_text(
        "node: n1\nvip: 10.0.0.100\ninterface: eth0\n"
        f"election:\n  vrrp:\n    vrid: 51\n    auth_hmac:\n      keys: {{4: {key}}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "vipd", "check", "--config", str(conf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("vipd: config error: election.vrrp.auth_hmac.keys.4: key file "), line
    assert key in line and "0604" in line and KEY not in out.stderr + out.stdout


def test_the_pods_mount_the_key_files_from_the_node() -> None:
    from vipd.deploy.manifest import model

    d = doc(auth_hmac={"keys": {1: "/etc/vipd/k1", 2: "/etc/vipd/k2"}, "send_key": 2})
    assert model.plan(d).host_files == ("/etc/vipd/k1", "/etc/vipd/k2")
    assert model.plan(doc()).host_files == ()
