"""IPVS desired state and plan: which real servers the VIP's virtual service should have, and
the operations that take the kernel's table from what is observed to that.

What it is
    Pure functions over frozen records. `select_pool` applies the pool rules to the backends'
    health and the current pool; `desired` turns (leader?, pool) into the one virtual service
    vipd owns; `plan(observed, desired)` returns the operations, in the order to apply them.
    ``plan(x, x) == []`` for every ``x``: a converged table costs nothing but the observation.

Pool rules
    - A backend joins the pool only once it is healthy (its API server answers the health
      check, rise/fall already applied by the checker), and leaves it when it stops being
      healthy.
    - Bootstrap exception: while the pool is empty and no backend is healthy, one backend is
      added anyway (this node if it is a backend, else the first listed), because during
      ``kubeadm init`` the endpoint must lead to the first API server before it is up.
    - The last remaining backend is never removed: when every backend is unhealthy, the pool
      keeps one of its current members (this node if it is one, else the first listed), so
      vipd never black-holes the control plane by its own hand.
    - "Each machine only changes its own entry": CAPVCO has one controller per machine, each
      editing its own row of a shared pool. vipd has one IPVS table, on the leader only (a
      table on every node would forward in a loop), so the leader is the only writer and each
      backend's row changes only on that backend's own health; the rules above are what the
      per-machine edits add up to. Membership is recomputed from scratch on every pass, so a
      row deleted or added by hand is repaired.

Scope
    vipd touches exactly one virtual service: VIP:port/TCP. `plan` refuses an observed service
    with another key (the actuator filters the dump to that key, so kube-proxy's services and
    anyone else's are never seen, never planned, never deleted).

What it must not do
    No I/O, no clocks, no netlink: the actuator observes and applies, this module decides.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import Literal

__all__ = [
    "FORWARDING_CODES",
    "PROTO_TCP",
    "AddServer",
    "AddService",
    "DelServer",
    "DelService",
    "EditServer",
    "EditService",
    "Forwarding",
    "Op",
    "Pool",
    "RealServer",
    "Service",
    "ServiceKey",
    "Table",
    "describe",
    "desired",
    "plan",
    "select_pool",
]

IPAddress = IPv4Address | IPv6Address
Forwarding = Literal["nat", "dr"]
PROTO_TCP = 6  # IPPROTO_TCP
# IP_VS_CONN_F_FWD_MASK values of the kernel: MASQ 0, LOCALNODE 1, TUNNEL 2, DROUTE 3.
FORWARDING_CODES: Mapping[Forwarding, int] = {"nat": 0, "dr": 3}


@dataclass(frozen=True, slots=True, order=True)
class ServiceKey:
    """What identifies a virtual service in the kernel (fwmark services are not vipd's)."""

    addr: IPAddress
    port: int
    protocol: int = PROTO_TCP

    def __str__(self) -> str:
        host = f"[{self.addr}]" if isinstance(self.addr, IPv6Address) else str(self.addr)
        return f"{host}:{self.port}/{'tcp' if self.protocol == PROTO_TCP else self.protocol}"


@dataclass(frozen=True, slots=True)
class Service:
    key: ServiceKey
    scheduler: str = "rr"


@dataclass(frozen=True, slots=True, order=True)
class RealServer:
    addr: IPAddress
    port: int
    forwarding: Forwarding = "nat"
    weight: int = 1

    @property
    def ident(self) -> tuple[IPAddress, int]:
        """A real server is identified by address and port; the rest can be edited."""
        return (self.addr, self.port)


@dataclass(frozen=True, slots=True)
class Table:
    """One virtual service and its real servers, as observed or as wanted."""

    service: Service
    servers: frozenset[RealServer] = field(default_factory=frozenset)


# -- operations ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddService:
    service: Service


@dataclass(frozen=True, slots=True)
class EditService:
    service: Service


@dataclass(frozen=True, slots=True)
class DelService:
    key: ServiceKey


@dataclass(frozen=True, slots=True)
class AddServer:
    key: ServiceKey
    server: RealServer


@dataclass(frozen=True, slots=True)
class EditServer:
    key: ServiceKey
    server: RealServer


@dataclass(frozen=True, slots=True)
class DelServer:
    key: ServiceKey
    server: RealServer


Op = AddService | EditService | DelService | AddServer | EditServer | DelServer


# -- pool rules ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pool:
    """The backends that should be real servers, and why when a rule overrode health."""

    members: tuple[IPAddress, ...]
    rule: Literal["healthy", "bootstrap", "keep-last", "empty"]
    reason: str


def select_pool(
    backends: Sequence[IPAddress],
    healthy: Collection[IPAddress],
    current: Collection[IPAddress],
    local: IPAddress | None = None,
) -> Pool:
    """Apply the pool rules (module docstring).

    ``backends`` in configured order; ``healthy`` the backends whose health check passes now
    (unknown counts as unhealthy); ``current`` the real servers in the table now (empty when
    the service does not exist); ``local`` this node's own backend address, if it is one.
    """
    if not backends:
        return Pool((), "empty", "no backends configured")
    members = tuple(b for b in backends if b in healthy)
    if members:
        return Pool(members, "healthy", f"{len(members)} of {len(backends)} backends healthy")

    def pick(among: Sequence[IPAddress]) -> IPAddress:
        return local if local is not None and local in among else among[0]

    kept = [b for b in backends if b in current]
    if kept:
        last = pick(kept)
        return Pool(
            (last,),
            "keep-last",
            f"no backend is healthy: keeping {last}, the last remaining one (never remove "
            "the last)",
        )
    first = pick(backends)
    return Pool(
        (first,),
        "bootstrap",
        f"pool empty and no backend healthy: adding {first} before it is healthy (bootstrap)",
    )


def desired(
    leader: bool,
    service: Service,
    members: Sequence[IPAddress],
    forwarding: Forwarding,
    port: int | None = None,
) -> Table | None:
    """The table vipd wants: none at all on a follower (a table on every node would make
    the nodes forward to each other in a loop), else ``service`` with one real server per
    member on ``port`` (default: the service's port; direct routing cannot change ports)."""
    if not leader:
        return None
    rport = service.key.port if port is None else port
    return Table(service, frozenset(RealServer(m, rport, forwarding) for m in members))


# -- plan ----------------------------------------------------------------------------------


def plan(observed: Table | None, want: Table | None) -> list[Op]:
    """Operations that take ``observed`` to ``want``, in the order to apply them.

    New real servers are added before old ones are deleted (make-before-break: the service
    never has fewer servers than it needs on the way). Deleting the service deletes its real
    servers with it, so that is one operation.
    """
    if observed is None and want is None:
        return []
    if want is None:
        assert observed is not None
        return [DelService(observed.service.key)]
    key = want.service.key
    if observed is None:
        added: list[Op] = [AddService(want.service)]
        return added + [AddServer(key, s) for s in sorted(want.servers)]
    if observed.service.key != key:
        raise ValueError(
            f"observed service {observed.service.key} is not vipd's {key}: out of scope"
        )
    ops: list[Op] = []
    if observed.service.scheduler != want.service.scheduler:
        ops.append(EditService(want.service))
    have = {s.ident: s for s in observed.servers}
    wanted = {s.ident: s for s in want.servers}
    ops += [AddServer(key, s) for i, s in sorted(wanted.items()) if i not in have]
    ops += [EditServer(key, s) for i, s in sorted(wanted.items()) if i in have and have[i] != s]
    ops += [DelServer(key, s) for i, s in sorted(have.items()) if i not in wanted]
    return ops


def describe(op: Op) -> str:
    """One line for logs: ``AddServer 10.0.0.11:6443 (nat) to 10.0.0.100:6443/tcp``."""
    name = type(op).__name__
    if isinstance(op, AddServer | EditServer | DelServer):
        s = op.server
        host = f"[{s.addr}]" if isinstance(s.addr, IPv6Address) else str(s.addr)
        return f"{name} {host}:{s.port} ({s.forwarding}, weight {s.weight}) of {op.key}"
    if isinstance(op, AddService | EditService):
        return f"{name} {op.service.key} ({op.service.scheduler})"
    return f"{name} {op.key}"
