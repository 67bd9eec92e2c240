"""The Active's advert schedule in a thread of its own: the steady tick without the loop.

What it is: a thread that sleeps until the time it was given and then runs ``tick(due)``
under the driver's lock; the tick sends the advert (or hands the moment to the loop) and
returns the next due time, or None to stop until it is given one again (``pace``). A Master
sends an advert every interval and nothing else happens in between, yet each of those
wake-ups costs an event loop (uvloop) several times what it costs a C daemon in
``epoll_wait``; a thread woken from its sleep, with the loop's thread idle in its poll and
the GIL free, costs much less (``bench/wake_floor.py``, shape ``uvloop-thread``). So the
schedule RFC 9568 §6.4.3 gives the Active's Adver_Timer is kept here, and the loop wakes
only for what arrives.

What it must not do: decide anything. The tick it runs
(``vrrp.driver.timers.Timers.paced_tick``) is the machine's own Adver_Timer
(``vrrp.driver.timers.steady_advert``), under the same lock as every loop callback of the
driver, and whatever is not a steady advert (a contest to end, a tick woken later than an
interval, a takeover, no socket) goes back to the loop. It does not feed the loop's
heartbeat either: the heartbeat says the loop is alive, and only the loop can say that.

The driver starts the thread when it joins the election (``start``), so that no takeover
waits for a thread to be created; it sleeps on a lock until the first ``pace``. It inherits
the scheduling of the thread that starts it, so the driver starts it only after its own
real-time request (``vipd.host.sched``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

# A due time this close is due now: waking again for the rest costs more than it is worth
# (the backups' down timer is three intervals and a skew), and the machine is told the due
# time itself, not the earlier moment.
DUE_SLACK = 0.0002
# How long close() waits for the thread to finish its tick.
JOIN_TIMEOUT = 1.0


class AdvertPacer:
    """Runs ``tick(due)`` at each due time, under ``lock``, in a daemon thread.

    ``pace(due)`` and ``halt()`` are called with ``lock`` held (the driver holds it in
    every loop callback); ``tick`` is called with it held and returns the next due time
    (None: stop until ``pace`` is called again)."""

    def __init__(
        self,
        tick: Callable[[float], float | None],
        lock: threading.RLock,
        *,
        clock: Callable[[], float] = time.monotonic,
        name: str = "vrrp-adverts",
    ) -> None:
        self._tick = tick
        self._lock = lock
        self._clock = clock
        self._name = name
        self._due: float | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        # Held while nobody rang: the thread sleeps by acquiring it with a timeout, and a
        # ring (an earlier due time, a stop) releases it.
        self._bell = threading.Lock()
        self._bell.acquire()
        self.ticks = 0  # ticks run (the tests and /status read it)

    @property
    def due(self) -> float | None:
        return self._due

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread, idle until the first ``pace``. Not on a takeover's path:
        ``Thread.start`` waits until the new thread has run, which a busy scheduler can put
        off (design/vrrp.md, "Fast adverts")."""
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def pace(self, due: float) -> None:
        """The next tick is due at ``due`` (the caller holds the lock)."""
        if self._closed:
            return
        wake = self._due is None or due < self._due
        self._due = due
        if self._thread is None:
            self.start()
        elif wake:
            self._ring()

    def halt(self) -> None:
        """Nothing is due until ``pace`` again (the caller holds the lock). The thread, if
        asleep, finds that out when it wakes; it sends nothing meanwhile."""
        self._due = None

    def close(self) -> None:
        """Stop the thread and wait for it (not with the lock held: it may be waiting for
        it)."""
        with self._lock:
            self._closed = True
            self._due = None
        self._ring()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT)

    def _ring(self) -> None:
        # Rung twice before the thread woke: the bell is already open.
        with contextlib.suppress(RuntimeError):
            self._bell.release()

    def _run(self) -> None:
        clock, bell = self._clock, self._bell
        while True:
            with self._lock:
                if self._closed:
                    return
                due = self._due
                if due is not None and due - clock() <= DUE_SLACK:
                    self.ticks += 1
                    self._due = self._tick(due)
                    continue
            if due is None:
                bell.acquire()
            else:
                bell.acquire(timeout=max(0.0, due - clock()))
