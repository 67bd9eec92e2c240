"""VRRP advertisement codec: bytes <-> `Advert`, checksums and the receive checks.

This module is part of vipd's pure core. It does no I/O and reads no clock: it never imports
asyncio, socket, select, subprocess, time or pyroute2. The shell (`vipd.vrrp.transport`) owns
the sockets and hands this module the VRRP message together with the addresses and TTL it
took from the IP header (`parse_ipv4` does that split for IPv4 raw sockets).

What it implements:

- RFC 3768 §5 (VRRPv2, IPv4 only): version 2, auth type, Adver Int in whole seconds, the
  address list and the 8-byte authentication data that keepalived always appends; checksum
  over the VRRP message alone.
- RFC 9568 §5 (VRRPv3, IPv4 and IPv6): version 3, 4 reserved bits and a 12-bit Max Adver Int
  in centiseconds, the address list, no authentication.
- RFC 1071 Internet checksum.
  - IPv6: over the RFC 8200 §8.1 pseudo-header (src, dst, 32-bit upper-layer length, three
    zero bytes, next header 112) followed by the message.
  - IPv4 v3: RFC 9568 §5.2 says "the VRRP message", but keepalived (2.2.7, and every
    release since 1.3.7) and RFC 5798 deployments checksum a 12-byte IPv4 pseudo-header
    (src, dst, 0, 112, length) followed by the message, and reject anything else. We send that
    form by default (``message_only=True`` sends the RFC's letter, for strict peers) and
    accept both on receive.
- The receive checks of RFC 3768 §7.1 / RFC 9568 §7.1 in keepalived's `vrrp_check_packet`
  order (`check`), raising `DecodeError` whose `reason` is a stable metric label; then
  vipd's own: a priority-255 (address owner, RFC 9568 §6.1) advert is dropped as ``owner``,
  since no vipd node owns the VIP and one forged owner advert would preempt every node.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Literal, TypeAlias

__all__ = [
    "GROUP_V4",
    "GROUP_V6",
    "VRRP_PROTO",
    "Advert",
    "ChecksumForm",
    "DecodeError",
    "Expectation",
    "IPAddress",
    "Reason",
    "check",
    "decode",
    "encode",
    "parse_ipv4",
]

VRRP_PROTO = 112
GROUP_V4 = IPv4Address("224.0.0.18")
GROUP_V6 = IPv6Address("ff02::12")

IPAddress: TypeAlias = IPv4Address | IPv6Address
Reason: TypeAlias = Literal[
    "truncated",
    "length",
    "version",
    "type",
    "checksum",
    "ttl",
    "auth",
    "interval",
    "address-list",
    "vrid",
    "source",
    "family",
    "owner",
]
ChecksumForm: TypeAlias = Literal["v2", "pseudo-header", "message-only", "ipv6"]

_HEADER_LEN = 8
_AUTH_LEN = 8  # v2 trailer; keepalived sends it even with auth_type 0
_ADVERT = 1  # the only VRRP packet type
_MAX_ADDRS = 255  # the count field is one byte
_MAX_V3_INTERVAL_CS = 0x0FFF
_MAX_V2_INTERVAL_CS = 255 * 100
_IP_TTL = 255
_OWNER_PRIORITY = 255  # RFC 9568 §6.1: only the address owner sends it
_AUTH_NONE = 0
_AUTH_PASS = 1

# vers_type, vrid, priority, count, then auth_type + adver_int (v2) or the 16-bit v3 field
_V2_HEADER = struct.Struct("!BBBBBBH")
_V3_HEADER = struct.Struct("!BBBBHH")
_IPV4_HEADER = struct.Struct("!BBHHHBBH4s4s")


class DecodeError(ValueError):
    """A received message was malformed or is not for us; `reason` is a metric label."""

    reason: Reason

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Advert:
    """One VRRP advertisement, independent of the wire version's units."""

    version: int
    vrid: int
    priority: int
    interval_cs: int
    addresses: tuple[IPAddress, ...]
    auth_type: int = _AUTH_NONE
    # Decoded with the trailing NUL padding stripped, so b"secret" round-trips.
    auth_data: bytes = b""


@dataclass(frozen=True, slots=True)
class Expectation:
    """What this node accepts from its peers for one virtual router."""

    version: int
    vrid: int
    addresses: frozenset[IPAddress]
    auth_type: int = _AUTH_NONE
    auth_data: bytes = b""
    interval_cs: int | None = None  # v2 only: keepalived drops a mismatching Adver Int
    unicast_peers: frozenset[IPAddress] = frozenset()  # empty = multicast mode


