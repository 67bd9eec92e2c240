"""Tracking, the pure part: what a tracked check's result does to the election
(keepalived's ``track_script`` and ``track_file``, keepalived.conf(5)).

What it is
    `file_value` reads a track file's text the way keepalived's ``track_file`` does, with
    words for the common case: ``up`` (or empty of meaning: ``0``) is up, ``down`` is down, and
    an integer is up and added to the priority (``-50`` lowers it by 50; keepalived's
    track_file with weight 1). Anything else, like a missing file, is down.

    `adjust` folds every track's current state into one `Adjustment`: the sum of the weights
    of the tracks that are down, the sum of the file values of those that are up, and
    whether a ``fault`` track is down. `effective_priority` combines it with the health gate:
    ``priority - health weight (while unhealthy) - down weights + file values``, clamped to
    1..254. It is vipd's one formula for the advertised priority: the VRRP backend uses it,
    and so do ``vipd check`` and the tests.

The health gate
    keepalived's weighted ``track_script`` rule for one tracked check with a negative weight
    (``vrrp_track.c``, ``process_script_update_priority`` and ``vrrp_set_effective_priority``):
    while the local API server is unhealthy the node advertises ``priority - weight``, floored
    at 1; while it is healthy, ``priority``. Our ``weight`` is the size of the reduction
    (keepalived writes it as ``weight -N``). The gate only lowers the priority, it never takes
    the node out of the election (keepalived's unweighted scripts put the instance in FAULT,
    which sends no adverts and never takes the VIP; that would keep ``kubeadm init`` from ever
    reaching its API server through the VIP). A node with nobody else to defer to still
    becomes active after its Master_Down_Interval, whatever its priority. A healthy node takes
    the VIP from an unhealthy active one when its priority is higher than the unhealthy node's
    reduced priority (`outranks`; it preempts, which needs ``preempt``). With ``weight = 0``
    the check still runs (for IPVS and for the logs) but leadership is not gated. The floor
    at 1 holds for tracking too: it never takes the priority to 0 (resigning, RFC 9568
    §5.2.4). Only a ``fault`` track takes the node out of the election (keepalived's FAULT
    state), and only because the operator asked for exactly that.

What it must not do: run a script, read a file or a clock (``vipd.tracking`` does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from vipd.config import Track

MIN_PRIORITY = 1  # 0 means "resigning" on the wire (RFC 9568 §5.2.4)
MAX_PRIORITY = 254  # 255 belongs to the address owner, which vipd never is
MAX_WEIGHT = MAX_PRIORITY - MIN_PRIORITY  # 253: any node, unhealthy, advertises priority 1


def file_value(text: str | None) -> tuple[bool, int]:
    """(up, priority change) of a track file's contents; None: the file could not be read."""
    if text is None:
        return False, 0
    word = text.strip().lower()
    if word == "up":
        return True, 0
    if word == "down":
        return False, 0
    if re.fullmatch(r"[+-]?[0-9]{1,4}", word):
        return True, int(word)
    return False, 0


@dataclass(frozen=True, slots=True)
class Adjustment:
    penalty: int = 0  # the weights of the tracks that are down
    offset: int = 0  # the file values of the tracks that are up
    fault: bool = False  # a track with weight "fault" is down
    down: tuple[str, ...] = ()  # names of the tracks that are down

    @property
    def ok(self) -> bool:
        """Nothing down and nothing lowered: what the Lease backend counts as healthy."""
        return not self.down and self.offset >= 0


NONE = Adjustment()


def adjust(states: Iterable[tuple[Track, bool, int]]) -> Adjustment:
    """``states``: (track, up, file value) for every track."""
    penalty = offset = 0
    fault = False
    down: list[str] = []
    for track, up, value in states:
        if up:
            offset += value
        else:
            down.append(track.name)
            penalty += track.weight
            fault = fault or track.fault
    return Adjustment(penalty, offset, fault, tuple(down))


def _check(value: int, low: int, high: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int (got {value!r})")
    if not low <= value <= high:
        raise ValueError(f"{what} must be in {low}..{high} (got {value})")


def effective_priority(
    priority: int, health_weight: int, healthy: bool, adj: Adjustment = NONE
) -> int:
    """The priority to advertise: ``priority``, less ``health_weight`` while unhealthy, less
    the weights of the tracks that are down, plus the file values of those that are up,
    clamped to 1..254. ``priority`` and ``health_weight`` are the config's, already in range
    (a value out of it is a bug: ValueError)."""
    _check(priority, MIN_PRIORITY, MAX_PRIORITY, "priority")
    _check(health_weight, 0, MAX_WEIGHT, "weight")
    gated = priority - (0 if healthy else health_weight) - adj.penalty + adj.offset
    return max(MIN_PRIORITY, min(MAX_PRIORITY, gated))


def outranks(healthy_priority: int, unhealthy_priority: int, weight: int) -> bool:
    """Whether a healthy node of ``healthy_priority`` ranks strictly above an unhealthy node
    of ``unhealthy_priority`` on priority alone (equal priorities fall to the address
    tie-break, which knows nothing about health). True for every pair of priorities >= 2 with
    the default weight 253."""
    return healthy_priority > effective_priority(unhealthy_priority, weight, False)
