"""Make-before-break on a stop: after our priority-0 advert, keep the VIP until the successor
is heard and its claim seen.

What it is: the waiting half of a resign (RFC 9568 §6.4.3's Shutdown event, with keepalived's
and vipd's successors in mind). The driver sends the priority-0 advert and steps down, then
hands every advert it reads (``on_advert``) and every claim its watch sees
(``on_claim``) to a :class:`Handover`, whose ``wait`` returns when the new leader has
advertised and claimed the VIP (its announcement, or its second advert where announcements
are not watched), or when no backup can still come. A vipd successor advertises first and
binds, announces and advertises again ``release_contest`` later; keepalived announces right
after its advert (``vrrp_state_goto_master``). Backups of one priority fire together and
only the best-ranked of them binds (the release contest): that one is named.

Both waits run on the driver's injected clock and timers (the loop's in production, fake
ones in the unit tests).

What it must not do: touch the VIP or the wire: the agent releases the VIP when ``wait``
returns.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from vipd import log as vlog
from vipd.vrrp.driver.wire import IPAddress, Timer

Later = Callable[[float, Callable[[], None]], Timer]


class Handover:
    """One resign's wait for its successor (see the module docstring)."""

    def __init__(self, later: Later, clock: Callable[[], float], log: logging.Logger) -> None:
        self._later = later
        self._clock = clock
        self._log = log
        self._wake = asyncio.Event()
        self.heard = False  # a successor's advert (priority > 0)
        self.claimed_by: str | None = None  # "announcement" or "advert", whichever came first
        self.successor: IPAddress | None = None
        self._rank = (0, 0)  # (priority, address): the best advert heard
        self._adverts: Counter[IPAddress] = Counter()  # adverts per router

    def on_advert(self, src: IPAddress, priority: int) -> None:
        if priority <= 0:
            return
        rank = (priority, int(src))
        if rank > self._rank:
            self.successor, self._rank = src, rank
            self.heard = True
        self._adverts[src] += 1
        if self._adverts[src] >= 2:
            # Its second advert: a vipd successor sends it right after its bind and
            # announcement; keepalived's next one is its own adverts' cadence.
            self.claimed_by = self.claimed_by or "advert"
        self._wake.set()

    def on_claim(self) -> None:
        """Another MAC announced the VIP: the successor's announcement."""
        self.claimed_by = self.claimed_by or "announcement"
        self._wake.set()

    async def wait(self, handover_bound: float, claim_bound: float) -> None:
        """Until the successor is heard (at most ``handover_bound``) and then its claim seen
        (at most ``claim_bound`` more)."""
        started = self._clock()
        if not await self._until(lambda: self.heard, handover_bound):
            vlog.event(
                self._log,
                logging.INFO,
                "no new leader heard: releasing the VIP",
                waited_s=handover_bound,
            )
            return
        # The clients move on the announcement: wait for it, or for the successor's second
        # advert where announcements are not watched (IPv6), bounded, before letting go.
        await self._until(lambda: self.claimed_by is not None, claim_bound)
        vlog.event(
            self._log,
            logging.INFO,
            "new leader heard: releasing the VIP",
            after_s=round(self._clock() - started, 6),
            leader=self.successor,
            claim_seen=self.claimed_by or "not seen",
        )

    async def _until(self, done: Callable[[], bool], timeout: float) -> bool:
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            self._wake.set()

        timer = self._later(timeout, expire)
        try:
            while not done() and not expired:
                self._wake.clear()
                await self._wake.wait()
        finally:
            timer.cancel()
        return done()
