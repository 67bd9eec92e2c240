"""The election port: what the agent asks of an election backend, and what it gets back.

What it is
    `Election` is the protocol both backends implement (`vipd.vrrp.driver.VrrpElection`,
    `vipd.lease.driver.LeaseElection`); `Transition` is the record of one role change (or, for
    the Lease backend's "holding through a store outage", of a reason that keeps the role),
    which each backend builds from its core's own output: the VRRP state machine's reason
    labels (`vipd.vrrp.state.REASON_LABELS`) and the Lease core's
    (`vipd.lease.logic.REASON_LABELS`). `Host` is what the agent lends a backend: the
    controller (is the VIP bound here? re-announce it) and the health checker, if any.

    The agent (`vipd.agent`) picks a backend with a plain ``if`` and talks to it only through
    this port:

    0. ``init_metrics()``: this backend's series at their starting values.
    1. ``await prepare()``: the link the VIP lives on (the VRRP backend's virtual MAC makes
       its own macvlan; everything else uses the configured interface).
    2. ``attach(host)``: the controller and health checker exist; start gating on health.
    3. ``await run(publish, ready)``: join the election; every role change goes out as
       ``publish(Transition)`` (the agent turns it into desired state, metrics and status);
       ``ready()`` once this node takes part. Runs until cancelled; raises on a fault.
    4. ``on_health(addr, health)``: pushed on every change of a checked API server;
       ``on_link(up)``: pushed when the configured interface stops or starts being usable
       (deleted, down, or without a source address: a Shutdown; back: a Startup, RFC 9568
       §6.4); ``await relink(pre)``: the interface was re-created (a new index, maybe a new
       MAC) or its source address changed: open fresh sockets on it and return the VIP's
       link (the VRRP backend's virtual MAC is made again on a new parent). The agent calls
       it before ``on_link(True)`` for a new interface, and while the node stays in the
       election for a new source address of the same one;
       ``on_track(adjustment)``: the tracked checks changed;
       ``reconfigure(cfg)``: a reload (SIGHUP) changed keys that apply live.
    5. ``await resign(graceful)``: stop electing and return once a successor has been seen or
       none can still come (bounded): the VIP stays bound until then (make-before-break).
    6. ``await close()``: release sockets, clients and links.
    7. ``status(now)``, ``readiness()``, ``stopped_fields()``: what ``/status``, ``/readyz``
       and the last log line say about the election.

What it must not do: import a backend, or hold any logic: it is types only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vipd.config import Config
    from vipd.controller import Controller
    from vipd.health.checker import HealthChecker
    from vipd.health.tracker import BackendHealth, Outcome
    from vipd.preflight import Preflight
    from vipd.track import Adjustment

IPAddress = IPv4Address | IPv6Address

# Role names shared by every backend (vipd.metrics.ROLES, /status "role").
LEADER = "leader"
FOLLOWER = "follower"
INIT = "init"
ROLES = (LEADER, FOLLOWER, INIT)


@dataclass(frozen=True, slots=True)
class Transition:
    """One decision of an election core, as the agent acts on it.

    ``role``: one of `ROLES`. ``label``: the core's stable reason label (a metric label).
    ``detail``: the core's human text for the log and ``/status``. ``at``: when it was decided
    (``time.monotonic()``), the start of the takeover's actuation latency.
    """

    role: str
    label: str
    detail: str
    at: float

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES} (got {self.role!r})")
        if not self.label or ":" in self.label or " " in self.label:
            raise ValueError(f"label must be one short word (got {self.label!r})")

    @property
    def leader(self) -> bool:
        return self.role == LEADER


@dataclass(frozen=True, slots=True)
class VipLink:
    """The link the VIP is bound and announced on: name, index, MAC (``aa:bb:...``)."""

    name: str
    index: int
    mac: str


@dataclass(frozen=True, slots=True)
class Host:
    """What the agent lends a backend once it has built it."""

    controller: Controller
    health: HealthChecker | None
    link_up: bool  # the configured interface is usable now (later changes come as on_link)
    # Offered the lag of each loop timer the backend runs (`Endpoint.offer_beat`): the
    # heartbeat needs no wake-up of its own while the backend's timers run often enough.
    beat: Callable[[float], None] | None = None


Publish = Callable[[Transition], None]


class Election(Protocol):
    """An election backend, as the agent sees it (see the module docstring for the order)."""

    @property
    def backend(self) -> str:
        """``"vrrp"``, ``"lease"`` or ``"routed"``: the ``backend`` label of the shared
        metrics."""
        ...

    @property
    def vips(self) -> tuple[IPAddress, ...]:
        """The VIPs this instance moves together: a VRRP virtual router's (one family), or
        every VIP for the Lease."""
        ...

    @property
    def health_peers(self) -> list[IPAddress]:
        """The other nodes' API servers this backend wants checked (besides the local one)."""
        ...

    def init_metrics(self) -> None: ...

    async def prepare(self) -> VipLink: ...

    def attach(self, host: Host) -> None: ...

    async def run(self, publish: Publish, ready: Callable[[], None]) -> None: ...

    def on_health(self, addr: IPAddress, health: BackendHealth) -> None: ...

    def on_check(self, addr: IPAddress, outcome: Outcome) -> None:
        """Every finished health check, changed or not (the Lease backend's peer evidence)."""
        ...

    def on_link(self, up: bool) -> None: ...

    async def relink(self, pre: Preflight) -> VipLink:
        """The configured interface as it is now (``pre.link``: index, MAC, addresses;
        ``pre.source``: the node's address on it): fresh sockets on it; the VIP's link."""
        ...

    def on_track(self, adj: Adjustment) -> None:
        """The tracked checks' sum changed (``vipd.track``): VRRP lowers its priority (or
        leaves the election on a fault), Lease counts it as the local health."""
        ...

    def reconfigure(self, cfg: Config) -> None:
        """A reload's new config; only keys of ``vipd.reload.LIVE`` differ from the old one."""
        ...

    async def resign(self, graceful: bool) -> None: ...

    async def close(self) -> None: ...

    def readiness(self) -> tuple[bool, str]: ...

    def status(self, now: float) -> dict[str, Any]:
        """This backend's part of ``/status`` (``vipd.endpoint.status`` documents the shape)."""
        ...

    def stopped_fields(self) -> dict[str, object]:
        """The first fields of the final "stopped" log line: whether this node led when the
        stop began, and the backend's counters."""
        ...
