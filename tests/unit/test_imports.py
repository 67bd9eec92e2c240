"""The import graph of vipd/: no cycle anywhere, imports only point down the floors (see
LAYERS below and docs/design/architecture.md), and the lab stays out of the agent.

Every import counts, the ones inside functions too (a lazy import is still a dependency: it
only moves the failure to the moment it runs). ``from vipd.x import y`` is an edge to
``vipd.x.y`` when that is a module, else to ``vipd.x``; ``if TYPE_CHECKING:`` imports are left
out, since they never run.

The floors
    vipd's modules sit on six floors, lowest first; a module may import from its own floor and
    the floors below it, never from one above ("up": to a floor later in LAYERS). Imports
    inside functions count; ``if TYPE_CHECKING:`` imports do not (they never run). Imports
    within one floor are allowed (test_no_import_cycle_in_vipd keeps them acyclic).

      core     the rules and definitions every part shares: the config, the pure cores
               (VRRP codec and state machine, the Lease decision, the IPVS plan, the health
               tracker and HTTP codec, track, reload, notify, the manifests), the election
               port, logs, metrics and their exposition, the loop helper (aio)
      host     vipd.host: the kernel's links, addresses, frames, signals and scheduler
      drivers  the parts that each run one job against the outside world: the election
               backends (vrrp, lease), the controller, IPVS, the health checker, tracking,
               hooks, the HTTP endpoint, kube, preflight, adopt
      agent    the shell that wires them together, its parts and its start-up: agent,
               instance, lifecycle, linkfollow, checkfeed, statusdoc, livereload, signals,
               daemon, startup
      cli      the command line
      lab      vipd.lab, the test bed, above everything (and out of the wheel)

    A module's floor is that of the most specific entry naming it or a package above it
    (``vipd`` itself names only the package's own __init__).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "vipd"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            for inner in node.body:
                skip.update(id(n) for n in ast.walk(inner))
    return skip


def _resolve(name: str) -> str | None:
    """The vipd module ``name`` names (itself, or the package it is an attribute of)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str) -> set[str]:
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] or [base]
        else:
            continue
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != name:
                out.add(resolved)
    return out


GRAPH = {name: imports_of(name) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first node repeated at the end), or None."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = grey
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt, black) == grey:
                return [*stack[stack.index(nxt) :], nxt]
            if colour.get(nxt) == white and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        colour[node] = black
        return None

    for node in sorted(graph):
        if colour[node] == white and (found := visit(node)) is not None:
            return found
    return None


def test_the_graph_is_read() -> None:
    # The finder must see the edges it is meant to judge (a broken parser finds no cycle).
    assert "vipd.controller" in GRAPH["vipd.agent"]
    assert "vipd.lease.driver" in GRAPH["vipd.agent"]  # an import inside a function
    assert "vipd.vrrp.state" in GRAPH["vipd.vrrp.driver.election"]


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_vipd() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, " -> ".join(cycle or [])


