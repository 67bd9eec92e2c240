"""Tracking, the pure part: what a tracked check's result does to the election
(keepalived's ``track_script`` and ``track_file``, keepalived.conf(5)).

What it is
    `file_value` reads a track file's text the way keepalived's ``track_file`` does, with
    words for the common case: ``up`` (or empty of meaning: ``0``) is up, ``down`` is down, and
    an integer is up and added to the priority (``-50`` lowers it by 50; keepalived's
    track_file with weight 1). Anything else, like a missing file, is down.

    `adjust` folds every track's current state into one `Adjustment`: the sum of the weights
    of the tracks that are down, the sum of the file values of those that are up, and
    whether a ``fault`` track is down. `effective_priority` combines it with the health gate
    (``vipd.health.gate``): ``priority - health weight (while unhealthy) - down weights +
    file values``, clamped to 1..254. The floor at 1 keeps the gate's rule: tracking never
    takes the priority to 0 (resigning), so a lone node, with nobody to defer to, still
    becomes active after its down interval, and ``kubeadm init`` reaches its API server
    through the VIP. Only a ``fault`` track takes the node out of the election (keepalived's
    FAULT state), and only because the operator asked for exactly that.

What it must not do: run a script, read a file or a clock (``vipd.tracking`` does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from vipd.config import Track
from vipd.health.gate import MAX_PRIORITY, MIN_PRIORITY


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


def effective_priority(priority: int, health_weight: int, healthy: bool, adj: Adjustment) -> int:
    gated = priority - (0 if healthy else health_weight) - adj.penalty + adj.offset
    return max(MIN_PRIORITY, min(MAX_PRIORITY, gated))
