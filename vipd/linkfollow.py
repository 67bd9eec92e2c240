"""The configured interface, followed by name, and what its changes mean for the election.

What it is
    The agent's side of the link watch (``vipd.host.linkwatch``): RFC 9568 §6.4 on the
    interface as it is now, for every election instance. Usable means present, up, and with
    a source address for every family of the VIPs (preflight's rule,
    ``vipd.preflight.advert_source``). Losing any of it is a Shutdown (``on_link(False)``; a
    deleted link took the VIPs with it: the controllers are unlinked). The same name with
    another index or MAC is a new interface, and a new source address a new identity on the
    wire: the backends reopen their sockets on it (``relink``) and each instance gets new
    actuators on its VIP link. Then, usable again, a Startup (``on_link(True)``). Changes
    are applied one at a time, in order, by one task (`LinkFollower.follow`); a relink that
    failed is tried again `RELINK_RETRY` later or at the next change.

    Every address notification goes to `LinkFollower.on_address`: a VIP's own, on its
    instance's link, makes that controller look at once (a VIP removed by someone else is
    added again); lost notifications make every controller look.

What it must not do: decide anything about the election (it tells the backends what the
interface is), or act once the stop has begun.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Protocol

from vipd import log as vlog
from vipd import metrics
from vipd.controller import Controller, VipActuators
from vipd.election import IPAddress
from vipd.host.linkwatch import Interface
from vipd.instance import Instance, MakeActuators
from vipd.lifecycle import Wiring
from vipd.preflight import Preflight, advert_source

__all__ = ["RELINK_RETRY", "LinkFollower", "LinkState", "WatchLink"]

# A relink that failed (the interface went again, the virtual MAC could not be made) is
# tried again this much later, or at the next change of the interface, whichever is first.
RELINK_RETRY = 1.0


class LinkState(Protocol):
    """What the follower needs of ``vipd.host.linkwatch.LinkWatch`` (a fake in unit tests)."""

    @property
    def state(self) -> bool: ...
    @property
    def iface(self) -> Interface: ...

    def fileno(self) -> int: ...
    def on_readable(self) -> None: ...
    def close(self) -> None: ...


# The watch of the configured interface (by name; the second callback hears every address
# change: index, address or None).
WatchLink = Callable[
    [str, Callable[[Interface], None], Callable[[int, IPAddress | None], None]], LinkState
]


class LinkFollower:
    """The configured interface and the instances' VIP links, kept in step."""

    def __init__(
        self,
        pre: Preflight,
        instances: list[Instance],
        wiring: Wiring,
        *,
        make_actuators: MakeActuators,
        on_sent: Callable[[int], None],
    ) -> None:
        self.pre = pre  # the link and sources in use: preflight's, or the last relink's
        self.instances = instances
        self._cfg = wiring.config
        self._make_actuators = make_actuators
        self._on_sent = on_sent
        self._publish = wiring.publish
        self._stopping = wiring.stopping
        self._guard = wiring.guard
        self.log = wiring.log
        self.watch: LinkState | None = None
        self._usable = False  # what the backends were last told (on_link)
        self._link_changed = asyncio.Event()

    @property
    def usable(self) -> bool:
        return self._usable

    @property
    def link_up(self) -> bool:
        return bool(self.watch is not None and self.watch.state)

    def _controllers(self) -> list[Controller]:
        return [i.controller for i in self.instances if i.controller is not None]

    def open(self, watch_link: WatchLink) -> None:
        """Start watching the interface; usable if it is still what preflight saw."""
        self.watch = watch_link(
            self.pre.link.name,
            lambda iface: self._guard(self.on_link, iface),
            lambda index, ip: self._guard(self.on_address, index, ip),
        )
        iface = self.watch.iface
        self._usable = (
            iface.up
            and (iface.index, iface.mac) == (self.pre.link.index, self.pre.link.mac)
            and self._sources(iface) == self._pre_sources()
        )
        self._link_changed.set()  # whatever changed since preflight's snapshot

    def listen(self) -> None:
        """Read the watch's notifications on the running loop from now."""
        assert self.watch is not None
        asyncio.get_running_loop().add_reader(
            self.watch.fileno(), self._guard, self.watch.on_readable
        )
        metrics.INTERFACE_UP.labels(interface=self.pre.link.name).set(1 if self.watch.state else 0)

    def close(self) -> None:
        """A stop step: no more notifications."""
        watch = self.watch
        if watch is not None:
            asyncio.get_running_loop().remove_reader(watch.fileno())
            watch.close()

    def on_link(self, iface: Interface) -> None:
        """The configured interface changed: `follow` applies it, in order."""
        metrics.INTERFACE_UP.labels(interface=self.pre.link.name).set(1 if iface.up else 0)
        self._link_changed.set()
        self._publish()

    def on_address(self, index: int, ip: IPAddress | None) -> None:
        """An address changed somewhere: a VIP's own on its instance's link is that
        controller's to check at once (a VIP removed by someone else is added again); None:
        notifications were lost, so every controller looks again."""
        if self._stopping():
            return
        for inst in self.instances:
            link = inst.link
            if inst.controller is None:
                continue
            if ip is None or (ip in inst.vips and link is not None and index == link.index):
                inst.controller.kick()

    def _pre_sources(self) -> tuple[IPAddress, ...]:
        """The advert sources in use, one per family of the VIPs (preflight's, or the last
        relink's)."""
        return self.pre.sources or (self.pre.source,)

    def _sources(self, iface: Interface) -> tuple[IPAddress, ...] | None:
        """The node's advert source on ``iface`` for each family of the VIPs (preflight's
        rule), IPv4 first; None if the interface is gone or any family has none."""
        if not iface.present:
            return None
        cfg = self._cfg()
        link = iface.host_link()
        out: list[IPAddress] = []
        for version in cfg.families:
            src = advert_source(cfg.family(version)[0], link, self.pre.peers_for(version))
            if src is None:
                return None
            out.append(src)
        return tuple(out)

    async def follow(self) -> None:
        """Apply every change of the configured interface, one at a time, until cancelled."""
        while True:
            await self._link_changed.wait()
            self._link_changed.clear()
            if self.watch is not None and not self._stopping():
                await self.apply(self.watch.iface)

    def _tell_elections(self, up: bool) -> None:
        for e in (inst.election for inst in self.instances):
            e.on_link(up)

    async def apply(self, iface: Interface) -> None:
        """RFC 9568 §6.4 on the interface as it is now, for every instance (the module
        docstring says what each change means)."""
        sources = self._sources(iface)
        usable = iface.up and sources is not None
        new_link = iface.present and (iface.index, iface.mac) != (
            self.pre.link.index,
            self.pre.link.mac,
        )
        if self._usable and (not usable or new_link):
            self._usable = False
            why = (
                "deleted"
                if not iface.present
                else "re-created"
                if new_link
                else "down"
                if not iface.up
                else "without a source address"
            )
            vlog.event(
                self.log,
                logging.WARNING,
                "interface unusable: leaving the election",
                interface=iface.name,
                why=why,
            )
            self._tell_elections(False)
        if not iface.present:
            for controller in self._controllers():
                controller.unlink()
        if usable and (new_link or sources != self._pre_sources()):
            assert sources is not None
            if not await self._relink(iface, sources, new_link):
                return
        if usable and not self._usable:
            self._usable = True
            self._tell_elections(True)
        self._publish()

    async def _relink(
        self, iface: Interface, sources: tuple[IPAddress, ...], new_link: bool
    ) -> bool:
        """Fresh sockets and actuators on the interface as it is now, for every instance;
        False if that failed (tried again `RELINK_RETRY` later, or at the next change)."""
        old = self.pre
        source = next(s for s in sources if s.version == self._cfg().vip.version)
        pre = dataclasses.replace(old, link=iface.host_link(), source=source, sources=sources)
        try:
            for inst in self.instances:
                link = await inst.election.relink(pre)
                if new_link or link != inst.link:
                    fresh = [self._make_actuators(link, v, self._on_sent) for v in inst.vips]
                    for address, announcer in inst.actuators:
                        for part in (address, announcer):
                            with contextlib.suppress(OSError):
                                part.close()
                    inst.actuators = fresh
                    if inst.controller is not None:
                        inst.controller.relink([VipActuators(a, b) for a, b in fresh])
                    inst.link = link
        except Exception as exc:
            vlog.event(
                self.log,
                logging.ERROR,
                "could not rejoin on the interface: trying again",
                interface=iface.name,
                index=iface.index,
                error=exc,
                retry_s=RELINK_RETRY,
            )
            asyncio.get_running_loop().call_later(RELINK_RETRY, self._link_changed.set)
            return False
        self.pre = pre
        vlog.event(
            self.log,
            logging.INFO,
            "interface re-created: fresh sockets on it" if new_link else "source address changed",
            interface=iface.name,
            index=iface.index,
            index_was=old.link.index,
            mac=iface.mac,
            source=",".join(map(str, sources)),
            source_was=",".join(map(str, old.sources or (old.source,))),
            vip_link=",".join(i.link.name for i in self.instances if i.link is not None),
        )
        h = self._cfg().health
        if h is not None and h.local == old.source and source != old.source:
            vlog.event(
                self.log,
                logging.WARNING,
                "health.local is the node's old address: the local API server is still "
                "checked there (change it in the config and restart)",
                local=h.local,
                source=source,
            )
        return True
