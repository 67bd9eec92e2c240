"""When vipd asks for real-time scheduling (vipd.host.sched.realtime_policy)."""

from __future__ import annotations

import pytest

from vipd.host import sched


@pytest.mark.parametrize("interval", [0.01, 0.02, 0.05, 0.09])
def test_fast_adverts_ask_for_sched_rr(interval: float) -> None:
    policy = sched.realtime_policy(interval)
    assert policy is not None
    assert policy.name == "SCHED_RR" and 1 <= policy.priority <= 99
    assert f"{interval:g} s" in policy.why


@pytest.mark.parametrize("interval", [0.1, 0.5, 1.0, 40.95])
def test_ordinary_adverts_leave_scheduling_alone(interval: float) -> None:
    assert sched.realtime_policy(interval) is None
