"""What the VRRP state machine asks its shell to do, and why: actions and reason strings.

What it is: the actions :class:`vrrp.state.Machine` returns (RFC 9568 §6.4.2 / §6.4.3
"Send an ADVERTISEMENT", "Transition to the Active/Backup state", and the gratuitous ARP /
Neighbor Advertisement of §6.4.2's takeover and §6.4.3's re-announcement), and the stable
labels of the reasons they carry.

What it must not do: perform any of them. The driver (``vrrp.driver``) sends, binds and logs.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "REASON_LABELS",
    "Action",
    "Announce",
    "BecomeActive",
    "BecomeBackup",
    "ContestLost",
    "SendAdvert",
    "fmt_s",
    "reason_label",
]

# Stable first words of every reason string (see reason_label()).
REASON_LABELS = frozenset(
    {
        "start",
        "master-down",
        "preempted",
        "shutdown",
        "lower-priority-advert",
        "interface-down",
        "interface-up",
    }
)


def reason_label(reason: str) -> str:
    """The stable label of a reason string (the part before the first colon)."""
    return reason.split(":", 1)[0]


def fmt_s(seconds: float) -> str:
    """Seconds for a reason string."""
    # Six decimals (µs) without trailing zeros: "3.609375", "1", "0.0001".
    text = f"{seconds:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


@dataclass(frozen=True, slots=True)
class SendAdvert:
    """Send one advertisement carrying ``priority`` (0 = we are resigning)."""

    priority: int


@dataclass(frozen=True, slots=True)
class BecomeActive:
    """We are the active router now: bind the VIP and announce it (after the advert)."""

    reason: str


@dataclass(frozen=True, slots=True)
class BecomeBackup:
    """We are not active: make sure the VIP is not bound here (also at start: stale copies)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Announce:
    """Still active, but another router thinks it is too: re-send gratuitous ARP / NA."""

    reason: str


@dataclass(frozen=True, slots=True)
class ContestLost:
    """We advertised after a priority-0 advert, but a better router did too before we bound
    the VIP: we stay a backup and never held it (nothing for the shell to undo)."""

    reason: str


Action = SendAdvert | BecomeActive | BecomeBackup | Announce | ContestLost
