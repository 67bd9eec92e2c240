"""Who held the VIP when: a timeline of address events, and the spans the chaos tests judge.

What it is: ``Timeline`` (the holders at the start, then every change, each ``(t, node,
held)``, times on ``time.monotonic()``), ``segments`` (the timeline cut into pieces during
which the set of *counting* holders is constant), and the questions the invariants ask:
``spans_where`` (maximal spans in which a predicate on the holders is true), ``longest``,
``changes_between``, ``holders_at``. A node's holding does not count while it is *excluded*
(a dead node, or one whose link is down, still has the address on its interface, but nobody
can reach it there): exclusions are per node, ``(start, end)`` with ``end=None`` for "until
the end".

The events come from ``vipd.lab.watch.HolderWatch`` (``ip monitor address`` in every node's
namespace); the client's side of the story comes from the prober (``vipd.lab.analysis``).

What it must not do: any I/O, clock reads or sleeping; everything is passed in, so each rule
has a unit test on made-up timelines (tests/unit/test_timeline.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Span = tuple[float, float]

# A graceful handover's make-before-break overlap (docs/design): at most this on a machine
# that schedules the stopping vipd at once.
OVERLAP_LIMIT = 0.1
# What the judges allow on top: the old holder drops the VIP when it is next scheduled after
# the successor's announcement, and on this 2-core machine under a pod churn that took up to
# 0.25 s (Lease and VRRP alike). A VIP left on two nodes by a real fault lasts seconds.
OVERLAP_NOISE = 0.5
Exclusions = Mapping[str, Sequence[tuple[float, float | None]]]


@dataclass(frozen=True, slots=True)
class Change:
    t: float
    node: str
    held: bool  # True: the VIP was added on ``node``; False: removed


@dataclass
class Timeline:
    start: float
    initial: frozenset[str]
    changes: list[Change] = field(default_factory=list)

    def sorted_changes(self) -> list[Change]:
        return sorted(self.changes, key=lambda c: c.t)

    def holders_at(self, t: float, excluded: Exclusions | None = None) -> frozenset[str]:
        held = set(self.initial)
        for c in self.sorted_changes():
            if c.t > t:
                break
            (held.add if c.held else held.discard)(c.node)
        return frozenset(n for n in held if not _excluded(n, t, excluded))

    def changes_between(self, since: float, until: float) -> list[Change]:
        return [c for c in self.sorted_changes() if since <= c.t <= until]


def _excluded(node: str, t: float, excluded: Exclusions | None) -> bool:
    if not excluded:
        return False
    return any(a <= t and (b is None or t < b) for a, b in excluded.get(node, ()))


def segments(
    tl: Timeline, until: float, excluded: Exclusions | None = None
) -> list[tuple[float, float, frozenset[str]]]:
    """``(start, end, holders)`` pieces from ``tl.start`` to ``until``; holders exclude the
    excluded nodes; consecutive pieces with the same holders are merged."""
    cuts = {tl.start, until}
    cuts.update(c.t for c in tl.changes if tl.start < c.t < until)
    for spans in (excluded or {}).values():
        for a, b in spans:
            for x in (a, b):
                if x is not None and tl.start < x < until:
                    cuts.add(x)
    points = sorted(cuts)
    out: list[tuple[float, float, frozenset[str]]] = []
    for a, b in itertools.pairwise(points):
        holders = tl.holders_at(a, excluded)
        if out and out[-1][2] == holders and out[-1][1] == a:
            out[-1] = (out[-1][0], b, holders)
        else:
            out.append((a, b, holders))
    return out


def spans_where(
    tl: Timeline,
    pred: Callable[[frozenset[str]], bool],
    since: float,
    until: float,
    excluded: Exclusions | None = None,
) -> list[Span]:
    """Maximal spans within ``[since, until]`` in which ``pred(holders)`` holds."""
    out: list[Span] = []
    for a, b, holders in segments(tl, until, excluded):
        a, b = max(a, since), min(b, until)
        if a >= b or not pred(holders):
            continue
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def longest(spans: Iterable[Span]) -> float:
    return max((b - a for a, b in spans), default=0.0)


def unowned(
    tl: Timeline, since: float, until: float, excluded: Exclusions | None = None
) -> list[Span]:
    """Spans in which no (counting) node held the VIP."""
    return spans_where(tl, lambda h: not h, since, until, excluded)


def shared(
    tl: Timeline, since: float, until: float, excluded: Exclusions | None = None
) -> list[Span]:
    """Spans in which two or more (counting) nodes held the VIP at once."""
    return spans_where(tl, lambda h: len(h) > 1, since, until, excluded)


def acquisitions(tl: Timeline, node: str, since: float, until: float) -> int:
    """How many times ``node`` took the VIP (an add while it did not hold it) in the window."""
    held = node in tl.holders_at(since)
    n = 0
    for c in tl.changes_between(since, until):
        if c.node != node:
            continue
        if c.held and not held:
            n += 1
        held = c.held
    return n
