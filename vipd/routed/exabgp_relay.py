"""The API process ExaBGP runs for vipd: copies its stdin to vipd's socket and the socket to
its stdout, so vipd (ExaBGP's parent) speaks ExaBGP's text API although ExaBGP only talks to
processes it starts itself (``process { run …; }``, with every other descriptor closed).

Usage (written into ExaBGP's config by `vipd.routed.exabgp`)::

    python -m vipd.routed.exabgp_relay /run/vipd/bgp-XXXX/api.sock

What it must not do: interpret a byte (`vipd.routed.exabgp_codec` does), or outlive either
end. EOF on stdin (ExaBGP gone) ends it. EOF on the socket means vipd is gone (killed, or it
gave up on this child): the relay then SIGKILLs its parent, ExaBGP, so that the BGP session
does not outlive vipd, and exits. ExaBGP drops its privileges to an unprivileged user at
start (it refuses to run as root), which clears the PR_SET_PDEATHSIG vipd set on it, and its
own reaction to a dead API process (``exabgp.api.terminate``) failed in 5.0.15: this is the
pipe whose close ends it. The parent is only killed while it is still the one that started
the relay (after ExaBGP's death the relay is reparented and its parent is someone else).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys

__all__ = ["main"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m vipd.routed.exabgp_relay SOCKET", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(argv[0])
    except OSError as exc:
        print(f"vipd relay: cannot connect to {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 1
    parent = os.getppid()
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(stdin, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fd == stdin:
                data = os.read(stdin, 65536)
                if not data:
                    return 0
                sock.sendall(data)
            else:
                data = sock.recv(65536)
                if not data:
                    if os.getppid() == parent:
                        os.kill(parent, signal.SIGKILL)
                    return 0
                view = memoryview(data)
                while view:
                    view = view[os.write(stdout, view) :]


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (BrokenPipeError, ConnectionError):
        sys.exit(0)
