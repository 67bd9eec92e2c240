"""Watches one interface's operational state through rtnetlink link notifications.

What it is: a sensor for the daemon. RFC 9568 §6.4 treats an interface that goes down as a
Shutdown event (the router leaves Active or Backup for Initialize) and an interface that comes
up as a Startup event. A node whose link is down cannot advertise, so it must not hold the VIP:
peers have already elected a new Active, and when the link returns a node that still believed
it was Active would never announce the VIP again, leaving clients pointed at the wrong MAC.

An interface counts as up when it is administratively up (IFF_UP) and has carrier
(IFF_RUNNING / IFF_LOWER_UP).

What it must not do: act. It reports the state (``up()``) and calls back on changes; the
daemon decides. It never blocks: the socket is non-blocking and read from the event loop.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from vipd.host import netlink
from vipd.host.netlink import HEADER

RTMGRP_LINK = 0x1
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
NLM_F_REQUEST = 0x1
IFF_UP = 0x1
IFF_RUNNING = 0x40
IFF_LOWER_UP = 0x10000

# struct ifinfomsg { u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change; }
_IFINFOMSG = struct.Struct("=BBHiII")


def is_up(flags: int) -> bool:
    return bool(flags & IFF_UP) and bool(flags & (IFF_RUNNING | IFF_LOWER_UP))


def parse_link_events(data: bytes, ifindex: int) -> list[bool]:
    """The up/down states reported for ``ifindex`` in one netlink read, in order.

    A deleted interface reads as down.
    """
    states: list[bool] = []
    for msg_type, _seq, msg in netlink.messages(data):
        if msg_type in (RTM_NEWLINK, RTM_DELLINK) and len(msg) >= HEADER.size + _IFINFOMSG.size:
            _fam, _pad, _type, index, flags, _change = _IFINFOMSG.unpack_from(msg, HEADER.size)
            if index == ifindex:
                states.append(msg_type == RTM_NEWLINK and is_up(flags))
    return states


class LinkWatch:
    """Link state of ``ifindex``; ``on_change(up)`` is called when it flips."""

    def __init__(self, ifindex: int, on_change: Callable[[bool], None]) -> None:
        self.ifindex = ifindex
        self.on_change = on_change
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        try:
            self.sock.bind((0, RTMGRP_LINK))
            self.state = self._query()
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise

    def _query(self) -> bool:
        """Ask the kernel for the link now (blocking, once, at start)."""
        request = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, self.ifindex, 0, 0)
        header = HEADER.pack(HEADER.size + len(request), RTM_GETLINK, NLM_F_REQUEST, 1, 0)
        self.sock.settimeout(2.0)
        self.sock.send(header + request)
        while True:
            states = parse_link_events(self.sock.recv(1 << 16), self.ifindex)
            if states:
                return states[-1]

    def fileno(self) -> int:
        return self.sock.fileno()

    def on_readable(self) -> None:
        """Drain notifications; call back once if the state changed."""
        before = self.state
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                # ENOBUFS: notifications were lost; ask again rather than guess.
                self.sock.setblocking(True)
                try:
                    self.state = self._query()
                finally:
                    self.sock.setblocking(False)
                continue
            for state in parse_link_events(data, self.ifindex):
                self.state = state
        if self.state != before:
            self.on_change(self.state)

    def close(self) -> None:
        self.sock.close()
