"""The fault signals and their blocking, apart from the agent so a start can block them first.

What it is: the set of signals the kernel also raises for a fault of the faulting thread
itself (signal(7)), and `block_fault_signals`, which ``vipd run`` calls before any thread
exists; ``vipd.signals`` takes them over from there (``watch_fault_signals``). A module of its
own, with nothing but ``signal`` imported, so that blocking them costs a start nothing: the
agent's imports run later, while the start-up probe waits for answers.

What it must not do: install handlers or start threads (the agent does).
"""

from __future__ import annotations

import signal

FAULT_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGSYS, signal.SIGTRAP}
)


def block_fault_signals() -> None:
    """Block the fault signals in this thread and so in every thread started after it; call
    it before any thread starts. A real fault still kills the process (the kernel unblocks
    a signal it forces on the faulting thread and takes the default action: a handler that
    returned would re-run the faulting instruction forever), while the same signal sent
    with kill(2) stays pending for ``vipd.signals.watch_fault_signals``."""
    signal.pthread_sigmask(signal.SIG_BLOCK, FAULT_SIGNALS)
