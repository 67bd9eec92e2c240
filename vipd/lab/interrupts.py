"""The lab's Ctrl-C and SIGTERM handling and its progress lines, shared by its runners.

What it is: ``Interrupted`` (raised by ``signals_raise``'s handlers, so ``finally`` blocks
tear a lab down), ``signals_ignored`` (a teardown in progress finishes, whatever arrives),
and ``log`` (one ``[lab] ...`` line on stderr). Used by `vipd.lab.runner` and
`vipd.lab.routed_lab`.

What it must not do: anything else; it imports nothing of the lab.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; unwinding tears the lab down."""


def log(msg: str) -> None:
    print(f"[lab] {msg}", file=sys.stderr, flush=True)


@contextmanager
def signals_raise() -> Iterator[None]:
    """While inside, SIGINT/SIGTERM raise Interrupted (so ``finally`` blocks tear down)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Teardown must finish: a second Ctrl-C must not leave half a lab behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
