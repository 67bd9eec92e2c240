"""The agent's lifecycle: named tasks that end the run, the ordered stop as a written plan.

What the agent's stop does on a wire is pinned by test_vrrp_driver, test_vips, test_signals
and tests/netns; here: `vipd.lifecycle` on its own, and the agent's plan as declared (the
steps and their order, docs/design/architecture.md).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.unit.test_vrrp_driver import Node
from vipd import metrics
from vipd.lifecycle import OrderedStop, Step, Tasks


def test_a_watched_task_that_returns_ends_the_run_as_a_crash() -> None:
    async def scenario() -> None:
        tasks = Tasks()
        tasks.open()
        tasks.spawn("link", asyncio.sleep(0), "link follower")
        tasks.spawn("election", asyncio.sleep(10), "election")
        with pytest.raises(RuntimeError, match="the link follower stopped unexpectedly"):
            await tasks.run(asyncio.Event())
        await tasks.cancel("election")

    asyncio.run(scenario())


def test_a_task_or_a_guarded_callback_that_raises_ends_the_run_with_its_error() -> None:
    async def boom() -> None:
        raise ValueError("a bug")

    async def with_task() -> None:
        tasks = Tasks()
        tasks.open()
        tasks.spawn("controller", boom(), "controller")
        with pytest.raises(ValueError, match="a bug"):
            await tasks.run(asyncio.Event())

    def bug() -> None:
        raise ZeroDivisionError("a bug in a callback")

    async def with_callback() -> None:
        tasks = Tasks()
        tasks.open()
        asyncio.get_running_loop().call_soon(tasks.guard, bug)
        with pytest.raises(ZeroDivisionError):
            await tasks.run(asyncio.Event())

    asyncio.run(with_task())
    asyncio.run(with_callback())


def test_the_stop_event_ends_the_run_and_an_unwatched_task_runs_on() -> None:
    async def scenario() -> None:
        tasks = Tasks()
        tasks.open()
        beat = tasks.spawn("heartbeat", asyncio.sleep(0), "heartbeat", watched=False)
        election = tasks.spawn("election", asyncio.sleep(10), "election")
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, stop.set)
        await tasks.run(stop)  # the heartbeat's end did not end it
        assert beat.done() and not election.done()
        await tasks.cancel("election", "nothing by that name")
        assert election.cancelled()

    asyncio.run(scenario())


def test_the_stop_runs_in_order_counts_a_guarded_failure_and_goes_on() -> None:
    done: list[str] = []

    def fail() -> None:
        done.append("b")
        raise OSError("gone")

    async def later() -> None:
        done.append("c")

    before = metrics.REGISTRY.get_sample_value("vipd_stop_errors_total", {"step": "ipvs"})
    stopper = OrderedStop(logging.getLogger("test"))
    plan = [
        Step(None, "a", lambda: done.append("a")),
        Step("ipvs", "b", fail),
        Step("host", "c", later),
    ]
    asyncio.run(stopper.run(plan))
    assert done == ["a", "b", "c"]
    assert stopper.errors == 1
    after = metrics.REGISTRY.get_sample_value("vipd_stop_errors_total", {"step": "ipvs"})
    assert after == (before or 0.0) + 1


def test_an_unguarded_step_that_fails_is_not_swallowed() -> None:
    def fail() -> None:
        raise RuntimeError("a bug in the stop")

    stopper = OrderedStop(logging.getLogger("test"))
    with pytest.raises(RuntimeError, match="a bug in the stop"):
        asyncio.run(stopper.run([Step(None, "stop the health checks", fail)]))


def test_the_agents_stop_plan_is_the_documented_order() -> None:
    """stop the checks and the resync, resign, remove the VIP, (IPVS), close the link watch
    and the backend, close the actuators, run the stop hooks."""

    async def scenario() -> None:
        n = Node()
        await n.start()
        plan = n.agent._stop_plan(graceful=True)
        assert [(s.label, s.what) for s in plan] == [
            (None, "stop the election and the resync"),
            (None, "quiesce the controller"),
            ("resign", "resign"),
            ("vip", "remove the VIP"),
            ("host", "close the link watch"),
            ("election", "close the election"),
            ("host", "close the announcer"),
            ("host", "close the address actuator"),
            ("host", "run the stop hooks"),
        ]
        n.stop.set()
        assert await n.stopped() == 0

    asyncio.run(scenario())
