"""Fixtures for the tests against the real Kubernetes bed (``vipd.lab.kubebed``).

What it is: ``bed``, one ``KubeBed`` per test module (three etcd members, three
kube-apiservers, vipd in Lease mode on each, the observers), torn down after the module; and
``window``, a per-test recorder of the holder timeline that judges the invariant at the end
of a scenario (``Window.check``) and prints the timeline excerpt either way, so a report can
quote it.

What it must not do: skip silently (a missing binary or root skips with the reason printed,
and fails under CI=true, by ``tests.prereq``), or leave a bed behind.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from tests.prereq import missing
from vipd.lab.analysis import Outage, measure
from vipd.lab.kubebed.bed import KubeBed, Timing, usable
from vipd.lab.kubebed.verdict import GRACEFUL_OVERLAP, Verdict, excerpt, judge
from vipd.lab.timeline import Exclusions
from vipd.lease.model import REQUEST_FRACTION

# Where Window.check appends each scenario's verdict (bench/lease_faults.py sets it).
FAULT_TABLE_ENV = "VIPD_FAULT_TABLE"

TIMING = Timing(duration=5, renew_deadline=3.0, retry_period=1.0)
# Scheduling slack on a shared, loaded 2-core machine that also runs six Go servers.
MARGIN = 1.5
# The longest no-holder span the timings allow: a follower acquires within duration +
# retry period of the last renewal it saw.
GAP_LIMIT = TIMING.takeover_bound() + MARGIN
# vipd.lease.logic's request timeouts: a leader's cap, and a follower's (r in the design doc).
CAP = max(0.2, TIMING.renew_deadline * REQUEST_FRACTION)
SHORT = max(0.2, min(CAP, TIMING.retry_period))


def survivors_read_again(bed: KubeBed, survivors: list[str], within: float) -> float:
    """Seconds until every survivor's API server has answered a Lease read (each tried every
    0.2 s, a second each); ``within`` if one never did."""
    t0 = time.monotonic()
    waiting = set(survivors)
    while waiting and time.monotonic() - t0 < within:
        waiting = {n for n in waiting if not bed.lease_readable(n)}
        if waiting:
            time.sleep(0.2)
    return min(time.monotonic() - t0, within)


@pytest.fixture(scope="module")
def bed() -> Iterator[KubeBed]:
    why = usable()
    if why is not None:
        missing(why)
    with KubeBed(timing=TIMING) as b:
        print(f"\nbed up in {b.startup_s:.1f} s ({b.apiserver_version}, {b.etcd_version})")
        yield b


class Window:
    """One scenario's slice of the bed's timeline, with its marks (fault, heal, …)."""

    def __init__(self, bed: KubeBed, name: str = "") -> None:
        self.bed = bed
        self.name = name
        self.t0 = time.monotonic()
        self.marks: list[tuple[float, str]] = []
        self.excluded: dict[str, list[tuple[float, float | None]]] = {}

    def mark(self, label: str) -> float:
        t = time.monotonic()
        self.marks.append((t, label))
        return t

    def exclude(self, node: str, start: float, end: float | None = None) -> None:
        """``node``'s holding does not count in [start, end): it is dead (link down)."""
        self.excluded.setdefault(node, []).append((start, end))

    def excerpt(self, until: float | None = None) -> str:
        assert self.bed.watch is not None
        tl = self.bed.watch.timeline()
        first = self.marks[0][0] if self.marks else self.t0
        return excerpt(tl, self.t0, until or time.monotonic(), first, self.marks)

    def _client(self, until: float) -> Outage | None:
        if self.bed.prober is None:
            return None
        fault = self.marks[0][0] if self.marks else self.t0
        return measure(self.bed.prober.attempts(), fault, until, pre=fault - self.t0 + 0.5)

    def client(self, until: float) -> str:
        """What the 2 ms prober through the VIP saw (for the report, not judged here)."""
        o = self._client(until)
        if o is None:
            return "no prober"
        if o.outage is None:
            return "client: no attempts"
        return (
            f"client through the VIP: longest gap {o.outage:.3f} s, "
            f"{o.successes} ok / {o.failures} failed, answered by {o.before}→{o.final}"
            + (", INTERLEAVED answers (two nodes)" if o.interleaved else "")
        )

    def check(self, gap_limit: float = GAP_LIMIT) -> Verdict:
        """The invariant over the whole window: no two holders beyond 0.1 s, no span
        without a holder beyond ``gap_limit``."""
        assert self.bed.watch is not None
        until = time.monotonic()
        tl = self.bed.watch.timeline()
        excluded: Exclusions = self.excluded
        v = judge(tl, self.t0, until, excluded)
        text = self.excerpt(until)
        print(
            f"\ntimeline (s from the first mark):\n{text}\n"
            f"worst two-holder span {v.worst_shared:.3f} s, worst no-holder span "
            f"{v.worst_unowned:.3f} s (limit {gap_limit:.1f} s); {self.client(until)}"
        )
        problems = v.problems(gap_limit)
        self._record(v, gap_limit, problems, until)
        assert not problems, (
            "; ".join(problems) + f"\ntimeline:\n{text}\n{self.bed.vipd_report(15)}"
        )
        return v

    def _record(self, v: Verdict, gap_limit: float, problems: list[str], until: float) -> None:
        """With ``$VIPD_FAULT_TABLE`` set, one JSON line per judged scenario (passed or
        not): what bench/lease_faults.py tabulates."""
        path = os.environ.get(FAULT_TABLE_ENV)
        if not path:
            return
        o = self._client(until)
        row = {
            "test": self.name,
            "marks": [label for _, label in self.marks],
            "worst_two_holders_s": round(v.worst_shared, 4),
            "worst_no_holder_s": round(v.worst_unowned, 4),
            "no_holder_bound_s": round(gap_limit, 3),
            "two_holder_limit_s": GRACEFUL_OVERLAP,
            "client_outage_s": None if o is None or o.outage is None else round(o.outage, 4),
            "client_interleaved": None if o is None else o.interleaved,
            "problems": problems,
        }
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


@pytest.fixture
def window(bed: KubeBed, request: pytest.FixtureRequest) -> Iterator[Window]:
    bed.settle()
    yield Window(bed, request.node.name)
    # Whatever the test did, the next one starts from a working control plane.
    bed.settle()
