"""An asyncio event loop on a virtual clock, for tests of code that waits on the loop's time.

`run` runs a coroutine as ``asyncio.run`` does, on a loop whose ``time()`` starts at 0 and
moves only when the loop would otherwise wait: with nothing ready, it jumps straight to the
next timer (``asyncio.sleep``, ``wait_for``'s timeout, ``call_later``) instead of sleeping.
The code under test sees the same order of events and the same intervals between them as on
a real loop, in milliseconds of real time.

Only for loops that wait on nothing but timers: a wake-up from another thread or from a
socket is still seen (the real selector is polled first), but while nothing is ready the
clock does not wait for one, it jumps. With no timer left, the loop waits for real I/O.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.BaseSelector):
    """The default selector, polled without waiting; a wait becomes a jump of the clock."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:  # no timer at all: only real I/O can wake the loop
            return self._real.select(None)
        self._loop.advance(timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a `VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(coro)
