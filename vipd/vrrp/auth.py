"""VRRP advert authentication trailer (HMAC-SHA256), wire-compatible with keepalived's auth_hmac.

What it is: the pure codec and policy of draft-cassen-vrrp-auth-hmac ("An HMAC Authentication
Extension for the Virtual Router Redundancy Protocol"), as keepalived >= 2.4 implements it
(``keepalived/vrrp/vrrp_auth_hmac.c`` and ``vrrp_check_packet`` in ``keepalived/vrrp/vrrp.c``,
github.com/acassen/keepalived). It must not open sockets, read a clock, read files or log: the
caller passes ``now`` (UTC seconds, a float) and the bytes; keys come in as a `KeyRing` that
`vipd.vrrp.keyfile` reads from files.

The wire (28 bytes after the VRRP message, inside the IP payload, so counted in the IPv4 total
length / IPv6 payload length):

    0      1       2..3      4..7         8..9            10..11       12..27
    type   key id  reserved  seconds      1/65536 second  counter      HMAC-SHA256[:16]
    (1)    1..255  0         UTC, 32 bit  (the three form one 64-bit sequence number)

- What is signed: HMAC-SHA256(key, pseudo || message' || trailer[0:12] || 16 zero bytes),
  truncated to 16 bytes, where pseudo is 20 bytes (4 for IPv4, 6 for IPv6; the VRRP version;
  the VRID; one zero byte; the IP source address, an IPv4 one zero-padded to 16 bytes) and
  message' is the VRRP message with its checksum field (bytes 6..7) read as zero. The IP header
  (TTL, destination) is outside the HMAC, so one signed advert goes to every unicast peer and
  the checksum may differ per copy.
- The VRRP checksum is not the trailer's business: IPv4 (v2 and v3) checksums the message
  alone, as without the trailer; IPv6 is checksummed by the kernel (``IPV6_CHECKSUM``) over the
  whole payload, trailer included, on send and on receive.
- A receiver sees a trailer only where it has auth configured and the payload is exactly the
  message length its header announces plus 28 (`split`).
- Receive checks in keepalived's order (`Verifier.verify`): type 1 and reserved 0 (else
  "malformed"); in time mode the timestamp within ``window`` seconds of ``now`` ("stale", before
  any HMAC work); the key id configured ("unknown-key"); the HMAC ("bad-hmac"); the sequence
  growing per sender ("replay"), the high-water mark moving only after the HMAC verified.
- Sending (`Signer`): the sequence is the clock (seconds << 32 | 1/65536 s << 16), or the last
  value plus one when the clock has not moved past it; in time mode a last value stranded more
  than ``window`` seconds ahead of the clock (a clock stepped back) restarts from the clock.
- Rollout (`decide`): receive-only verifies a trailer that is present and sends none;
  permissive signs and still accepts adverts without a trailer; enforce (keepalived's default)
  drops them. A trailer that is present and fails drops the advert in every mode.

How the VRRP driver plugs it in (``vipd.vrrp.driver.signing`` and ``adverts``):

- Start: `vipd.vrrp.keyfile.read_keyring` for the configured key files, then one `Signer` and
  one `Verifier` per virtual router (``senders``: the number of unicast peers, or keepalived's
  4 for multicast). Import this module only where auth is configured: ``hashlib`` costs a node
  without auth memory for nothing (see ``packet._same_auth``).
- Per received datagram, after ``packet.parse_ipv4`` (IPv4) or the IPv6 receive path:
  ``message, trailer = auth.split(payload, ipv6=...)``; ``packet.decode(message, ...)`` (IPv6
  with ``verify_checksum=False`` as today: the kernel verified the whole payload) and
  ``packet.check(...)`` as today; then ``verdict = verifier.verify(message, trailer, src=src,
  now=time.time())`` and, unless ``verdict.accept``, count ``verdict.reason`` and drop. A
  ``verdict.skew`` beyond half the window on an accepted advert is keepalived's "clock skew
  approaching window" warning.
- Per sent advert: ``trailer = signer.trailer(message, src=src, now=time.time())`` once per
  logical advert, appended to every copy (a v3 IPv4 unicast sender encodes one message per
  peer: the checksum differs, the HMAC does not). ``src`` must be the source the kernel puts in
  the IP header (IPv6: the link-local address), or every peer answers "bad-hmac". The IPv4
  checksum stays the message's; the kernel recomputes the IPv6 one over the whole payload.
- The advert-size budget (how many VIPs fit in the MTU) loses ``signer.overhead`` bytes.
- Config: keepalived refuses auth_hmac together with the v2 password (it drops the password),
  and its ``strict_mode`` requires enforce.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import TypeAlias

__all__ = [
    "EXT_TYPE_SHA256",
    "HMAC_LEN",
    "KEY_MAX",
    "KEY_MIN",
    "MCAST_SENDERS",
    "TRAILER_LEN",
    "WINDOW_MAX",
    "WINDOW_MIN",
    "KeyRing",
    "Mode",
    "Replay",
    "Result",
    "Signer",
    "Trailer",
    "Verdict",
    "Verifier",
    "clock_sequence",
    "decide",
    "default_window",
    "mac",
    "next_sequence",
    "parse_key",
    "sign",
    "split",
]

IPAddress: TypeAlias = IPv4Address | IPv6Address

EXT_TYPE_SHA256 = 1
HMAC_LEN = 16
TRAILER_LEN = 28
KEY_MIN = 32  # keepalived's floor: a 128-bit margin even against a quantum search
KEY_MAX = 64
WINDOW_MIN = 1
WINDOW_MAX = 300
WINDOW_FLOOR = 5  # the least window keepalived derives from the advert interval
MCAST_SENDERS = 4  # keepalived's replay slots per multicast instance

_TRAILER = struct.Struct("!BBHIHH16s")
_SIGNED_PREFIX = 12  # type .. counter: the part of the trailer covered as it is
_ZERO_HMAC = bytes(HMAC_LEN)
_HEADER_LEN = 8
_V2_AUTH_LEN = 8
_U32 = 1 << 32
_U64 = 1 << 64


class Mode(enum.Enum):
    """keepalived's ``mode``: the rollout stage of one node."""

    RECEIVE_ONLY = "receive-only"
    PERMISSIVE = "permissive"
    ENFORCE = "enforce"

    @property
    def signs(self) -> bool:
        return self is not Mode.RECEIVE_ONLY


