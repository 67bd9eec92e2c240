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
