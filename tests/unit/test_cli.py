"""The command line: exit codes, and what the daemon's start-up imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def vipd(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vipd", *args],
        capture_output=True,
        text=True,
        check=False,
        input=stdin,
        env={"PATH": "/usr/bin:/bin", "NODE_NAME": "n1"},
    )


def test_version_flag_and_command_agree() -> None:
    flag, command = vipd("--version"), vipd("version")
    assert flag.returncode == command.returncode == 0, flag.stderr
    assert flag.stdout == command.stdout and flag.stdout.startswith("vipd ")


GOOD = "vip: 10.0.0.100\ninterface: eth0\nelection: {vrrp: {vrid: 51, priority: 150}}\n"
BAD = (
    "vip: 10.0.0.100\n"
    "interface: eth0\n"
    "election:\n"
    "  vrrp: {vrid: 300, prioritty: 150, preempt: maybe}\n"
    "garp: {repeet: 3, interval: 9}\n"
    "helth: {}\n"
)


def test_check_offline_validates_the_file_alone(tmp_path: Path) -> None:
    # eth0 need not exist here, nor the VIP's subnet: nothing on the host is looked at.
    path = tmp_path / "good.yaml"
    path.write_text(GOOD.replace("eth0", "nosuchif0"))
    out = vipd("check", "--offline", "-c", str(path))
    assert out.returncode == 0, out.stderr
    assert "valid (offline" in out.stdout


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
    assert "kind: Pod" in out.stdout and "vrid: 51" in out.stdout


def test_a_yaml_error_on_stdin_names_stdin() -> None:
    out = vipd("check", "--offline", "-c", "-", stdin="vip: [\n")
    assert out.returncode == cli.EXIT_CONFIG
    assert out.stderr.startswith("vipd: config error: <stdin>:")
