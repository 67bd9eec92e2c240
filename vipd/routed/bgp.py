"""bgp mode's routes: the AnyIP bindings in the kernel, the announcements by vipd's own BGP
speaker. `BgpRoutes` is what `vipd.routed.backend.RoutedElection` (the ECMP pool) and
`vipd.routed.leader.RouteAddress` (the leader pool) drive in ``announce.mode: bgp``, through
the same `Routes` port as routing-table mode's actuator.

What it is
    ``converge(desired)`` takes the same phases (`vipd.routed.plan.Phase`) and keeps the same
    order: the bindings a VIP needs are added first (`RouteActuator`, the ``local`` table),
    then the speaker is told to announce or withdraw, then the bindings no longer needed
    are removed. The announcement half is worked out against what the speaker was told
    (``told``), not against what it announces now: a speaker whose process died is not told
    again (its driver replays everything it was told to the next process), and a
    withdrawal during its death is still passed on, so a restart during a stop's drain
    cannot bring a withdrawn prefix back. Announcement routes of vipd's protocol left in the
    kernel table by a routing-table run are removed (nothing exports them here).

    ``withdraw_all`` is the stop sequence: every announcement withdrawn, the drain, the
    bindings removed; ``close`` then stops the speaker gracefully (its sessions closed with
    a Cease after the withdrawals).

What it must not do: decide (`vipd.routed.ecmp`), or talk BGP (the speaker does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from ipaddress import IPv4Address, IPv6Address

from vipd import metrics
from vipd.routed.actuator import RouteActuator
from vipd.routed.plan import (
    DEFAULT_DRAIN,
    AddBinding,
    AddRoute,
    DelRoute,
    IPNetwork,
    Observed,
    Op,
    Phase,
    host_network,
    plan,
)
from vipd.routed.speaker import Speaker

__all__ = ["BgpRoutes"]

IPAddress = IPv4Address | IPv6Address


class BgpRoutes:
    """Bindings through ``actuator``, announcements through ``speaker``."""

    def __init__(self, actuator: RouteActuator, speaker: Speaker) -> None:
        self.actuator = actuator
        self.speaker = speaker
        self.announced_before: frozenset[IPNetwork] = frozenset()
        self.told: set[IPNetwork] = set()
        self._lock = threading.RLock()

    def observe(self) -> Observed:
        """The kernel's bindings (a restart keeps a predecessor's for the drain), and as
        the announcements what the speaker was told (``told``: a killed predecessor's
        speaker took its own with it). The leader pool (`vipd.routed.leader`) reads the
        announcement here to know that a withdrawal needs its drain."""
        bound = self.actuator.observe().bound
        with self._lock:
            return Observed(frozenset(self.told), bound)

    def converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]:
        # The kernel holds the bindings only: ANNOUNCED is DRAINING there (binding, no route).
        kernel = {
            vip: Phase.WITHDRAWN if phase is Phase.WITHDRAWN else Phase.DRAINING
            for vip, phase in desired.items()
        }
        kops = plan(self.actuator.observe(), kernel)
        adds = [op for op in kops if isinstance(op, AddBinding)]
        rest = [op for op in kops if not isinstance(op, AddBinding)]
        want = {host_network(v) for v, p in desired.items() if p is Phase.ANNOUNCED}
        self.actuator.apply(adds)
        sops: list[Op] = []
        with self._lock:
            for dst in sorted(want - self.told, key=str):
                self.speaker.announce(dst)
                self.told.add(dst)
                sops.append(AddRoute(dst))
            for dst in sorted(self.told - want, key=str):
                self.speaker.withdraw(dst)
                self.told.discard(dst)
                sops.append(DelRoute(dst))
            self.announced_before = self.speaker.announced()
        self.actuator.apply(rest)
        self.publish()
        return [*adds, *sops, *rest]

    def withdraw_all(
        self,
        vips: Sequence[IPAddress],
        drain: float = DEFAULT_DRAIN,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Every announcement withdrawn, ``drain`` seconds, every binding removed."""
        if self.converge(dict.fromkeys(vips, Phase.DRAINING)) or self.actuator.observe().bound:
            sleep(drain)
        self.converge({})

    def publish(self) -> None:
        """The speaker's state as metrics; the driver calls it on every change of its own
        (a session's state, a child's death or start). Prefixes gone without a withdraw of
        ours are counted as ``speaker-died``."""
        with self._lock:
            announced = self.speaker.announced()
            metrics.BGP_ANNOUNCED.set(len(announced))
            for peer, up in self.speaker.sessions().items():
                metrics.BGP_SESSION_UP.labels(peer=str(peer)).set(up)
            lost = self.announced_before - announced
            if lost:
                metrics.BGP_WITHDRAWALS.labels(reason="speaker-died").inc(len(lost))
            self.announced_before = announced

    def bfd_down(self, peer: IPAddress) -> None:
        """A peer's BFD session went down (the hook for `vipd.bfd`'s ``on_state``)."""
        if self.speaker.announced():
            metrics.BGP_WITHDRAWALS.labels(reason="bfd-down").inc()
        self.speaker.bfd_down(peer)

    def bfd_up(self, peer: IPAddress) -> None:
        self.speaker.bfd_up(peer)

    def close(self) -> None:
        try:
            self.speaker.stop(graceful=True)
        finally:
            self.actuator.close()
