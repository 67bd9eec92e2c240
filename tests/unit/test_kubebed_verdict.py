"""The Kubernetes bed's invariant judge (``vipd.lab.kubebed.verdict``) on made-up timelines."""

from __future__ import annotations

from vipd.lab.kubebed.verdict import excerpt, judge
from vipd.lab.timeline import Change, Timeline


def test_a_graceful_overlap_passes_a_longer_one_fails() -> None:
    tl = Timeline(0.0, frozenset({"n1"}), [Change(1.0, "n2", True), Change(1.08, "n1", False)])
    assert judge(tl, 0.0, 5.0).problems(gap_limit=6.0) == []
    tl = Timeline(0.0, frozenset({"n1"}), [Change(1.0, "n2", True), Change(1.2, "n1", False)])
    problems = judge(tl, 0.0, 5.0).problems(gap_limit=6.0)
    assert len(problems) == 1 and problems[0].startswith("two holders for 0.200 s")


def test_no_holder_beyond_the_bound_fails_and_a_dead_node_does_not_count() -> None:
    tl = Timeline(0.0, frozenset({"n1"}), [Change(1.0, "n1", False), Change(8.0, "n2", True)])
    v = judge(tl, 0.0, 10.0)
    assert v.worst_unowned == 7.0
    assert v.problems(gap_limit=6.0) == ["no holder for 7.000 s (1.000..8.000), bound 6.000 s"]
    # n1 dies holding the VIP at 1.0 (its address stays on a link that is down): it does not
    # count, so the gap runs from its death to n2's takeover.
    tl = Timeline(0.0, frozenset({"n1"}), [Change(6.5, "n2", True)])
    v = judge(tl, 0.0, 10.0, {"n1": [(1.0, None)]})
    assert v.worst_unowned == 5.5 and v.shared == []


def test_excerpt_is_relative_to_the_fault_and_interleaves_marks() -> None:
    tl = Timeline(0.0, frozenset({"n1"}), [Change(3.0, "n1", False), Change(5.0, "n2", True)])
    text = excerpt(tl, 0.0, 10.0, 2.0, [(2.0, "fault")])
    assert text.splitlines() == [
        "     -2.000 s  holders n1",
        "     +0.000 s  ** fault",
        "     +1.000 s  n1 -VIP",
        "     +3.000 s  n2 +VIP",
    ]
