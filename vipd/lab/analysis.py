"""Pure analysis of prober output: client-seen outage, who answered, flaps, percentiles.

What it is: functions over ``Attempt`` records (one per TCP connection the prober made) and
times on the same clock (``time.monotonic()``; CLOCK_MONOTONIC is machine-wide).

Definitions (also in ``measure``'s docstring, and what the lab reports):

- **client-seen outage**: within the window ``[fault - pre, end]``, the largest gap between
  the *start* times of two consecutive *successful* attempts, among the pairs whose second
  attempt started after the fault. Failures in between do not matter; only that nothing that
  started in the gap succeeded. Its **resolution is the probe interval**: the service was
  unreachable for at least ``gap - interval`` and at most ``gap`` seconds, as seen by
  connections started at that rate.
- **before**: the node that answered the last success started at or before the fault;
  **after**: the node that answered the success that ended the outage; **final**: the node
  that answered the last success in the window.
- **switches**: how many times the answering node changed among successes from ``before`` on.
  A clean failover has one switch (or none, if the same node kept or got back the VIP);
  **flap** means two or more (A→B→A, or A→B→C), and **interleaved** means some node answered
  again after another node had answered (A→B→A): two nodes answering the VIP at once.
- **move gap**: the largest gap between consecutive successes answered by *different* nodes
  (the client-seen cost of the VIP moving, at the probe's resolution), with the failed
  attempts started inside it; **other gap**: the largest gap between consecutive successes
  answered by the same node, where nothing moved (the prober's and the machine's own floor
  in the window). A planned move that loses no connection has a move gap of about one probe
  interval even where a scheduling stall elsewhere in the window makes the outage larger.

What it must not do: any I/O, clock reads or sleeping. Everything is passed in, so every rule
here has a unit test on made-up timelines (tests/unit/test_lab_analysis.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Attempt:
    """One prober connection: start/end times, success, and who answered (or why not)."""

    start: float
    end: float
    ok: bool
    name: str | None  # the answering node; None for a failure
    reason: str = ""  # for failures: timeout, ECONNREFUSED, eof, …


def parse_line(line: str) -> Attempt | None:
    """Parse ``start end ok name [reason]``; None for blank or malformed lines."""
    parts = line.split()
    if len(parts) < 4:
        return None
    try:
        start, end, ok = float(parts[0]), float(parts[1]), parts[2] == "1"
    except ValueError:
        return None
    if ok:
        return Attempt(start, end, True, parts[3])
    return Attempt(start, end, False, None, parts[4] if len(parts) > 4 else "")


def format_line(a: Attempt) -> str:
    if a.ok:
        return f"{a.start:.6f} {a.end:.6f} 1 {a.name}"
    return f"{a.start:.6f} {a.end:.6f} 0 - {a.reason}".rstrip()


@dataclass(frozen=True, slots=True)
class Outage:
    """What the client saw around one fault; see the module docstring for definitions."""

    fault: float
    window_start: float
    window_end: float
    resolution: float  # the probe interval: outage is exact to within this
    recovered: bool  # some attempt started after the fault succeeded
    outage: float | None  # seconds; a lower bound if not recovered; None if no data at all
    gap_start: float | None  # start of the last success before the outage
    gap_end: float | None  # start of the first success after it
    before: str | None
    after: str | None
    final: str | None
    switches: int
    flap: bool
    interleaved: bool
    successes: int
    failures: int
    move_gap: float | None = None  # seconds; None if the answering node never changed
    move_failures: int = 0  # failed attempts started inside the move gap
    other_gap: float | None = None  # largest gap between two answers of the same node

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    attempts: Iterable[Attempt],
    fault: float,
    end: float,
    *,
    pre: float = 0.5,
    resolution: float = 0.0,
) -> Outage:
    """Measure the client-seen outage caused by a fault at ``fault``, looking until ``end``.

    ``pre`` is how far before the fault we look for the last success (the service was up
    then). If no success started in ``[fault - pre, fault]`` the outage is measured from the
    window start. If nothing started after the fault succeeded, ``recovered`` is False and
    ``outage`` is ``end - (last success or window start)``: a lower bound, the service was
    still down when we stopped looking.
    """
    lo = fault - pre
    window = sorted((a for a in attempts if lo <= a.start <= end), key=lambda a: a.start)
    ok = [a for a in window if a.ok]
    failures = sum(1 for a in window if not a.ok)
    before_list = [a for a in ok if a.start <= fault]
    after_list = [a for a in ok if a.start > fault]
    last_before = before_list[-1] if before_list else None
    before = last_before.name if last_before else None

    if not after_list:
        since = last_before.start if last_before else lo
        return Outage(
            fault=fault,
            window_start=lo,
            window_end=end,
            resolution=resolution,
            recovered=False,
            outage=(end - since) if window or last_before else None,
            gap_start=last_before.start if last_before else None,
            gap_end=None,
            before=before,
            after=None,
            final=before,
            switches=0,
            flap=False,
            interleaved=False,
            successes=len(ok),
            failures=failures,
        )

    # Consecutive successes (a, b) with b after the fault; the first pair starts from the
    # last success before the fault, or from the window start if there was none.
    chain: list[tuple[float, str | None]] = (
        [(last_before.start, last_before.name)] if last_before else [(lo, None)]
    )
    chain += [(a.start, a.name) for a in after_list]
    best_i = max(range(1, len(chain)), key=lambda i: chain[i][0] - chain[i - 1][0])
    gap = chain[best_i][0] - chain[best_i - 1][0]

    names = [n for _, n in chain if n is not None]
    switches, interleaved = _switches(names)
    move_gap: float | None = None
    move_span: tuple[float, float] | None = None
    other_gap: float | None = None
    for (t0, n0), (t1, n1) in itertools.pairwise(chain):
        if n0 is None:
            continue
        if n0 != n1:
            if move_gap is None or t1 - t0 > move_gap:
                move_gap, move_span = t1 - t0, (t0, t1)
        elif other_gap is None or t1 - t0 > other_gap:
            other_gap = t1 - t0
    move_failures = (
        sum(1 for a in window if not a.ok and move_span[0] < a.start < move_span[1])
        if move_span is not None
        else 0
    )
    return Outage(
        fault=fault,
        window_start=lo,
        window_end=end,
        resolution=resolution,
        recovered=True,
        outage=gap,
        gap_start=chain[best_i - 1][0] if last_before or best_i > 1 else None,
        gap_end=chain[best_i][0],
        before=before,
        after=chain[best_i][1],
        final=after_list[-1].name,
        switches=switches,
        flap=switches >= 2,
        interleaved=interleaved,
        successes=len(ok),
        failures=failures,
        move_gap=move_gap,
        move_failures=move_failures,
        other_gap=other_gap,
    )


def _switches(names: Sequence[str]) -> tuple[int, bool]:
    """Count changes of answering node; interleaved if a node answers again after another."""
    switches = 0
    seen_done: set[str] = set()  # nodes that answered and were then replaced
    interleaved = False
    for prev, cur in itertools.pairwise(names):
        if cur != prev:
            switches += 1
            seen_done.add(prev)
            if cur in seen_done:
                interleaved = True
    return switches, interleaved


def stable_on(
    attempts: Sequence[Attempt], name: str, min_span: float, since: float | None = None
) -> bool:
    """Has the client seen at least ``min_span`` seconds of successes from ``name`` only?

    Looks at the trailing run of attempts (sorted by start, optionally only those started at
    or after ``since``) that all succeeded and were answered by ``name``, and compares the
    start times of its first and last attempt. Any failure or other answer ends the run.
    """
    run_first: float | None = None
    run_last: float | None = None
    for a in sorted(attempts, key=lambda a: a.start):
        if since is not None and a.start < since:
            continue
        if a.ok and a.name == name:
            if run_first is None:
                run_first = a.start
            run_last = a.start
        else:
            run_first = run_last = None
    return run_first is not None and run_last is not None and run_last - run_first >= min_span


def answered(attempts: Iterable[Attempt], start: float, end: float) -> dict[str, int]:
    """How many successes each node answered among attempts started in ``[start, end]``."""
    counts: dict[str, int] = {}
    for a in attempts:
        if a.ok and a.name is not None and start <= a.start <= end:
            counts[a.name] = counts.get(a.name, 0) + 1
    return counts


@dataclass(frozen=True, slots=True)
class Percentiles:
    n: int
    p50: float
    p90: float
    p99: float
    max: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100 (got {q})")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def percentiles(values: Sequence[float]) -> Percentiles | None:
    """p50/p90/p99/max of ``values``, or None when there are none."""
    if not values:
        return None
    return Percentiles(
        n=len(values),
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p99=percentile(values, 99),
        max=max(values),
    )
