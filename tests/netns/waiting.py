"""The one polling helper of the netns tests.

``wait_for(cond, timeout, step)`` polls ``cond`` every ``step`` seconds for up to ``timeout``
seconds and returns how long it took (seconds, always > 0, so ``assert wait_for(...)`` reads
as "it happened"), or None if it never held; ``cond`` is tried once more at the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# The smallest result: a condition that held at once still took some time.
_AT_ONCE = 1e-9


def wait_for(cond: Callable[[], object], timeout: float, step: float = 0.01) -> float | None:
    start = time.monotonic()
    deadline = start + timeout
    while True:
        if cond():
            return max(time.monotonic() - start, _AT_ONCE)
        now = time.monotonic()
        if now >= deadline:
            return None
        time.sleep(min(step, max(0.0, deadline - now)))
