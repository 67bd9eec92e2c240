"""Dependencies: what pyproject.toml declares is what the daemon imports, and constraints.txt
pins all of it.

- The runtime dependencies are exactly the distributions that vipd's production modules
  (everything outside ``vipd/lab``) import, each with an upper bound; scapy, imported only by
  tests, is in the ``test`` extra.
- constraints.txt (scripts/lock) pins every declared requirement, the extras' and the build
  backend's too, at a version the requirement accepts: editing one without the other fails.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements(*extras: str) -> list[Requirement]:
    project = PROJECT["project"]
    texts = list(project["dependencies"])
    for extra in extras:
        texts += project["optional-dependencies"][extra]
    return [Requirement(t) for t in texts]


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            out[canonicalize_name(name)] = version
    return out


def imported_top_levels(files: list[Path]) -> set[str]:
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def third_party_distributions(files: list[Path]) -> set[str]:
    dists = packages_distributions()
    out: set[str] = set()
    for name in imported_top_levels(files) - set(sys.stdlib_module_names) - {"vipd"}:
        assert name in dists, f"{name} is imported but no installed distribution provides it"
        out |= {canonicalize_name(d) for d in dists[name]}
    return out


def production_files() -> list[Path]:
    return [p for p in (ROOT / "vipd").rglob("*.py") if "lab" not in p.relative_to(ROOT).parts]


def test_runtime_dependencies_are_what_the_daemon_imports() -> None:
    declared = {canonicalize_name(r.name) for r in requirements()}
    assert declared == third_party_distributions(production_files())


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    for req in requirements():
        assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), str(req)


def test_scapy_is_a_test_tool_only() -> None:
    assert "scapy" not in {canonicalize_name(r.name) for r in requirements()}
    assert "scapy" in {canonicalize_name(r.name) for r in requirements("test")}
    assert "scapy" not in third_party_distributions(production_files())


def test_constraints_pin_every_declared_requirement_within_its_range() -> None:
    pinned = pins()
    declared = requirements("test", "bench")
    declared += [Requirement(t) for t in PROJECT["build-system"]["requires"]]
    for req in declared:
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req} is not in constraints.txt: run scripts/lock"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside {req}: run scripts/lock"
        )


def test_the_dependency_check_sees_a_missing_import(tmp_path: Path) -> None:
    extra = tmp_path / "uses_scapy.py"
    extra.write_text("import json\nfrom scapy.all import Ether\n")
    assert "scapy" in third_party_distributions([extra])
