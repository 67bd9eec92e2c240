"""``vipd adopt``: hand a node's VIP duty from the static pod to the DaemonSet's pod.

What it is: the DaemonSet's ``adopt`` init container. It deletes the static pod's manifest
(``/etc/kubernetes/manifests/vipd.yaml``, mounted as a directory: a single-file hostPath is a
bind mount and cannot be removed), then waits until the static instance has let go of the
metrics port. vipd binds that port before it joins the election and refuses to start when
it is taken, so the port is the per-node lock that keeps two vipd instances (same node name,
same VRID or Lease) from ever running side by side. The kubelet notices the deleted file on
its next manifest scan (every 20 s), stops the static pod with SIGTERM, and vipd steps down
gracefully (priority 0, or releasing the Lease) before it exits and frees the port.

It gives up after ``--timeout`` (120 s by default) with exit code 1 and a message saying
what still holds the port: a visible stuck ``Init:Error``/``CrashLoopBackOff`` beats a second
vipd on the node. A missing manifest is not an error (the node joined after the handover, or
the pod restarted): it then only waits for the port.

How "released" is judged: by binding the very address the new instance will bind, with
SO_REUSEADDR like an HTTP server does, so a connection in TIME_WAIT does not count as taken
and a listening socket does. The test socket is closed at once.

What it must not do: touch any file but the one manifest it was given, remove anything that
is not a regular file, kill processes (stopping the static pod is the kubelet's job), or
report success while the port is still taken.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from typing import TextIO

EXIT_OK = 0
EXIT_TIMEOUT = 1
EXIT_USAGE = 2


class AdoptError(Exception):
    """A problem that waiting will not fix (bad address, manifest not a file)."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) → (host, port); the host may be empty for 0.0.0.0."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise AdoptError(f"--listen: must be HOST:PORT with a port from 1 to 65535 ({listen!r})")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_text)


def port_free(host: str, port: int) -> bool:
    """Could a server bind ``host:port`` right now?"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise AdoptError(f"--listen {host}:{port}: cannot bind it: {exc.strerror}") from None
    return True


def remove_manifest(path: str) -> bool:
    """Delete the static manifest; False if there was none."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        raise AdoptError(f"--manifest {path}: not a regular file; refusing to remove it")
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise AdoptError(
            f"--manifest {path}: cannot remove it: {exc.strerror} (is its directory "
            "mounted read-only, or as a single file?)"
        ) from None
    return True


def adopt(
    manifest: str,
    listen: str,
    timeout: float,
    interval: float = 0.25,
    *,
    out: TextIO = sys.stderr,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Remove ``manifest``, wait for ``listen`` to be free; the exit code."""

    def say(text: str) -> None:
        print(f"vipd adopt: {text}", file=out, flush=True)

    try:
        host, port = parse_listen(listen)
        started = clock()
        if remove_manifest(manifest):
            say(
                f"removed the static manifest {manifest}; waiting up to {timeout:g} s for the "
                f"static vipd to release {listen} (the kubelet rescans manifests every 20 s)"
            )
        else:
            say(f"no static manifest at {manifest}; checking that {listen} is free")
        while not port_free(host, port):
            waited = clock() - started
            if waited >= timeout:
                say(
                    f"gave up after {waited:.1f} s: {listen} is still taken, so the static "
                    f"vipd (or another process on that port) is still running; not starting "
                    f"a second vipd on this node. Check what listens there (`ss -ltnp "
                    f"'sport = :{port}'`) and whether the kubelet still runs the static pod."
                )
                return EXIT_TIMEOUT
            sleep(interval)
    except AdoptError as exc:
        say(str(exc))
        return EXIT_USAGE
    say(f"{listen} is free after {clock() - started:.1f} s: this node is ours")
    return EXIT_OK
