"""The command line: exit codes, and what the daemon's start-up imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vipd import cli


def test_commands_other_than_lab_do_not_import_the_lab() -> None:
    # `vipd run` is the daemon: the lab's modules would cost it ~2.3 MiB of RSS for nothing.
    code = (
        "import sys\nfrom vipd import cli\n"
        "rc = cli.main(['version'])\n"
        "assert not any(m.startswith('vipd.lab') for m in sys.modules), sorted(sys.modules)\n"
        "sys.exit(rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("vipd ")


def test_lab_options_are_there_for_the_lab() -> None:
    from vipd.lab import runner

    args = cli.build_parser(lab_arguments=runner.add_arguments).parse_args(["lab", "--rounds", "7"])
    assert args.rounds == 7
    # `vipd lab` runs the lab's own parser (python -m vipd.lab) with its arguments.
    out = subprocess.run(
        [sys.executable, "-m", "vipd", "lab", "--help"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "--rounds" in out.stdout and out.stdout.startswith("usage: vipd lab")


def test_config_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("vip: api.example.com\nelection: {vrrp: {vrid: 51}}\n")
    out = subprocess.run(
        [sys.executable, "-m", "vipd", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("vipd: config error: vip:") and "DNS name" in line


def vipd(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vipd", *args],
        capture_output=True,
        text=True,
        check=False,
        input=stdin,
        env=env if env is not None else {**os.environ, "NODE_NAME": "n1"},
    )


GOOD = "vip: 10.0.0.100\ninterface: eth0\nelection: {vrrp: {vrid: 51, priority: 150}}\n"
BAD = (
    "vip: 10.0.0.100\n"
    "interface: eth0\n"
    "election:\n"
    "  vrrp: {vrid: 300, prioritty: 150, preempt: maybe}\n"
    "garp: {repeet: 3, interval: 9}\n"
    "helth: {}\n"
)


def test_check_offline_prints_every_error_with_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    out = vipd("check", "--offline", "-c", str(path))
    assert out.returncode == cli.EXIT_CONFIG
    lines = out.stderr.splitlines()
    errors = [line for line in lines if line.startswith("vipd: config error: ")]
    keys = [line.removeprefix("vipd: config error: ").split(":")[0] for line in errors]
    assert keys == [
        "helth",
        "election.vrrp.prioritty",
        "election.vrrp.vrid",
        "election.vrrp.preempt",
        "garp.repeet",
        "garp.interval",
    ]
    assert 'did you mean "health"?' in errors[0]
    assert 'did you mean "priority"?' in errors[1]
    assert 'did you mean "repeat"?' in errors[4]
    assert lines[-1].endswith("6 error(s)")


def test_check_offline_reads_stdin() -> None:
    out = vipd("check", "--offline", "-c", "-", stdin=BAD)
    assert out.returncode == cli.EXIT_CONFIG and "6 error(s)" in out.stderr
    out = vipd("check", "--offline", "-c", "-", stdin=GOOD)
    assert out.returncode == 0 and "config <stdin>" not in out.stderr, out.stderr


def test_manifest_reads_stdin() -> None:
    out = vipd("manifest", "pod", "-c", "-", stdin=GOOD)
    assert out.returncode == 0, out.stderr
    assert "kind: Pod" in out.stdout
    out = vipd("manifest", "config", "-c", "-", stdin=GOOD)  # the static pod's config file
    assert out.returncode == 0 and "vrid: 51" in out.stdout, out.stderr


def test_a_yaml_error_on_stdin_names_stdin() -> None:
    out = vipd("check", "--offline", "-c", "-", stdin="vip: [\n")
    assert out.returncode == cli.EXIT_CONFIG
    assert out.stderr.startswith("vipd: config error: <stdin>:")


def test_version_flag_prints_what_the_version_command_prints() -> None:
    flag, command = vipd("--version"), vipd("version")
    assert flag.returncode == 0 and command.returncode == 0, flag.stderr + command.stderr
    assert flag.stdout == command.stdout and flag.stdout.startswith("vipd ")


def test_check_offline_validates_the_file_alone(tmp_path: Path) -> None:
    # An interface this host does not have and a kubeconfig that does not exist: both would
    # fail the online check, neither is looked at offline.
    path = tmp_path / "vipd.yaml"
    path.write_text(
        "vip: 10.0.0.100\ninterface: no-such-if0\n"
        "election: {mode: lease, lease: {kubeconfig: /nonexistent/admin.conf}}\n"
    )
    out = vipd("check", "--offline", "--config", str(path))
    assert out.returncode == 0, out.stderr
    assert "valid" in out.stdout and "election lease" in out.stdout
    online = vipd("check", "--config", str(path))
    assert online.returncode == 2, online.stdout


def test_check_offline_still_refuses_a_bad_config_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("vip: 10.0.0.100\nelection: {vrrp: {vrid: 300}}\n")
    out = vipd("check", "--offline", "--config", str(path))
    assert out.returncode == 2 and out.stdout == ""
    line, summary = out.stderr.strip().splitlines()
    assert line.startswith("vipd: config error: election.vrrp.vrid:"), line
    assert summary.endswith("1 error(s)"), summary


def test_manifest_warns_about_the_local_default_image_only(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text("vip: 10.0.0.100\nelection: {vrrp: {vrid: 51}}\n")
    default = vipd("manifest", "daemonset", "--config", str(path))
    assert default.returncode == 0, default.stderr
    assert "localhost/vipd:" in default.stderr and "--image" in default.stderr
    chosen = vipd("manifest", "daemonset", "--config", str(path), "--image", "reg.example/vipd:1")
    assert chosen.returncode == 0 and chosen.stderr == "", chosen.stderr
    assert "image: reg.example/vipd:1" in chosen.stdout


# Modules a VRRP daemon has no use for on its paths, each a few hundred KiB of RSS: pathlib,
# hmac (only VRRPv2's password compares), difflib (only a config error's suggestion). None of
# them may come back by a module-level import anywhere `vipd run` loads. (urllib.parse and
# hashlib are no longer on the list: prometheus_client's package imports them, through
# urllib.request, for its push gateway and HTTP server, and any import of the library runs
# its package first.)
_NOT_IN_A_VRRP_DAEMON = ("pathlib", "hmac", "difflib")


def test_a_vrrp_daemon_does_not_import_what_it_does_not_use(tmp_path: Path) -> None:
    path = tmp_path / "vipd.yaml"
    path.write_text("node: n1\nvip: 10.0.0.100\ninterface: eth0\nelection: {vrrp: {vrid: 51}}\n")
    code = (
        "import sys\n"
        "from vipd import cli, config\n"
        f"config.load({str(path)!r})\n"
        "from vipd.host import faultsig, sdnotify\n"
        "from vipd.endpoint import server\n"
        "from vipd import agent\n"
        "from vipd.vrrp import driver\n"
        "import uvloop\n"
        f"found = sorted(set({_NOT_IN_A_VRRP_DAEMON!r}) & set(sys.modules))\n"
        "assert not found, found\n"
    )
    out = _bare_python(code)
    assert out.returncode == 0, out.stderr


def _bare_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in an interpreter started with -S: the development venv's start-up hooks
    (the editable install's finder) import pathlib themselves, and an installed vipd has
    none. The paths they would add come from PYTHONPATH instead."""
    root = str(Path(cli.__file__).resolve().parents[1])
    purelib = next(p for p in sys.path if p.endswith("site-packages"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((root, purelib)))
    return subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.parametrize("auth_pass", [None, "s3cret"])
def test_the_password_compare_is_loaded_at_start_only_where_a_password_is_set(
    auth_pass: str | None,
) -> None:
    vrrp = {"vrid": 51, "version": 2, "advert_interval": 1, "auth_pass": auth_pass}
    code = (
        "import sys\n"
        "from ipaddress import IPv4Address\n"
        "from vipd import config\n"
        "from vipd.preflight import HostLink, Preflight\n"
        "from vipd.vrrp.driver import VrrpElection\n"
        "cfg = config.parse({'node': 'n1', 'vip': '10.0.0.100', 'interface': 'eth0',\n"
        f"                   'election': {{'mode': 'vrrp', 'vrrp': {vrrp!r}}}}})\n"
        "pre = Preflight(link=HostLink('eth0', 2, True, False, '02:00:00:00:00:11'),\n"
        "                source=IPv4Address('10.0.0.11'), findings=(), stale_vip=False)\n"
        "VrrpElection(cfg, pre, claimwatch=False)\n"
        "print('hmac' in sys.modules)\n"
    )
    out = _bare_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(auth_pass is not None)


def test_check_in_the_ecmp_pool_prints_the_routes_not_vrrp(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ipaddress import ip_interface

    from vipd import config, preflight, startup

    cfg = config.parse(
        {
            "node": "cp-1",
            "vip": "10.79.0.100",
            "interface": "eth0",
            "announce": {
                "mode": "bgp",
                "bgp": {"local_asn": 65100, "peers": [{"address": "10.78.1.0", "asn": 65000}]},
            },
            "health": None,
        }
    )
    eth0 = preflight.HostLink(
        "eth0", 2, True, False, "02:00:00:00:00:02",
        (preflight.HostAddress(ip_interface("10.78.1.1/31"), 0x80),),
    )  # fmt: skip
    pre = preflight.check_host(cfg, preflight.HostView((eth0,)))
    monkeypatch.setattr(startup, "load", lambda path: (cfg, pre))
    assert cli.main(["check", "--config", "/nonexistent.yaml"]) == 0
    out = capsys.readouterr().out
    assert "VRRP" not in out, out
    assert "bgp mode: AS65100" in out
    assert "table 198" not in out, out  # the speaker announces: no kernel table involved
    assert "preflight: vipd's BGP speaker announces 10.79.0.100 to 10.78.1.0 AS65000" in out
