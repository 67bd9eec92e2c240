"""The ``announce.bgp`` section: the embedded BGP speaker of ``announce.mode: bgp``
(`vipd.routed.speaker`, docs/design/routed.md): this node's AS, router id, hold time and the
routers it peers with.

What it must not do: read a password file (`vipd.routed.bgp_password` does, at start and on
``vipd check``) or do any I/O. A password is never config text: only its file's path is.

Where the rules come from
    - ASNs: 1 to 4294967294 (RFC 6793 four-octet ASNs). 0 is reserved (RFC 7607),
      4294967295 is reserved (RFC 7300), 23456 is AS_TRANS (RFC 6793 §9), a placeholder that
      no speaker may be configured with.
    - ``hold_time``: 0 (no keepalives: a dead node is never detected) is refused; otherwise
      3 to 65535 (RFC 4271 §4.2: "MUST be either zero or at least three seconds"). The
      default, 9, is FRR's ``frr defaults datacenter`` (keepalive 3, hold 9): without BFD a
      silent node's path leaves the router within 9 s, and two lost keepalives in a row are
      still survived. The session uses the smaller of the two ends' values (RFC 4271 §4.2).
    - ``router_id``: an IPv4 address (RFC 4271 §4.2 BGP Identifier, four octets; RFC 6286
      only needs it unique within the AS), default: this node's IPv4 source address.
    - ``peers``: at least one; an address once (one session per router); each VIP's family
      needs a peer of that family (the VIP is announced with ``next-hop self``, which is an
      address of the session's family), and a peer of a family no VIP has would carry nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from vipd.config.rules import ip_literal
from vipd.config.schema import Check, read, spec

__all__ = ["AS_TRANS", "Bgp", "BgpPeer", "read_peers"]

IPAddress = IPv4Address | IPv6Address

AS_TRANS = 23456
ASN_MAX = 4294967294


def _asn(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int | None:
    if value is None:
        return None
    asn = c.integer(key, value, 1, ASN_MAX, " (0 and 4294967295 are reserved)")
    if asn == AS_TRANS:
        c.fail(key, "must not be 23456 (AS_TRANS, RFC 6793: a placeholder, not an AS)", value)
    return asn


def _peer_asn(c: Check, key: str, value: object, got: Mapping[str, Any]) -> int:
    if value is None:
        c.fail(key, "is required (the router's AS number)")
    asn = _asn(c, key, value, got)
    assert asn is not None
    return asn


def _address(c: Check, key: str, value: object, _: Mapping[str, Any]) -> IPAddress:
    if value is None:
        c.fail(key, "is required (the router's address)")
    ip = ip_literal(c, key, value, "the router's address")
    if ip.is_multicast or ip.is_unspecified or ip.is_loopback:
        c.fail(key, "must be a unicast address of a router", value)
    return ip


def _password_file(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.startswith("/")):
        c.fail(key, "must be an absolute path (a root-owned file of mode 0600 or 0400)", value)
    return value


def _router_id(c: Check, key: str, value: object, _: Mapping[str, Any]) -> IPv4Address | None:
    if value is None:
        return None
    ip = ip_literal(c, key, value, "a BGP identifier: four octets written as IPv4")
    if not isinstance(ip, IPv4Address) or ip.is_unspecified:
        c.fail(key, "must be a non-zero IPv4 address (RFC 4271 §4.2: four octets)", value)
    return ip


def _hold_time(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int:
    return c.integer(
        key, value, 3, 65535, " (RFC 4271 §4.2; 0, no keepalives at all, is not allowed)"
    )


@dataclass(frozen=True, slots=True)
class BgpPeer:
    """One ``announce.bgp.peers`` item: a router this node opens a session to."""

    address: IPAddress = field(metadata=spec(_address, stand_in="192.0.2.1"))
    asn: int = field(metadata=spec(_peer_asn, stand_in=65000))
    port: int = field(default=179, metadata=spec(lambda c, k, v, _: c.integer(k, v, 1, 65535)))
    # TCP MD5 signature (RFC 2385): the file holding the password, never the password
    password_file: str | None = field(default=None, metadata=spec(_password_file))


def read_peers(c: Check, key: str, value: object, _: Mapping[str, Any]) -> tuple[BgpPeer, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        c.fail(key, "must be a list of routers ({address, asn, port, password_file})", value)
    out: list[BgpPeer] = []
    for i, item in enumerate(value):
        c.index = i
        if item is None:
            c.fail(f"{key}[{i}]", "must be a mapping with address and asn", item)
        p = read(c, f"{key}[{i}]", BgpPeer, item)
        if any(o.address == p.address for o in out):
            c.fail(f"{key}[{i}].address", "is listed twice: one session per router", str(p.address))
        out.append(p)
    return tuple(out)


def _families(c: Check, prefix: str, got: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    """Each VIP's family has a peer, and each peer's family a VIP (the module docstring)."""
    peers: tuple[BgpPeer, ...] = got["peers"]
    vip_versions = {v.version for v in c.vips}
    for version in sorted(vip_versions):
        if peers and not any(p.address.version == version for p in peers):
            c.fail(
                f"{prefix}.peers",
                f"has no IPv{version} router, but an IPv{version} VIP is announced with "
                "next-hop self over a session of its own family",
            )
    for i, p in enumerate(peers):
        if c.vips and p.address.version not in vip_versions:
            c.fail(
                f"{prefix}.peers[{i}].address",
                f"is IPv{p.address.version}, and no VIP is: the session would carry nothing",
                str(p.address),
            )


@dataclass(frozen=True, slots=True)
class Bgp:
    """``announce.bgp``: used with ``announce.mode: bgp`` only."""

    # this node's AS (required in bgp mode; eBGP to the routers is the usual design)
    local_asn: int | None = field(default=None, metadata=spec(_asn))
    # the BGP identifier; null: this node's IPv4 source address
    router_id: IPv4Address | None = field(default=None, metadata=spec(_router_id))
    # seconds; the session's hold time (keepalives every third of it)
    hold_time: int = field(default=9, metadata=spec(_hold_time))
    peers: tuple[BgpPeer, ...] = field(
        default=(), metadata=spec(read_peers, section=BgpPeer, many=True, then=_families)
    )


def require(c: Check, bgp: Bgp) -> None:
    """What ``announce.mode: bgp`` needs of the section."""
    if bgp.local_asn is None:
        c.fail("announce.bgp.local_asn", "is required with announce.mode: bgp (this node's AS)")
    if not bgp.peers:
        c.fail("announce.bgp.peers", "needs at least one router with announce.mode: bgp")
