"""The agent's lifecycle, declared: named tasks that run until the first ends, and the
ordered stop as a list of steps.

What it is
    `Tasks` is the agent's task group (kopf's ``spawn_tasks``/``run_tasks`` are the model,
    kopf/_core/reactor/running.py): each long-running part is spawned under a name; `run`
    returns when the stop event is set and raises when a watched task ends, however it
    ends (a return is a bug too: "the controller stopped unexpectedly"), or when a loop
    callback run through `guard` raises. `cancel` ends named tasks in the order given and
    waits for each.

    `OrderedStop` runs a stop plan, a list of `Step` in the order it is written. A step
    with a metric label is guarded: its failure is logged and counted
    (``vipd_stop_errors_total{step}``) and the stop goes on releasing the rest. A step
    without a label (stopping the checks, cancelling the agent's own tasks) is not expected
    to fail and is not caught.

    Why a plan and not a last-in-first-out exit stack: the stop's order is not the reverse
    of the start's (the VIP outlives the resign, IPVS goes after the VIP, the stop hooks run
    last), so it is written once, in the order docs/design/architecture.md gives it.

    `Wiring` is what the agent lends the parts it runs, instead of itself.

What it must not do: know what the steps or tasks are (the agent declares them), or swallow
an exception that is not a guarded step's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from vipd import log as vlog
from vipd import metrics
from vipd.config import Config

__all__ = ["OrderedStop", "Step", "Tasks", "Wiring", "together"]


@dataclass(frozen=True, slots=True)
class Wiring:
    """What the agent lends the parts it runs (the link follower, the check feed): the
    running config (a reload replaces it), whether the stop has begun, the guard for loop
    callbacks (`Tasks.guard`), the readiness publisher and the log."""

    config: Callable[[], Config]
    stopping: Callable[[], bool]
    guard: Callable[..., None]
    publish: Callable[[], None]
    log: logging.Logger


class Tasks:
    """Named tasks on the running loop; the first watched one to end ends the run."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._what: dict[str, str] = {}
        self._watched: set[str] = set()
        self._fatal: asyncio.Future[None] | None = None

    def open(self) -> None:
        """On the running loop, before any task or guarded callback: from here a guarded
        callback's exception ends the run (before, there is no run to end)."""
        self._fatal = asyncio.get_running_loop().create_future()

    def spawn(
        self, name: str, coro: Coroutine[Any, Any, None], what: str, *, watched: bool = True
    ) -> asyncio.Task[None]:
        """Run ``coro`` as task ``name``. ``watched``: its end, for any reason, ends the run
        (``what`` names it in the error); else it runs until cancelled (the heartbeat)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[name] = task
        self._what[name] = what
        if watched:
            self._watched.add(name)
        return task

    def guard(self, fn: Callable[..., None], *args: Any) -> None:
        """Loop callbacks run through here so that a bug ends the run instead of vanishing."""
        try:
            fn(*args)
        except Exception as exc:
            if self._fatal is not None and not self._fatal.done():
                self._fatal.set_exception(exc)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set (returns) or a watched task or guarded callback fails
        (raises its exception, or RuntimeError for a task that returned)."""
        assert self._fatal is not None, "Tasks.open() first"
        loop = asyncio.get_running_loop()
        stopper = loop.create_task(stop.wait(), name="stop-signal")
        watched = {self._tasks[n]: n for n in self._watched}
        waiters: set[asyncio.Future[Any]] = {stopper, self._fatal, *watched}
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        for fut in done:
            if fut is not stopper and (exc := fut.exception()) is not None:
                raise exc
        for task, name in watched.items():
            if task in done:
                raise RuntimeError(f"the {self._what[name]} stopped unexpectedly")

    def canceller(self, *names: str) -> Callable[[], Awaitable[None]]:
        """`cancel` of ``names``, for a stop plan."""
        return lambda: self.cancel(*names)

    async def cancel(self, *names: str) -> None:
        """Cancel the named tasks that are still running, one after the other, each awaited."""
        for name in names:
            task = self._tasks.get(name)
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def together(coros: Iterable[tuple[str, Coroutine[Any, Any, None]]]) -> None:
    """Named coroutines as one task (an asyncio.TaskGroup): the first to raise ends them all."""
    async with asyncio.TaskGroup() as tg:
        for name, coro in coros:
            tg.create_task(coro, name=name)


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the ordered stop. ``label``: its ``vipd_stop_errors_total{step}`` label
    (a guarded step), or None (not caught)."""

    label: str | None
    what: str
    action: Callable[[], Awaitable[None] | None]


class OrderedStop:
    """Runs a stop plan in order; counts the guarded steps that failed."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.errors = 0

    async def run(self, steps: Iterable[Step]) -> None:
        for step in steps:
            if step.label is None:
                await _call(step.action)
            else:
                await self._guarded(step)

    async def _guarded(self, step: Step) -> None:
        try:
            await _call(step.action)
        except Exception as exc:
            self.errors += 1
            metrics.STOP_ERRORS.labels(step=step.label).inc()
            vlog.event(
                self.log,
                logging.ERROR,
                "stop step failed",
                step=step.label,
                what=step.what,
                error=exc,
            )


async def _call(action: Callable[[], Awaitable[None] | None]) -> None:
    result = action()
    if result is not None:
        await result