class Replay(enum.Enum):
    """keepalived's ``anti_replay``: a freshness window on UTC, or only a growing sequence."""

    TIME = "time"
    MONOTONIC = "monotonic"


class Result(enum.Enum):
    """The outcome of verifying one advert; the values are metric labels."""

    OK = "ok"
    MISSING = "missing"
    MALFORMED = "malformed"
    UNKNOWN_KEY = "unknown-key"
    BAD_HMAC = "bad-hmac"
    STALE = "stale"
    REPLAY = "replay"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a received advert: ``reason`` is the metric label ("unsigned": accepted
    without a trailer in a migration mode)."""

    accept: bool
    reason: str
    result: Result
    key_id: int | None = None
    skew: int | None = None  # time mode: our seconds minus the sender's, when it was read


@dataclass(frozen=True, slots=True)
class Trailer:
    """The 28 bytes after the VRRP message."""

    ext_type: int
    key_id: int
    reserved: int
    seconds: int
    subsec: int
    counter: int
    digest: bytes

    @property
    def sequence(self) -> int:
        return (self.seconds << 32) | (self.subsec << 16) | self.counter

    @classmethod
    def decode(cls, data: bytes) -> Trailer:
        if len(data) != TRAILER_LEN:
            raise ValueError(f"a trailer is {TRAILER_LEN} bytes, got {len(data)}")
        return cls(*_TRAILER.unpack(data))

    def encode(self) -> bytes:
        return _TRAILER.pack(
            self.ext_type,
            self.key_id,
            self.reserved,
            self.seconds,
            self.subsec,
            self.counter,
            self.digest,
        )


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The keys of one virtual router by id, and the one used to sign.

    The repr never shows key bytes, so a KeyRing in a log line or a traceback leaks nothing.
    """

    keys: Mapping[int, bytes] = field(repr=False)
    active: int

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("no keys")
        for key_id, key in self.keys.items():
            if not 1 <= key_id <= 255:
                raise ValueError(f"key id must be 1..255, got {key_id}")
            if not KEY_MIN <= len(key) <= KEY_MAX:
                raise ValueError(f"key {key_id} is {len(key)} bytes, must be {KEY_MIN}..{KEY_MAX}")
        if self.active not in self.keys:
            raise ValueError(f"active key {self.active} is not among the keys {sorted(self.keys)}")

    def __repr__(self) -> str:
        return f"KeyRing(ids={sorted(self.keys)}, active={self.active})"


