"""Test doubles for the agent and the election drivers: no root, no sockets on the wire.

What it is: a fake clock and the timers that run on it (`FakeClock`, `FakeTimers`), an
in-memory VRRP wire (`FakeWire`), the VIP's actuators (`FakeAddress`, `FakeAnnouncer`), a link
watch whose state a test flips (`FakeLink`), and an in-memory Lease store (`LeaseStore`,
`FakeLeaseApi`). Everything that reaches "the host" appends to one shared `Events` list, so a
test can assert the order of adverts, binds and gratuitous ARPs across them.

The only real file descriptors are socketpairs: the event loop's ``add_reader`` needs one,
and writing a byte to it is how an injected datagram or link change wakes the loop.

What it must not do: pretend to be more than the driver reads (no packet checks of its own,
no timing of its own beyond the fake clock).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address, IPv6Address, ip_interface
from typing import Any

from vipd.host.linkwatch import IFF_LOWER_UP, IFF_RUNNING, IFF_UP, Interface
from vipd.kube import Credentials
from vipd.lease import logic
from vipd.preflight import HostAddress
from vipd.vrrp import packet
from vipd.vrrp.transport import Datagram

IPAddress = IPv4Address | IPv6Address


class Events(list[str]):
    def since(self, mark: int) -> list[str]:
        return self[mark:]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeTimer:
    due: float
    fn: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """``call_later`` on the fake clock; the test fires them with `fire_next`."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.pending: list[FakeTimer] = []

    def call_later(self, delay: float, fn: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.clock.now + delay, fn)
        self.pending.append(timer)
        return timer

    def next_due(self) -> float | None:
        live = [t for t in self.pending if not t.cancelled]
        return min((t.due for t in live), default=None)

    def _take_next(self) -> FakeTimer:
        live = sorted((t for t in self.pending if not t.cancelled), key=lambda t: t.due)
        assert live, "no timer is armed"
        self.pending.remove(live[0])
        return live[0]

    def fire_next(self) -> float:
        """Move the clock to the next live timer and run it; returns its due time."""
        timer = self._take_next()
        self.clock.now = max(self.clock.now, timer.due)
        timer.fn()
        return timer.due

    def fire_next_at(self, now: float) -> float:
        """Run the next live timer with the clock at ``now``: before its due time is the loop
        firing it early, after it a process woken late. Returns its due time."""
        timer = self._take_next()
        self.clock.now = now
        timer.fn()
        return timer.due


async def run_out(
    task: asyncio.Task[int],
    timers: FakeTimers,
    stopping: Callable[[], bool],
    timeout: float = 5.0,
) -> int:
    """The agent's run to its end, within ``timeout`` of real time. A resigning leader's
    wait for its successor runs on the fake clock: while ``stopping`` holds, its timers fire
    as they come due, each once the loop has read what was injected before."""

    async def handed_over() -> int:
        while not task.done():
            await asyncio.sleep(0.001)
            if stopping() and timers.next_due() is not None:
                timers.fire_next()
        return task.result()

    return await asyncio.wait_for(handed_over(), timeout)


class _Wakeable:
    """A socketpair whose read end the loop watches; a byte written to it means "look"."""

    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)

    def fileno(self) -> int:
        return self._r.fileno()

    def _poke(self) -> None:
        self._w.send(b"x")

    def _drain(self) -> None:
        try:
            while self._r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        self._r.close()
        self._w.close()


