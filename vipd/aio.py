"""Calling into the asyncio event loop from another thread, and waiting for the answer.

What it is: the one helper the agent's threads (the HTTP endpoint, the VRRP advert pacer) use
to run a function on the loop that owns the daemon's objects and wait, bounded, for its result.
What it must not do: run anything on the calling thread, or wait without a bound.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], T], timeout: float) -> T:
    """``fn()`` called on ``loop`` from another thread, waited for up to ``timeout`` seconds
    (``concurrent.futures.TimeoutError`` after it; a loop that gets to it later then skips it).
    What ``fn`` raises, or the closed loop's error, is raised here."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if done.set_running_or_notify_cancel():
            try:
                done.set_result(fn())
            except Exception as exc:
                done.set_exception(exc)

    loop.call_soon_threadsafe(run)
    try:
        return done.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        done.cancel()
        raise
