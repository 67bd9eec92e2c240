"""The VRRP states of one virtual router, and the RFC 9568 §6.4.3 ranking of two routers.

What it is: :class:`State` (RFC 9568 §6.4: Initialize, Backup, Active) and
:func:`address_greater`, the tie-break between two routers of one priority.

What it must not do: hold a router's state or do any I/O (``vrrp.state`` runs the machine).
"""

from __future__ import annotations

from enum import Enum
from ipaddress import IPv4Address, IPv6Address

__all__ = ["State", "address_greater"]


class State(Enum):
    """RFC 9568 §6.4 states. ACTIVE is RFC 3768's MASTER; the value is usable as a label."""

    INITIALIZE = "initialize"
    BACKUP = "backup"
    ACTIVE = "active"


def address_greater(a: IPv4Address | IPv6Address, b: IPv4Address | IPv6Address) -> bool:
    # RFC 9568 §6.4.3: compare the addresses as unsigned integers in network byte order,
    # which is what int() of an ipaddress object is. Mixed families cannot be ranked; the
    # transport only ever hands us one family per instance.
    if a.version != b.version:
        raise ValueError(f"cannot compare {a} with our address {b}: different families")
    return int(a) > int(b)