class FakeWire(_Wakeable):
    """The VRRP transport: sends are recorded as ``advert:<priority>``; `inject` delivers."""

    def __init__(
        self, events: Events, clock: FakeClock, destinations: tuple[IPAddress, ...]
    ) -> None:
        super().__init__()
        self.events = events
        self.clock = clock
        self.destinations = destinations
        self.sent: list[tuple[bytes, IPAddress]] = []
        self.queue: list[Datagram | packet.DecodeError] = []
        self.fail_receive: Exception | None = None
        self.closed = False
        # Quiet following as the real transport's filters do it: a datagram equal to the
        # followed one is queued (with its arrival on the fake clock) without waking anyone.
        self.can_follow = True
        self.followed: Datagram | None = None
        self.follows: list[Datagram | None] = []
        self.quiet: list[tuple[float, Datagram]] = []

    def send(self, message: bytes, dst: IPAddress) -> None:
        self.sent.append((message, dst))
        self.events.append(f"advert:{message[2]}")  # the priority byte (RFC 9568 §5.2.4)

    def inject(self, dgram: Datagram) -> None:
        if self.followed is not None and dgram == self.followed:
            self.quiet.append((self.clock.now, dgram))
            return
        self.queue.append(dgram)
        self._poke()

    def follow(self, dgram: Datagram | None) -> None:
        self.followed = dgram
        self.follows.append(dgram)

    def receive_quiet(self) -> list[tuple[float, Datagram]]:
        out = [(max(0.0, self.clock.now - at), d) for at, d in self.quiet]
        self.quiet = []
        return out

    def receive(self) -> list[Datagram | packet.DecodeError]:
        self._drain()
        if self.fail_receive is not None:
            exc, self.fail_receive = self.fail_receive, None
            raise exc
        out, self.queue = self.queue, []
        return out

    def wait_readable(self, timeout: float) -> bool:
        if self.queue or self.quiet:
            return True
        self.clock.now += timeout  # nothing arrives during the wait
        return False

    def close(self) -> None:
        self.closed = True
        super().close()


def advert(
    src: str, priority: int, vip: str = "10.0.0.100", vrid: int = 51, interval_cs: int = 100
) -> Datagram:
    """A valid VRRPv3 advert from ``src`` to the IPv4 group, as the transport hands it over."""
    s, d = IPv4Address(src), packet.GROUP_V4
    msg = packet.encode(
        packet.Advert(
            version=3,
            vrid=vrid,
            priority=priority,
            interval_cs=interval_cs,
            addresses=(IPv4Address(vip),),
        ),
        s,
        d,
    )
    return Datagram(src=s, dst=d, ttl=255, message=msg)


class FakeAddress:
    def __init__(self, events: Events, vip: IPAddress) -> None:
        self.events = events
        self.vip = vip
        self.present = False
        self.closed = False
        self.fail_close: Exception | None = None

    def observe(self) -> bool:
        return self.present

    def add(self) -> None:
        self.present = True
        self.events.append("bind")

    def remove(self) -> bool:
        was, self.present = self.present, False
        if was:
            self.events.append("unbind")
        return was

    def close(self) -> None:
        if self.fail_close is not None:
            raise self.fail_close
        self.closed = True


class FakeAnnouncer:
    def __init__(self, events: Events) -> None:
        self.events = events
        self.closed = False

    def burst(self, loop: Any, repeat: int, interval: float) -> bool:
        self.events.append("garp")
        return True

    def send_one(self) -> bool:
        self.events.append("garp-refresh")
        return True

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


UP = IFF_UP | IFF_RUNNING | IFF_LOWER_UP


