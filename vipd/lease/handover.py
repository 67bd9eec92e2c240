"""The Lease backend's stop: release the Lease, and hand the VIP over make-before-break.

The handover (graceful stop)
    The release write is sent; the VIP stays. The successor reads the release at its
    next retry, writes its acquire, binds the VIP on the answer and announces it. This
    node drops the VIP at the first of: the successor's gratuitous ARP heard (its VIP
    is up: no gap, no overlap beyond the frame's way), or ``SUCCESSOR_GRACE`` after the
    send of the last read that did *not* show a successor, once a read shows one. The
    successor's write was committed after that read was served, and it binds only after
    its write is answered, so the two hold at once for less than ``SUCCESSOR_GRACE``
    whatever the polling lag. Nobody seen within one retry period and a little: drop.
What it is
    `Handover.resign`: settle a takeover write still in flight (a Lease won at the stop is
    released like any other), send the release (once more after a 409: a renewal in flight
    at the stop lands first), then wait for the successor (`_await_successor`).

What it must not do
    Decide anything (the core's `release`/`release_again` say what to write), touch the
    VIP (the agent removes it when `resign` returns), or wait longer than one retry period
    and a little for a successor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from vipd import log as vlog
from vipd.election import FOLLOWER
from vipd.lease import logic
from vipd.lease.feed import LeaseFeed
from vipd.lease.model import Role

__all__ = ["HANDOVER_POLL", "SUCCESSOR_GRACE", "Handover"]

# How often a stopping leader reads the Lease while it waits for its successor.
HANDOVER_POLL = 0.05
# The overlap bound of a handover (see the module docstring), less the time the agent takes
# to remove the address once the wait ends: the make-before-break overlap stays under 0.1 s.
SUCCESSOR_GRACE = 0.08


class Handover(LeaseFeed):
    """Resigning one node's Lease election: the release and the successor wait."""

    async def resign(self, graceful: bool) -> None:
        """Release the Lease; after a graceful stop keep the VIP until a successor shows in
        the Lease (the agent removes it when this returns)."""
        # Release whatever the role: a leader whose VIP waits for ``bind_at`` holds the Lease
        # too (``leader`` is False then). The successor wait is only for a VIP that is up.
        held_vip = self.elector.leader
        await self._settle_takeover()
        self._was_leader = self.elector.role is not Role.FOLLOWER
        if self.api is None or not self._was_leader:
            return
        timeout = max(0.2, min(self.lease.renew_deadline * 0.5, 5.0))
        # From here on this node does not lead (it will never renew again), whatever the
        # release's fate; the VIP stays, quiet, until the successor shows up
        # (make-before-break).
        now = self.clock()
        self._transition(FOLLOWER, "released", "stopping: releasing the Lease", now)
        released = False
        released_at = now
        actions = self.elector.release(now, timeout)
        outcome: logic.Outcome | None = None
        # One more try after a 409: a renewal in flight at the stop lands first and moves
        # the resourceVersion on; without the retry the peers would wait out the Lease.
        for attempt in (1, 2):
            sends = [a for a in actions if isinstance(a, logic.Send)]
            if not sends:
                break
            released_at = time.monotonic()
            outcome = await self._call(sends[0].request, timeout + 0.5)
            released = isinstance(outcome, logic.Ok)
            if released or attempt == 2 or not isinstance(outcome, logic.Conflict):
                break
            read = logic.Request(0, logic.Verb.GET, logic.Purpose.READ, timeout=timeout)
            fresh = await self._call(read, timeout + 0.5)
            if not isinstance(fresh, logic.Ok):
                break
            vlog.event(
                self.log,
                logging.INFO,
                "release refused on a stale version: releasing again",
                holder=fresh.record.holder,
            )
            actions = self.elector.release_again(self.clock(), timeout, fresh.record)
        if released:
            vlog.event(self.log, logging.INFO, "released the Lease", outcome="ok")
        elif outcome is not None:
            vlog.event(
                self.log,
                logging.WARNING,
                "could not release the Lease: peers wait for it to expire",
                outcome=logic.outcome_kind(outcome),
            )
        if released and graceful and held_vip:
            await self._await_successor(released_at)
        self._successor_heard = None

    async def _settle_takeover(self) -> None:
        """A follower's takeover write (acquire or create) in flight when the stop began can
        still land. Wait for its answer (bounded by its own timeout): a Lease won at the stop
        is then released like any other, not left to a holder that is gone, for the peers to
        wait out its whole duration with nobody holding the VIP. Only the role is taken from
        the answer; nothing more is sent, and the stopping agent binds nothing."""
        fut, req = self._inflight, self._inflight_req
        takeover = (logic.Purpose.ACQUIRE, logic.Purpose.CREATE)
        if fut is None or req is None or req.purpose not in takeover:
            return
        if self.elector.role is not Role.FOLLOWER:
            return
        try:
            outcome = await asyncio.wait_for(asyncio.shield(fut), req.timeout + 0.5)
        except TimeoutError:
            return  # not answered: whether it landed is unknown, as after a crash
        self._inflight = None
        actions = self._result(outcome)
        self._apply([a for a in actions if not isinstance(a, logic.Send)], self.clock())

    async def _call(self, request: logic.Request, timeout: float) -> logic.Outcome:
        """One API call on the pool, its answer or Unreachable after ``timeout``."""
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(self._pool, self._api_call, request), timeout
            )
        except TimeoutError:
            return logic.Unreachable("timed out")

    def _api_call(self, request: logic.Request) -> logic.Outcome:
        assert self.api is not None
        return self.api.call(request)

    async def _await_successor(self, released_at: float) -> None:
        """Make-before-break: keep the (quiet) VIP until the successor is up, at most one
        retry period plus a little (the successor reads at its next retry, then writes).
        ``released_at``: when the release write was sent (monotonic); the bound on the
        overlap is in the module docstring."""
        assert self.api is not None
        loop = asyncio.get_running_loop()
        heard = self._successor_heard = asyncio.Event()
        bound = self.lease.retry_period + 0.5
        # The send time of the last read that showed no successor: its write came later.
        clear = released_at
        holder: str | None = None
        while (left := released_at + bound - time.monotonic()) > 0:
            sent = time.monotonic()
            req = logic.Request(0, logic.Verb.GET, logic.Purpose.READ, timeout=0.5)
            read = loop.run_in_executor(self._pool, self.api.call, req)
            listen = loop.create_task(heard.wait(), name="lease-successor-arp")
            both: set[asyncio.Future[Any]] = {read, listen}
            try:
                await asyncio.wait(
                    both, timeout=min(1.0, left), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                listen.cancel()
            if heard.is_set():
                self._handover_done("announcement heard", released_at, holder)
                return
            if not read.done():
                continue  # no answer in a second: read again (the bound still holds)
            outcome = read.result()
            if isinstance(outcome, logic.Ok) and outcome.record.holder not in (None, self.cfg.node):
                holder = outcome.record.holder
                # Its write is visible here a moment before it has its answer and binds the
                # VIP: keep the VIP until ``clear + SUCCESSOR_GRACE`` (or its ARP), so that
                # clients never find nobody and the overlap stays bounded.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        heard.wait(), max(0.0, clear + SUCCESSOR_GRACE - time.monotonic())
                    )
                self._handover_done(
                    "announcement heard" if heard.is_set() else "new holder seen",
                    released_at,
                    holder,
                )
                return
            clear = sent
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard.wait(), HANDOVER_POLL)
            if heard.is_set():
                self._handover_done("announcement heard", released_at, holder)
                return
        vlog.event(self.log, logging.INFO, "no new holder seen: releasing the VIP", waited_s=bound)

    def _handover_done(self, how: str, released_at: float, holder: str | None) -> None:
        vlog.event(
            self.log,
            logging.INFO,
            f"{how}: releasing the VIP",
            holder=holder,
            after_s=round(time.monotonic() - released_at, 6),
        )
