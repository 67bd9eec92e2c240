"""The ECMP pool rule: does this node announce the VIP? Every node decides for itself.

What it is
    `decide(now, announcing, local, peers)` → `Decision` (announce or not, and a reason label
    from `REASONS`). In an ECMP fabric every node that announces the VIP's /32 is one path of
    the router's multipath route, so the set of announcing nodes is the pool, and each node
    only ever adds or removes its own entry (CAPVCO's "each machine only changes its own
    entry", and `vipd.ipvs.plan`'s pool rules, made local):

    - A node announces while its own API server is healthy ("healthy"), and joins only once
      it is (rise already applied by `vipd.health.tracker`): a node whose API server is not
      up yet is never a path.
    - It withdraws for its own ill health only while some peer's API server is healthy
      ("unhealthy"; "waiting" for one that never joined): someone else is serving.
    - When no peer is healthy, a node that is announcing keeps announcing ("last-resort"),
      so the endpoint never disappears by vipd's own hand because every API server is
      unhealthy at once (a restart of the whole control plane, an etcd outage).
    - A lone node (no peers at all) announces even before its API server is healthy
      ("bootstrap"): during ``kubeadm init`` the endpoint must lead to the first API server.
    - Otherwise a node that is not announcing and not healthy waits ("waiting"), even when no
      peer is healthy either: it would only add an unhealthy path. (Unlike
      `vipd.ipvs.plan`, which sees the whole pool and adds one backend to an empty one, a
      node here cannot see who else announces; the API server checks go to each node's own
      API server, not through the VIP, so the first one healthy joins on its own.)

    A peer counts as healthy only on fresh, clean news (`serving`): healthy, its last check a
    success (``failures == 0``: a peer already failing checks, still inside its ``fall``
    count, is not counted), less than ``stale_after`` seconds old, and, when this node is
    unhealthy, completed after this node became unhealthy (``checked_at >= local.since``).
    So when every API server fails at once (an etcd outage), each node sees its peers' checks
    fail after its own failure began and keeps announcing; only a node whose peer was seen
    serving after its own failure withdraws, and the last node to fail never does. All the
    times are the local checker's, on one monotonic clock.

What it must not do
    No I/O, no clocks (time comes in as ``now``, seconds of a monotonic clock), no routes:
    `vipd.routed.plan` and the actuator turn the decision into kernel routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from vipd.health.tracker import BackendHealth

__all__ = ["DEFAULT_STALE_AFTER", "REASONS", "Decision", "decide", "serving"]

IPAddress = IPv4Address | IPv6Address

DEFAULT_STALE_AFTER = 10.0  # seconds; a few check intervals of the default health check

REASONS = ("healthy", "unhealthy", "waiting", "last-resort", "bootstrap")


@dataclass(frozen=True, slots=True)
class Decision:
    announce: bool
    reason: str

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown reason {self.reason!r}")


def serving(
    health: BackendHealth | None, now: float, stale_after: float, after: float | None = None
) -> bool:
    """Healthy, last check a success, checked less than ``stale_after`` seconds ago (at
    ``checked_at + stale_after`` the news has expired: `vipd.routed.core` wakes then) and not
    before ``after``."""
    if health is None or not health.healthy or health.failures or health.checked_at is None:
        return False
    if after is not None and health.checked_at < after:
        return False
    return now - health.checked_at < stale_after


def decide(
    now: float,
    announcing: bool,
    local: BackendHealth | None,
    peers: Mapping[IPAddress, BackendHealth | None],
    *,
    stale_after: float = DEFAULT_STALE_AFTER,
) -> Decision:
    """Announce or not, with the rule that decided (module docstring, in that order).

    ``local``: this node's API server (None: not checked yet); ``peers``: the other
    control-plane nodes' API servers, by address (None: not checked yet).
    """
    if stale_after <= 0:
        raise ValueError(f"stale_after must be > 0 seconds (got {stale_after})")
    # The local checker's result is taken as it is: staleness only guards against trusting a
    # peer's old good news, and the local checker's "healthy" already needs rise successes.
    if local is not None and local.healthy:
        return Decision(True, "healthy")
    after = None if local is None else local.since
    if any(serving(h, now, stale_after, after) for h in peers.values()):
        return Decision(False, "unhealthy" if announcing else "waiting")
    if announcing:
        return Decision(True, "last-resort")
    if not peers:
        return Decision(True, "bootstrap")
    return Decision(False, "waiting")
