"""vipd.vrrp.ratelimit on a fake clock: bursts, refill, per-source independence, the shared
bucket against forged sources, the suppressed counts and the bounded source table."""

from __future__ import annotations

import pytest

from vipd.vrrp import ratelimit
from vipd.vrrp.ratelimit import Limiter, Rate


def run(limiter: Limiter, times: list[float], key: object = "a") -> list[bool]:
    return [limiter.allow(t, key).allowed for t in times]


def test_a_burst_then_one_per_period() -> None:
    lim = Limiter(Rate(2, 1.0))
    assert run(lim, [0.0, 0.0, 0.0, 0.5, 0.99]) == [True, True, False, False, False]
    assert lim.allow(1.0, "a").allowed
    assert not lim.allow(1.5, "a").allowed
    assert lim.allow(2.0, "a").allowed
    assert lim.refused == 4


def test_a_flood_is_held_to_burst_plus_duration_over_period() -> None:
    interval = 0.1
    lim = Limiter(ratelimit.answers(interval))
    times = [i * 0.01 for i in range(300)]  # 300 adverts at 100/s from one source
    allowed = sum(run(lim, times))
    bound = ratelimit.ANSWER_BURST + times[-1] / (ratelimit.ANSWER_EVERY * interval)
    assert allowed <= bound
    assert allowed >= bound - 1  # and the budget is really spent, not refused outright


def test_the_suppressed_count_comes_with_the_next_allowed_event_and_resets() -> None:
    lim = Limiter(ratelimit.log_lines())
    assert lim.allow(0.0, "x") == ratelimit.Verdict(True, 0)
    for t in (1.0, 2.0, 3.0):
        assert lim.allow(t, "x") == ratelimit.Verdict(False)
    assert lim.allow(ratelimit.LOG_WINDOW, "x") == ratelimit.Verdict(True, 3)
    assert lim.allow(2 * ratelimit.LOG_WINDOW, "x") == ratelimit.Verdict(True, 0)


def test_sources_have_their_own_buckets() -> None:
    lim = Limiter(Rate(1, 10.0))
    assert lim.allow(0.0, "a").allowed
    assert not lim.allow(0.1, "a").allowed
    assert lim.allow(0.1, "b").allowed  # a flood from a does not silence b


def test_forged_sources_share_one_bucket() -> None:
    rate = Rate(2, 1.0)
    lim = Limiter(rate, shared_sources=4)
    # 1000 distinct sources in one instant: at most four sources' bursts get through.
    allowed = sum(lim.allow(0.0, f"src{i}").allowed for i in range(1000))
    assert allowed == 4 * 2
    # Then the shared bucket earns four sources' worth per period, whatever the sources.
    later = sum(lim.allow(1.0, f"new{i}").allowed for i in range(1000))
    assert later == 4


def test_the_source_table_is_bounded_and_forgets_the_quietest() -> None:
    lim = Limiter(Rate(1, 100.0), shared_sources=10_000, max_keys=3)
    for i, key in enumerate("abc"):
        assert lim.allow(float(i), key).allowed
    assert lim.allow(3.0, "d").allowed  # "a" (quiet since 0.0) is forgotten
    assert len(lim._buckets) == 3 and "a" not in lim._buckets
    assert lim.allow(4.0, "a").allowed  # back with a full bucket ("b" goes)
    assert not lim.allow(5.0, "c").allowed  # still remembered, still empty


def test_a_clock_that_steps_back_earns_nothing() -> None:
    lim = Limiter(Rate(1, 1.0))
    assert lim.allow(10.0, "a").allowed
    assert not lim.allow(5.0, "a").allowed
    assert not lim.allow(10.5, "a").allowed
    assert lim.allow(11.0, "a").allowed


@pytest.mark.parametrize("burst, every", [(0.5, 1.0), (1, 0.0), (2, -1.0)])
def test_a_rate_needs_a_burst_and_a_period(burst: float, every: float) -> None:
    with pytest.raises(ValueError, match="burst >= 1"):
        Rate(burst, every)
