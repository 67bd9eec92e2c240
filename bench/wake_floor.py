"""Wake-up floor benchmark: the CPU one timer wake-up costs an idle process, by the shape of
its loop, on this machine.

Run from the repository root (no root needed)::

    .venv/bin/python bench/wake_floor.py [--periods 0.3 0.1 0.03 0.01] [--wakes 100]
                                         [--blocks 3] [--out bench/results]

Why: a VRRP daemon at rest is a process woken by a timer (a Master's advert tick, a Backup's
down timer) that does a little work and sleeps again. On a virtual machine each wake-up
finds the caches cold, so what one costs is mostly fixed by the shape of the loop, before any
VRRP code runs. This measures that floor for each shape, with an empty callback:

- ``c-epoll``: a C program in ``epoll_wait`` with a timeout (keepalived's shape; built with
  ``cc`` when there is one, else left out);
- ``python-epoll``: CPython in ``select.epoll().poll(timeout)``;
- ``asyncio``: CPython's own event loop, a ``call_later`` re-armed from its callback;
- ``uvloop``: the same on uvloop, the loop vipd runs;
- ``uvloop-thread``: uvloop idle in its poll (no timer), and a second thread that sleeps in
  ``time.sleep`` and wakes (a sender thread beside the loop, the shape a Master's advert tick
  could take off the loop); the whole process's CPU, both threads.

Each (shape, period) runs ``--wakes`` wake-ups in a fresh process, after a second's settling,
and takes that thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``: user and system) divided by
the wake-ups. Blocks interleave the shapes so drift in the machine's load hits all alike.
Periods: 0.3 s is a Backup's wake-up at 0.1 s adverts (it wakes every third advert), 0.1 s
and 0.01 s a Master's tick, 0.03 s a Backup's at 0.01 s.

It writes ``wake-floor.json`` (every sample) and ``wake-floor.md`` (medians, and each shape
against ``c-epoll``) into ``--out``. No thresholds.

What it must not do: judge, or need root; it touches nothing but its own child processes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHAPES = ("c-epoll", "python-epoll", "asyncio", "uvloop", "uvloop-thread")

C_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
int main(int argc, char **argv) {
    int ms = atoi(argv[1]), n = atoi(argv[2]), ep = epoll_create1(0);
    struct epoll_event ev;
    struct timespec a, b, settle = {1, 0};
    nanosleep(&settle, NULL);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (int i = 0; i < n; i++) epoll_wait(ep, &ev, 1, ms);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    printf("%.3f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n / 1e3);
    return 0;
}
"""


def child(shape: str, period: float, wakes: int, settle: float = 1.0) -> float:
    """Run in the child process: µs of CPU per wake-up of ``shape``, after ``settle`` s."""
    time.sleep(settle)
    if shape == "python-epoll":
        import select

        ep = select.epoll()
        t0 = time.thread_time()
        for _ in range(wakes):
            ep.poll(period)
        return (time.thread_time() - t0) / wakes * 1e6
    import asyncio

    async def run() -> float:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        left = [wakes]

        def tick() -> None:
            left[0] -= 1
            if left[0] > 0:
                loop.call_later(period, tick)
            else:
                done.set_result(None)

        t0 = time.thread_time()
        loop.call_later(period, tick)
        await done
        return (time.thread_time() - t0) / wakes * 1e6

    if shape == "uvloop-thread":
        import threading

        import uvloop

        async def idle() -> float:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[float] = loop.create_future()

            def sender() -> None:
                t0 = time.process_time()
                for _ in range(wakes):
                    time.sleep(period)
                us = (time.process_time() - t0) / wakes * 1e6
                loop.call_soon_threadsafe(done.set_result, us)

            threading.Thread(target=sender, daemon=True).start()
            return await done

        return uvloop.run(idle())
    if shape == "uvloop":
        import uvloop

        return uvloop.run(run())
    return asyncio.run(run())


def build_c(tmp: Path) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, exe = tmp / "wake.c", tmp / "wake"
    src.write_text(C_SOURCE)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def measure(shape: str, period: float, wakes: int, c_exe: Path | None) -> float:
    if shape == "c-epoll":
        assert c_exe is not None
        argv = [str(c_exe), str(round(period * 1000)), str(wakes)]
    else:
        argv = [sys.executable, __file__, "--child", shape, str(period), str(wakes)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def summarise(samples: list[dict[str, Any]], periods: list[float]) -> list[dict[str, Any]]:
    """Per period: each shape's median µs per wake-up, and its ratio to ``c-epoll``'s."""
    rows = []
    for period in periods:
        row: dict[str, Any] = {"period": period}
        for shape in SHAPES:
            xs = [s["us_per_wake"] for s in samples if (s["shape"], s["period"]) == (shape, period)]
            row[shape] = round(statistics.median(xs), 1) if xs else None
        c = row.get("c-epoll")
        for shape in SHAPES[1:]:
            v = row[shape]
            row[f"{shape}_vs_c"] = round(v / c, 2) if v is not None and c else None
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [
        "# Wake-up floor: CPU per timer wake-up of an idle loop",
        "",
        f"{meta['date']}, {meta['host']}, {meta['python']}, {meta['wakes']} wake-ups per "
        f"sample, {meta['blocks']} blocks (medians). µs of CPU (user + system) per wake-up.",
        "",
        "| period s | "
        + " | ".join(SHAPES)
        + " | "
        + " | ".join(f"{s} / c" for s in SHAPES[1:])
        + " |",
        "|---" * (1 + 2 * len(SHAPES) - 1) + "|",
    ]
    for r in rows:
        cells = [f"{r['period']:g}"]
        cells += ["–" if r[s] is None else f"{r[s]:.1f}" for s in SHAPES]
        cells += ["–" if r[f"{s}_vs_c"] is None else f"{r[f'{s}_vs_c']:.2f}" for s in SHAPES[1:]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(f"{child(sys.argv[2], float(sys.argv[3]), int(sys.argv[4])):.3f}")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--periods", type=float, nargs="+", default=[0.3, 0.1, 0.03, 0.01])
    ap.add_argument("--wakes", type=int, default=100)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default="wake-floor")
    args = ap.parse_args()
    for p in args.periods:
        if not 0.001 <= p <= 5:
            ap.error(f"--periods: {p:g} s is outside 0.001..5")
    load = os.getloadavg()[0]
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="vipd-wake-") as tmp:
        c_exe = build_c(Path(tmp))
        shapes = [s for s in SHAPES if s != "c-epoll" or c_exe is not None]
        for block in range(args.blocks):
            order = shapes if block % 2 == 0 else list(reversed(shapes))
            for period in args.periods:
                for shape in order:
                    us = measure(shape, period, args.wakes, c_exe)
                    samples.append({"shape": shape, "period": period, "block": block,
                                    "us_per_wake": us})  # fmt: skip
                    print(f"[wake-floor] {shape} {period:g} s: {us:.1f} us", file=sys.stderr)
    meta = {
        "date": dt.date.today().isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "wakes": args.wakes,
        "blocks": args.blocks,
        "loadavg_start": load,
    }
    rows = summarise(samples, args.periods)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(
        json.dumps({"meta": meta, "summary": rows, "samples": samples}, indent=2) + "\n"
    )
    (args.out / f"{args.name}.md").write_text(render(rows, meta))
    print(render(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