# RFC 1071 arithmetic. The one's-complement sum of 16-bit words is congruent to the
# big-endian integer value of the data modulo 0xFFFF (because 2**16 == 1 mod 0xFFFF), so one
# C-level int.from_bytes plus a modulo replaces a Python loop over words. Concatenating
# even-length parts is just adding their integers. Every message reaching these helpers has
# even length (8 + 4n [+ 8] or 8 + 16n), so no odd-byte padding is needed.


def _checksum(total: int) -> int:
    """Checksum field value for data whose word-sum integer is `total`."""
    # End-around carry never folds non-zero data to 0: the folded sum is then 0xFFFF.
    folded = total % 0xFFFF or (0xFFFF if total else 0)
    return folded ^ 0xFFFF


def _sums_to_zero(total: int) -> bool:
    """True if data including its checksum field verifies (folded sum 0xFFFF)."""
    return total != 0 and total % 0xFFFF == 0


def _pseudo_header(src: IPAddress, dst: IPAddress, length: int) -> int:
    # IPv4: src, dst, (0, 112), length. IPv6: src, dst, 32-bit length, 3 zero bytes, 112.
    # Zero words add nothing and the split of the length field does not matter, so both
    # families reduce to the same sum.
    return int(src) + int(dst) + VRRP_PROTO + length


def _wire_auth(data: bytes) -> bytes:
    # keepalived truncates the configured password to 8 bytes and NUL-pads it.
    return data[:_AUTH_LEN].ljust(_AUTH_LEN, b"\0")


def _group(address: IPAddress) -> IPAddress:
    return GROUP_V4 if address.version == 4 else GROUP_V6


def _validate(advert: Advert, src: IPAddress, dst: IPAddress) -> None:
    version = advert.version
    if version not in (2, 3):
        raise ValueError(f"version must be 2 or 3, got {version}")
    if not 1 <= advert.vrid <= 255:
        raise ValueError(f"vrid must be 1..255, got {advert.vrid}")
    if not 0 <= advert.priority <= 255:
        raise ValueError(f"priority must be 0..255, got {advert.priority}")
    if src.version != dst.version:
        raise ValueError(f"src {src} and dst {dst} are different address families")
    addresses = advert.addresses
    if not 1 <= len(addresses) <= _MAX_ADDRS:
        raise ValueError(f"need 1..{_MAX_ADDRS} addresses, got {len(addresses)}")
    for address in addresses:
        if address.version != src.version:
            raise ValueError(f"address {address} is not IPv{src.version} like src {src}")
    # A peer compares the count with its own VIP count (keepalived does), so a duplicate
    # would make every advert we send look wrong to it.
    if len(set(addresses)) != len(addresses):
        raise ValueError("addresses contain duplicates")
    interval = advert.interval_cs
    if version == 2:
        if src.version != 4:
            raise ValueError("VRRPv2 is IPv4 only")
        if interval % 100 or not 100 <= interval <= _MAX_V2_INTERVAL_CS:
            raise ValueError(
                f"v2 interval_cs must be a multiple of 100 in 100..25500, got {interval}"
            )
        if advert.auth_type not in (_AUTH_NONE, _AUTH_PASS):
            # AH (2) needs an IPsec AH header around the message, which we do not build.
            raise ValueError(f"auth_type must be 0 or 1, got {advert.auth_type}")
        if advert.auth_type == _AUTH_NONE and advert.auth_data:
            raise ValueError("auth_data needs auth_type 1")
    else:
        if not 1 <= interval <= _MAX_V3_INTERVAL_CS:
            raise ValueError(f"v3 interval_cs must be 1..{_MAX_V3_INTERVAL_CS}, got {interval}")
        if advert.auth_type or advert.auth_data:
            raise ValueError("VRRPv3 has no authentication")


def encode(advert: Advert, src: IPAddress, dst: IPAddress, *, message_only: bool = False) -> bytes:
    """Build the VRRP message (no IP header) that `src` sends to `dst`.

    The checksum depends on `src` and `dst` for v3, so a unicast sender encodes once per peer.
    ``message_only``: a v3 IPv4 checksum over the message alone (RFC 9568 §5.2.8 read
    literally), for peers that verify only that form; v2 and IPv6 have one form each and
    ignore it. Raises ValueError if the advert cannot be put on the wire as given.
    """
    _validate(advert, src, dst)
    body = b"".join([address.packed for address in advert.addresses])
    count = len(advert.addresses)
    if advert.version == 2:
        body += _wire_auth(advert.auth_data)
        v2 = (
            0x21,
            advert.vrid,
            advert.priority,
            count,
            advert.auth_type,
            advert.interval_cs // 100,
        )
        total = int.from_bytes(_V2_HEADER.pack(*v2, 0) + body, "big")
        return _V2_HEADER.pack(*v2, _checksum(total)) + body
    v3 = (0x31, advert.vrid, advert.priority, count, advert.interval_cs)
    total = int.from_bytes(_V3_HEADER.pack(*v3, 0) + body, "big")
    if not (message_only and isinstance(src, IPv4Address)):
        total += _pseudo_header(src, dst, _HEADER_LEN + len(body))
    return _V3_HEADER.pack(*v3, _checksum(total)) + body


