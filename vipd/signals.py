"""What each signal does to the agent: the handlers, and the thread for the fault signals.

What it is: SIGHUP reloads, SIGUSR1 and SIGUSR2 log the status document, and every other
signal whose default action ends the process (signal(7): Term and Core) takes the ordered
stop, with exit code 128 + its number (SIGTERM and SIGINT: 0). The synchronous fault signals
(``vipd.host.faultsig``), blocked in every thread, are taken by one thread with
sigwaitinfo(2) and handed to the loop as an ordered stop. docs/reference/cli.md#signals lists
them all.

What it must not do: act in a handler. Every handler only schedules the agent's own method
on the loop.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Protocol

from vipd.host.faultsig import FAULT_SIGNALS

__all__ = ["SignalTarget", "install_signal_handlers", "signal_name", "watch_fault_signals"]


class SignalTarget(Protocol):
    """What the signals call on the agent (``vipd.agent.Agent``)."""

    def reload(self) -> str: ...
    def log_status(self, signum: int) -> None: ...
    def request_stop(self, signum: int, stop: asyncio.Event) -> None: ...


def signal_name(signum: int) -> str:
    """``SIGTERM``; a real-time signal without a name of its own as ``SIGRTMIN+7``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIGRTMIN+{signum - signal.SIGRTMIN}"


def install_signal_handlers(agent: SignalTarget, stop: asyncio.Event) -> None:
    """SIGHUP reloads, SIGUSR1 and SIGUSR2 log the status, and every other signal whose
    default action ends the process (signal(7): Term and Core) takes the ordered stop, so
    that no catchable signal leaves the VIP bound on a stopped vipd. SIGPIPE stays ignored
    (Python's default: a closed socket is an EPIPE error, not a death). The synchronous
    fault signals go to `watch_fault_signals`. The handlers only schedule work on the loop.
    """
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, agent.reload)
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        loop.add_signal_handler(sig, agent.log_status, sig)
    terminating = [
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGQUIT,
        signal.SIGABRT,
        signal.SIGALRM,
        signal.SIGVTALRM,
        signal.SIGPROF,
        signal.SIGIO,
        signal.SIGPWR,
        signal.SIGSTKFLT,
        signal.SIGXCPU,
        signal.SIGXFSZ,
        *range(signal.SIGRTMIN, signal.SIGRTMAX + 1),
    ]
    for sig in terminating:
        loop.add_signal_handler(sig, agent.request_stop, sig, stop)


def watch_fault_signals(agent: SignalTarget, stop: asyncio.Event) -> None:
    """A thread that takes the blocked fault signals sent by kill(2) (sigwaitinfo) and hands
    each to the loop as an ordered stop."""
    loop = asyncio.get_running_loop()

    def wait() -> None:
        while True:
            info = signal.sigwaitinfo(FAULT_SIGNALS)
            try:
                loop.call_soon_threadsafe(agent.request_stop, info.si_signo, stop)
            except RuntimeError:  # the loop is closed: vipd is on its way out anyway
                return

    threading.Thread(target=wait, name="vipd-signals", daemon=True).start()
