"""Routing-table mode's routes in the kernel, through pyroute2: observe, plan, apply.

What it is
    `RouteActuator` keeps vipd's two routes per VIP (`vipd.routed.plan`: the AnyIP binding in
    the ``local`` table and the announcement in the exported table, both with vipd's route
    protocol) in the network namespace ``netns`` (None: ours). ``observe`` dumps the routes of
    vipd's protocol only; ``apply`` runs a plan's operations in its order; ``converge(desired)``
    does the three, is idempotent, and is what a restart calls first: with the VIPs it wants
    (or none) it removes every route a killed predecessor left. `withdraw_all` is the stop
    sequence: announcements off, the drain delay, bindings off.

    The routing daemon on the node does the announcing: FRR 8.4
    (``ip import-table 198`` in zebra, ``redistribute table 198 route-map VIP`` in bgpd), or
    BIRD 2 (a ``protocol kernel`` on ``kernel table 198`` with ``learn``, exported to BGP);
    FRR ≥ 10 can use ``redistribute table-direct 198``. See docs/design/routed.md.

    Synchronous on purpose: pyroute2's IPRoute runs an asyncio loop of its own, so the agent
    calls it in a worker thread (as it does vipd.host.vmaclink), never on its event loop.
    ``observe`` dumps every route of both families and keeps vipd's: cheap on a node that
    learns a default route from its routers, not on one that holds a full Internet table
    (a kernel-side filter, NETLINK_GET_STRICT_CHK with RTA_TABLE, would be the fix then).

What it must not do
    Decide whether to announce (`vipd.routed.ecmp` does), wait on its own except in
    `withdraw_all`'s drain, or touch any route that is not of its protocol (in its table or,
    for bindings, of type ``local`` in the ``local`` table).
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_network
from typing import Any

from vipd.routed.plan import (
    DEFAULT_DRAIN,
    DEFAULT_PROTOCOL,
    DEFAULT_TABLE,
    AddBinding,
    AddRoute,
    DelBinding,
    DelRoute,
    IPNetwork,
    Observed,
    Op,
    Phase,
    plan,
)

__all__ = ["LOCAL_TABLE", "RouteActuator", "RouteError"]

IPAddress = IPv4Address | IPv6Address

LOCAL_TABLE = 255  # RT_TABLE_LOCAL
RTN_UNICAST = 1
RTN_LOCAL = 2
RT_SCOPE_HOST = 254
RT_SCOPE_LINK = 253


class RouteError(OSError):
    """A route request was refused; ``errno`` is the kernel's."""


class RouteActuator:
    """vipd's announcement and binding routes in ``table`` with ``protocol``, in ``netns``."""

    def __init__(
        self,
        table: int = DEFAULT_TABLE,
        protocol: int = DEFAULT_PROTOCOL,
        netns: str | None = None,
    ) -> None:
        if not 1 <= table <= 0xFFFFFFFF or table in (253, 254, LOCAL_TABLE):
            # 253-255 are the kernel's default/main/local: announcing "what main has" would
            # export every route of the node.
            raise ValueError(f"table must be 1-4294967295 and not 253-255 (got {table})")
        if not 5 <= protocol <= 255:
            # 0-4 are the kernel's own (unspec, redirect, kernel, boot, static).
            raise ValueError(f"protocol must be 5-255 (got {protocol})")
        self.table = table
        self.protocol = protocol
        self.netns = netns
        from pyroute2 import IPRoute

        kwargs: dict[str, Any] = {} if netns is None else {"netns": netns, "flags": 0}
        try:
            self._ipr = IPRoute(**kwargs)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such network namespace", netns) from None
        found = self._ipr.link_lookup(ifname="lo")
        if not found:
            raise RouteError(errno.ENODEV, "no loopback interface")
        self._lo = int(found[0])

    def observe(self) -> Observed:
        """vipd's routes now: announcements in its table, bindings in the local table."""
        announced: set[IPNetwork] = set()
        bound: set[IPNetwork] = set()
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in self._ipr.get_routes(family=family):
                if int(msg["proto"]) != self.protocol:
                    continue
                table = msg.get_attr("RTA_TABLE")
                table = int(msg["table"] if table is None else table)
                dst = msg.get_attr("RTA_DST")
                if dst is None:
                    continue
                net = ip_network(f"{dst}/{msg['dst_len']}", strict=False)
                if table == self.table:
                    announced.add(net)
                elif table == LOCAL_TABLE and int(msg["type"]) == RTN_LOCAL:
                    bound.add(net)
        return Observed(frozenset(announced), frozenset(bound))

    def apply(self, ops: Iterable[Op]) -> None:
        """Run ``ops`` in order; stop at the first refusal (RouteError) and leave the rest."""
        for op in ops:
            if isinstance(op, AddBinding):
                self._request("replace", op.dst, LOCAL_TABLE, RTN_LOCAL, RT_SCOPE_HOST)
            elif isinstance(op, AddRoute):
                self._request("replace", op.dst, self.table, RTN_UNICAST, RT_SCOPE_LINK)
            elif isinstance(op, DelRoute):
                self._request("del", op.dst, self.table, RTN_UNICAST, RT_SCOPE_LINK)
            elif isinstance(op, DelBinding):
                self._request("del", op.dst, LOCAL_TABLE, RTN_LOCAL, RT_SCOPE_HOST)

    def converge(self, desired: Mapping[IPAddress, Phase]) -> list[Op]:
        """Observe, plan, apply; returns what was done (empty when already converged)."""
        ops = plan(self.observe(), desired)
        self.apply(ops)
        return ops

    def withdraw_all(
        self,
        vips: Sequence[IPAddress],
        drain: float = DEFAULT_DRAIN,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """The stop sequence: every announcement off, ``drain`` seconds, every binding off.

        During the drain the fabric withdraws the route (0.13 s measured with BFD) while
        packets already on their way, and flows the router still hashes here, are answered.
        """
        if self.converge(dict.fromkeys(vips, Phase.DRAINING)) or self.observe().bound:
            sleep(drain)
        self.converge({})

    def _request(self, cmd: str, dst: IPNetwork, table: int, rtype: int, scope: int) -> None:
        family = socket.AF_INET if dst.version == 4 else socket.AF_INET6
        try:
            self._ipr.route(
                cmd,
                family=family,
                dst=str(dst.network_address),
                dst_len=dst.prefixlen,
                table=table,
                proto=self.protocol,
                type=rtype,
                scope=scope,
                oif=self._lo,
            )
        except OSError as exc:
            code = getattr(exc, "code", None) or exc.errno or 0
            if cmd == "del" and code in (errno.ESRCH, errno.ENOENT):
                return  # already gone: the plan's goal holds
            name = errno.errorcode.get(code, str(code))
            raise RouteError(code, f"{cmd} {dst} table {table}: {name}") from None

    def close(self) -> None:
        self._ipr.close()

    def __enter__(self) -> RouteActuator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