def decode(
    message: bytes | bytearray | memoryview,
    src: IPAddress,
    dst: IPAddress,
    *,
    verify_checksum: bool = True,
) -> tuple[Advert, ChecksumForm]:
    """Parse a VRRP message received from `src` at `dst`.

    Returns the advert and the checksum form it carried. With ``verify_checksum=False``
    (IPv6, where the kernel verified it) the form is the one the family implies and, for v3
    IPv4, the one we send ("pseudo-header"), not one that was observed. Raises only
    DecodeError, whatever the bytes.
    """
    data = bytes(message)
    size = len(data)
    if size < _HEADER_LEN:
        raise DecodeError("truncated", f"{size} bytes, the header alone is {_HEADER_LEN}")
    version = data[0] >> 4
    if version not in (2, 3):
        raise DecodeError("version", f"version {version}")
    if src.version != dst.version:
        raise DecodeError("family", f"src {src} and dst {dst} are different address families")
    ipv6 = src.version == 6
    if version == 2 and ipv6:
        raise DecodeError("family", "VRRPv2 over IPv6")
    if data[0] & 0x0F != _ADVERT:
        raise DecodeError("type", f"type {data[0] & 0x0F}")
    count = data[3]
    width = 16 if ipv6 else 4
    expected = _HEADER_LEN + width * count + (_AUTH_LEN if version == 2 else 0)
    if size != expected:
        raise DecodeError("length", f"{size} bytes, expected {expected} for {count} addresses")

    form: ChecksumForm
    if version == 2:
        form = "v2"
        if verify_checksum and not _sums_to_zero(int.from_bytes(data, "big")):
            raise DecodeError("checksum", "VRRPv2 checksum")
    elif ipv6:
        form = "ipv6"
        if verify_checksum:
            total = int.from_bytes(data, "big") + _pseudo_header(src, dst, size)
            if not _sums_to_zero(total):
                raise DecodeError("checksum", "VRRPv3 IPv6 checksum")
    else:
        form = "pseudo-header"
        if verify_checksum:
            total = int.from_bytes(data, "big")
            # The pseudo-header form first: a message valid in both forms is what we and
            # keepalived send.
            if _sums_to_zero(total + _pseudo_header(src, dst, size)):
                pass
            elif _sums_to_zero(total):
                form = "message-only"
            else:
                raise DecodeError("checksum", "VRRPv3 IPv4 checksum, neither form")

    if count == 0:
        raise DecodeError("address-list", "no addresses")
    if version == 2:
        interval_cs = data[5] * 100
        auth_type = data[4]
        auth_data = data[-_AUTH_LEN:].rstrip(b"\0")
    else:
        # RFC 9568 §5.2: the reserved bits are ignored on reception (keepalived agrees).
        interval_cs = ((data[4] << 8) | data[5]) & _MAX_V3_INTERVAL_CS
        auth_type = _AUTH_NONE
        auth_data = b""
    if interval_cs == 0:
        # A zero interval would make a backup's Master_Down_Interval collapse to the skew.
        raise DecodeError("interval", "advertisement interval 0")

    end = _HEADER_LEN + width * count
    addresses: tuple[IPAddress, ...]
    if ipv6:
        addresses = tuple(IPv6Address(data[i : i + 16]) for i in range(_HEADER_LEN, end, 16))
    else:
        addresses = tuple(IPv4Address(data[i : i + 4]) for i in range(_HEADER_LEN, end, 4))
    advert = Advert(
        version=version,
        vrid=data[1],
        priority=data[2],
        interval_cs=interval_cs,
        addresses=addresses,
        auth_type=auth_type,
        auth_data=auth_data,
    )
    return advert, form


