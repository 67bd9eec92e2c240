"""One election instance as the agent runs it, and the host actuators its VIPs get.

What it is: `Instance`, an election backend with what the agent runs for it (its controller
over its VIPs' actuators, its notify hooks, the link its VIPs are bound on), and the seam for
those actuators (`MakeActuators`; `host_actuators` makes the real ones: netlink for the
address, a packet socket for the gratuitous ARP / unsolicited NA). With several VIPs the
agent runs one instance per set of VIPs that moves together (RFC 9568 §7: one virtual router
per address family; one Lease for all).

In routing-table mode (``announce.mode``) the VIP is bound and announced by routes
(`vipd.routed.backend`), so the controller gets `inert_actuators`: the role still flows
through it (hooks, status), but no address is added and no frame is sent.

What it must not do: decide or act; the agent and the controller do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from vipd.controller import Address, Announce, Controller
from vipd.election import Election, IPAddress, VipLink
from vipd.hooks import HookRunner
from vipd.host.address import AddressActuator
from vipd.host.announce import Announcer
from vipd.host.neighbor import announcement, parse_mac

__all__ = [
    "Actuator",
    "Announcement",
    "Instance",
    "MakeActuators",
    "host_actuators",
    "inert_actuators",
]


class Actuator(Address, Protocol):
    def close(self) -> None: ...


class Announcement(Announce, Protocol):
    def close(self) -> None: ...


# The host seam: the VIP's actuators on a link; the callback counts the frames sent.
MakeActuators = Callable[
    [VipLink, IPAddress, Callable[[int], None]], "tuple[Actuator, Announcement]"
]


def host_actuators(
    link: VipLink, vip: IPAddress, on_sent: Callable[[int], None]
) -> tuple[Actuator, Announcement]:
    """The real ones: netlink for the address, a packet socket for the announcements."""
    announcer = Announcer(link.name, announcement(parse_mac(link.mac), vip), on_sent)
    return AddressActuator(link.index, vip), announcer


class _InertAddress:
    """The controller's address step in routing-table mode: remembers, binds nothing."""

    def __init__(self, vip: IPAddress) -> None:
        self.vip = vip
        self._on = False

    def observe(self) -> bool:
        return self._on

    def add(self) -> None:
        self._on = True

    def remove(self) -> bool:
        was, self._on = self._on, False
        return was

    def close(self) -> None:
        pass


class _InertAnnouncer:
    """The controller's gratuitous ARP in routing-table mode: sends nothing (no L2 peers)."""

    def burst(self, loop: asyncio.AbstractEventLoop, repeat: int, interval: float) -> bool:
        return True

    def send_one(self) -> bool:
        return True

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


def inert_actuators(
    link: VipLink, vip: IPAddress, on_sent: Callable[[int], None]
) -> tuple[Actuator, Announcement]:
    """Routing-table mode's: the routes are the binding and the announcement."""
    return _InertAddress(vip), _InertAnnouncer()


@dataclass
class Instance:
    """One election instance and what the agent runs for it: its controller over its VIPs'
    actuators, and its notify hooks (whose ``<vip>`` is its VIPs, comma-separated)."""

    election: Election
    hooks: HookRunner
    controller: Controller | None = None
    actuators: list[tuple[Actuator, Announcement]] = field(default_factory=list)
    link: VipLink | None = None  # where its VIPs are bound (the interface, or its macvlan)
    ready: bool = False

    @property
    def vips(self) -> tuple[IPAddress, ...]:
        return self.election.vips
