"""vipd.lease.logic under random fault schedules, with hypothesis.

What they prove, for any schedule hypothesis can build of the faults tests/unit/lease_sim.py
models (a node's etcd member cut off, its API server throttling vipd, stalled, or its node
partitioned; writes failing on one node; the whole store answering 503, or not answering at
all; etcd's NOSPACE alarm;
silent death; a graceful stop), on 3 nodes with the fast timing 5/3/1, with and without the
wire signal and with the peers' view up to 1.5 s late:

- **never two VIP holders at the same instant** (the simulation's graceful stop is
  break-before-make, so there is no allowed overlap at all);
- **a holder again within a bound once every fault has ended** (while a node is alive):
  a follower's first good read, a duration, its take-over, and the wait after a store
  refusal, plus the unhealthy-follower window.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from tests.unit.budget import budget
from tests.unit.lease_sim import Sim
from vipd.lease.model import Params

NAMES = ["n1", "n2", "n3"]
D, RD, RP = 5.0, 3.0, 1.0
SHORT = max(0.2, min(RD / 2, RP))
NODE_FAULTS = ["5xx", "429", "5xx-writes", "blackhole", "partition", "403"]


@dataclass(frozen=True)
class Event:
    at: float
    length: float
    kind: str  # a node fault, "store-5xx", "store-hang", "nospace", "kill", "stop"
    target: int  # 0: the leader of the moment, 1..3: that node


events = st.builds(
    Event,
    at=st.floats(3.0, 60.0, allow_nan=False).map(lambda x: round(x, 3)),
    length=st.floats(0.1, 30.0, allow_nan=False).map(lambda x: round(x, 3)),
    kind=st.sampled_from([*NODE_FAULTS, "store-5xx", "store-hang", "nospace", "kill", "stop"]),
    target=st.integers(0, 3),
)


def undo(sim: Sim, what: str, name: str) -> None:
    if what == "node":
        sim.nodes[name].fault = ""
    elif what == "store-5xx":
        for n in sim.nodes.values():
            n.fault = ""
    elif what == "nospace":
        sim.store.nospace = False


def run(schedule: list[Event], arp: bool, lag: float) -> Sim:
    sim = Sim(
        NAMES,
        lambda n: Params(identity=n, duration=D, renew_deadline=RD, retry_period=RP),
        arp=arp,
        view_lag=lag,
    )
    ends: list[tuple[float, str, str]] = []  # (time, what, node) to undo
    for ev in sorted(schedule, key=lambda e: e.at):
        for t, what, name in sorted(ends):  # the faults that end before this one starts
            if t <= ev.at:
                sim.run_until(t)
                undo(sim, what, name)
        ends = [e for e in ends if e[0] > ev.at]
        sim.run_until(ev.at)
        live = [n for n in NAMES if sim.nodes[n].alive]
        leaders = sim.leaders()
        target = (leaders[0] if leaders else None) if ev.target == 0 else NAMES[ev.target - 1]
        if target is None or target not in live:
            continue
        if ev.kind in NODE_FAULTS:
            sim.nodes[target].fault = ev.kind
            ends.append((ev.at + ev.length, "node", target))
        elif ev.kind in ("store-5xx", "store-hang"):
            for n in sim.nodes.values():
                n.fault = "5xx" if ev.kind == "store-5xx" else "store-hang"
            ends.append((ev.at + ev.length, "store-5xx", ""))
        elif ev.kind == "nospace":
            sim.store.nospace = True
            ends.append((ev.at + ev.length, "nospace", ""))
        elif ev.kind == "kill" and len(live) > 1:
            sim.kill(target)
        elif ev.kind == "stop" and len(live) > 1:
            sim.stop(target)
    for t, what, name in sorted(ends):
        sim.run_until(t)
        undo(sim, what, name)
    return sim


@budget(300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=st.lists(events, min_size=1, max_size=6),
    arp=st.booleans(),
    lag=st.sampled_from([0.0, 0.5, 1.5]),
)
def test_random_faults_never_make_two_holders_and_a_holder_comes_back(
    schedule: list[Event], arp: bool, lag: float
) -> None:
    sim = run(schedule, arp, lag)
    cleared = sim.now
    bound = 2 * D + 2 * RP + 3 * SHORT + 0.5
    sim.run_until(cleared + bound + 5.0)
    assert not sim.overlaps(), (sim.overlaps(), sim.timeline)
    assert sim.store.refused_updates_without_rv == 0
    if any(n.alive and not n.elector.released for n in sim.nodes.values()):
        assert sim.leaders(), sim.timeline
        worst = max((b - a for a, b in sim.gaps(cleared)), default=0.0)
        assert worst <= bound, (cleared, sim.gaps(cleared), sim.timeline)


# Schedules hypothesis found, kept as they were (each gave two holders before its fix).
FOUND = [
    # A holder kept on the peers' evidence carried on on store refusals when the peers
    # recovered, skipping the reclaim's wait; a follower took over the moment writes
    # returned (0.5 s), and with the fix for that, the follower blind during the store hang
    # took over after the reclaim (0.6 s) until any failure made it wait before binding.
    (
        [
            Event(15.0, 3.122, "store-hang", 3),
            Event(19.938, 3.903, "nospace", 3),
            Event(59.214, 13.251, "store-hang", 0),
            Event(59.0, 13.816, "kill", 3),
            Event(32.184, 15.044, "store-5xx", 1),
            Event(15.0, 11.4, "nospace", 1),
            Event(25.634, 20.272, "429", 1),
            Event(46.602, 28.692, "kill", 0),
        ],
        False,
        0.5,
    ),
    # A follower's 429 restarted its observation and pushed its take-over past the time
    # window after which the refusal it had met no longer made it wait.
    (
        [
            Event(30.15, 3.238, "stop", 0),
            Event(10.825, 23.873, "5xx-writes", 0),
            Event(15.0, 26.898, "partition", 0),
            Event(42.313, 1.1, "429", 1),
            Event(59.839, 21.464, "nospace", 1),
            Event(57.167, 28.851, "403", 2),
            Event(26.898, 21.464, "nospace", 1),
            Event(15.0, 13.356, "stop", 2),
        ],
        False,
        1.5,
    ),
    # A follower stopped with a read in flight kept asking to be polled at that instant.
    (
        [
            Event(58.8, 23.639, "blackhole", 3),
            Event(59.914, 21.697, "stop", 3),
            Event(10.0, 0.683, "5xx-writes", 2),
            Event(10.0, 0.917, "store-hang", 0),
        ],
        True,
        0.5,
    ),
]


@pytest.mark.parametrize(("schedule", "arp", "lag"), FOUND)
def test_schedules_hypothesis_found(schedule: list[Event], arp: bool, lag: float) -> None:
    sim = run(schedule, arp, lag)
    sim.run_until(sim.now + 30.0)
    assert not sim.overlaps(), sim.timeline
