"""A thread in another network namespace: sockets made there live there.

What it is: ``join_netns`` moves the calling thread into a named network namespace (setns(2)
changes only the calling thread's), and ``in_netns`` runs a function in a short-lived thread
that did. A socket stays in the namespace it was created in, so the sockets ``fn`` opens can
be used from any thread afterwards. For the lab, its tests and its benches only.

What it must not do: move the calling thread of ``in_netns`` (the test's or the bench's main
thread stays where it was).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def join_netns(ns: str) -> None:
    """Move this thread into network namespace ``ns`` (a name under /run/netns, or a path)."""
    path = ns if ns.startswith("/") else f"/run/netns/{ns}"
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns}): {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(ns: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a new thread that has joined network namespace ``ns``; its result or error."""
    result: list[T] = []
    error: list[BaseException] = []

    def body() -> None:
        try:
            join_netns(ns)
            result.append(fn())
        except BaseException as exc:
            error.append(exc)

    t = threading.Thread(target=body, name=f"netns-{ns}")
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]
