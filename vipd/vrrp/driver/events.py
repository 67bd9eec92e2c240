"""The agent's events to a VRRP virtual router: health, tracked checks, a reload's live keys,
the link going down and up (RFC 9568 §6.4: the machine's ``link_down``, ``link_up``).

What it is: a part of ``vipd.vrrp.driver.election.VrrpElection``, as the mixin `AgentEvents`
its class inherits (it declares what the class provides), and `_locked`, which runs an entry
point the loop calls outside ``Timers.guarded`` under the timers' lock. Each event goes
through the state machine (``vrrp.state``): the priority with the health gate and the
tracked checks (``vipd.track``), keepalived's FAULT on a ``fault`` track, the interface's
state.

What it must not do: decide the election (the machine does) or touch the VIP (the agent's
controller does).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from vipd import log as vlog
from vipd import track
from vipd.config import Config
from vipd.election import Publish
from vipd.health.tracker import BackendHealth
from vipd.health.tracker import Outcome as HealthOutcome
from vipd.vrrp import state
from vipd.vrrp.driver.wire import IPAddress

if TYPE_CHECKING:
    from vipd.config.election import Vrrp
    from vipd.health.checker import HealthChecker
    from vipd.vrrp.driver.adverts import AdvertIO
    from vipd.vrrp.driver.following import Follower
    from vipd.vrrp.driver.timers import Timers

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E", bound="AgentEvents")


def _locked(
    method: Callable[Concatenate[E, P], R],
) -> Callable[Concatenate[E, P], R]:
    """The method under the timers' lock: an entry point the loop calls outside
    ``Timers.guarded`` (the agent's health, track, link and reload events, /status)."""

    @functools.wraps(method)
    def locked(self: E, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.timers.lock:
            return method(self, *args, **kwargs)

    return locked


class AgentEvents:
    """The election port's events (see the module docstring)."""

    cfg: Config
    vrrp: Vrrp
    ifname: str
    log: logging.Logger
    clock: Callable[[], float]
    machine: state.Machine
    timers: Timers
    follower: Follower
    adverts: AdvertIO
    health: HealthChecker | None
    link_up: bool
    _publish: Publish | None
    _track: track.Adjustment
    _faulted: bool
    held: bool  # membership's admission rule (vipd.vrrp.driver.members)
    apply: Callable[[list[state.Action], float], None]

    @_locked
    def on_health(self, addr: IPAddress, health: BackendHealth) -> None:
        h = self.cfg.health
        if h is None or addr != h.local or h.weight == 0:
            return
        self.follower.catch_up()
        now = self.clock()
        priority = self._gated_priority(health.healthy)
        old = self.machine.priority
        vlog.event(
            self.log,
            logging.INFO,
            "local API server healthy: priority restored"
            if health.healthy
            else "local API server unhealthy: priority lowered",
            priority_from=old,
            priority_to=priority,
            state=self.machine.state.value,
            error=health.error,
        )
        self.apply(self.machine.set_priority(now, priority), now)

    @_locked
    def on_track(self, adj: track.Adjustment) -> None:
        """Tracked checks changed: the priority (like health), or with a ``fault`` track down
        keepalived's FAULT: out of the election (a leader resigns with a priority-0 advert
        and releases the VIP) until it is up again."""
        self._track = adj
        self.follower.catch_up()
        now = self.clock()
        self.apply(self.machine.set_priority(now, self._current_priority()), now)
        if adj.fault and not self._faulted:
            self._faulted = True
            vlog.event(
                self.log, logging.WARNING, "track fault: leaving the election", tracks=adj.down
            )
            self.apply(self.machine.shutdown(now), now)
        elif not adj.fault and self._faulted:
            self._faulted = False
            vlog.event(self.log, logging.INFO, "track fault cleared: joining the election")
            if self.link_up and self._publish is not None and not self.held:
                self.apply(self.machine.start(now), now)

    def _current_priority(self) -> int:
        h = self.cfg.health
        healthy = h is None or h.weight == 0 or self.health is None or self.health.local_healthy()
        return self._gated_priority(healthy)

    def _gated_priority(self, healthy: bool) -> int:
        """The health gate and the tracked checks together (``vipd.track``), floored at 1."""
        weight = self.cfg.health.weight if self.cfg.health is not None else 0
        return track.effective_priority(self.vrrp.priority, weight, healthy, self._track)

    @_locked
    def reconfigure(self, cfg: Config) -> None:
        """A reload's live keys (``vipd.reload.LIVE``): priority, preemption and its delay,
        the health weight. The new priority goes through the machine like a health change
        (a leader sends one advert with it; a backup moves its down timer), so a reload by
        itself neither releases nor re-announces the VIP. New auth_hmac keys, signing key or
        mode apply from the next advert (``signing.AdvertAuth.rekey``)."""
        v = cfg.election.vrrp
        if self.adverts.auth is not None and v.auth_hmac != self.vrrp.auth_hmac:
            self.adverts.auth.rekey(v)
        self.cfg, self.vrrp = cfg, v
        self.machine.params = dataclasses.replace(
            self.machine.params,
            priority=v.priority,
            preempt=v.preempt,
            preempt_delay=v.preempt_delay,
        )
        self.follower.catch_up()
        now = self.clock()
        self.apply(self.machine.set_priority(now, self._current_priority()), now)

    def on_check(self, addr: IPAddress, outcome: HealthOutcome) -> None:
        """VRRP goes by health changes only (``on_health``)."""

    @_locked
    def on_link(self, up: bool) -> None:
        """Interface down is the machine's ``link_down``, up its ``link_up`` (RFC 9568 §6.4)."""
        self.link_up = up
        self.follower.catch_up()
        now = self.clock()
        if up:
            vlog.event(
                self.log,
                logging.INFO,
                "interface is up: joining the election",
                interface=self.ifname,
            )
            if not self._faulted and not self.held:
                self.apply(self.machine.link_up(now), now)
        else:
            vlog.event(
                self.log,
                logging.WARNING,
                "interface is down: leaving the election and releasing the VIP",
                interface=self.ifname,
                state=self.machine.state.value,
            )
            self.apply(self.machine.link_down(now), now)
