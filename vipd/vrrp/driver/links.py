"""The sockets and links of a VRRP virtual router: opened when it runs, made again on a
relink, closed at the end.

What it is: the VRRP socket on the interface (``vrrp.transport`` through the driver's
``open_wire`` seam) and, with ``election.vrrp.vmac``, the macvlan with the virtual MAC
(RFC 9568 §7.3, ``vipd.host.vmaclink``) and its send-only socket, and the claim watch's
sockets (``defence``). A relink (``vipd.election``: the interface re-created, or a new source
address on it) reopens them in one call, so a leader misses no advert.

What it must not do: change the election (the agent takes the node out of it first when the
link is re-created), or leave a socket open on an error: every close is attempted and the
first failure raised after the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from vipd import log as vlog
from vipd.election import VipLink
from vipd.host.vmaclink import VmacLink
from vipd.preflight import Preflight

if TYPE_CHECKING:
    from vipd.vrrp.driver.election import VrrpElection


async def prepare(e: VrrpElection) -> VipLink:
    """The VIP's link: the interface, or with ``vmac`` the macvlan made for it here."""
    if not e.vrrp.vmac or e.family != 4:
        return VipLink(e.ifname, e.ifindex, e.pre.link.mac)
    return await make_vmac(e)


async def make_vmac(e: VrrpElection) -> VipLink:
    e.vmac = VmacLink(e.ifname, e.ifindex, e.vrrp.vrid)
    # In a thread: pyroute2's IPRoute runs an asyncio loop of its own, which cannot start
    # inside this (running) one. Start-up only.
    index = await asyncio.to_thread(e.vmac.start)
    vlog.event(
        e.log,
        logging.INFO,
        "virtual MAC on",
        link=e.vmac.name,
        mac=e.vmac.mac,
        parent=e.ifname,
        reused_leftover=e.vmac.reused,
    )
    return VipLink(e.vmac.name, index, e.vmac.mac)


async def relink(e: VrrpElection, pre: Preflight) -> VipLink:
    """The interface as it is now: fresh sockets on it (see ``vipd.election``).

    Re-created (another index or MAC): the agent took the node out of the election
    first (``on_link(False)``); the VRRP socket (bound to the new index, the multicast
    membership joined there), the claim watch (the new MAC is ours) and, with ``vmac``,
    the macvlan on the new parent (it went with the old one) are made again. A new
    source address on the same interface: the node may be leading, so the VRRP socket
    is reopened with it in this same call, no advert is missed, and the machine takes
    it as its own address (the tie-break of RFC 9568 §6.4.3 and the own-advert check)."""
    loop = asyncio.get_running_loop()
    with e.timers.lock:  # the pacer's tick finds the old sockets or none (the loop's)
        new_link = (pre.link.index, pre.link.mac) != (e.ifindex, e.pre.link.mac)
        e.pre = pre
        e.ifname, e.ifindex = pre.link.name, pre.link.index
        e.source = pre.source_for(e.family)  # this virtual router's family
        e.unicast_peers = pre.peers_for(e.family)
        params = dataclasses.replace(e.machine.params, primary_ip=e.source)
        e.machine.params = params
        e.adverts.cache.clear()  # the IPv4 checksum covers the source address
        started = e.timers.fatal is not None
        close_sockets(e, loop)
        if new_link:
            e.defence.close(loop)
    link = VipLink(e.ifname, e.ifindex, pre.link.mac)
    vmac = e.vmac
    if vmac is not None and (vmac.parent_index != e.ifindex or vmac.index is None):
        # The macvlan went with its old parent (or an earlier try did not make it); this
        # also restores the sysctls it had set on the parent.
        with contextlib.suppress(Exception):
            await asyncio.to_thread(vmac.stop)
        link = await make_vmac(e)
    elif vmac is not None and vmac.index is not None:
        link = VipLink(vmac.name, vmac.index, vmac.mac)
    if started:
        with e.timers.lock:
            open_sockets(e, loop)
            if not e.defence.watches:
                start_claimwatch(e, loop)
    vlog.event(
        e.log,
        logging.INFO,
        "vrrp: sockets reopened",
        interface=e.ifname,
        index=e.ifindex,
        source=e.source,
        vip_link=link.name,
        family=f"IPv{e.family}",
        multicast="no (unicast)" if e.unicast_peers else "joined",
    )
    return link


def open_sockets(e: VrrpElection, loop: asyncio.AbstractEventLoop) -> None:
    """The VRRP socket on the interface (and the virtual MAC's send-only one)."""
    e.transport = e.open_wire(e.ifname, e.ifindex, e.source, e.unicast_peers, True)
    e.follower.reset()
    if e.vmac is not None:
        assert e.vmac.index is not None
        e.sender = e.open_wire(e.vmac.name, e.vmac.index, e.source, (), False)
    loop.add_reader(e.transport.fileno(), e.timers.guarded, e.adverts.on_readable)


def close_sockets(e: VrrpElection, loop: asyncio.AbstractEventLoop) -> None:
    transport, sender = e.transport, e.sender
    e.transport = e.sender = None
    if transport is not None:
        loop.remove_reader(transport.fileno())
        transport.close()
    if sender is not None:
        sender.close()


def start_claimwatch(e: VrrpElection, loop: asyncio.AbstractEventLoop) -> None:
    """IPv4: watch ARP for another MAC claiming a VIP (see ``defence``)."""
    if e.want_claimwatch and e.family == 4:
        e.defence.start(loop, e.ifname, e.pre.link.mac)


async def close(e: VrrpElection) -> None:
    """Sockets, watches and the virtual MAC link; each failure is raised after the rest
    are closed (the agent logs and counts it)."""
    loop = asyncio.get_running_loop()
    errors: list[BaseException] = []

    def attempt(fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:
            errors.append(exc)

    transport = e.transport
    for claimwatch in e.defence.watches:
        attempt(lambda cw=claimwatch: loop.remove_reader(cw.fileno()))  # type: ignore[misc]
        attempt(claimwatch.close)
    if transport is not None:
        attempt(lambda: loop.remove_reader(transport.fileno()))
        attempt(transport.close)
    if e.sender is not None:
        attempt(e.sender.close)
    if e.vmac is not None:
        try:
            await asyncio.to_thread(e.vmac.stop)
        except Exception as exc:
            vlog.event(
                e.log,
                logging.ERROR,
                "could not remove the virtual MAC link",
                link=e.vmac.name,
                error=exc,
            )
            errors.append(exc)
    if errors:
        raise errors[0]
