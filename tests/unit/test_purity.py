"""The pure core imports nothing that does I/O, reads a clock, draws random numbers, runs
threads, exports metrics or talks to Kubernetes, directly or through another vipd module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "vipd"
PURE = [
    "vrrp/packet.py",
    "vrrp/auth.py",
    "vrrp/state.py",
    "bfd/packet.py",
    "bfd/session.py",
    "vrrp/transitions.py",
    "vrrp/timing.py",
    "vrrp/params.py",
    "vrrp/actions.py",
    "vrrp/variables.py",
    "vrrp/backup.py",
    "vrrp/active.py",
    "config/__init__.py",
    "config/document.py",
    "config/election.py",
    "config/announce.py",
    "config/bfd.py",
    "config/bgp.py",
    "config/auth_hmac.py",
    "config/error.py",
    "config/kubeapi.py",
    "config/membership.py",
    "config/rules.py",
    "config/schema.py",
    "config/sections.py",
    "config/source.py",
    "vrrp/claims.py",
    "vrrp/ratelimit.py",
    "host/neighbor.py",
    "host/netlink.py",
    "lab/analysis.py",
    "lease/model.py",
    "lease/state.py",
    "lease/unreachable.py",
    "lease/giveway.py",
    "lease/foreign.py",
    "lease/logic.py",
    "deploy/manifest/__init__.py",
    "deploy/manifest/model.py",
    "deploy/manifest/pods.py",
    "deploy/manifest/rbac.py",
    "ipvs/plan.py",
    "membership/policy.py",
    "health/tracker.py",
    "health/http.py",
    "lab/timeline.py",
    "host/conflict.py",
    "host/vmac.py",
    "election.py",
    "reload.py",
    "notify.py",
    "track.py",
    "script_security.py",
]
FORBIDDEN = {
    "asyncio",
    "socket",
    "pyroute2",
    "time",
    "select",
    "selectors",
    "subprocess",
    "os",
    "prometheus_client",  # the metrics (vipd.metrics): the shell counts what the core returns
    "random",
    "threading",
    "kubernetes",
}


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


@pytest.mark.parametrize("module", PURE)
def test_core_module_imports_only_the_core(module: str) -> None:
    """A pure module's vipd imports are pure too (``vipd`` itself only carries the version),
    so the forbidden modules cannot come in through a shell module either."""
    from tests.unit.test_imports import GRAPH

    def dotted(path: str) -> str:
        return "vipd." + path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")

    pure = {dotted(m) for m in PURE}
    assert GRAPH[dotted(module)] - pure - {"vipd"} == set()


def test_every_module_of_a_pure_package_is_listed() -> None:
    """A module added to a pure package (vipd/config/) is pure too, and checked as such."""
    for package in {m.rpartition("/")[0] for m in PURE if m.endswith("/__init__.py")}:
        for path in sorted((ROOT / package).glob("*.py")):
            assert f"{package}/{path.name}" in PURE, path
