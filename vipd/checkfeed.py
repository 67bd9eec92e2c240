"""The health checks' and the tracked checks' results: counted, and pushed to every election.

What it is: the agent's feed from its checkers to the election instances. It makes the
health checker (``vipd.health.checker``; every target starts unhealthy, and its gauge at 0)
and the tracked checks (``vipd.tracking``; every track starts down), counts every check
(``vipd_health_checks_total``, ``vipd_health_check_duration_seconds``), sets
``vipd_health_backend_healthy`` on every change, and hands each result to every instance
(``on_check``, ``on_health``, ``on_track``).

What it must not do: decide what a result means for the election (the backends' cores do),
or push anything once the stop has begun.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vipd import metrics
from vipd.election import Election, IPAddress
from vipd.health.checker import HealthChecker
from vipd.health.tracker import BackendHealth, Outcome
from vipd.lifecycle import Wiring
from vipd.track import Adjustment
from vipd.tracking import TrackChecker

__all__ = ["CheckFeed"]


class CheckFeed:
    """From the checkers to ``elections``, while not ``stopping()``."""

    def __init__(
        self,
        elections: Sequence[Election],
        wiring: Wiring,
    ) -> None:
        self.elections = elections
        self._cfg = wiring.config
        self._stopping = wiring.stopping
        self._guard = wiring.guard
        self._publish = wiring.publish
        self.log = wiring.log

    def health_checker(self, peers: Iterable[IPAddress]) -> HealthChecker | None:
        """The checker of the local API server and ``peers`` (not started), or None without
        a ``health`` section."""
        h = self._cfg().health
        if h is None:
            return None
        health = HealthChecker(
            [a for a in peers if a != h.local],
            h,
            lambda addr, s: self._guard(self.on_health, addr, s),
            log=self.log,
            on_check=self.on_check,
        )
        for addr in health.targets():
            metrics.HEALTH_BACKEND_HEALTHY.labels(
                target=str(addr), local=str(addr == h.local).lower()
            ).set(0)
        return health

    def start_tracks(self) -> TrackChecker | None:
        """The tracked checks, started, each down until its first result; None without
        ``track``."""
        cfg = self._cfg()
        if not cfg.track:
            return None
        tracks = TrackChecker(
            cfg.track,
            lambda a: self._guard(self.on_track, a),
            log=self.log,
            scripts=cfg.scripts,
        )
        for e in self.elections:
            e.on_track(tracks.adjustment())  # every track starts down
        tracks.start()
        return tracks

    def on_check(self, addr: IPAddress, outcome: Outcome) -> None:
        metrics.HEALTH_CHECKS.labels(target=str(addr), result="ok" if outcome.ok else "fail").inc()
        metrics.HEALTH_CHECK_DURATION.labels(target=str(addr)).observe(outcome.duration)
        if not self._stopping():
            for e in self.elections:
                e.on_check(addr, outcome)

    def on_health(self, addr: IPAddress, health: BackendHealth) -> None:
        h = self._cfg().health
        local = h is not None and addr == h.local
        metrics.HEALTH_BACKEND_HEALTHY.labels(target=str(addr), local=str(local).lower()).set(
            1 if health.healthy else 0
        )
        if not self._stopping():
            for e in self.elections:
                e.on_health(addr, health)

    def on_track(self, adj: Adjustment) -> None:
        if not self._stopping():
            for e in self.elections:
                e.on_track(adj)
        self._publish()
