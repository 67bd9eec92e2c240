"""The pure core imports nothing that does I/O or reads a clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "vipd"
PURE = [
    "vrrp/packet.py",
    "vrrp/state.py",
    "config.py",
    "host/neighbor.py",
    "host/netlink.py",
    "lab/analysis.py",
    "lease/logic.py",
    "deploy/manifest.py",
    "ipvs/plan.py",
    "health/tracker.py",
    "health/gate.py",
    "health/http.py",
    "lab/timeline.py",
    "host/conflict.py",
    "host/vmac.py",
]
FORBIDDEN = {"asyncio", "socket", "pyroute2", "time", "select", "selectors", "subprocess", "os"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", PURE)
def test_core_module_is_pure(module: str) -> None:
    bad = imported_modules(ROOT / module) & FORBIDDEN
    assert not bad, f"{module} imports {sorted(bad)}"
