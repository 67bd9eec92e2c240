"""Routing-table mode's desired state and plan: which kernel routes say "announce the VIP".

What it is
    Pure functions over frozen records, for a node that announces its VIPs through a routing
    daemon on the same node (FRR's ``redistribute table``, BIRD's ``protocol kernel`` on a
    table). For each VIP two routes are vipd's, both tagged with vipd's route protocol number
    (default 248, kube-vip's) so that an observation can tell them from everyone else's:

    - the *binding*: an AnyIP route ``local VIP/32 dev lo table local``: the node accepts
      packets for the VIP (and answers from it) without the VIP being an address;
    - the *announcement*: ``VIP/32 dev lo table 198``: the table the routing daemon exports.

    A VIP is in one of three `Phase` s: ``ANNOUNCED`` (both routes), ``DRAINING`` (the binding
    only: the announcement is being withdrawn from the fabric while connections still reach
    this node) and ``WITHDRAWN`` (neither). `step` moves a VIP between phases on the
    announce/withdraw decision and a drain delay; `plan(observed, desired)` returns the route
    operations, in the order to apply them; ``plan(x, desired_of(x)) == []`` when converged.

Ordering rules
    - Announce: the binding first, then the announcement: a router never sends a packet to a
      node that would not accept it.
    - Withdraw: the announcement first; the binding only after the drain delay (``step``),
      once the fabric has stopped sending new flows here; never the other way round.
    - Within one plan: every route addition of a binding precedes every announcement; every
      removal of an announcement precedes every removal of a binding.

Reconcile
    Every route of vipd's protocol in vipd's table, and every local route of vipd's protocol,
    whose VIP is not in ``desired`` is removed: after a SIGKILL a fresh start with an empty
    ``desired`` (or the VIPs it owns now) cleans up whatever the dead process left, including a
    route for a VIP that is no longer configured. Routes of other protocols are never seen
    (the actuator filters by protocol) and never planned.

Why an AnyIP route and not an address on ``lo``
    FRR 8.4's zebra (``ip import-table``, which bgpd's ``redistribute table`` exports) imports
    the table's route with distance 15; an address on ``lo`` adds a *connected* /32 with
    distance 0, zebra selects that one, and only the selected route is redistributed: nothing
    is announced. A route in the kernel's ``local`` table is not imported by zebra, so the
    table route stays selected (checked against FRR 8.4 in tests/netns/test_routed.py). FRR
    ≥ 10's ``redistribute table-direct`` exports the table without the RIB's selection; the
    AnyIP binding works with both.

What it must not do
    No I/O, no clocks, no netlink: the actuator observes and applies, this module decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

__all__ = [
    "DEFAULT_DRAIN",
    "DEFAULT_PROTOCOL",
    "DEFAULT_TABLE",
    "AddBinding",
    "AddRoute",
    "DelBinding",
    "DelRoute",
    "Observed",
    "Op",
    "Phase",
    "Track",
    "host_network",
    "plan",
    "step",
    "wake_at",
]

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

DEFAULT_TABLE = 198  # kube-vip's routing-table mode
DEFAULT_PROTOCOL = 248  # kube-vip's; any value unused by the kernel (0-4) and the daemons
DEFAULT_DRAIN = 2.0  # seconds: withdraw measured at 0.13 s on a BFD fabric; ample margin


class Phase(Enum):
    ANNOUNCED = "announced"
    DRAINING = "draining"
    WITHDRAWN = "withdrawn"


def host_network(vip: IPAddress) -> IPNetwork:
    """The VIP as a host route: /32 or /128."""
    return ip_network(vip)


@dataclass(frozen=True, slots=True)
class Observed:
    """vipd's routes as the kernel has them now (only vipd's protocol is ever listed).

    ``announced``: destinations in vipd's table; ``bound``: local-type destinations in the
    ``local`` table.
    """

    announced: frozenset[IPNetwork] = frozenset()
    bound: frozenset[IPNetwork] = frozenset()


@dataclass(frozen=True, slots=True)
class AddBinding:
    dst: IPNetwork


@dataclass(frozen=True, slots=True)
class AddRoute:
    dst: IPNetwork


@dataclass(frozen=True, slots=True)
class DelRoute:
    dst: IPNetwork


@dataclass(frozen=True, slots=True)
class DelBinding:
    dst: IPNetwork


Op = AddBinding | AddRoute | DelRoute | DelBinding


def plan(observed: Observed, desired: Mapping[IPAddress, Phase]) -> list[Op]:
    """The operations that take ``observed`` to ``desired``, in the order to apply them.

    A VIP missing from ``desired`` is WITHDRAWN. The order is the one the module docstring
    states: bindings added, announcements added, announcements removed, bindings removed.
    """
    want_bound: set[IPNetwork] = set()
    want_announced: set[IPNetwork] = set()
    for vip, phase in desired.items():
        dst = host_network(vip)
        if phase is not Phase.WITHDRAWN:
            want_bound.add(dst)
        if phase is Phase.ANNOUNCED:
            want_announced.add(dst)
    ops: list[Op] = []
    ops += [AddBinding(d) for d in sorted(want_bound - observed.bound, key=_key)]
    ops += [AddRoute(d) for d in sorted(want_announced - observed.announced, key=_key)]
    ops += [DelRoute(d) for d in sorted(observed.announced - want_announced, key=_key)]
    ops += [DelBinding(d) for d in sorted(observed.bound - want_bound, key=_key)]
    return ops


def _key(net: IPNetwork) -> tuple[int, int, int]:
    return (net.version, int(net.network_address), net.prefixlen)


@dataclass(frozen=True, slots=True)
class Track:
    """One VIP's phase and when it entered it (seconds of a monotonic clock)."""

    phase: Phase = Phase.WITHDRAWN
    since: float = 0.0


def step(now: float, announce: bool, prev: Track, drain: float = DEFAULT_DRAIN) -> Track:
    """The VIP's phase after the decision ``announce`` at ``now``.

    Announce: ANNOUNCED at once (the binding goes first, `plan` sees to it). Withdraw: an
    ANNOUNCED VIP becomes DRAINING; a DRAINING one becomes WITHDRAWN once ``drain`` seconds
    have passed since it started draining. A DRAINING VIP asked to announce again goes back to
    ANNOUNCED without ever losing its binding.
    """
    if drain < 0:
        raise ValueError(f"drain must be >= 0 seconds (got {drain})")
    if announce:
        return prev if prev.phase is Phase.ANNOUNCED else Track(Phase.ANNOUNCED, now)
    if prev.phase is Phase.ANNOUNCED:
        prev = Track(Phase.DRAINING, now)
    if prev.phase is Phase.DRAINING and now - prev.since >= drain:
        return Track(Phase.WITHDRAWN, now)
    return prev


def wake_at(tracks: Sequence[Track], drain: float = DEFAULT_DRAIN) -> float | None:
    """When `step` must run again without a new decision (the earliest drain's end), or None."""
    ends = [t.since + drain for t in tracks if t.phase is Phase.DRAINING]
    return min(ends) if ends else None
