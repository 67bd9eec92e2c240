"""Real-time scheduling for fast adverts: keep the master's adverts on time on a busy host.

What it is: ``realtime_policy(advert_interval)`` (pure: which policy and priority, or none)
and ``apply(policy)`` (the one call into the kernel). With adverts every 0.01 s a backup's
Master_Down_Interval is 3 × 10 ms + Skew_Time ≈ 34 ms, and a master stalled that long by
the scheduler loses the VIP to a backup that was never meant to have it. Measured in the
lab on this project's 2-core machines at 0.01 s under ordinary load (a client probing at
500 connects/s, the lab polling addresses): without real-time scheduling a new master
stalled 36-100 ms right after taking over in 2 of 20 rounds, and the third node took the
VIP for a moment; SCHED_RR lets vipd run ahead of every ordinary task the moment its timer
or socket wakes it.

Policy: below ``REALTIME_BELOW`` (0.1 s) vipd asks for SCHED_RR at ``RT_PRIORITY`` (10, low
among real-time priorities, so kernel threads and anything an operator raised on purpose
still come first), as keepalived's ``vrrp_rt_priority`` does. At 0.1 s and slower the slack is
tens of milliseconds and ordinary scheduling is enough, so nothing changes. vipd needs a few
percent of one core at 0.01 s; the kernel's real-time throttling
(``kernel.sched_rt_runtime_us``, 95 % by default) still bounds a runaway. The whole process
runs SCHED_RR, every thread, as keepalived's one thread does: a thread left at ordinary
priority while it holds the GIL would hold the real-time ones back.

What it must not do: fail the daemon. Without CAP_SYS_NICE (or inside a cgroup with no
real-time budget) the request is refused: that is reported to the caller, which logs a
warning, and vipd runs on with ordinary scheduling.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

REALTIME_BELOW = 0.1  # seconds: adverts faster than this run with SCHED_RR
RT_PRIORITY = 10


@dataclass(frozen=True, slots=True)
class Policy:
    name: str  # "SCHED_RR"
    priority: int
    why: str


def realtime_policy(advert_interval: float) -> Policy | None:
    """The scheduling vipd asks for at this advert interval; None = leave it as it is."""
    if advert_interval >= REALTIME_BELOW:
        return None
    mdi_ms = 3 * advert_interval * 1000
    return Policy(
        "SCHED_RR",
        RT_PRIORITY,
        f"advert_interval {advert_interval:g} s < {REALTIME_BELOW:g} s: a master stalled "
        f"~{mdi_ms:.0f} ms by the scheduler would lose the VIP",
    )


def apply(policy: Policy) -> str | None:
    """Switch every thread of this process to ``policy``; returns None on success, else why
    not."""
    param = os.sched_param(policy.priority)
    try:
        os.sched_setscheduler(0, os.SCHED_RR, param)
    except OSError as exc:
        return f"{exc.strerror or exc} (needs CAP_SYS_NICE and a real-time budget)"
    # Linux sets the policy per thread, and threads inherit it from the one that starts them:
    # the threads started before this call (the endpoint's, the signal watcher's) and the
    # ones they start (a connection's) would stay ordinary. Such a thread serving a scrape
    # or /status holds the GIL, and at times the driver's lock, and neither passes priority
    # on: while the scheduler keeps it waiting behind ordinary tasks, so are the real-time
    # threads that need either.
    for tid in _threads():
        with contextlib.suppress(OSError):  # ended meanwhile
            os.sched_setscheduler(tid, os.SCHED_RR, param)
    return None


def _threads() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []
