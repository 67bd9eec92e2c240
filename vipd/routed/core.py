"""One node's routing-table announcement as pure data: the ECMP decision drives the phases.

What it is
    `advance(now, state, inputs)` → `Step`: it asks `vipd.routed.ecmp.decide` whether this
    node announces, moves every VIP through `vipd.routed.plan.step` (announce at once;
    withdraw = announcement off, then the binding after the drain delay), and says when it
    must run again with no new input (`Step.wake`: a drain ending, or a peer's last good
    check going stale). The shell (next: the agent's routed backend) calls it on every health
    change and at ``wake``, hands ``Step.desired`` to `RouteActuator.converge` and publishes
    ``Step.decision`` when it changed.

What it must not do
    No I/O, no clocks, no routes: time comes in as ``now``, routes go out as desired phases.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address

from vipd.health.tracker import BackendHealth
from vipd.routed.ecmp import DEFAULT_STALE_AFTER, Decision, decide, serving
from vipd.routed.plan import DEFAULT_DRAIN, Phase, Track, step, wake_at

__all__ = ["Inputs", "State", "Step", "advance"]

IPAddress = IPv4Address | IPv6Address


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the node knows now: its VIPs, its own and its peers' API server health."""

    vips: tuple[IPAddress, ...]
    local: BackendHealth | None
    peers: Mapping[IPAddress, BackendHealth | None] = field(default_factory=dict)
    drain: float = DEFAULT_DRAIN
    stale_after: float = DEFAULT_STALE_AFTER


@dataclass(frozen=True, slots=True)
class State:
    decision: Decision | None = None
    tracks: Mapping[IPAddress, Track] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    state: State
    desired: dict[IPAddress, Phase]
    changed: bool  # the decision differs from the previous one (publish it)
    wake: float | None  # when to advance again without new input


def advance(now: float, state: State, inputs: Inputs) -> Step:
    """The next state, the VIPs' desired phases, and when to come back."""
    announcing = any(t.phase is Phase.ANNOUNCED for t in state.tracks.values())
    decision = decide(
        now,
        announcing,
        inputs.local,
        inputs.peers,
        stale_after=inputs.stale_after,
    )
    tracks = {
        vip: step(now, decision.announce, state.tracks.get(vip, Track()), inputs.drain)
        for vip in inputs.vips
    }
    wakes = [wake_at(list(tracks.values()), inputs.drain)]
    if inputs.local is None or not inputs.local.healthy:
        # The decision rests on the peers: it may flip when a healthy peer's news expires.
        wakes += [
            h.checked_at + inputs.stale_after
            for h in inputs.peers.values()
            if h is not None
            and h.checked_at is not None
            and serving(
                h, now, inputs.stale_after, None if inputs.local is None else inputs.local.since
            )
        ]
    known = [w for w in wakes if w is not None]
    return Step(
        state=State(decision, tracks),
        desired={vip: t.phase for vip, t in tracks.items()},
        changed=decision != state.decision,
        wake=min(known) if known else None,
    )
