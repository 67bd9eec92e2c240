"""The wheel as a user installs it: built by scripts/build, installed into a clean virtualenv
with the pinned dependencies (``pip install -c constraints.txt``), then run.

What it checks: ``vipd --version`` prints the package's version; ``vipd check --offline``
passes the example config and refuses a broken one with exit 2; the virtualenv holds exactly
the runtime dependencies at the versions in constraints.txt (scapy, a test tool, is not
among them); the sdist carries the licence, the changelog and the constraints. The wheel (and
the sdist) carry the agent only: no ``vipd/lab``, and ``vipd lab`` from the installed wheel
says that the lab runs from a clone of the repository, with exit code 2.

It needs the package index (or pip's cache) for the dependencies; without it the test skips
with the reason, and fails under CI=true. About 30 s on the 2-core machine with a warm cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.prereq import missing
from vipd import __version__

ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            out[name] = version
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [str(ROOT / "scripts" / "build")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "OUTDIR": str(out)},
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    (wheel,) = dist.glob("vipd-*.whl")
    pip = subprocess.run(
        [str(where / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         "-c", str(ROOT / "constraints.txt"), str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if pip.returncode != 0:
        if "Could not find a version" in pip.stderr or "NewConnectionError" in pip.stderr:
            missing(f"needs the package index for vipd's dependencies: {pip.stderr[-300:]}")
        raise AssertionError(pip.stderr)
    yield where


def vipd(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "vipd"), *args], capture_output=True, text=True, check=False, cwd="/"
    )


def test_built_wheel_and_sdist(dist: Path) -> None:
    names = sorted(p.name for p in dist.iterdir())
    assert names == [f"vipd-{__version__}-py3-none-any.whl", f"vipd-{__version__}.tar.gz"]
    with tarfile.open(dist / f"vipd-{__version__}.tar.gz") as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"LICENSE", "CHANGELOG.md", "constraints.txt", "pyproject.toml"} <= members
    assert "vipd/cli.py" in members
    assert sorted(m for m in members if m.startswith("vipd/lab")) == []


def test_the_wheel_carries_the_agent_only(dist: Path) -> None:
    """No ``vipd/lab`` (the lab, its test doubles, the Kubernetes beds) in the wheel."""
    (wheel,) = dist.glob("vipd-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    assert {"vipd/cli.py", "vipd/agent.py", "vipd/vrrp/driver/__init__.py"} <= set(names)
    assert sorted(n for n in names if n.startswith("vipd/lab")) == []


def test_lab_from_the_installed_wheel_says_where_it_runs(venv: Path) -> None:
    out = vipd(venv, "lab", "--nodes", "2")
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "the lab runs from a clone of the vipd repository" in out.stderr, out.stderr
    assert out.stdout == ""


def test_version_from_the_installed_wheel(venv: Path) -> None:
    out = vipd(venv, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"vipd {__version__}\n"
    assert vipd(venv, "version").stdout == out.stdout


def test_offline_check_of_the_example_config(venv: Path, tmp_path: Path) -> None:
    out = vipd(venv, "check", "--offline", "--config", str(ROOT / "examples" / "vipd.yaml"))
    assert out.returncode == 0, out.stderr
    assert "valid" in out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("vip: api.example.com\n")
    out = vipd(venv, "check", "--offline", "--config", str(bad))
    assert out.returncode == 2 and out.stderr.startswith("vipd: config error: vip:"), out.stderr


def test_venv_has_the_runtime_dependencies_at_the_pinned_versions(venv: Path) -> None:
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    installed = {
        p["name"].lower().replace("_", "-"): p["version"]
        for p in json.loads(listed)
        if p["name"] not in ("pip", "setuptools", "vipd")
    }
    pinned = pins()
    assert "scapy" not in installed and "pytest" not in installed, sorted(installed)
    assert {"pyroute2", "pyyaml", "prometheus-client", "uvloop", "kubernetes"} <= set(installed)
    wrong = {n: v for n, v in installed.items() if pinned.get(n) != v}
    assert not wrong, f"installed versions not in constraints.txt: {wrong}"
