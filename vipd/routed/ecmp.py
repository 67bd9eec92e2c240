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
    - A node with no peers at all announces even before its API server is healthy
      ("bootstrap"): during ``kubeadm init`` the endpoint must lead to the first API server.
      With peers but none healthy and nobody known to announce, the lowest address among this
      node and its peers announces ("bootstrap") and the others wait ("waiting"): one path,
      chosen by every node alike, like `vipd.ipvs.plan`'s "the first listed".

    A peer counts as healthy only on a fresh observation: ``checked_at`` no older than
    ``stale_after`` seconds at ``now`` (a checker that stopped reporting does not keep a
    peer healthy, and so cannot make this node withdraw).

What it must not do
    No I/O, no clocks (time comes in as ``now``, seconds of a monotonic clock), no routes:
    `vipd.routed.plan` and the actuator turn the decision into kernel routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from vipd.health.tracker import BackendHealth

__all__ = ["DEFAULT_STALE_AFTER", "REASONS", "Decision", "decide", "fresh_healthy"]

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


def fresh_healthy(health: BackendHealth | None, now: float, stale_after: float) -> bool:
    """Healthy, and checked no more than ``stale_after`` seconds ago."""
    if health is None or not health.healthy or health.checked_at is None:
        return False
    return now - health.checked_at <= stale_after


def decide(
    now: float,
    announcing: bool,
    local: BackendHealth | None,
    peers: Mapping[IPAddress, BackendHealth | None],
    *,
    self_addr: IPAddress | None = None,
    stale_after: float = DEFAULT_STALE_AFTER,
) -> Decision:
    """Announce or not, with the rule that decided (module docstring, in that order).

    ``local``: this node's API server (None: not checked yet); ``peers``: the other
    control-plane nodes' API servers, by address (None: not checked yet); ``self_addr``: this
    node's address, for the lowest-address bootstrap pick (None: this node never picks
    itself while it has peers).
    """
    if stale_after < 0:
        raise ValueError(f"stale_after must be >= 0 (got {stale_after})")
    # The local checker's result is taken as it is: staleness only guards against trusting a
    # peer's old good news, and the local checker's "healthy" already needs rise successes.
    if local is not None and local.healthy:
        return Decision(True, "healthy")
    if any(fresh_healthy(h, now, stale_after) for h in peers.values()):
        return Decision(False, "unhealthy" if announcing else "waiting")
    if announcing:
        return Decision(True, "last-resort")
    if not peers:
        return Decision(True, "bootstrap")
    if self_addr is not None and all(_order(self_addr) < _order(p) for p in peers):
        return Decision(True, "bootstrap")
    return Decision(False, "waiting")


def _order(addr: IPAddress) -> tuple[int, int]:
    return (addr.version, int(addr))
