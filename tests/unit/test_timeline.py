"""The VIP-holder timeline the chaos tests judge from (vipd.lab.timeline), on made-up events."""

from __future__ import annotations

import pytest

from vipd.lab.timeline import (
    Change,
    Timeline,
    acquisitions,
    longest,
    segments,
    shared,
    spans_where,
    unowned,
)


def failover() -> Timeline:
    # n1 holds from the start; dies at 10 (its copy stays bound); n2 takes over at 10.34;
    # n1 comes back, removes its stale copy at 12 and takes the VIP back at 12.5; n2 lets
    # go at 12.51.
    return Timeline(
        0.0,
        frozenset({"n1"}),
        [
            Change(10.34, "n2", True),
            Change(12.0, "n1", False),
            Change(12.5, "n1", True),
            Change(12.51, "n2", False),
        ],
    )


def test_holders_at_applies_changes_up_to_and_including_t() -> None:
    tl = failover()
    assert tl.holders_at(5) == {"n1"}
    assert tl.holders_at(10.34) == {"n1", "n2"}
    assert tl.holders_at(12.2) == {"n2"}
    assert tl.holders_at(12.505) == {"n1", "n2"}
    assert tl.holders_at(20) == {"n1"}


def test_a_dead_node_holding_the_vip_does_not_count() -> None:
    tl = failover()
    dead = {"n1": [(10.0, 12.0)]}
    gaps = unowned(tl, 0, 20, dead)
    assert gaps == [(10.0, 10.34)]
    assert longest(gaps) == pytest.approx(0.34)
    # Without the exclusion the stale copy hides the outage, and n1+n2 look like a split.
    assert unowned(tl, 0, 20) == []
    assert shared(tl, 0, 20, dead) == [(12.5, 12.51)]


def test_open_ended_exclusion_and_window_clipping() -> None:
    tl = Timeline(0.0, frozenset({"n1"}), [Change(3.0, "n2", True)])
    assert unowned(tl, 0, 10, {"n1": [(2.0, None)]}) == [(2.0, 3.0)]
    assert unowned(tl, 2.5, 10, {"n1": [(2.0, None)]}) == [(2.5, 3.0)]
    assert unowned(tl, 0, 10) == []


def test_segments_merge_equal_neighbours() -> None:
    tl = Timeline(0.0, frozenset(), [Change(1.0, "n1", True), Change(1.0, "n1", True)])
    assert segments(tl, 2.0) == [(0.0, 1.0, frozenset()), (1.0, 2.0, frozenset({"n1"}))]


def test_spans_where_any_predicate() -> None:
    tl = failover()
    only_n2 = spans_where(tl, lambda h: h == {"n2"}, 0, 20)
    assert only_n2 == [(12.0, 12.5)]


def test_acquisitions_count_takeovers_not_re_adds() -> None:
    tl = failover()
    assert acquisitions(tl, "n2", 0, 20) == 1
    assert acquisitions(tl, "n1", 0, 20) == 1  # the re-take at 12.5
    assert acquisitions(tl, "n1", 0, 11) == 0
    assert acquisitions(tl, "n3", 0, 20) == 0


def test_out_of_order_events_are_sorted() -> None:
    tl = Timeline(0.0, frozenset(), [Change(2.0, "n1", False), Change(1.0, "n1", True)])
    assert unowned(tl, 0, 3) == [(0.0, 1.0), (2.0, 3.0)]
