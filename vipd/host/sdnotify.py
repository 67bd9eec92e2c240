"""systemd's readiness protocol (sd_notify), for ``Type=notify`` units.

What it is: one function that sends a state string (``READY=1``, ``STOPPING=1``,
``STATUS=…``) as one datagram to the AF_UNIX socket named by ``$NOTIFY_SOCKET``, as
sd_notify(3) describes: a path, or an abstract socket when it starts with ``@``. vipd says
READY=1 once it takes part in the election and STOPPING=1 when its ordered shutdown starts,
so ``systemctl start`` returns when the node is really in the election and ``systemctl
stop`` shows the stop in progress.

What it must not do: fail the daemon. Without ``$NOTIFY_SOCKET`` (not under systemd) it does
nothing; a socket error is returned as False and otherwise ignored: readiness reporting is
never a reason to stop holding a VIP.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


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
