"""The BGP speaker port of ``announce.mode: bgp``: what vipd asks of an embedded speaker,
and the records it is configured with. `vipd.routed.exabgp` is the one implementation.

What it is
    `Speaker` is a small protocol: ``start``, ``announce(prefix)``, ``withdraw(prefix)``,
    ``announced()`` (what a live speaker has been told to announce: empty while it is dead,
    so a dead speaker is "everything withdrawn" in vipd's view), ``sessions()`` (each peer's
    session up or not), the BFD hooks ``bfd_down(peer)`` / ``bfd_up(peer)`` (routes toward
    that peer withdrawn while its BFD session is down) and ``stop(graceful)``.
    `SpeakerConfig` and `Peer` are what the speaker needs, built from ``announce.bgp`` by
    `speaker_config`; a peer's password is bytes read from its file and never in a repr.

    The announcement is the VIP's host route with next hop self (RFC 4271 §5.1.3: the
    speaker's own address on the session), per family: an IPv4 VIP goes to the IPv4 peers,
    an IPv6 VIP to the IPv6 peers.

What it must not do: any I/O (the driver does), or decide whether to announce
(`vipd.routed.ecmp` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Protocol

__all__ = ["Peer", "Speaker", "SpeakerConfig", "speaker_config"]

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network


@dataclass(frozen=True, slots=True)
class Peer:
    address: IPAddress
    asn: int
    port: int = 179
    password: bytes | None = field(default=None, repr=False)  # TCP MD5 (RFC 2385)


@dataclass(frozen=True, slots=True)
class SpeakerConfig:
    local_asn: int
    router_id: IPv4Address
    hold_time: int
    peers: tuple[Peer, ...]


class Speaker(Protocol):
    """An embedded BGP speaker. Every method returns at once (the driver's threads do the
    waiting), except ``stop``, which returns once the speaker is gone."""

    def start(self) -> None: ...

    def announce(self, prefix: IPNetwork) -> None: ...

    def withdraw(self, prefix: IPNetwork) -> None: ...

    def announced(self) -> frozenset[IPNetwork]: ...

    def sessions(self) -> Mapping[IPAddress, bool]: ...

    def bfd_down(self, peer: IPAddress) -> None: ...

    def bfd_up(self, peer: IPAddress) -> None: ...

    def stop(self, graceful: bool) -> None: ...


def speaker_config(
    local_asn: int,
    router_id: IPv4Address,
    hold_time: int,
    peers: tuple[tuple[IPAddress, int, int], ...],
    passwords: Mapping[IPAddress, bytes] | None = None,
) -> SpeakerConfig:
    """A `SpeakerConfig` from ``announce.bgp``'s values; ``passwords`` by peer address."""
    pw = passwords or {}
    return SpeakerConfig(
        local_asn,
        router_id,
        hold_time,
        tuple(Peer(a, asn, port, pw.get(a)) for a, asn, port in peers),
    )
