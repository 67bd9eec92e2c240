"""The BFD Control packet (RFC 5880 §4.1): encode, decode, and the checks of §6.8.6 that need
no session.

What it is: the 24-byte mandatory section of a BFD Control packet as a frozen dataclass
(:class:`ControlPacket`), :func:`encode` and :func:`decode`. :func:`decode` applies the
reception rules of RFC 5880 §6.8.6 that look at the packet alone (version, length, Detect
Mult, Multipoint, My Discriminator, a zero Your Discriminator only in Down/AdminDown) and
raises :class:`BadPacket` with a stable ``reason`` label (a metric label) for the first rule
broken.

Authentication (RFC 5880 §4.2-§4.4, §6.7) is not implemented: a packet with the A bit set is
refused with reason ``auth_unsupported`` (§6.8.6: "If the A bit is set and no authentication
is in use ... the packet MUST be discarded"), and vipd never sets the A bit. The Echo function
(§6.4) is not implemented either: vipd advertises a Required Min Echo RX Interval of zero.

What it must not do: any I/O, clock or randomness; which session a packet belongs to and what
it does to it is :mod:`vipd.bfd.session`'s.

Intervals are integer microseconds, as on the wire (§4.1).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

__all__ = [
    "BAD_PACKET_REASONS",
    "HEADER_LEN",
    "VERSION",
    "BadPacket",
    "ControlPacket",
    "Diag",
    "State",
    "decode",
    "diag_label",
    "encode",
]

VERSION = 1
HEADER_LEN = 24  # RFC 5880 §4.1: the mandatory section, without authentication
AUTH_MIN_LEN = 26  # §6.8.6: the shortest packet with the A bit set (header + 2-byte auth)
_STRUCT = struct.Struct("!BBBBIIIII")
_MAX_U32 = 0xFFFFFFFF
# every BadPacket reason (a metric label), the session's "your_discr" included
BAD_PACKET_REASONS = (
    "short",
    "version",
    "length",
    "detect_mult",
    "multipoint",
    "my_discr",
    "your_discr",
    "auth_unsupported",
    "poll_final",
)


class State(enum.IntEnum):
    """The session state field (RFC 5880 §4.1 "State (Sta)", §6.2)."""

    ADMIN_DOWN = 0
    DOWN = 1
    INIT = 2
    UP = 3


class Diag(enum.IntEnum):
    """The diagnostic codes (RFC 5880 §4.1 "Diagnostic (Diag)"); 9-31 are reserved and a
    received reserved value is kept as a plain int, not refused."""

    NONE = 0
    CONTROL_DETECTION_TIME_EXPIRED = 1
    ECHO_FUNCTION_FAILED = 2
    NEIGHBOR_SIGNALED_SESSION_DOWN = 3
    FORWARDING_PLANE_RESET = 4
    PATH_DOWN = 5
    CONCATENATED_PATH_DOWN = 6
    ADMINISTRATIVELY_DOWN = 7
    REVERSE_CONCATENATED_PATH_DOWN = 8


def diag_label(value: int) -> str:
    """A stable lower-case name for a diagnostic code (``reserved_N`` for 9-31)."""
    try:
        return Diag(value).name.lower()
    except ValueError:
        return f"reserved_{value}"


class BadPacket(ValueError):
    """A packet that RFC 5880 §6.8.6 says to discard; ``reason`` is a stable label."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in BAD_PACKET_REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ControlPacket:
    """The mandatory section of a BFD Control packet (RFC 5880 §4.1)."""

    state: State
    diag: int
    detect_mult: int
    my_discr: int
    your_discr: int
    desired_min_tx_us: int
    required_min_rx_us: int
    required_min_echo_rx_us: int = 0
    poll: bool = False
    final: bool = False
    cpi: bool = False  # Control Plane Independent (C)
    auth: bool = False  # Authentication Present (A)
    demand: bool = False  # Demand (D)
    multipoint: bool = False  # Multipoint (M), reserved for RFC 8562; must be zero here

    def __post_init__(self) -> None:
        if not 0 <= self.diag <= 31:
            raise ValueError(f"diag is 5 bits (got {self.diag})")
        if not 0 <= self.detect_mult <= 255:
            raise ValueError(f"detect_mult is 8 bits (got {self.detect_mult})")
        for name in (
            "my_discr",
            "your_discr",
            "desired_min_tx_us",
            "required_min_rx_us",
            "required_min_echo_rx_us",
        ):
            value = getattr(self, name)
            if not 0 <= value <= _MAX_U32:
                raise ValueError(f"{name} is 32 bits (got {value})")
        if self.poll and self.final:
            # §6.5: "A BFD Control packet MUST NOT have both the Poll (P) and Final (F) bits set."
            raise ValueError("a packet must not have both Poll and Final set")


def encode(packet: ControlPacket) -> bytes:
    """The 24 bytes on the wire (RFC 5880 §4.1); the A bit is never set by vipd."""
    if packet.auth:
        raise ValueError("authentication is not supported: the A bit cannot be sent")
    flags = (
        (int(packet.state) << 6)
        | (packet.poll << 5)
        | (packet.final << 4)
        | (packet.cpi << 3)
        | (packet.auth << 2)
        | (packet.demand << 1)
        | int(packet.multipoint)
    )
    return _STRUCT.pack(
        (VERSION << 5) | packet.diag,
        flags,
        packet.detect_mult,
        HEADER_LEN,
        packet.my_discr,
        packet.your_discr,
        packet.desired_min_tx_us,
        packet.required_min_rx_us,
        packet.required_min_echo_rx_us,
    )


def decode(data: bytes) -> ControlPacket:
    """Parse ``data`` (a UDP payload) and apply the session-free rules of RFC 5880 §6.8.6,
    in the RFC's order. Raises :class:`BadPacket`."""
    if len(data) < HEADER_LEN:
        raise BadPacket("short", f"{len(data)} bytes, a Control packet has at least {HEADER_LEN}")
    vers_diag, flags, mult, length, my, your, tx, rx, echo = _STRUCT.unpack_from(data)
    version = vers_diag >> 5
    if version != VERSION:
        raise BadPacket("version", f"version {version}, not {VERSION}")
    auth = bool(flags & 0x04)
    if length < (AUTH_MIN_LEN if auth else HEADER_LEN):
        raise BadPacket("length", f"Length field {length} is below the minimum")
    if length > len(data):
        raise BadPacket("length", f"Length field {length} exceeds the payload ({len(data)})")
    if mult == 0:
        raise BadPacket("detect_mult", "Detect Mult is zero")
    if flags & 0x01:
        raise BadPacket("multipoint", "the Multipoint (M) bit is set")
    if my == 0:
        raise BadPacket("my_discr", "My Discriminator is zero")
    state = State(flags >> 6)
    if your == 0 and state not in (State.DOWN, State.ADMIN_DOWN):
        raise BadPacket("your_discr", f"Your Discriminator is zero in state {state.name}")
    if auth:
        raise BadPacket("auth_unsupported", "the A bit is set and vipd has no authentication")
    poll, final = bool(flags & 0x20), bool(flags & 0x10)
    if poll and final:
        raise BadPacket("poll_final", "both Poll and Final are set (RFC 5880 §6.5)")
    return ControlPacket(
        state=state,
        diag=vers_diag & 0x1F,
        detect_mult=mult,
        my_discr=my,
        your_discr=your,
        desired_min_tx_us=tx,
        required_min_rx_us=rx,
        required_min_echo_rx_us=echo,
        poll=poll,
        final=final,
        cpi=bool(flags & 0x08),
        auth=False,
        demand=bool(flags & 0x02),
    )
