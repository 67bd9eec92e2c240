"""Sends the prebuilt gratuitous ARP / unsolicited NA frames for the VIP.

What it is: the driver behind "announce": a packet socket on the VIP's interface and a burst
scheduler. The first frame of a burst is written synchronously, in the same turn of the event
loop as the decision, so it is on the wire within a fraction of a millisecond of the VIP being
bound; the rest of the burst is paced with loop timers (RFC 9568 §6.4.1 asks for one
announcement per address on takeover; keepalived sends a burst of 5, then 5 more after 5 s, and
switches that missed the first frame are the reason for the repeats).

``send_once`` writes a few frames from a socket of their own (the step-down that ends a split
brain, ``vipd.vrrp.yielding``).

What it must not do: build frames on the takeover path (``vipd.host.neighbor`` builds them once at
start), or block the loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

# Protocol 0: a send-only packet socket, so no received frame is ever queued on it.
_SEND_ONLY = 0


class Announcer:
    """Writes one prebuilt announcement frame on ``ifname``, in bursts."""

    def __init__(self, ifname: str, frame: bytes, on_sent: Callable[[int], None]) -> None:
        self.ifname = ifname
        self.frame = frame
        self._on_sent = on_sent
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, _SEND_ONLY)
        try:
            self.sock.setblocking(False)
            self.sock.bind((ifname, _SEND_ONLY))
        except BaseException:
            self.sock.close()
            raise
        self._pending: list[asyncio.TimerHandle] = []

    def send_one(self) -> bool:
        """Write one frame now; False (and nothing raised) when the kernel refused it."""
        try:
            self.sock.send(self.frame)
        except OSError:
            return False
        self._on_sent(1)
        return True

    def burst(self, loop: asyncio.AbstractEventLoop, repeat: int, interval: float) -> bool:
        """First frame now, ``repeat - 1`` more every ``interval`` seconds; cancels any pending."""
        self.cancel()
        ok = self.send_one()
        for i in range(1, repeat):
            self._pending.append(loop.call_later(i * interval, self.send_one))
        return ok

    def cancel(self) -> None:
        """Drop the frames of a burst not yet sent (the VIP is going away)."""
        for handle in self._pending:
            handle.cancel()
        self._pending.clear()

    def close(self) -> None:
        self.cancel()
        self.sock.close()


def send_once(ifname: str, frames: list[bytes]) -> int:
    """Write ``frames`` on ``ifname`` from a send-only packet socket opened for them (a rare
    event's frames, not worth a socket kept open); how many the kernel took. OSError when no
    socket can be opened on ``ifname``."""
    sent = 0
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, _SEND_ONLY) as sock:
        sock.bind((ifname, _SEND_ONLY))
        for frame in frames:
            try:
                sock.send(frame)
            except OSError:
                continue
            sent += 1
    return sent
