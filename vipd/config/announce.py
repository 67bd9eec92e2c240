"""The ``announce`` section: how the VIP reaches the network. ``arp`` (the default) binds it
on the interface and announces it with gratuitous ARP / unsolicited NA after an election;
``routing-table`` writes it as a route into a kernel table that the node's routing daemon
exports to BGP; with ``pool: ecmp`` every node decides for itself by the ECMP pool rule, with
``pool: leader`` the elected holder alone announces (docs/design/routed.md, `vipd.routed`);
``bgp`` is the same with vipd's own BGP speaker announcing (``announce.bgp``,
`vipd.config.bgp`) instead of the node's routing daemon, in either pool.

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

from vipd.config.bgp import Bgp, require
from vipd.config.schema import Check, choice, seconds, spec

__all__ = ["BGP", "ROUTED", "Announce"]

ROUTED = "routing-table"
BGP = "bgp"


def _bgp_used(c: Check, prefix: str, got: Mapping[str, Any], sec: Mapping[str, Any]) -> None:
    # In another mode the section is validated and not used (like the other election mode's).
    if got["mode"] != BGP:
        return
    require(c, got["bgp"])
    if got.get("pool") == "leader" and got["bgp"].bfd.enabled:
        # BFD runs in the ECMP pool's backend (vipd.routed.backend); the leader pool's
        # actuators (vipd.routed.leader) do not open it, and a setting that does nothing
        # would let a reader believe a silent node's path leaves in BFD's time.
        c.fail(
            "announce.bgp.bfd.enabled",
            "must be false with announce.pool: leader (BFD toward the routers is built for "
            "the ecmp pool only)",
            True,
        )


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


@dataclass(frozen=True, slots=True)
class Announce:
    """``announce``: ``mode`` and, for ``routing-table``, the table, protocol, drain, pool;
    for ``bgp``, the same drain and pool and the speaker's ``bgp`` section (the table is
    not used; the protocol tags the AnyIP bindings)."""

    mode: Literal["arp", "routing-table", "bgp"] = field(
        default="arp", metadata=spec(choice("arp", ROUTED, BGP))
    )
    # the kernel table the routing daemon exports (FRR: ip import-table 198)
    table: int = field(default=198, metadata=spec(_table))
    # the route protocol of vipd's routes (kube-vip's 248)
    protocol: int = field(default=248, metadata=spec(lambda c, k, v, _: c.integer(k, v, 5, 255)))
    # seconds between the announcement's withdrawal and the binding's removal
    drain: float = field(default=2.0, metadata=spec(seconds(0, 60)))
    pool: Literal["ecmp", "leader"] = field(default="ecmp", metadata=spec(choice("ecmp", "leader")))
    bgp: Bgp = field(
        default=Bgp(), metadata=spec(section=Bgp, needs=("mode", "pool"), then=_bgp_used)
    )

    @property
    def routed(self) -> bool:
        """Routing-table or bgp mode: AnyIP bindings, the routes announce the VIP."""
        return self.mode in (ROUTED, BGP)

    @property
    def speaker(self) -> bool:
        """bgp mode: vipd's own BGP speaker announces (not a table for a routing daemon)."""
        return self.mode == BGP

    @property
    def ecmp(self) -> bool:
        """The ECMP pool (the default of both routed modes): every node decides, nothing
        is elected."""
        return self.routed and self.pool == "ecmp"