def test_nothing_outside_the_lab_imports_the_lab() -> None:
    """The container image leaves vipd/lab out: the agent must never need it."""
    offenders = {
        name: sorted(t for t in targets if t == "vipd.lab" or t.startswith("vipd.lab."))
        for name, targets in GRAPH.items()
        if not (name == "vipd.lab" or name.startswith("vipd.lab."))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


# -- the layering (the floors: see the module docstring) ------------------------------------

LAYERS = ("core", "host", "drivers", "agent", "cli", "lab")

FLOORS = {
    "vipd": "core",
    "vipd.aio": "core",
    "vipd.config": "core",
    "vipd.election": "core",
    "vipd.log": "core",
    "vipd.metrics": "core",
    "vipd.metrics_registry": "core",
    "vipd.metrics_agent": "core",
    "vipd.metrics_drivers": "core",
    "vipd.notify": "core",
    "vipd.reload": "core",
    "vipd.track": "core",
    "vipd.script_security": "core",
    "vipd.sandbox": "host",
    "vipd.health": "core",
    "vipd.health.checker": "drivers",
    "vipd.vrrp": "drivers",
    "vipd.vrrp.packet": "core",
    "vipd.vrrp.state": "core",
    "vipd.vrrp.transitions": "core",
    "vipd.vrrp.timing": "core",
    "vipd.vrrp.params": "core",
    "vipd.vrrp.actions": "core",
    "vipd.vrrp.variables": "core",
    "vipd.vrrp.backup": "core",
    "vipd.vrrp.active": "core",
    "vipd.vrrp.claims": "core",
    "vipd.vrrp.ratelimit": "core",
    "vipd.vrrp.auth": "core",
    "vipd.lease": "drivers",
    "vipd.lease.logic": "core",
    "vipd.lease.model": "core",
    "vipd.lease.state": "core",
    "vipd.lease.unreachable": "core",
    "vipd.lease.giveway": "core",
    "vipd.lease.foreign": "core",
    "vipd.ipvs": "drivers",
    "vipd.ipvs.plan": "core",
    "vipd.deploy": "drivers",
    "vipd.deploy.manifest": "core",
    "vipd.host": "host",
    "vipd.controller": "drivers",
    "vipd.endpoint": "drivers",
    "vipd.hooks": "drivers",
    "vipd.kube": "drivers",
    "vipd.membership": "drivers",
    "vipd.membership.policy": "core",
    "vipd.preflight": "drivers",
    "vipd.tracking": "drivers",
    "vipd.agent": "agent",
    "vipd.checkfeed": "agent",
    "vipd.daemon": "agent",
    "vipd.instance": "agent",
    "vipd.lifecycle": "agent",
    "vipd.linkfollow": "agent",
    "vipd.livereload": "agent",
    "vipd.signals": "agent",
    "vipd.startup": "agent",
    "vipd.statusdoc": "agent",
    "vipd.importers": "core",
    "vipd.importers.command": "drivers",
    "vipd.routed": "core",
    "vipd.routed.actuator": "host",
    "vipd.routed.backend": "drivers",
    "vipd.routed.leader": "drivers",
    "vipd.bfd": "drivers",
    "vipd.bfd.packet": "core",
    "vipd.bfd.session": "core",
    "vipd.routed.bgp": "drivers",
    "vipd.routed.bgp_bfd": "drivers",
    "vipd.routed.exabgp": "host",
    "vipd.routed.exabgp_relay": "host",
    "vipd.routed.bgp_password": "host",
    "vipd.cli": "cli",
    "vipd.__main__": "cli",
    "vipd.lab": "lab",
}

# Known upward imports (none left): an entry here is an exception with a comment saying why.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def floor_of(name: str) -> str | None:
    """The floor of module ``name`` (None: no entry names it)."""
    probe = name
    while probe and probe != "vipd":
        if probe in FLOORS:
            return FLOORS[probe]
        probe = probe.rpartition(".")[0]
    return FLOORS.get(name)


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every import edge (importer, imported) that goes to a higher floor."""
    out: set[tuple[str, str]] = set()
    for name, targets in graph.items():
        here = LAYERS.index(floor_of(name) or "lab")
        for target in targets:
            if LAYERS.index(floor_of(target) or "lab") > here:
                out.add((name, target))
    return out


def test_every_module_has_a_floor() -> None:
    assert set(FLOORS.values()) <= set(LAYERS)
    assert sorted(name for name in MODULES if floor_of(name) is None) == []


def test_the_floors_are_read() -> None:
    # A placement that is wrong (everything on one floor) would let every import through.
    assert floor_of("vipd") == "core" and floor_of("vipd.vrrp.state") == "core"
    assert floor_of("vipd.host.linkwatch") == "host"
    assert floor_of("vipd.vrrp.driver") == "drivers"
    assert floor_of("vipd.agent") == "agent" and floor_of("vipd.cli") == "cli"
    assert floor_of("vipd.lab.runner") == "lab"
    assert upward({"vipd.host.linkwatch": {"vipd.preflight", "vipd.host.netlink"}}) == {
        ("vipd.host.linkwatch", "vipd.preflight")
    }
    assert upward({"vipd.config": {"vipd.cli"}, "vipd.cli": {"vipd.config"}}) == {
        ("vipd.config", "vipd.cli")
    }


def test_imports_only_point_down() -> None:
    found = upward(GRAPH)
    assert sorted(found - KNOWN_UPWARD) == []


def test_the_known_upward_imports_are_still_there() -> None:
    """An exception that no longer happens goes from KNOWN_UPWARD (so it cannot come back)."""
    assert sorted(KNOWN_UPWARD - upward(GRAPH)) == []


def test_the_arp_probe_and_watch_import_only_the_host_layer() -> None:
    """vipd.host.arpwatch is the wire: what an answer means is the caller's (the VRRP start-up
    probe, vipd.vrrp.startprobe; the claim policy, vipd.vrrp.claims), so it imports nothing
    above vipd.host (no election backend, no preflight, no config)."""
    assert GRAPH["vipd.host.arpwatch"], "no edges read"
    assert {m for m in GRAPH["vipd.host.arpwatch"] if not m.startswith("vipd.host.")} == set()
    assert "vipd.host.arpwatch" in GRAPH["vipd.vrrp.startprobe"]
