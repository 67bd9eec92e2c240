"""The network the IPVS guest tests and bench/ipvs.py build inside the qemu guest.

What it is: the guest's root namespace is the director (the leader): a bridge ``br0`` with
10.88.0.1/24 and the VIP 10.88.0.100/32; three backend namespaces ``b1``..``b3``
(10.88.0.11..13) each serving HTTPS on :6443 (``/readyz``: 200, or 503 while failed;
``/name``: the backend's name) from a thread of this process, with a socket opened inside
the namespace; a client namespace ``c`` (10.88.0.2). Backends have no route but their subnet:
a reply reaches the client only through the director's source NAT.

What it must not do: run on the host (the guest is a throwaway VM; the names are fixed).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import logging
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from ipaddress import IPv4Address
from typing import Any

from vipd.config import Health
from vipd.health.checker import HealthChecker
from vipd.ipvs.plan import Forwarding, Service, ServiceKey
from vipd.ipvs.reconciler import IpvsReconciler, IpvsSpec

DIRECTOR = IPv4Address("10.88.0.1")
VIP = IPv4Address("10.88.0.100")
CLIENT = IPv4Address("10.88.0.2")
BACKENDS = {f"b{i}": IPv4Address(f"10.88.0.1{i}") for i in (1, 2, 3)}
PORT = 6443
log = logging.getLogger("vipd-guest")


def ns_socket(ns: str, family: int, kind: int) -> socket.socket:
    """A socket created inside network namespace ``ns``: setns(2) in a short-lived thread
    (it changes only that thread's namespace; the socket keeps it). pyroute2's
    netns.create_socket forks a helper with a timeout, which a loaded emulated guest misses."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    result: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), f"setns {ns}")
            finally:
                os.close(fd)
            result.append(socket.socket(family, kind))
        except BaseException as exc:
            result.append(exc)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def sh(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


class Backend:
    """One HTTPS "API server" in its namespace; ``failing`` makes /readyz answer 503."""

    def __init__(self, name: str, addr: IPv4Address, ctx: ssl.SSLContext) -> None:
        self.name, self.addr = name, addr
        self.failing = False
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/readyz":
                    code, body = (503, b"down") if backend.failing else (200, b"ok")
                else:
                    code, body = 200, backend.name.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("", PORT), Handler, bind_and_activate=False)
        server.socket.close()
        sock = ns_socket(name, socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", PORT))
        sock.listen(64)
        server.socket = ctx.wrap_socket(sock, server_side=True)
        server.daemon_threads = True
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()


class Net:
    def __init__(self) -> None:
        self.backends: dict[str, Backend] = {}
        self.tmp = tempfile.mkdtemp(prefix="vipd-ipvs-")

    def build(self) -> Net:
        sh("ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "addr", "add", f"{DIRECTOR}/24", "dev", "br0")
        sh("ip", "link", "set", "br0", "up")
        # the VIP as the leader binds it (vipd.host.address): /32, preferred_lft 0
        sh("ip", "addr", "add", f"{VIP}/32", "dev", "br0", "preferred_lft", "0")
        for name, addr in [*BACKENDS.items(), ("c", CLIENT)]:
            sh("ip", "netns", "add", name)
            sh("ip", "link", "add", f"v{name}", "type", "veth", "peer", "name", "eth0",
               "netns", name)  # fmt: skip
            sh("ip", "link", "set", f"v{name}", "master", "br0", "up")
            sh("ip", "-n", name, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", name, "link", "set", "eth0", "up")
            sh("ip", "-n", name, "link", "set", "lo", "up")
        key, crt = f"{self.tmp}/key.pem", f"{self.tmp}/crt.pem"
        sh(
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"),
            *("-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=apiserver"),
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        for name, addr in BACKENDS.items():
            self.backends[name] = Backend(name, addr, ctx)
        return self

    def get_name(self, timeout: float = 20.0) -> str:
        """One HTTPS request from the client namespace to VIP:6443; the backend's name."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        raw = ns_socket("c", socket.AF_INET, socket.SOCK_STREAM)
        raw.settimeout(timeout)
        with contextlib.closing(raw):
            raw.connect((str(VIP), PORT))
            with ctx.wrap_socket(raw) as s:
                s.sendall(b"GET /name HTTP/1.1\r\nHost: vip\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
        return data.split(b"\r\n\r\n", 1)[1].decode()


class Director:
    """What the daemon runs on the leader: checker + reconciler on an asyncio loop (here in a
    thread, so the test can act on the network while they run)."""

    def __init__(self, params: Health, forwarding: Forwarding = "nat", resync: float = 0.5) -> None:
        self.transitions: list[tuple[float, Any, bool]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        spec = IpvsSpec(Service(ServiceKey(VIP, PORT), "rr"), forwarding, tuple(BACKENDS.values()))

        async def start() -> None:
            self.checker = HealthChecker(BACKENDS.values(), params, self._changed, log=log)
            self.rec = IpvsReconciler(spec, self.checker, log, resync_interval=resync)
            self.checker.start()
            self.task = asyncio.get_running_loop().create_task(self.rec.run())

        self.call(start())

    def _changed(self, addr: Any, health: Any) -> None:
        self.transitions.append((time.monotonic(), addr, bool(health.healthy)))
        self.rec.on_health_change(addr, health)

    def call(self, coro: Any) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout=60)

    def set_leader(self, leader: bool) -> None:
        async def go() -> None:
            self.rec.set_leader(leader)

        self.call(go())

    def stop(self, release: bool = True) -> None:
        async def go() -> None:
            self.checker.stop()
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            if release:
                await self.rec.release()

        self.call(go())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def ipvs_table() -> dict[str, list[str]]:
    """``ipvsadm -Ln`` as {service: [real server lines]} (the kernel's view, not ours)."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in sh("ipvsadm", "-Ln").splitlines():
        parts = line.split()
        if parts and parts[0] in ("TCP", "UDP", "FWM"):
            current = f"{parts[0]} {parts[1]}"
            out[current] = []
        elif parts and parts[0] == "->" and current and parts[1] != "RemoteAddress:Port":
            out[current].append(f"{parts[1]} {parts[2]}")
    return out


def wait_for(cond: Callable[[], bool], timeout: float, step: float = 0.02) -> float | None:
    """Seconds until ``cond()`` held, or None after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if cond():
            return time.monotonic() - start
        time.sleep(step)
    return None
