"""What the VRRP driver needs of the world: the wire, timers, and its counters.

What it is: the seams of the driver package (``vipd.vrrp.driver``): the ``Wire`` protocol
that ``vrrp.transport.Transport`` implements (a fake in the unit tests), the timer and
``call_later`` shapes (the loop's, or fake ones on a fake clock), the advert encoder with
its per-priority cache, and the driver's own counters.

What it must not do: decide anything; it holds no state of the election.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import Any, Protocol

from vipd.vrrp import packet
from vipd.vrrp.transport import Datagram, Transport

IPAddress = IPv4Address | IPv6Address


class Wire(Protocol):
    """What the driver needs of ``vrrp.transport.Transport``."""

    # Settable: membership changes the unicast peers of a running wire.
    destinations: tuple[IPAddress, ...]

    @property
    def can_follow(self) -> bool: ...

    def send(self, message: bytes, dst: IPAddress) -> None: ...
    def receive(self) -> Any: ...
    def follow(self, dgram: Datagram | None) -> None: ...
    def receive_quiet(self) -> list[tuple[float, Datagram]]: ...
    def wait_readable(self, timeout: float) -> bool: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


# (ifname, ifindex, source, unicast peers, receive) -> a transport.
OpenWire = Callable[[str, int, IPAddress, tuple[IPAddress, ...], bool], Wire]
CallLater = Callable[[float, Callable[[], None]], Timer]


def open_transport(
    ifname: str, ifindex: int, source: IPAddress, peers: tuple[IPAddress, ...], receive: bool
) -> Wire:
    return Transport(
        ifname=ifname, ifindex=ifindex, source=source, unicast_peers=peers, receive=receive
    )


@dataclass
class VrrpStats:
    adverts_sent: int = 0
    adverts_received: int = 0
    send_errors: int = 0
    invalid: Counter[str] = field(default_factory=Counter)
    auth_failures: Counter[str] = field(default_factory=Counter)  # auth_hmac drops by reason
    checksum_forms: Counter[str] = field(default_factory=Counter)
    transitions: Counter[str] = field(default_factory=Counter)


@dataclass
class AdvertCache:
    """Encoded adverts per priority and destination: they only change with the priority
    (and with the source, whose change clears the cache: the IPv4 checksum covers it)."""

    version: int
    vrid: int
    interval_cs: int
    addresses: tuple[IPAddress, ...]
    auth_type: int
    auth_data: bytes
    message_only: bool
    _encoded: dict[int, list[tuple[bytes, IPAddress]]] = field(default_factory=dict)

    def messages(
        self, priority: int, source: IPAddress, destinations: tuple[IPAddress, ...]
    ) -> list[tuple[bytes, IPAddress]]:
        cached = self._encoded.get(priority)
        if cached is None:
            advert = packet.Advert(
                version=self.version,
                vrid=self.vrid,
                priority=priority,
                interval_cs=self.interval_cs,
                addresses=self.addresses,
                auth_type=self.auth_type,
                auth_data=self.auth_data,
            )
            cached = [
                (packet.encode(advert, source, dst, message_only=self.message_only), dst)
                for dst in destinations
            ]
            self._encoded[priority] = cached
        return cached

    def clear(self) -> None:
        self._encoded.clear()
