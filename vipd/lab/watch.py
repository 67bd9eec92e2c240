"""A VIP-holder timeline on the lab's monotonic clock, from ``vipd.lab.addrwatch`` events.

What it is: ``HolderWatch(lab, vip)``, a context manager around ``AddressWatch`` (``ip -ts
-o monitor address`` in every node; no polling, which would spawn hundreds of ``ip``
processes a second and disturb the timing it watches). ``start()`` starts the monitors,
gives them a moment to subscribe, and notes the wall-clock → monotonic offset (each event
read from a monitor carries its own, taken when it was read: a clock stepped or slewed during
a long module moves no event against the marks);
``timeline()`` returns what was recorded so far as a ``vipd.lab.timeline.Timeline`` on
``time.monotonic()``, the clock the lab's faults and the prober's attempts use.

What it must not do: judge (``vipd.lab.timeline`` and the tests do), or record anything
itself: the events are ``AddressWatch``'s.
"""

from __future__ import annotations

import time
from types import TracebackType

from vipd.lab.addrwatch import AddressWatch
from vipd.lab.timeline import Change, Timeline
from vipd.lab.topology import Lab, LabError

SUBSCRIBE_GRACE = 0.3  # seconds for `ip monitor` to subscribe before the start snapshot


class HolderWatch:
    def __init__(self, lab: Lab, vip: str) -> None:
        self.watch = AddressWatch(lab, vip)
        self._start: float | None = None
        self._offset = 0.0  # time.time() - time.monotonic()

    def __enter__(self) -> HolderWatch:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.watch.start()
        time.sleep(SUBSCRIBE_GRACE)
        # The snapshot again, now that the monitors have surely subscribed: a change between
        # the two is in the events as well, and applying it twice changes nothing.
        self.watch.initial = frozenset(self.watch.lab.holders(self.watch.vip))
        self._offset = time.time() - time.monotonic()
        self._start = time.monotonic()

    def timeline(self) -> Timeline:
        if self._start is None:
            raise LabError("HolderWatch.timeline() before start()")
        changes = [
            Change(
                e.at - (self._offset if e.clock_offset is None else e.clock_offset), e.node, e.added
            )
            for e in list(self.watch.events)  # appended by reader threads; a copy is atomic
        ]
        return Timeline(self._start, self.watch.initial, [c for c in changes if c.t > self._start])

    def stop(self) -> None:
        self.watch.stop()
