"""systemd's readiness protocol (sd_notify), for ``Type=notify`` units.

What it is: one function that sends a state string (``READY=1``, ``STOPPING=1``,
``STATUS=…``) as one datagram to the AF_UNIX socket named by ``$NOTIFY_SOCKET``, as
sd_notify(3) describes: a path, or an abstract socket when it starts with ``@``. vipd says
READY=1 once it takes part in the election and STOPPING=1 when its ordered shutdown starts,
so ``systemctl start`` returns when the node is really in the election and ``systemctl
stop`` shows the stop in progress.

The watchdog (sd_watchdog_enabled(3)): when the unit sets ``WatchdogSec=``, systemd passes
``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``, the process it is meant for) and expects
``WATCHDOG=1`` more often than that. `Watchdog` reads both once and pings from the event
loop's heartbeat, at most every half period: a loop that stops beating stops the pings, and
systemd sends ``WatchdogSignal=`` and restarts the service.

What it must not do: fail the daemon. Without ``$NOTIFY_SOCKET`` (not under systemd) it does
nothing; a socket error is returned as False and otherwise ignored: readiness reporting is
never a reason to stop holding a VIP.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field


def notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` to the service manager; True if a datagram was sent."""
    path = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not path or path[0] not in "/@":
        return False
    address = "\0" + path[1:] if path[0] == "@" else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError:
        return False
    return True


@dataclass(slots=True)
class Watchdog:
    """systemd's watchdog for this process: `ping` sends ``WATCHDOG=1`` when half the period
    has passed since the last one. ``period`` is None when the watchdog is off (no
    ``$WATCHDOG_USEC``, or ``$WATCHDOG_PID`` names another process): `ping` does nothing."""

    period: float | None
    env: Mapping[str, str] = field(default_factory=dict)
    last: float | None = None  # monotonic time of the last ping sent

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, pid: int | None = None) -> Watchdog:
        env = dict(os.environ if env is None else env)
        return cls(watchdog_period(env, os.getpid() if pid is None else pid), env)

    def ping(self, now: float) -> bool:
        """Send ``WATCHDOG=1`` if it is due at ``now`` (monotonic); True if one was sent."""
        if self.period is None:
            return False
        if self.last is not None and now - self.last < self.period / 2:
            return False
        sent = notify("WATCHDOG=1", self.env)
        if sent:
            self.last = now
        return sent


def watchdog_period(env: Mapping[str, str], pid: int) -> float | None:
    """The watchdog period in seconds that systemd asks of process ``pid``, or None."""
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    owner = env.get("WATCHDOG_PID", "")
    if owner:
        try:
            if int(owner) != pid:
                return None
        except ValueError:
            return None
    return usec / 1e6
