"""Health gating of VRRP leadership: the effective priority, as pure arithmetic.

What it is: keepalived's weighted ``track_script`` rule for one tracked check with a negative
weight (``vrrp_track.c``, ``process_script_update_priority`` and
``vrrp_set_effective_priority``): while the local API server is unhealthy the node advertises
``priority - weight``, floored at 1; while it is healthy, ``priority``. Our ``weight`` is the
size of the reduction (keepalived writes it as ``weight -N``).

The rule and why it never strands a lone node: the gate only lowers the priority, it never
takes the node out of the election (keepalived's unweighted scripts put the instance in FAULT,
which sends no adverts and never takes the VIP; that would keep ``kubeadm init`` from ever
reaching its API server through the VIP). A node with nobody else to defer to still becomes
active after its Master_Down_Interval, whatever its priority. A healthy node takes the VIP
from an unhealthy active one when its priority is higher than the unhealthy node's reduced
priority (it preempts; this needs ``preempt``), and an unhealthy node that joins does not
preempt a healthy active one for the same reason. With ``weight = 0`` the check still runs
(for IPVS and for the logs) but leadership is not gated.

What it must not do: any I/O or clock reading; it does not know about the checker or the
state machine, only numbers.
"""

from __future__ import annotations

__all__ = ["MAX_PRIORITY", "MAX_WEIGHT", "MIN_PRIORITY", "effective_priority", "outranks"]

MIN_PRIORITY = 1  # 0 means "resigning" on the wire (RFC 9568 §5.2.4)
MAX_PRIORITY = 254  # 255 belongs to the address owner, which vipd never is
MAX_WEIGHT = MAX_PRIORITY - MIN_PRIORITY  # 253: any node, unhealthy, advertises priority 1


def _check(value: int, low: int, high: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int (got {value!r})")
    if not low <= value <= high:
        raise ValueError(f"{what} must be in {low}..{high} (got {value})")


def effective_priority(priority: int, weight: int, healthy: bool) -> int:
    """The priority to advertise: ``priority`` when healthy, else ``max(1, priority - weight)``."""
    _check(priority, MIN_PRIORITY, MAX_PRIORITY, "priority")
    _check(weight, 0, MAX_WEIGHT, "weight")
    if healthy:
        return priority
    return max(MIN_PRIORITY, priority - weight)


def outranks(healthy_priority: int, unhealthy_priority: int, weight: int) -> bool:
    """Whether a healthy node of ``healthy_priority`` ranks strictly above an unhealthy node
    of ``unhealthy_priority`` on priority alone (equal priorities fall to the address
    tie-break, which knows nothing about health). True for every pair of priorities >= 2 with
    the default weight 253."""
    return healthy_priority > effective_priority(unhealthy_priority, weight, False)
