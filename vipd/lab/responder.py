"""A stand-in for a node's API server: every TCP connection gets ``<name>\\n`` and is closed.

Run on each lab node as ``python -m vipd.lab.responder --name n1 --port 6443``. It listens on
every IPv4 and IPv6 address (two sockets, the IPv6 one IPV6_V6ONLY) with SO_REUSEADDR and
IP_FREEBIND / IPV6_FREEBIND, so it keeps answering on the VIP whenever the VIP is bound on
its node, without restarts. One thread, non-blocking accept loop on ``selectors``: thousands
of connections per second with no thread or task per connection. It prints one
``listening …`` line once both sockets are bound, so the lab knows it is ready.

With ``--health-port`` it also serves the API server's HTTPS health endpoints on that port
(``vipd.lab.fakes.apiserver``, on a thread of the same process), steered by ``--mode-file``: the
lab's ``apidown`` fault kills this one process, and the API server's port and its health
endpoint die together, as a real API server's would. (They are two ports because the client
prober's plain TCP probes, one every 2 ms, cannot share a port with TLS.)

This module also holds ``Responder``, the lab-side handle that starts and stops it on a node.

What it must not do: read from clients, keep connections open, or block on a slow client (the
reply is a few bytes into an empty send buffer, so one non-blocking send always fits; if it
does not, the connection is dropped rather than waited on).
"""

from __future__ import annotations

import argparse
import contextlib
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any

from vipd.lab.fakes.apiserver import HealthServer
from vipd.lab.pki import make_cert
from vipd.lab.topology import Lab, LabError, Node, python_argv, python_env

# Linux values; the socket module does not export them on every Python build.
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
IPV6_FREEBIND = 78
READY_LINE = "listening"


def _listener(family: socket.AddressFamily, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        # A separate v4 socket owns IPv4; without V6ONLY the two binds would collide.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
        sock.bind(("::", port))
    else:
        sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
        sock.bind(("0.0.0.0", port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def serve(name: str, port: int, health: HealthServer | None = None) -> int:
    reply = (name + "\n").encode()
    if health is not None:
        health.run_in_thread()
    sel = selectors.DefaultSelector()
    listeners = [_listener(socket.AF_INET, port), _listener(socket.AF_INET6, port)]
    for sock in listeners:
        sel.register(sock, selectors.EVENT_READ)
    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"{READY_LINE} name={name} port={port}", flush=True)
    served = 0
    while not stop:
        for key, _ in sel.select(timeout=0.5):
            lsock: socket.socket = key.fileobj  # type: ignore[assignment]
            while True:  # drain the accept queue: one wakeup can carry many connections
                try:
                    conn, _addr = lsock.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break  # e.g. ECONNABORTED: the client gave up already; nothing to do
                with contextlib.suppress(OSError):
                    conn.setblocking(False)
                    conn.send(reply)
                conn.close()
                served += 1
    for sock in listeners:
        sock.close()
    print(f"stopped served={served}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vipd.lab.responder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--name", required=True, help="the line every client receives")
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--health-port", type=int, default=None, help="HTTPS /readyz port")
    parser.add_argument("--cert", type=Path, default=None)
    parser.add_argument("--key", type=Path, default=None)
    parser.add_argument("--mode-file", type=Path, default=None)
    args = parser.parse_args(argv)
    health = None
    if args.health_port is not None:
        if args.cert is None or args.key is None:
            parser.error("--health-port needs --cert and --key")
        health = HealthServer(args.health_port, args.cert, args.key, args.mode_file)
    return serve(args.name, args.port, health)


class Responder:
    """Lab-side handle: the responder process on one node, logging to the lab's workdir."""

    def __init__(
        self, lab: Lab, node: Node, port: int = 6443, health_port: int | None = None
    ) -> None:
        self.lab = lab
        self.node = node
        self.port = port
        self.health_port = health_port
        self.mode_file: Path = lab.workdir / f"{node.name}-api.mode"
        self.log_path: Path = lab.workdir / f"{node.name}-responder.log"
        self.proc: subprocess.Popen[Any] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 5.0) -> None:
        """Start it (if not running) and wait until it has bound its sockets."""
        if self.running():
            return
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._close_log()
        self._log = self.log_path.open("ab")
        argv = ["--name", self.node.name, "--port", str(self.port)]
        if self.health_port is not None:
            cert, key = make_cert(self.lab.workdir)
            argv += ["--health-port", str(self.health_port), "--cert", str(cert)]
            argv += ["--key", str(key), "--mode-file", str(self.mode_file)]
        self.proc = self.lab.spawn(
            self.node.ns,
            python_argv("vipd.lab.responder", *argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=python_env(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                if READY_LINE.encode() in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise LabError(f"responder on {self.node.name} did not start; see {self.log_path}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 2.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self._close_log()

    def set_health(self, mode: str) -> None:
        """What the health endpoint does from the next connection on (vipd.lab.fakes.apiserver)."""
        self.mode_file.write_text(mode + "\n")

    def reap(self) -> None:
        """Collect the exit status after someone else killed it (the ``kill`` fault)."""
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2.0)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


if __name__ == "__main__":
    sys.exit(main())
