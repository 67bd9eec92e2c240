"""Footprint benchmark: vipd's steady CPU, memory and start-up against keepalived, same run.

Run as root from the repository root::

    .venv/bin/python bench/footprint.py [--adverts 0.1 0.01] [--blocks 2] [--seconds 20]
                                        [--restarts 5] [--out bench/results]

What it does: for each advert interval, a 3-node lab (VRRPv3 multicast, priorities
200/150/100, ``vipd.lab``) runs one daemon kind on every node, in blocks interleaved
vipd, keepalived, keepalived, vipd, … so drift in this shared machine's load hits both
alike. In each block, once the cluster has converged and settled:

- **CPU**: time on CPU (ns, ``/proc/PID/task/*/schedstat``: every thread of the daemon's
  whole process tree; keepalived runs a parent and a VRRP child, vipd a loop, an HTTP thread
  and on a master the advert pacer; before 2026-12-03 only each process's main thread was
  read, which was all of vipd's work then) over a fixed ``--seconds`` window, in % of one
  core, per node (the master sends the adverts, the backups receive them);
- **wake-ups**: the tree's context switches (``/proc/PID/task/*/status``, voluntary and
  involuntary, every thread) over the same window, a second: where the CPU goes in a daemon
  that does little per wake-up (a thread that ends in the window takes its counts with it;
  in the steady state none does);
- **memory**: VmRSS, and from ``/proc/PID/smaps_rollup`` PSS and USS (private clean + dirty),
  summed over the tree, the median of one sample a second over the same window;
- **start to Backup**: the lowest-priority node is stopped (SIGTERM) and started again
  ``--restarts`` times, with the master up (the usual restart: a node rejoins a running
  cluster); the time from the process being spawned to the daemon's own first Backup log
  line (vipd ``became backup``, keepalived ``Entering BACKUP STATE``), read by tailing the
  log every millisecond, so each figure is an upper bound by about that much.

vipd runs from a snapshot of the working tree (an edit during the run cannot reach some
daemons and not others), or of ``--vipd-tree DIR``'s ``vipd/`` (an export of an older commit,
to compare before and after on the same machine), byte-compiled first as ``pip install``
does: without ``.pyc`` files every start would compile vipd again (slower, and the
compiler's peak stays in the RSS). The bench and the daemons run on a venv laid out as an
installed vipd's (``installed_python``): the development venv's start-up hooks are left out.

It writes ``footprint.json`` (every sample) and ``footprint.md`` (medians and vipd/keepalived
ratios) into ``--out``. No thresholds: the numbers go to docs/benchmarks.md.

What it must not do: touch anything outside its labs' namespaces, or judge (a test does that).
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT_ENV = "VIPD_FOOTPRINT_SNAPSHOT"
if os.environ.get(SNAPSHOT_ENV) is None:
    sys.path.insert(0, str(REPO))

from vipd.lab.daemons import (  # noqa: E402
    Daemon,
    Fleet,
    VipdDaemon,
    VrrpSpec,
    descendants,
    make_fleet,
)
from vipd.lab.topology import Lab, LabError, new_prefix, vip_for  # noqa: E402

# "vipd-base": the vipd of --base DIR (another checkout's vipd/), run in the same blocks.
Kind = str
KINDS: tuple[Kind, ...] = ("vipd", "keepalived")
SETTLE = 3.0  # s after convergence before the window opens (start-up work is over)
CONVERGE_TIMEOUT = 20.0
BACKUP_TIMEOUT = 10.0
STOPPED_TIMEOUT = 5.0


def _log(msg: str) -> None:
    print(f"[footprint {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- /proc ------------------------------------------------------------------------------------


def run_ns(pid: int) -> int | None:
    """Time on CPU in ns of all of a process's live threads (each ``/proc/PID/task/TID/
    schedstat``: ``/proc/PID/schedstat`` is the main thread's alone, which misses vipd's
    advert pacer); None if it is gone."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def switches(pid: int) -> int | None:
    """Context switches of all of a process's threads (voluntary + involuntary): how often
    it went to sleep or was put off the CPU, so about how often it was woken; None if gone."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                    total += int(line.split()[1])
    except (OSError, ValueError):
        return None
    return total


def memory_kib(pid: int) -> dict[str, int] | None:
    """RSS, PSS and USS (private clean + private dirty) of one process, in KiB."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
            fields[parts[0][:-1]] = int(parts[1])
    return {
        "rss": fields.get("Rss", 0),
        "pss": fields.get("Pss", 0),
        "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0),
    }


def tree(pid: int) -> list[int]:
    return [pid, *descendants(pid)]


