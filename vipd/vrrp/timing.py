"""The VRRP timers' arithmetic: Skew_Time and Master_Down_Interval, to the microsecond.

What it is: RFC 3768 §6.1 (VRRPv2) and RFC 9568 §6.1 (VRRPv3) timer formulas, computed in
integer microseconds exactly as keepalived's ``vrrp.h`` does, so a vipd backup and a
keepalived backup put their down timer at the same instant (truncation < 1 µs), and the
argument checks every VRRP core module shares.

What it must not do: hold state, read a clock or do any I/O. It knows numbers only: who is
active and when a timer fires is ``vrrp.state``'s job.
"""

from __future__ import annotations

__all__ = [
    "DOWN_TIMER_ADVERTS",
    "MAX_LEARNED_INTERVAL_FACTOR",
    "check_priority",
    "check_version",
    "master_down_interval",
    "master_down_interval_us",
    "skew_time",
    "skew_time_us",
]

# How many advert intervals a backup waits before declaring the master down. Fixed by both
# RFCs; keepalived's non-standard ``down_timer_adverts`` knob is deliberately not offered.
DOWN_TIMER_ADVERTS = 3

# A v3 Backup adopts the master's Max Adver Int (RFC 9568 §6.4.2) only up to this many times
# its own configured interval. The advert is unauthenticated, so without a bound one forged
# packet with 4095 cs stretches every backup's down timer to 3 x 40.95 s + skew. 4 keeps a
# real peer at up to 12x our interval from flapping (3 x 4 = 12 intervals before the timer
# runs out; keepalived's default 1 s against our 0.1 s is 10x), and caps what one forged
# advert can cost at 3 x 4 x our interval + skew without a holder. See docs/design/vrrp.md
# "Forged adverts".
MAX_LEARNED_INTERVAL_FACTOR = 4


_US_PER_S = 1_000_000
_US_PER_CS = 10_000


def check_priority(priority: int, low: int, high: int, what: str = "priority") -> None:
    """Raise TypeError/ValueError unless ``priority`` is an int in ``low..high``."""
    # bool is an int subclass; True as a priority is a bug upstream, not priority 1.
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"{what} must be an int (got {priority!r})")
    if not low <= priority <= high:
        raise ValueError(f"{what} must be in {low}..{high} (got {priority})")


def check_version(version: int) -> None:
    """Raise ValueError unless ``version`` is a VRRP version we speak (2 or 3)."""
    if version not in (2, 3):
        raise ValueError(f"version must be 2 or 3 (got {version!r})")


def skew_time_us(version: int, priority: int, master_adver_interval_cs: int) -> int:
    """Skew_Time in whole microseconds, truncated exactly as keepalived's ``vrrp.h`` does.

    v2 (RFC 3768 §6.1): ``(256 - priority) / 256`` s; the interval is not used.
    v3 (RFC 9568 §6.1): ``(256 - priority) * interval / 256``, i.e. ``(256-p) * cs * 625 / 16``
    µs. ``priority`` is the local router's priority (1..255).
    """
    check_version(version)
    check_priority(priority, 1, 255)
    check_priority(master_adver_interval_cs, 1, 4095 if version == 3 else 25500, "interval_cs")
    if version == 2:
        return (256 - priority) * _US_PER_S // 256
    return (256 - priority) * master_adver_interval_cs * 625 // 16


def master_down_interval_us(version: int, priority: int, master_adver_interval_cs: int) -> int:
    """Master_Down_Interval (RFC 9568: Active_Down_Interval) in whole microseconds."""
    skew = skew_time_us(version, priority, master_adver_interval_cs)
    return DOWN_TIMER_ADVERTS * master_adver_interval_cs * _US_PER_CS + skew


def skew_time(version: int, priority: int, master_adver_interval_cs: int) -> float:
    """Skew_Time in seconds (see :func:`skew_time_us`)."""
    return skew_time_us(version, priority, master_adver_interval_cs) / _US_PER_S


def master_down_interval(version: int, priority: int, master_adver_interval_cs: int) -> float:
    """Master_Down_Interval in seconds: 3 x interval + Skew_Time (v2: the own interval)."""
    return master_down_interval_us(version, priority, master_adver_interval_cs) / _US_PER_S
