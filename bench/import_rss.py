"""Where Lease mode's memory goes: RSS added by each import on the way to the ``kubernetes``
client, and by the client's first use, in a venv laid out as vipd is installed.

Run from the repository root (no root needed)::

    .venv/bin/python bench/import_rss.py [--repeats 3] [--out bench/results] [--name import-rss]

What it does: builds a venv holding vipd's runtime dependencies only (``bench/footprint.py``'s
``installed_python``: what the image installs; the development venv also has test tools,
and ``kubernetes.dynamic`` imports one of them, ``kubernetes_validate``, when it is there),
then, ``--repeats`` times, in a fresh interpreter running a snapshot of this tree's vipd:
imports the modules of ``STEPS`` one after the other, reading ``VmRSS`` (after a garbage
collection) and the number of loaded modules after each, so each step's delta is what it adds
on top of the ones before (a module a step shares with a later one is counted in the first).
Then the client's first use as vipd's Lease driver makes it: an ``ApiClient`` and a
``CoordinationV1Api``, and one ``V1Lease`` deserialised from the JSON an API server returns
(the client loads its model classes on first use). Medians over the repeats.

It writes ``<name>.json`` and ``<name>.md``. No thresholds.

What it must not do: touch the network or the host (nothing here opens a socket).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import footprint as fp

# vipd's VRRP agent, then the Lease driver, then the client's dependencies in the order that
# separates them (each is imported by ``kubernetes`` at import time), then the client.
STEPS = (
    "vipd.agent",
    "vipd.lease.driver",
    "urllib3",
    "decimal",
    "dateutil.parser",
    "multiprocessing.pool",
    "pydantic",
    "requests",
    "requests_oauthlib",
    "websocket",
    "kubernetes",
)

CHILD = r"""
import gc, importlib, json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
out = [["(interpreter)", rss(), len(sys.modules)]]
for name in sys.argv[1:]:
    importlib.import_module(name)
    gc.collect()
    out.append([name, rss(), len(sys.modules)])
if sys.argv[-1] != "kubernetes":
    print(json.dumps(out))
    sys.exit(0)
from kubernetes import client
api = client.ApiClient()
client.CoordinationV1Api(api)
gc.collect()
out.append(["ApiClient + CoordinationV1Api", rss(), len(sys.modules)])
body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "vipd-cp-lock", "namespace": "kube-system",
                     "resourceVersion": "12", "uid": "0",
                     "creationTimestamp": "2026-12-05T10:00:00Z",
                     "managedFields": [{"manager": "vipd", "operation": "Update",
                                        "apiVersion": "coordination.k8s.io/v1",
                                        "time": "2026-12-05T10:00:00Z", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:spec": {}}}]},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 5,
                 "acquireTime": "2026-12-05T10:00:00.000000Z",
                 "renewTime": "2026-12-05T10:00:01.000000Z", "leaseTransitions": 1}}
api.deserialize(json.dumps(body), "V1Lease", "application/json")
gc.collect()
out.append(["one V1Lease deserialised", rss(), len(sys.modules)])
print(json.dumps(out))
"""


def one(python: Path, src: Path, steps: tuple[str, ...] = STEPS) -> list[list[Any]]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(src)}
    env["PYTHONSAFEPATH"] = "1"
    proc = subprocess.run(
        [str(python), "-c", CHILD, *steps], env=env, capture_output=True, text=True, check=True
    )
    rows: list[list[Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows


def _mib(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=fp.REPO / "bench" / "results")
    ap.add_argument("--name", default="import-rss")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="vipd-import-rss-"))
    python = fp.installed_python(tmp)
    fp.snapshot(fp.REPO, tmp / "src")
    runs = [one(python, tmp / "src") for _ in range(args.repeats)]
    steps = []
    for i, (name, _, modules) in enumerate(runs[0]):
        total = statistics.median(r[i][1] for r in runs) / 1024
        delta = total - (statistics.median(r[i - 1][1] for r in runs) / 1024 if i else 0.0)
        added = modules - (runs[0][i - 1][2] if i else 0)
        steps.append(
            {"step": name, "rss_mib": round(total, 2), "delta_mib": round(delta, 2),
             "modules_added": added}
        )  # fmt: skip
    # Each dependency alone on top of the Lease driver: its own cost, whatever loads first.
    base = STEPS[:2]
    alone: dict[str, float] = {}
    for dep in STEPS[2:]:
        rs = [one(python, tmp / "src", (*base, dep)) for _ in range(args.repeats)]
        at = len(base) + 1  # the row of ``dep``: after the interpreter's and the base's
        alone[dep] = round(statistics.median(r[at][1] - r[at - 1][1] for r in rs) / 1024, 2)
    for s in steps:
        s["alone_mib"] = alone.get(s["step"])
    doc = {
        "command": "bench/import_rss.py " + " ".join(sys.argv[1:]),
        "head": fp._first_line(["git", "-C", str(fp.REPO), "rev-parse", "HEAD"]),
        "repeats": args.repeats,
        "steps": steps,
        "runs": runs,
    }
    lines = [
        f"`{doc['command'].strip()}`, vipd {str(doc['head'])[:10]}, installed layout, "
        f"median of {args.repeats} fresh interpreters; *alone*: the import by itself on top "
        "of vipd.lease.driver (a fresh interpreter each):",
        "",
        "| step | + RSS MiB | RSS MiB | + modules | alone MiB |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {s['step']} | {s['delta_mib']:.2f} | {s['rss_mib']:.1f} | {s['modules_added']} "
        f"| {_mib(s['alone_mib'])} |"
        for s in steps
    ]
    md = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