# -- one block ----------------------------------------------------------------------------------


def wait_for(cond: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def converge(lab: Lab, fleet: Fleet, vip: str) -> str:
    top = fleet.top()
    if not wait_for(lambda: lab.holders(vip) == [top], CONVERGE_TIMEOUT):
        raise LabError(f"{fleet.kind}: not converged on {top} (holders {lab.holders(vip)})")
    return top


def tx_packets(lab: Lab, node: str, ifname: str) -> int:
    """Frames the node has sent on its lab link: in the steady state, its adverts."""
    ns = lab.node(node).ns
    out = lab.exec(ns, ["cat", f"/sys/class/net/{ifname}/statistics/tx_packets"]).stdout
    return int(out.strip())


def sample(lab: Lab, fleet: Fleet, top: str, seconds: float) -> dict[str, Any]:
    """CPU over ``seconds`` and memory once a second, per node (each daemon's tree); the
    master's adverts in the same window (its link's sent frames), so its CPU can also be
    given per advert: the two daemons' timers do not keep exactly the same rate."""
    trees: dict[str, list[int]] = {}
    for name, daemon in fleet.daemons.items():
        if daemon.pid is None or not daemon.running():
            raise LabError(f"{fleet.kind} on {name} is not running for the sample")
        trees[name] = tree(daemon.pid)
    tx0 = tx_packets(lab, top, fleet.spec.interface)
    ns0 = {n: [run_ns(p) for p in pids] for n, pids in trees.items()}
    sw0 = {n: [switches(p) for p in pids] for n, pids in trees.items()}
    t0 = time.monotonic()
    mem: dict[str, list[dict[str, int]]] = {n: [] for n in trees}
    end = t0 + seconds
    while True:
        for n, pids in trees.items():
            per = [m for p in pids if (m := memory_kib(p)) is not None]
            mem[n].append({k: sum(m[k] for m in per) for k in ("rss", "pss", "uss")})
        now = time.monotonic()
        if now >= end:
            break
        time.sleep(min(1.0, end - now))
    ns1 = {n: [run_ns(p) for p in pids] for n, pids in trees.items()}
    sw1 = {n: [switches(p) for p in pids] for n, pids in trees.items()}
    elapsed = time.monotonic() - t0
    sent = tx_packets(lab, top, fleet.spec.interface) - tx0
    nodes: dict[str, Any] = {}
    for n, pids in trees.items():
        used = sum(
            b - a for a, b in zip(ns0[n], ns1[n], strict=True) if a is not None and b is not None
        )
        woke = sum(
            b - a for a, b in zip(sw0[n], sw1[n], strict=True) if a is not None and b is not None
        )
        nodes[n] = {
            "role": "master" if n == top else "backup",
            "processes": len(pids),
            "run_ns": used,
            "cpu_pct": round(100.0 * used / 1e9 / elapsed, 4),
            "switches_per_s": round(woke / elapsed, 2),
            **{
                f"{k}_mib": round(statistics.median(s[k] for s in mem[n]) / 1024, 2)
                for k in ("rss", "pss", "uss")
            },
            "samples": len(mem[n]),
        }
        if n == top:
            nodes[n]["sent"] = sent
            nodes[n]["us_per_advert"] = round(used / 1e3 / sent, 2) if sent > 0 else None
    return {"seconds": round(elapsed, 3), "nodes": nodes}


def first_backup(daemon: Daemon) -> bool:
    return daemon.state() == "BACKUP"


def restart_to_backup(daemon: Daemon, restarts: int) -> list[float]:
    """Stop and start ``daemon`` ``restarts`` times: seconds from spawn to its Backup line."""
    out: list[float] = []
    for _ in range(restarts):
        daemon.stop(signal.SIGTERM, timeout=STOPPED_TIMEOUT)
        time.sleep(0.3)  # the port and sockets of the old process are gone
        t0 = time.monotonic()
        daemon.start()
        while not first_backup(daemon):
            if time.monotonic() - t0 > BACKUP_TIMEOUT or not daemon.running():
                raise LabError(f"{daemon.kind} on {daemon.node.name} did not reach Backup")
            time.sleep(0.001)
        out.append(round(time.monotonic() - t0, 4))
        time.sleep(1.0)  # rejoined: the next stop is of a settled process
    return out


class BaseVipd(VipdDaemon):
    """vipd from another tree (``--base``): its snapshot first on the daemon's path."""

    root = ""

    def _env(self) -> dict[str, str]:
        env = super()._env()
        env["PYTHONPATH"] = self.root + os.pathsep + env.get("PYTHONPATH", "")
        return env


def make_kind_fleet(kind: Kind, lab: Lab, spec: VrrpSpec) -> Fleet:
    if kind != "vipd-base":
        return make_fleet("vipd" if kind == "vipd" else "keepalived", lab, spec)
    return Fleet("vipd", spec, {n.name: BaseVipd(lab, n, spec, lab.nodes) for n in lab.nodes})


def run_block(
    kind: Kind, advert: float, block: int, seconds: float, restarts: int, tmp: Path
) -> dict[str, Any]:
    prefix = new_prefix()
    workdir = tmp / f"{prefix}-{kind}-{advert:g}-{block}"
    lab = Lab(nodes=3, prefix=prefix, workdir=workdir)
    spec = VrrpSpec(vip=vip_for(4), advert_interval=advert, version=3)
    out: dict[str, Any] = {"daemon": kind, "advert": advert, "block": block, "error": None}
    fleet: Fleet | None = None
    try:
        lab.build()
        fleet = make_kind_fleet(kind, lab, spec)
        fleet.start_all()
        top = converge(lab, fleet, spec.vip)
        time.sleep(SETTLE)
        out["steady"] = sample(lab, fleet, top, seconds)
        last = min(fleet.daemons, key=lambda n: fleet.daemons[n].priority)
        out["start_to_backup_s"] = restart_to_backup(fleet.daemons[last], restarts)
        out["converged_after"] = lab.holders(spec.vip) == [top]
    except LabError as exc:
        out["error"] = str(exc)
        _log(f"{kind} {advert:g} s block {block}: {exc}; logs in {workdir}")
    finally:
        if fleet is not None:
            fleet.stop_all()
        lab.teardown()
    if out["error"] is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def schedule(
    adverts: list[float], blocks: int, kinds: tuple[Kind, ...] = KINDS
) -> Iterator[tuple[Kind, float, int]]:
    """vipd, keepalived, keepalived, vipd, … per interval: load drift hits both alike."""
    for advert in adverts:
        for b in range(blocks):
            order = kinds if b % 2 == 0 else tuple(reversed(kinds))
            for kind in order:
                yield kind, advert, b


# -- summary ----------------------------------------------------------------------------------


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


RATIO_KEYS = (
    "master_cpu_pct",
    "master_us_per_advert",
    "backup_cpu_pct",
    "node_cpu_pct",
    "rss_mib",
    "pss_mib",
)


def summarise(
    blocks: list[dict[str, Any]], adverts: list[float], kinds: tuple[Kind, ...] = KINDS
) -> list[dict[str, Any]]:
    rows = []
    for advert in adverts:
        row: dict[str, Any] = {"advert": advert}
        for kind in kinds:
            ok = [
                b
                for b in blocks
                if b["daemon"] == kind and b["advert"] == advert and not b["error"]
            ]
            nodes = [n for b in ok for n in b["steady"]["nodes"].values()]
            master = [n for n in nodes if n["role"] == "master"]
            backup = [n for n in nodes if n["role"] == "backup"]
            row[kind] = {
                "blocks": len(ok),
                "master_cpu_pct": _median([n["cpu_pct"] for n in master]),
                "master_us_per_advert": _median(
                    [n["us_per_advert"] for n in master if n.get("us_per_advert") is not None]
                ),
                "adverts_per_s": _median(
                    [
                        n["sent"] / b["steady"]["seconds"]
                        for b in ok
                        for n in b["steady"]["nodes"].values()
                        if n["role"] == "master" and "sent" in n
                    ]
                ),
                "backup_cpu_pct": _median([n["cpu_pct"] for n in backup]),
                "master_switches_per_s": _median(
                    [n["switches_per_s"] for n in master if "switches_per_s" in n]
                ),
                "backup_switches_per_s": _median(
                    [n["switches_per_s"] for n in backup if "switches_per_s" in n]
                ),
                "node_cpu_pct": _median([n["cpu_pct"] for n in nodes]),
                "rss_mib": _median([n["rss_mib"] for n in nodes]),
                "pss_mib": _median([n["pss_mib"] for n in nodes]),
                "uss_mib": _median([n["uss_mib"] for n in nodes]),
                "start_to_backup_s": _median([s for b in ok for s in b["start_to_backup_s"]]),
                "start_to_backup_max_s": max(
                    (s for b in ok for s in b["start_to_backup_s"]), default=None
                ),
                "processes": max((n["processes"] for n in nodes), default=None),
            }
        v, k = row["vipd"], row["keepalived"]
        row["ratio"] = {key: _ratio(v[key], k[key]) for key in RATIO_KEYS}
        if "vipd-base" in row:
            b = row["vipd-base"]
            row["ratio_base"] = {key: _ratio(b[key], k[key]) for key in RATIO_KEYS}
        rows.append(row)
    return rows


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def render(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = [
        "### Footprint: vipd vs keepalived",
        "",
        f"`{env['command']}` on {env['date']} ({env['cpus']}× {env['cpu_model']}, Linux "
        f"{env['kernel']}, Python {env['python']}, {env['keepalived']}; vipd "
        f"{env['vipd_commit'][:12] if env['vipd_commit'] else '?'}"
        f"{' (dirty)' if env['vipd_tree_dirty'] else ''}; load {' '.join(env['loadavg_start'])} "
        f"at the start). 3-node lab, VRRPv3 multicast, metrics endpoint on (vipd's default "
        f"0.0.0.0:2112), no health checks; {doc['blocks']} blocks per daemon and interval "
        f"(vipd, keepalived, keepalived, vipd), {doc['seconds']:g} s CPU window, "
        f"{doc['restarts']} restarts of the lowest-priority node per block. Medians over "
        "nodes and blocks; CPU in % of one core (schedstat, every thread of the daemon's "
        "process tree); "
        "switches: the tree's context switches a second (every thread's, voluntary and not: "
        "about its wake-ups); memory summed over the tree.",
        "",
        "| advert | daemon | master CPU % | master µs per advert (adverts/s) | backup CPU % "
        "| switches/s master, backup | RSS MiB | PSS MiB | USS MiB | start → Backup s (max) "
        "| processes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    kinds = tuple(doc.get("kinds", KINDS))
    for row in doc["summary"]:
        for kind in kinds:
            d = row[kind]
            lines.append(
                f"| {row['advert']:g} s | {kind} | {_f(d['master_cpu_pct'], 3)} "
                f"| {_f(d.get('master_us_per_advert'), 1)} ({_f(d.get('adverts_per_s'), 1)}) "
                f"| {_f(d['backup_cpu_pct'], 3)} "
                f"| {_f(d.get('master_switches_per_s'), 1)}, "
                f"{_f(d.get('backup_switches_per_s'), 1)} "
                f"| {_f(d['rss_mib'], 1)} | {_f(d['pss_mib'], 1)} "
                f"| {_f(d['uss_mib'], 1)} | {_f(d['start_to_backup_s'], 3)} "
                f"({_f(d['start_to_backup_max_s'], 3)}) | {d['processes']} |"
            )
    lines += [
        "",
        "| advert | vipd/keepalived master CPU | per advert | backup CPU | RSS | PSS |",
        "|---|---|---|---|---|---|",
    ]
    for row in doc["summary"]:
        for label, r in (("vipd", row["ratio"]), ("vipd-base", row.get("ratio_base"))):
            if r is None:
                continue
            lines.append(
                f"| {row['advert']:g} s{' (base)' if label == 'vipd-base' else ''} "
                f"| {_f(r['master_cpu_pct'])} | {_f(r.get('master_us_per_advert'))} "
                f"| {_f(r['backup_cpu_pct'])} "
                f"| {_f(r['rss_mib'])} | {_f(r['pss_mib'])} |"
            )
    errors = [b for b in doc["runs"] if b["error"]]
    if errors:
        lines += ["", f"{len(errors)} block(s) failed: " + "; ".join(b["error"] for b in errors)]
    return "\n".join(lines) + "\n"


# -- main -------------------------------------------------------------------------------------


def _first_line(argv: list[str]) -> str | None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (p.stdout or p.stderr).strip()
    return text.splitlines()[0] if text else None


def environment(command: str) -> dict[str, Any]:
    cpu = None
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "vipd"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "kernel": platform.release(),
        "cpu_model": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "keepalived": _first_line(["keepalived", "--version"]),
        "vipd_commit": _first_line(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        "vipd_tree_dirty": bool(dirty),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }


def snapshot(tree: Path, root: Path) -> None:
    """Copy ``tree``/vipd to ``root``/vipd and byte-compile it."""
    shutil.copytree(
        tree / "vipd", root / "vipd", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    # As pip does on install: the daemons load .pyc files instead of compiling at each start.
    if not compileall.compile_dir(str(root / "vipd"), quiet=1):
        raise SystemExit(f"footprint: byte-compiling {root} failed")


def runtime_closure() -> set[str]:
    """Normalised names of the distributions an installed vipd has: ``[project]
    dependencies`` of pyproject.toml (the image installs exactly those, ``Containerfile``)
    and theirs, recursively, without extras, markers evaluated here."""
    import importlib.metadata as md
    import tomllib

    from packaging.requirements import Requirement

    def norm(name: str) -> str:
        return name.lower().replace("-", "_").replace(".", "_")

    todo = list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    seen: set[str] = set()
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = norm(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(md.requires(req.name) or [])
        except md.PackageNotFoundError:
            continue  # an optional platform dependency that is not installed here
    return seen


def runtime_entries(here: Path) -> set[str]:
    """The top-level names in ``here`` (site-packages) that the distributions of
    ``runtime_closure`` installed: their packages, modules, extensions and metadata."""
    import importlib.metadata as md

    wanted = runtime_closure()
    names: set[str] = set()
    for dist in md.distributions(path=[str(here)]):
        name = (dist.metadata["Name"] or "").lower().replace("-", "_").replace(".", "_")
        if name not in wanted:
            continue
        for f in dist.files or []:
            top = f.parts[0]
            if top not in ("..", "", "__pycache__") and not top.endswith(".pth"):
                names.add(top)
    return names


def installed_python(tmp: Path) -> Path:
    """A venv laid out as vipd is installed (the image: a venv with vipd's runtime
    dependencies only, no start-up hooks): those distributions of this venv linked in
    (``runtime_entries``), nothing else. The development venv has more that vipd would load
    if it were there: the editable install's import hook runs at every interpreter start
    (pathlib, re, urllib.parse: ~30 ms and ~1 MiB), and ``kubernetes.dynamic`` imports the
    test-only ``kubernetes_validate`` when it is installed (jsonschema with it: ~4 MiB)."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    here = Path(sysconfig.get_paths()["purelib"])
    there = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    for name in sorted(runtime_entries(here)):
        if (here / name).exists():
            (there / name).symlink_to(here / name)
    return venv / "bin" / "python"


def reexec_from_snapshot(tmp: Path, tree: Path, base: Path | None) -> NoReturn:
    """Snapshot ``tree`` (and ``base``) under ``tmp`` and re-run this script on the copy,
    with the interpreter of ``installed_python``."""
    root = tmp / "src"
    snapshot(tree, root)
    if base is not None:
        snapshot(base, tmp / "base")
    python = str(installed_python(tmp))
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(root) + (os.pathsep + old if old else "")
    env[SNAPSHOT_ENV] = str(root)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(python, [python, *sys.argv], env)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--adverts", type=float, nargs="+", default=[0.1, 0.01])
    ap.add_argument("--blocks", type=int, default=2, help="blocks per daemon and interval (2)")
    ap.add_argument("--seconds", type=float, default=20.0, help="CPU window per block (20)")
    ap.add_argument("--restarts", type=int, default=5, help="restarts per block (5)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default="footprint", help="output file stem (footprint)")
    ap.add_argument(
        "--vipd-tree", type=Path, default=REPO, help="the tree whose vipd/ runs (this one)"
    )
    ap.add_argument(
        "--base",
        type=Path,
        help="another tree whose vipd/ runs too, as vipd-base, in the same blocks",
    )
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("footprint: run as root (network namespaces)", file=sys.stderr)
        return 2
    if shutil.which("keepalived") is None:
        print("footprint: keepalived is not installed (scripts/setup)", file=sys.stderr)
        return 2
    snapshot_dir = os.environ.get(SNAPSHOT_ENV)
    if snapshot_dir is None:
        reexec_from_snapshot(
            Path(tempfile.mkdtemp(prefix="vipd-footprint-")), args.vipd_tree, args.base
        )
    command = "bench/footprint.py " + " ".join(sys.argv[1:])
    env = environment(command.strip())
    env["vipd_tree"] = str(args.vipd_tree.resolve())
    kinds: tuple[Kind, ...] = KINDS
    if args.base is not None:
        env["vipd_base_tree"] = str(args.base.resolve())
        BaseVipd.root = str(Path(snapshot_dir).parent / "base")
        kinds = ("vipd", "vipd-base", "keepalived")
    tmp = Path(tempfile.mkdtemp(prefix="vipd-footprint-labs-"))
    runs: list[dict[str, Any]] = []
    for kind, advert, block in schedule(args.adverts, args.blocks, kinds):
        _log(f"{kind}, advert {advert:g} s, block {block + 1}/{args.blocks}")
        runs.append(run_block(kind, advert, block, args.seconds, args.restarts, tmp))
    doc = {
        "environment": env,
        "blocks": args.blocks,
        "seconds": args.seconds,
        "restarts": args.restarts,
        "adverts": args.adverts,
        "kinds": list(kinds),
        "summary": summarise(runs, args.adverts, kinds),
        "runs": runs,
        "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = render(doc)
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    if snapshot_dir is not None:
        shutil.rmtree(Path(snapshot_dir).parent, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if any(r["error"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