def parse_ipv4(
    datagram: bytes | bytearray | memoryview,
) -> tuple[IPv4Address, IPv4Address, int, bytes]:
    """Split an IPv4 datagram from a raw socket into (src, dst, ttl, payload).

    The payload is cut at the header's total length, which drops Ethernet padding: a
    VRRP advert is shorter than the 46-byte Ethernet minimum. The protocol field is not
    checked; the raw socket was opened for protocol 112.
    """
    data = bytes(datagram)
    size = len(data)
    if size < _IPV4_HEADER.size:
        raise DecodeError("truncated", f"{size} bytes, an IPv4 header is 20")
    ver_ihl, _, total_length, _, _, ttl, _, _, src, dst = _IPV4_HEADER.unpack_from(data)
    if ver_ihl >> 4 != 4:
        raise DecodeError("version", f"IP version {ver_ihl >> 4}")
    header_length = (ver_ihl & 0x0F) * 4
    if header_length < _IPV4_HEADER.size:
        raise DecodeError("length", f"IHL {header_length // 4} is below 5")
    if total_length < header_length:
        raise DecodeError("length", f"total length {total_length} < header {header_length}")
    if total_length > size:
        raise DecodeError("truncated", f"total length {total_length} > {size} bytes received")
    return IPv4Address(src), IPv4Address(dst), ttl, data[header_length:total_length]


def _same_auth(got: bytes, want: bytes) -> bool:
    """Constant-time comparison of authentication data.

    hmac is imported here, not at the top: only VRRPv2 with a password compares, and hashlib
    (which hmac brings) costs every other daemon ~0.2 MiB of RSS. The driver loads it at
    start where a password is configured, so here it is a lookup in ``sys.modules``."""
    import hmac

    return hmac.compare_digest(got, want)


def check(
    advert: Advert,
    *,
    src: IPAddress,
    dst: IPAddress,
    ttl: int,
    expect: Expectation,
) -> None:
    """Apply the receive checks; raise DecodeError(reason) if the advert must be ignored.

    The order is keepalived's `vrrp_check_packet` order, so the label we count for a packet
    is the one keepalived would log. VRID comes first because keepalived's dispatcher drops
    other VRIDs silently before any check: they belong to another virtual router.
    """
    if advert.vrid != expect.vrid:
        raise DecodeError("vrid", f"vrid {advert.vrid}, expected {expect.vrid}")
    unicast = bool(expect.unicast_peers)
    # RFC 3768/9568 §7.1: TTL 255 proves the sender is on-link, and §5.1.1.3 has unicast
    # adverts sent with TTL 255 too, so over IPv4 the check holds in both modes (skipping it
    # let an off-link host with a spoofed peer source in). keepalived skips it in unicast
    # but sends IPv4 unicast with TTL 255 unless `unicast_ttl` is set; a routed unicast peer
    # is not supported. IPv6 unicast stays exempt: keepalived 2.2.7 leaves its hop limit to
    # the kernel (64), and enforcing 255 there would make such a peer unheard (dual master).
    if ttl != _IP_TTL and (not unicast or dst.version == 4):
        raise DecodeError("ttl", f"TTL {ttl}, expected {_IP_TTL}")
    if advert.version != expect.version:
        raise DecodeError("version", f"version {advert.version}, expected {expect.version}")
    if advert.version == 2:
        if advert.auth_type != expect.auth_type:
            raise DecodeError("auth", f"auth type {advert.auth_type}, expected {expect.auth_type}")
        # Auth type 0 defines no data; keepalived does not compare it, so neither do we.
        if expect.auth_type != _AUTH_NONE and not _same_auth(
            _wire_auth(advert.auth_data), _wire_auth(expect.auth_data)
        ):
            raise DecodeError("auth", "authentication data mismatch")
        if expect.interval_cs is not None and advert.interval_cs != expect.interval_cs:
            raise DecodeError(
                "interval", f"interval {advert.interval_cs} cs, expected {expect.interval_cs} cs"
            )
    if unicast:
        if dst.is_multicast:
            raise DecodeError("source", f"multicast dst {dst} in unicast mode")
    elif dst != _group(dst):
        raise DecodeError("source", f"dst {dst} is not the VRRP group")
    # keepalived checks the count and that each of its VIPs is present; together they make
    # the list equal to ours as a set with no duplicates.
    addresses = advert.addresses
    if len(addresses) != len(expect.addresses) or set(addresses) != expect.addresses:
        raise DecodeError("address-list", f"{len(addresses)} addresses differ from ours")
    if unicast and src not in expect.unicast_peers:
        raise DecodeError("source", f"src {src} is not a unicast peer")
    # No vipd node owns the VIP (the config refuses priority 255 and a VIP that is a node
    # address), so a priority-255 advert claims an ownership nobody has: honouring it would
    # let one forged packet preempt every node at once (RFC 9568 §6.4.3: a Master steps down
    # to any higher priority). Checked last, so only an otherwise valid advert counts here.
    if advert.priority == _OWNER_PRIORITY:
        raise DecodeError("owner", f"priority {_OWNER_PRIORITY}: no node owns the VIP")
