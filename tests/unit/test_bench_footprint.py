"""Unit tests for bench/footprint.py's summary: CPU per advert beside CPU per second (no lab)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.unit.benches import load

footprint = load("footprint")


def _node(role: str, run_ns: int, sent: int | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {
        "role": role,
        "processes": 1,
        "run_ns": run_ns,
        "cpu_pct": round(100.0 * run_ns / 1e9 / 10.0, 4),
        "rss_mib": 20.0,
        "pss_mib": 10.0,
        "uss_mib": 8.0,
        "samples": 10,
        "switches_per_s": 12.0 if role == "master" else 4.0,
    }
    if sent is not None:
        node["sent"] = sent
        node["us_per_advert"] = round(run_ns / 1e3 / sent, 2)
    return node


def _block(kind: str, master_ns: int, sent: int) -> dict[str, Any]:
    return {
        "daemon": kind,
        "advert": 0.01,
        "block": 0,
        "error": None,
        "steady": {
            "seconds": 10.0,
            "nodes": {"n1": _node("master", master_ns, sent), "n2": _node("backup", 10**7)},
        },
        "start_to_backup_s": [0.2],
    }


def test_the_master_is_also_compared_per_advert_when_the_rates_differ() -> None:
    # vipd sends 10 % more adverts in the window: per second it costs 2.2x, per advert 2x.
    blocks = [_block("vipd", 220 * 10**6, 1100), _block("keepalived", 100 * 10**6, 1000)]
    (row,) = footprint.summarise(blocks, [0.01])
    assert row["vipd"]["master_us_per_advert"] == 200.0
    assert row["keepalived"]["master_us_per_advert"] == 100.0
    assert row["vipd"]["adverts_per_s"] == 110.0
    assert row["ratio"]["master_cpu_pct"] == 2.2
    assert row["ratio"]["master_us_per_advert"] == 2.0
    doc = {
        "environment": {
            "command": "bench/footprint.py",
            "date": "2026-12-01",
            "cpus": 2,
            "cpu_model": "x",
            "kernel": "6",
            "python": "3.11",
            "keepalived": "Keepalived v2.2.7",
            "vipd_commit": "0" * 40,
            "vipd_tree_dirty": False,
            "loadavg_start": ["0.1", "0.1", "0.1"],
        },
        "blocks": 1,
        "seconds": 10.0,
        "restarts": 1,
        "summary": [row],
        "runs": blocks,
    }
    text = footprint.render(doc)
    assert "| 0.01 s | vipd | 2.200 | 200.0 (110.0) | 0.100 | 12.0, 4.0 |" in text
    assert "| 0.01 s | 2.20 | 2.00 |" in text


def test_switches_count_every_threads_wake_ups() -> None:
    """A thread of this process that sleeps and wakes 20 times adds at least 20 switches
    (counted while it lives: an ended thread's counts leave /proc with it)."""
    import os
    import threading
    import time

    napped, done = threading.Event(), threading.Event()
    before: list[int | None] = []

    def nap() -> None:
        before.append(footprint.switches(os.getpid()))
        for _ in range(20):
            time.sleep(0.001)
        napped.set()
        done.wait()

    t = threading.Thread(target=nap)
    t.start()
    napped.wait()
    after = footprint.switches(os.getpid())
    done.set()
    t.join()
    (start,) = before
    assert start is not None and after is not None and after - start >= 20
    assert footprint.switches(2**22 + 7) is None  # no such process


def test_the_daemons_interpreter_has_the_dependencies_and_none_of_the_dev_hooks(
    tmp_path: Path,
) -> None:
    python = footprint.installed_python(tmp_path)
    probe = (
        "import sys, yaml, uvloop, kubernetes; "
        "print(sorted(m for m in sys.modules if 'editable' in m or 'distutils' in m "
        "or m.startswith(('kubernetes_validate', 'jsonschema', 'pytest'))))"
    )
    out = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True, env={}
    ).stdout
    assert out.strip() == "[]"
    site = [p for p in (tmp_path / "venv" / "lib").rglob("site-packages")]
    assert len(site) == 1
    names = {p.name for p in site[0].iterdir()}
    assert not any(n.endswith(".pth") for n in names)
    assert not any(n.startswith(("pip", "setuptools", "vipd", "__editable__")) for n in names)
    # Test tools are not vipd's: kubernetes.dynamic would import kubernetes_validate if it
    # were there (jsonschema and its kin: MiBs an installed vipd does not have).
    assert not any(n.startswith(("pytest", "kubernetes_validate", "jsonschema")) for n in names)
    assert "pydantic" in names and "kubernetes" in names
