"""The bed's invariant on a holder timeline: never two holders, never none for too long.

What it is: ``judge`` cuts a ``vipd.lab.timeline.Timeline`` (``ip monitor address`` in every
node) over a window into the spans with two or more holders and the spans with none, and
returns a ``Verdict`` with the worst of each; ``Verdict.problems`` names every span beyond
the limits (two holders beyond the make-before-break overlap of a graceful stop, 0.1 s; no
holder beyond the bound the Lease timings give), and ``excerpt`` prints the window's changes
relative to the fault, for a failure message or a report.

What it must not do: any I/O or clock reads (pure; the times are passed in), or loosen a
limit on its own: the limits are the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vipd.lab.timeline import Exclusions, Span, Timeline, longest, shared, unowned

GRACEFUL_OVERLAP = 0.1  # seconds: a stopping leader keeps the VIP until its successor holds


@dataclass(frozen=True, slots=True)
class Verdict:
    shared: list[Span]
    unowned: list[Span]

    @property
    def worst_shared(self) -> float:
        return longest(self.shared)

    @property
    def worst_unowned(self) -> float:
        return longest(self.unowned)

    def problems(self, gap_limit: float, overlap_limit: float = GRACEFUL_OVERLAP) -> list[str]:
        out = [
            f"two holders for {b - a:.3f} s ({a:.3f}..{b:.3f})"
            for a, b in self.shared
            if b - a > overlap_limit
        ]
        out += [
            f"no holder for {b - a:.3f} s ({a:.3f}..{b:.3f}), bound {gap_limit:.3f} s"
            for a, b in self.unowned
            if b - a > gap_limit
        ]
        return out


def judge(tl: Timeline, since: float, until: float, excluded: Exclusions | None = None) -> Verdict:
    return Verdict(
        shared=shared(tl, since, until, excluded), unowned=unowned(tl, since, until, excluded)
    )


def excerpt(
    tl: Timeline,
    since: float,
    until: float,
    t0: float,
    marks: Sequence[tuple[float, str]] = (),
) -> str:
    """The holders at ``since`` and every change up to ``until``, times relative to ``t0``;
    ``marks`` (time, label) are interleaved (fault injected, healed, …)."""
    rows: list[tuple[float, str]] = [
        (since, f"holders {','.join(sorted(tl.holders_at(since))) or '-'}")
    ]
    rows += [
        (c.t, f"{c.node} {'+' if c.held else '-'}VIP") for c in tl.changes_between(since, until)
    ]
    rows += [(t, f"** {label}") for t, label in marks if since <= t <= until]
    rows.sort(key=lambda r: r[0])
    return "\n".join(f"  {t - t0:+9.3f} s  {text}" for t, text in rows)