def parse_key(text: bytes) -> bytes:
    """A key as keepalived reads one from a file: ``hex:`` and hex digits, else the bytes
    themselves; trailing CR/LF dropped. The error never quotes the key."""
    value = text.rstrip(b"\r\n")
    if value.startswith(b"hex:"):
        try:
            key = bytes.fromhex(value[4:].decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError("the hex: key has a character that is not a hex digit") from None
    else:
        key = value
    if not KEY_MIN <= len(key) <= KEY_MAX:
        raise ValueError(f"the key is {len(key)} bytes, must be {KEY_MIN}..{KEY_MAX}")
    return key


def default_window(advert_interval: float) -> int:
    """keepalived's window when none is set: 3 whole advert intervals, clamped to 5..300 s."""
    return min(max(3 * int(advert_interval), WINDOW_FLOOR), WINDOW_MAX)


def _message_length(payload: bytes, ipv6: bool) -> int | None:
    if len(payload) < _HEADER_LEN:
        return None
    width = 16 if ipv6 else 4
    extra = _V2_AUTH_LEN if payload[0] >> 4 == 2 else 0
    return _HEADER_LEN + width * payload[3] + extra


def split(payload: bytes, *, ipv6: bool) -> tuple[bytes, bytes | None]:
    """(VRRP message, trailer or None) of an IP payload, as keepalived tells them apart: a
    trailer only where the payload is the length the header announces plus `TRAILER_LEN`.
    Anything else comes back whole, for ``packet.decode`` to judge."""
    data = bytes(payload)
    length = _message_length(data, ipv6)
    if length is not None and len(data) == length + TRAILER_LEN:
        return data[:length], data[length:]
    return data, None


def _pseudo(src: IPAddress, version: int, vrid: int) -> bytes:
    family = 6 if src.version == 6 else 4
    return bytes((family, version, vrid, 0)) + src.packed.ljust(16, b"\0")


def mac(key: bytes, message: bytes, src: IPAddress, trailer_prefix: bytes) -> bytes:
    """The 16-byte truncated HMAC of ``message`` (a VRRP message) sent from ``src`` with the
    first 12 trailer bytes ``trailer_prefix``; version and VRID are read from the message."""
    if len(message) < _HEADER_LEN or len(trailer_prefix) != _SIGNED_PREFIX:
        raise ValueError("a VRRP message of 8+ bytes and a 12-byte trailer prefix")
    data = b"".join(
        (
            _pseudo(src, message[0] >> 4, message[1]),
            message[:6],
            b"\0\0",
            message[8:],
            trailer_prefix,
            _ZERO_HMAC,
        )
    )
    return hmac.new(key, data, hashlib.sha256).digest()[:HMAC_LEN]


def _after(a: int, b: int) -> bool:
    """RFC 1982 serial order on 64 bits: a comes after b."""
    diff = (a - b) % _U64
    return 0 < diff < (1 << 63)


def _delta32(a: int, b: int) -> int:
    """a - b of two 32-bit second counts, as a signed 32-bit number (keepalived's int32_t)."""
    diff = (a - b) % _U32
    return diff - _U32 if diff >= (1 << 31) else diff


def clock_sequence(now: float) -> int:
    """The sequence the clock gives at ``now``: UTC seconds << 32, 1/65536 s << 16, counter 0."""
    seconds = int(now // 1)
    subsec = min(int((now - seconds) * 65536), 0xFFFF)
    return ((seconds % _U32) << 32) | (subsec << 16)


def next_sequence(last: int, now: float, *, replay: Replay, window: int) -> int:
    """The sequence to send after ``last`` (0: none sent yet), as keepalived's sender does."""
    clock = clock_sequence(now)
    if _after(clock, last):
        return clock
    ahead = _delta32(last >> 32, clock >> 32)
    if replay is Replay.TIME and ahead > window:
        return clock
    return (last + 1) % _U64


class Signer:
    """The sending side of one virtual router: mode, keys and the last sequence sent."""

    def __init__(
        self, keys: KeyRing, *, mode: Mode = Mode.ENFORCE, replay: Replay, window: int
    ) -> None:
        if not WINDOW_MIN <= window <= WINDOW_MAX:
            raise ValueError(f"window must be {WINDOW_MIN}..{WINDOW_MAX} s, got {window}")
        self.keys = keys
        self.mode = mode
        self.replay = replay
        self.window = window
        self.last = 0

    @property
    def overhead(self) -> int:
        """Bytes the trailer adds to each advert in this mode."""
        return TRAILER_LEN if self.mode.signs else 0

    def trailer(self, message: bytes, *, src: IPAddress, now: float) -> bytes:
        """The trailer to append to ``message`` sent from ``src`` (b"" in receive-only)."""
        if not self.mode.signs:
            return b""
        self.last = next_sequence(self.last, now, replay=self.replay, window=self.window)
        return sign(message, src=src, keys=self.keys, sequence=self.last)


def sign(message: bytes, *, src: IPAddress, keys: KeyRing, sequence: int) -> bytes:
    """The trailer for ``message`` from ``src`` with the active key and ``sequence``."""
    prefix = _TRAILER.pack(
        EXT_TYPE_SHA256,
        keys.active,
        0,
        sequence >> 32,
        (sequence >> 16) & 0xFFFF,
        sequence & 0xFFFF,
        b"",
    )[:_SIGNED_PREFIX]
    return prefix + mac(keys.keys[keys.active], message, src, prefix)


def decide(mode: Mode, result: Result) -> Verdict:
    """Accept or drop an advert given the verification ``result`` and the rollout ``mode``."""
    if result is Result.OK:
        return Verdict(True, "ok", result)
    if result is Result.MISSING:
        if mode is Mode.ENFORCE:
            return Verdict(False, "missing", result)
        return Verdict(True, "unsigned", result)
    return Verdict(False, result.value, result)


class Verifier:
    """The receiving side of one virtual router: keys, mode, replay rule and the per-sender
    high-water marks (at most ``senders`` sources, least recently verified evicted; keepalived
    keeps 4 for multicast and one per configured unicast peer)."""

    def __init__(
        self,
        keys: KeyRing,
        *,
        mode: Mode = Mode.ENFORCE,
        replay: Replay,
        window: int,
        senders: int = MCAST_SENDERS,
    ) -> None:
        if not WINDOW_MIN <= window <= WINDOW_MAX:
            raise ValueError(f"window must be {WINDOW_MIN}..{WINDOW_MAX} s, got {window}")
        if senders < 1:
            raise ValueError(f"senders must be at least 1, got {senders}")
        self.keys = keys
        self.mode = mode
        self.replay = replay
        self.window = window
        self.senders = senders
        self.marks: OrderedDict[IPAddress, int] = OrderedDict()

    def verify(
        self, message: bytes, trailer: bytes | None, *, src: IPAddress, now: float
    ) -> Verdict:
        """Judge one received advert from ``src`` at ``now``: ``split``'s parts (a trailer
        of any other length than `TRAILER_LEN` is a ValueError, not a verdict)."""
        if trailer is None:
            return decide(self.mode, Result.MISSING)
        result, key_id, skew = self._check(message, Trailer.decode(trailer), src, now)
        verdict = decide(self.mode, result)
        return Verdict(verdict.accept, verdict.reason, result, key_id, skew)

    def _check(
        self, message: bytes, tr: Trailer, src: IPAddress, now: float
    ) -> tuple[Result, int | None, int | None]:
        if tr.ext_type != EXT_TYPE_SHA256 or tr.reserved != 0:
            return Result.MALFORMED, None, None
        seconds = int(now // 1) % _U32
        skew: int | None = None
        if self.replay is Replay.TIME:
            # Before the HMAC: a flood of old captures costs no digest each. The stamp is not
            # authenticated yet, so this may only reject.
            skew = _delta32(seconds, tr.seconds)
            if abs(skew) > self.window:
                return Result.STALE, tr.key_id, skew
        key = self.keys.keys.get(tr.key_id)
        if key is None:
            return Result.UNKNOWN_KEY, tr.key_id, skew
        want = mac(key, message, src, tr.encode()[:_SIGNED_PREFIX])
        if not hmac.compare_digest(want, tr.digest):
            return Result.BAD_HMAC, tr.key_id, skew
        mark = self.marks.get(src)
        # In time mode a mark outside the window only orders packets the window rejects
        # anyway; dropping it lets a sender whose clock was stepped back in again.
        if (
            mark is not None
            and self.replay is Replay.TIME
            and abs(_delta32(seconds, mark >> 32)) > self.window
        ):
            mark = None
        if mark is not None and not _after(tr.sequence, mark):
            self.marks.move_to_end(src)
            return Result.REPLAY, tr.key_id, skew
        self.marks[src] = tr.sequence
        self.marks.move_to_end(src)
        while len(self.marks) > self.senders:
            self.marks.popitem(last=False)
        return Result.OK, tr.key_id, skew