class FakeLink(_Wakeable):
    """The link watch: `flip`, `delete`, `recreate`, `readdress` and `address_event`
    queue what netlink would report and wake the loop like a notification; the next read
    folds them and calls back once, as the real watch does."""

    def __init__(
        self,
        iface: Interface,
        on_change: Callable[[Interface], None],
        on_address: Callable[[int, IPAddress | None], None],
    ) -> None:
        super().__init__()
        self.iface = iface
        self.on_change = on_change
        self.on_address = on_address
        self._next: Interface | None = None
        self._addresses: list[tuple[int, IPAddress | None]] = []

    @property
    def state(self) -> bool:
        return self.iface.up

    def _set(self, iface: Interface) -> None:
        self._next = iface
        self._poke()

    def _now(self) -> Interface:
        return self._next if self._next is not None else self.iface

    def flip(self, up: bool) -> None:
        self._set(replace(self._now(), flags=UP if up else 0))

    def delete(self) -> None:
        self._set(Interface(self.iface.name))

    def recreate(self, index: int, mac: str, *addresses: str, up: bool = True) -> None:
        """The same name again, with a new index and MAC and these addresses."""
        found = tuple(HostAddress(ip_interface(a)) for a in addresses)
        self._set(Interface(self.iface.name, index, UP if up else 0, mac, found))

    def readdress(self, *addresses: str) -> None:
        found = tuple(HostAddress(ip_interface(a)) for a in addresses)
        self._set(replace(self._now(), addresses=found))

    def address_event(self, index: int, ip: IPAddress | None) -> None:
        self._addresses.append((index, ip))
        self._poke()

    def on_readable(self) -> None:
        self._drain()
        for index, ip in self._addresses:
            self.on_address(index, ip)
        self._addresses.clear()
        if self._next is not None and self._next != self.iface:
            self.iface, self._next = self._next, None
            self.on_change(self.iface)


@dataclass
class Host:
    """One node's fakes, and the seams the agent takes. The interface starts as the tests'
    preflight snapshots describe it: index 2, ``02:00:00:00:00:11``, 10.0.0.11/24.
    ``actuated`` lists the VIP links actuators were made on (a relink makes new ones)."""

    vip: IPAddress
    events: Events = field(default_factory=Events)
    address: FakeAddress | None = None
    announcer: FakeAnnouncer | None = None
    link: FakeLink | None = None
    index: int = 2
    mac: str = "02:00:00:00:00:11"
    addresses: tuple[str, ...] = ("10.0.0.11/24",)
    actuated: list[Any] = field(default_factory=list)

    def actuators(
        self, link: Any, vip: IPAddress, on_sent: Callable[[int], None]
    ) -> tuple[FakeAddress, FakeAnnouncer]:
        self.address = FakeAddress(self.events, vip)
        self.announcer = FakeAnnouncer(self.events)
        self.actuated.append(link)
        return self.address, self.announcer

    def watch_link(
        self,
        name: str,
        on_change: Callable[[Interface], None],
        on_address: Callable[[int, IPAddress | None], None],
    ) -> FakeLink:
        found = tuple(HostAddress(ip_interface(a)) for a in self.addresses)
        iface = Interface(name, self.index, UP, self.mac, found)
        self.link = FakeLink(iface, on_change, on_address)
        return self.link


# -- an in-memory Lease store ------------------------------------------------------------------


class LeaseStore:
    """One Lease with the API server's rules vipd relies on: a resourceVersion per write, a
    PUT with a stale one is a conflict, a POST of an existing one too."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.record: logic.Record | None = None
        self.version = 0
        self.writes: list[tuple[str, str | None]] = []  # (verb, holder)

    def call(self, req: logic.Request) -> logic.Outcome:
        with self.lock:
            if req.verb is logic.Verb.GET:
                return logic.NotFound() if self.record is None else logic.Ok(self.record)
            if req.verb is logic.Verb.CREATE and self.record is not None:
                return logic.Conflict()
            if req.verb is logic.Verb.UPDATE and (
                self.record is None or req.resource_version != self.record.resource_version
            ):
                return logic.Conflict()
            self.version += 1
            self.record = logic.Record(
                resource_version=str(self.version),
                holder=req.holder or None,
                duration_seconds=req.duration_seconds,
                transitions=req.transitions,
            )
            self.writes.append((req.verb.value, self.record.holder))
            return logic.Ok(self.record)


class FakeLeaseApi:
    """What `LeaseElection` needs of `LeaseApi`, answered by a shared `LeaseStore`."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.using = Credentials("fake", None)

    def call(self, req: logic.Request) -> logic.Outcome:
        return self.store.call(req)
