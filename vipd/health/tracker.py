"""Rise/fall tracking of one health-check target, as pure data in and data out.

What it is: a :class:`Tracker` fed with the outcome of each check (:class:`Outcome`, with the
time it finished) that says whether the target is healthy. A target starts UNHEALTHY and
becomes healthy after ``rise`` consecutive successes; a healthy target becomes unhealthy after
``fall`` consecutive failures. These are keepalived's ``rise``/``fall`` (vrrp_script, and the
checkers' ``alpha`` mode: a real server counts as down until it has passed its checks), so one
slow answer among good ones changes nothing when ``fall`` > 1, and one good answer among bad
ones changes nothing when ``rise`` > 1.

Why a target starts unhealthy: a node whose API server is not up yet must not look healthy,
or it would preempt a healthy leader the moment it starts (see ``gate``), and a backend must
not receive connections before it has answered (CAPVCO's pool rule: "added to the pool only
once its API server is actually healthy").

What it must not do: any I/O, read a clock, or decide what a check result means for the
election or for IPVS (``gate`` and the IPVS plan do that). Time is passed in as ``now``:
float seconds of a monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["BackendHealth", "Outcome", "Tracker"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one check.

    ``ok`` is True only for an HTTP 200. ``status`` is the HTTP status when a response line
    arrived (None otherwise); ``error`` says why a check failed (None when ``ok``);
    ``duration`` is how long the check took, in seconds. ``failed_checks``: the checks a
    failing answer named as failed (kube-apiserver's ``[-]<name> failed`` lines), if any.
    """

    ok: bool
    status: int | None = None
    error: str | None = None
    duration: float = 0.0
    failed_checks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BackendHealth:
    """What is known about one target right now (immutable: a snapshot).

    ``since`` is when ``healthy`` last changed (or when tracking started, for a target that
    never changed). ``status``/``error``/``duration``/``checked_at`` describe the last check
    (None before the first one). ``successes``/``failures`` are the current run of
    consecutive results; ``checks`` counts every check.
    """

    healthy: bool
    since: float
    status: int | None = None
    error: str | None = None
    duration: float | None = None
    checked_at: float | None = None
    successes: int = 0
    failures: int = 0
    checks: int = 0


def _check_threshold(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1 (got {value!r})")


class Tracker:
    """Rise/fall state of one target. Not thread-safe; the caller serialises calls."""

    def __init__(self, rise: int, fall: int, now: float) -> None:
        _check_threshold(rise, "rise")
        _check_threshold(fall, "fall")
        self.rise = rise
        self.fall = fall
        self.state = BackendHealth(healthy=False, since=now)

    @property
    def healthy(self) -> bool:
        return self.state.healthy

    def record(self, now: float, outcome: Outcome) -> bool:
        """Account for one finished check; True if ``healthy`` changed because of it."""
        s = self.state
        successes = s.successes + 1 if outcome.ok else 0
        failures = 0 if outcome.ok else s.failures + 1
        healthy = s.healthy
        if not healthy and successes >= self.rise:
            healthy = True
        elif healthy and failures >= self.fall:
            healthy = False
        changed = healthy != s.healthy
        self.state = replace(
            s,
            healthy=healthy,
            since=now if changed else s.since,
            status=outcome.status,
            error=None if outcome.ok else (outcome.error or "failed"),
            duration=outcome.duration,
            checked_at=now,
            successes=successes,
            failures=failures,
            checks=s.checks + 1,
        )
        return changed
