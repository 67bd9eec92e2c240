"""The ``announce`` section: how the VIP reaches the network. ``arp`` (the default) binds it
on the interface and announces it with gratuitous ARP / unsolicited NA after an election;
``routing-table`` writes it as a route into a kernel table that the node's routing daemon
exports to BGP; with ``pool: ecmp`` every node decides for itself by the ECMP pool rule, with
``pool: leader`` the elected holder alone announces (docs/design/routed.md, `vipd.routed`).

What it must not do: touch routes (``vipd.routed.actuator``) or do any I/O.

Where the rules come from
    - ``table``: 1 to 2^32-1, not 253-255 (the kernel's ``default``, ``main`` and ``local``,
      include/uapi/linux/rtnetlink.h ``RT_TABLE_*``): exporting one of them would announce
      every route of the node. 0 is ``RT_TABLE_UNSPEC``.
    - ``protocol``: 5 to 255; 0-4 are the kernel's own (``RTPROT_UNSPEC``, ``REDIRECT``,
      ``KERNEL``, ``BOOT``, ``STATIC``). vipd only ever sees and touches routes of its protocol.
    - ``pool``: ``ecmp`` (every node whose API server is healthy announces: no election) or
      ``leader`` (the holder that ``election`` elects, VRRP or a Lease, announces alone:
      `vipd.routed.leader`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from vipd.config.schema import Check, choice, seconds, spec

__all__ = ["Announce"]

ROUTED = "routing-table"


def _table(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int:
    table = c.integer(key, value, 1, 0xFFFFFFFF)
    if table in (253, 254, 255):
        c.fail(
            key,
            "must not be 253-255 (the kernel's default, main and local tables: exporting one "
            "would announce every route of the node)",
            value,
        )
    return table


def _pool(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str:
    return c.choice(key, value, ("ecmp", "leader"))


@dataclass(frozen=True, slots=True)
class Announce:
    """``announce``: ``mode`` and, for ``routing-table``, the table, protocol, drain, pool."""

    mode: Literal["arp", "routing-table"] = field(
        default="arp", metadata=spec(choice("arp", ROUTED))
    )
    # the kernel table the routing daemon exports (FRR: ip import-table 198)
    table: int = field(default=198, metadata=spec(_table))
    # the route protocol of vipd's routes (kube-vip's 248)
    protocol: int = field(default=248, metadata=spec(lambda c, k, v, _: c.integer(k, v, 5, 255)))
    # seconds between the announcement's withdrawal and the binding's removal
    drain: float = field(default=2.0, metadata=spec(seconds(0, 60)))
    pool: Literal["ecmp", "leader"] = field(default="ecmp", metadata=spec(_pool))

    @property
    def routed(self) -> bool:
        return self.mode == ROUTED

    @property
    def ecmp(self) -> bool:
        """Routing-table mode's ECMP pool: every node decides, nothing is elected."""
        return self.routed and self.pool == "ecmp"
