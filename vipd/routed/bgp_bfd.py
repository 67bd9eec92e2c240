"""BFD beside bgp mode's speaker: one `vipd.bfd.BfdSessions` in vipd's own process, a session
per BGP peer, whose changes go to `vipd.routed.bgp.BgpRoutes` (``announce.bgp.bfd``,
docs/design/bfd.md).

What it is
    `BgpBfd.open` starts a single-hop session (RFC 5881) with every ``announce.bgp.peers``
    address, from the node's address on the peer's link (`local_for`); `on_state` is the
    policy of RFC 5882:

    - a session leaving Up because nothing was heard for a detection time (§4.2) or because
      the router said Down: ``routes.bfd_down(peer)``, the announcements withdrawn toward that
      peer and its BGP session closed, rather than waiting for the hold time;
    - a session leaving Up because the router signalled AdminDown: nothing is withdrawn
      (§3.2: an administrative action, not a path failure; the router keeps its BGP session
      too). It is logged and counted in ``vipd_bfd_state_changes_total``;
    - a session entering Up: ``routes.bfd_up(peer)``, announced again if it was held.

    The sockets live in vipd's process and on its event loop, like the speaker's child (which
    dies with vipd): a SIGKILLed vipd stops answering BFD, and the router drops the path within
    its detection time. `close` (after the speaker's graceful stop) sends AdminDown to each
    router and closes the sockets.

What it must not do: decide what is announced (`vipd.routed.ecmp`), or talk BGP.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from ipaddress import ip_address
from typing import Protocol

from vipd import log as vlog
from vipd.bfd import BfdSessions, Diag
from vipd.bfd.metrics import BfdMetrics
from vipd.config.bfd import Bfd
from vipd.election import IPAddress
from vipd.host.snapshot import HostAddress

__all__ = ["BfdRoutes", "BgpBfd", "local_for"]

_metrics: BfdMetrics | None = None


def _registered() -> BfdMetrics:
    """The BFD families on vipd's registry, made once per process and only when BFD runs,
    so a config without BFD scrapes as before."""
    global _metrics
    if _metrics is None:
        from vipd.metrics import REGISTRY

        _metrics = BfdMetrics(REGISTRY)
    return _metrics


def _diag_name(diag: int) -> str:
    try:
        return Diag(diag).name.lower()
    except ValueError:
        return str(diag)


class BfdRoutes(Protocol):
    """What BFD tells the speaker's side (`BgpRoutes`)."""

    def bfd_down(self, peer: IPAddress) -> None: ...

    def bfd_up(self, peer: IPAddress) -> None: ...


def local_for(peer: IPAddress, addresses: Iterable[HostAddress]) -> str | None:
    """This node's address on ``peer``'s subnet: the source single-hop BFD must use (the
    router's session is keyed by it); None: the kernel's choice."""
    for a in addresses:
        if a.ip.version == peer.version and peer in a.address.network:
            return str(a.ip)
    return None


class BgpBfd:
    """The BFD sessions of one vipd run; made and used on the event loop."""

    def __init__(self, cfg: Bfd, routes: BfdRoutes) -> None:
        self.cfg = cfg
        self.routes = routes
        self.log = vlog.get()
        self.metrics = _registered()
        self.sessions = BfdSessions(self.on_state, on_change=self.metrics.on_change)
        self.metrics.watch(self.sessions)

    def open(
        self, peers: Iterable[IPAddress], addresses: Iterable[HostAddress], interface: str
    ) -> None:
        """A session with each peer; raises OSError/ValueError (after closing what opened)."""
        addresses = list(addresses)
        try:
            for peer in peers:
                local = local_for(peer, addresses)
                self.metrics.add_peer(str(peer))
                c = self.cfg
                self.sessions.add_peer(
                    str(peer),
                    c.min_tx_ms,
                    c.min_rx_ms,
                    c.multiplier,
                    local=local,
                    # bound to the uplink only when the peer is on it (single hop)
                    interface=interface if local is not None else None,
                )
                vlog.event(self.log, logging.INFO, "bfd: session", peer=peer, local=local or "-")
        except BaseException:
            self.sessions.close()
            raise

    def on_state(self, peer: str, up: bool, diag: int) -> None:
        """`BfdSessions`' callback (on the loop; must not raise)."""
        addr = ip_address(peer)
        try:
            if up:
                vlog.event(self.log, logging.INFO, "bfd: up", peer=peer)
                self.routes.bfd_up(addr)
            elif diag == Diag.ADMINISTRATIVELY_DOWN:
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "bfd: the router set the session AdminDown; announcements kept "
                    "(RFC 5882 §3.2: not a path failure)",
                    peer=peer,
                )
            else:
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "bfd: down; withdrawing toward the peer and closing its BGP session",
                    peer=peer,
                    diag=_diag_name(diag),
                )
                self.routes.bfd_down(addr)
        except Exception as exc:  # a callback must not raise into the BFD driver
            vlog.event(self.log, logging.ERROR, "bfd: state change not applied", error=exc)

    def close(self) -> None:
        self.sessions.close()
