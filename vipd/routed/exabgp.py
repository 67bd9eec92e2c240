"""ExaBGP as vipd's BGP speaker: a supervised child process behind `vipd.routed.speaker`.

What it is
    `ExaBgpSpeaker` writes ExaBGP's config (`vipd.routed.exabgp_codec.render_config`) into a
    private runtime directory (mode 0700: it holds the peers' passwords, base64, mode 0600)
    with a listening Unix socket beside it, and runs ``python -m exabgp server CONF`` from a
    supervisor thread. ExaBGP starts the relay (`vipd.routed.exabgp_relay`) as its API
    process, which connects to the socket: from then on vipd writes commands and reads
    answers and session states as if on ExaBGP's own stdin/stdout.

    - Commands: ``announce``/``withdraw`` record what vipd wants (``_wanted``) and send it
      to every peer of the prefix's family (``next-hop self``) that BFD has not taken down;
      a restarted child is told everything wanted again once its relay connects.
    - Its death is everything withdrawn in vipd's view: ``announced()`` is empty and every
      session down from then until a new child's relay is connected.
    - Supervision: a child that exits is started again after `restart_delay` (0.5 s, doubling
      to 30 s while each lives less than 60 s). Every `PING_EVERY` seconds a ``# ping`` goes
      out; a child that leaves a command unanswered for `STUCK_AFTER` seconds is killed
      (SIGKILL) and restarted. Lines that are not ExaBGP's are counted and dropped.
    - The child dies with vipd: when vipd is gone (a SIGKILL included) the kernel closes the
      relay's socket and the relay SIGKILLs ExaBGP (`vipd.routed.exabgp_relay`); the
      kernel then closes ExaBGP's TCP sessions and the router drops them at once (or after
      the hold time when the close is lost with the node). PR_SET_PDEATHSIG (prctl(2),
      SIGKILL) is set too. Not a SIGTERM: ExaBGP 5.0.15's shutdown with its API process
      already gone failed on a KeyError and the process stayed up with the session (seen on
      the bed of tests/netns/test_bgp.py).
    - The child keeps vipd's user and has no capability at all (`_ChildSetup`).
    - ``stop(graceful=True)``: each established session closed through the API with a
      NOTIFICATION Cease, Administrative Shutdown (RFC 4271 §6.7, RFC 4486 §4; ``neighbor P
      teardown 2``), waited for up to `TEARDOWN_WAIT` seconds to report down; then SIGTERM,
      waited for `GRACE` seconds, then SIGKILL. The Cease is sent by vipd because ExaBGP
      5.0.15 on SIGTERM closes its TCP sessions without one (a FIN after the last UPDATE,
      seen with tcpdump against FRR 8.4 and GoBGP 4.8.0). The router drops every route of a
      session on that NOTIFICATION, so once the child has exited the router has no route
      from this node, whatever UPDATE was still queued.

What it must not do: decide what to announce, block the event loop (every method returns at
once but ``stop``, which the backend calls in a worker thread), log or expose a password, or
pass vipd's environment to the child (it gets PATH and ExaBGP's own settings only).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from pathlib import Path

from vipd.routed import exabgp_codec as codec
from vipd.routed.speaker import SpeakerConfig

__all__ = ["GRACE", "PING_EVERY", "STUCK_AFTER", "ExaBgpSpeaker", "exabgp_problem"]

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

PING_EVERY = 2.0  # seconds between liveness probes
STUCK_AFTER = 10.0  # seconds a command may stay unanswered before the child is killed
# seconds for a new child's relay to connect: two Python start-ups (ExaBGP, then the relay),
# 1-2 s measured at a load average of 20 on 2 cores; generous, since a broken config makes
# ExaBGP exit by itself and only a hung start waits this long
CONNECT_WAIT = 60.0
GRACE = 5.0  # seconds for ExaBGP to close its sessions and exit on SIGTERM
TEARDOWN_WAIT = 1.0  # seconds for the sessions to report down after a stop's Cease
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_prctl = _libc.prctl


class _ChildSetup:
    """Between fork and exec (looked up in the parent, so the child only calls): every
    capability dropped with vipd's own ids kept (`vipd.sandbox.Drop`: ExaBGP only connects
    out, sets TCP_MD5SIG on its own sockets and reads its config, none of which needs one),
    then PR_SET_PDEATHSIG. ExaBGP is told to run as vipd's own user
    (``exabgp.daemon.user``): it refuses to keep root otherwise and switches to ``nobody``,
    which a vipd confined to CAP_NET_ADMIN and CAP_NET_RAW (systemd/vipd.service, the pod)
    cannot do, and a change of ids would clear the death signal."""

    def __init__(self) -> None:
        from vipd.sandbox import Drop, Identity

        self._drop = Drop(Identity(os.getuid(), os.getgid()))

    def __call__(self) -> None:
        self._drop()
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def exabgp_problem() -> str | None:
    """Why ExaBGP cannot run here, or None. Only ``exabgp.version`` (a few constants) is
    imported into vipd; the speaker itself runs in the child. The codec speaks ExaBGP
    5.0's API (JSON encoder 5.0.0): another major or minor is refused."""
    try:
        from exabgp.version import release  # type: ignore[import-untyped]
    except ImportError:
        return "needs ExaBGP 5.0 (a dependency of vipd: pip install 'exabgp>=5.0.15,<5.1')"
    if not str(release).startswith("5.0."):
        return f"needs ExaBGP 5.0.x (found {release})"
    return None


def daemon_user_env(uid: int) -> dict[str, str]:
    """ExaBGP's ``daemon.user``: vipd's own user, so that a vipd running as root keeps its
    child root rather than ExaBGP's default ``nobody``. A uid without a passwd entry (the
    unit's DynamicUser= on a host without nss-systemd: ``getpwuid`` fails) is left to the
    default: ExaBGP looks the name up (``getpwnam``, refusing one it cannot find) but
    drops nothing for a process whose uid and gid are not 0 (``Daemon.drop_privileges``)."""
    try:
        return {"exabgp_daemon_user": pwd.getpwuid(uid).pw_name}
    except KeyError:
        return {}


class ExaBgpSpeaker:
    """ExaBGP behind the `Speaker` protocol (the module docstring)."""

    def __init__(
        self,
        cfg: SpeakerConfig,
        *,
        runtime_root: str | None = None,
        on_change: Callable[[], None] | None = None,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
        stuck_after: float = STUCK_AFTER,
    ) -> None:
        self.cfg = cfg
        self.stuck_after = stuck_after
        self.runtime_root = runtime_root
        self.on_change = on_change or (lambda: None)
        self.log = log or logging.getLogger("vipd.routed.exabgp")
        self.clock = clock
        self.dir: Path | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: socket.socket | None = None
        self._listener: socket.socket | None = None
        self._pending: deque[float] = deque()
        self._wanted: set[IPNetwork] = set()
        self._held: set[IPAddress] = set()  # peers whose BFD session is down
        self._up: dict[IPAddress, bool] = {p.address: False for p in cfg.peers}
        # Down events per peer: a stop's wait for the Cease counts them, since ExaBGP
        # reconnects a torn-down peer within milliseconds and the session is "up" again.
        self._downs: dict[IPAddress, int] = {p.address: 0 for p in cfg.peers}
        self.starts = 0
        self.deaths = 0
        self.kills = 0
        self.bad_lines = 0
        self.errors = 0  # commands ExaBGP answered with "error"
        self._setup = _ChildSetup()

    # -- the Speaker protocol ----------------------------------------------------------

    def start(self) -> None:
        problem = exabgp_problem()
        if problem is not None:
            raise RuntimeError(f"announce.mode: bgp {problem}")
        root = self.runtime_root
        if root is not None:
            os.makedirs(root, mode=0o755, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix="vipd-bgp-", dir=root))  # mode 0700
        sock = self.dir / "api.sock"
        conf = self.dir / "exabgp.conf"
        relay = [sys.executable, "-m", "vipd.routed.exabgp_relay", str(sock)]
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(codec.render_config(self.cfg, relay))
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(sock))
        self._listener.listen(1)
        self._thread = threading.Thread(target=self._supervise, name="exabgp", daemon=True)
        self._thread.start()

    def announce(self, prefix: IPNetwork) -> None:
        with self._lock:
            self._wanted.add(prefix)
            for peer in self._peers_for(prefix):
                self._send(codec.announce(peer, prefix))

    def withdraw(self, prefix: IPNetwork) -> None:
        with self._lock:
            self._wanted.discard(prefix)
            for peer in self._peers_for(prefix):
                self._send(codec.withdraw(peer, prefix))

    def announced(self) -> frozenset[IPNetwork]:
        with self._lock:
            return frozenset(self._wanted) if self._conn is not None else frozenset()

    def sessions(self) -> Mapping[IPAddress, bool]:
        with self._lock:
            return dict(self._up)

    def bfd_down(self, peer: IPAddress) -> None:
        """Withdraw everything toward ``peer`` and close its session (Cease): a path whose
        forwarding BFD saw fail must not wait for the hold time."""
        with self._lock:
            if peer in self._held or peer not in self._up:
                return
            for prefix in self._wanted:
                if prefix.version == peer.version:
                    self._send(codec.withdraw(peer, prefix))
            self._send(codec.teardown(peer))
            self._held.add(peer)

    def bfd_up(self, peer: IPAddress) -> None:
        with self._lock:
            if peer not in self._held:
                return
            self._held.discard(peer)
            for prefix in self._wanted:
                if prefix.version == peer.version:
                    self._send(codec.announce(peer, prefix))

    def stop(self, graceful: bool) -> None:
        self._stop.set()
        proc = self._proc
        if graceful and proc is not None and proc.poll() is None:
            self._cease_all()
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                proc.wait(GRACE)
            except subprocess.TimeoutExpired:
                self.log.warning("exabgp: no exit %.0f s after SIGTERM: killed", GRACE)
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join()
        if self._listener is not None:
            self._listener.close()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _cease_all(self) -> None:
        """Every established session closed with a Cease (6, 2) through the API; returns
        once ExaBGP reports them down, or after `TEARDOWN_WAIT` (a lost answer must not
        hold the stop: the SIGTERM that follows closes the sessions anyway)."""
        with self._lock:
            peers = [peer for peer, up in self._up.items() if up]
            downs = {peer: self._downs[peer] for peer in peers}
            for peer in peers:
                self._send(codec.teardown(peer))
        deadline = time.monotonic() + TEARDOWN_WAIT  # real time: this waits on the child
        while time.monotonic() < deadline:
            with self._lock:
                if all(self._downs[peer] > downs[peer] for peer in peers):
                    return
            time.sleep(0.02)
        self.log.warning("exabgp: sessions not down %.0f s after the Cease", TEARDOWN_WAIT)

    # -- the supervisor thread ---------------------------------------------------------

    def _peers_for(self, prefix: IPNetwork) -> list[IPAddress]:
        return [
            p.address
            for p in self.cfg.peers
            if p.address.version == prefix.version and p.address not in self._held
        ]

    def _send(self, line: str) -> None:
        """One command to a live child (the lock held); dropped while none is connected:
        the next child is told everything wanted when it connects."""
        if self._conn is None:
            return
        try:
            self._conn.sendall((line + "\n").encode())
        except OSError as exc:
            self.log.warning("exabgp: command not sent: %s", exc)
            return
        self._pending.append(self.clock())

    def _supervise(self) -> None:
        failures = 0
        while not self._stop.is_set():
            started = self.clock()
            try:
                self._run_child()
            except Exception:
                self.log.exception("exabgp: supervisor error")
            if self._stop.is_set():
                break
            delay, failures = codec.restart_delay(failures, self.clock() - started)
            self.log.warning("exabgp: child gone; restarting in %.1f s", delay)
            self._stop.wait(delay)

    def _run_child(self) -> None:
        assert self.dir is not None and self._listener is not None
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "exabgp_daemon_daemonize": "false",
            "exabgp_daemon_drop": "false",
            "exabgp_api_cli": "false",
            "exabgp_api_ack": "true",
            "exabgp_api_respawn": "false",
            "exabgp_api_terminate": "true",
            "exabgp_tcp_bind": "",
            "exabgp_log_level": "WARNING",
            **daemon_user_env(os.getuid()),
        }
        log = open(self.dir / "exabgp.log", "ab")  # noqa: SIM115 - the child's
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "exabgp", "server", str(self.dir / "exabgp.conf")],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=self._setup,
                start_new_session=True,
            )
        finally:
            log.close()
        self._proc = proc
        self.starts += 1
        try:
            conn = self._accept(proc)
            if conn is not None:
                self._serve(proc, conn)
        finally:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                self._pending.clear()
                for peer, up in self._up.items():
                    self._downs[peer] += up  # a death ends the sessions too
                    self._up[peer] = False
            if proc.poll() is None and not self._stop.is_set():
                proc.kill()
            if not self._stop.is_set():
                proc.wait()
                self.deaths += 1
                self.on_change()

    def _accept(self, proc: subprocess.Popen[bytes]) -> socket.socket | None:
        assert self._listener is not None
        deadline = self.clock() + CONNECT_WAIT
        while not self._stop.is_set() and proc.poll() is None and self.clock() < deadline:
            ready, _, _ = select.select([self._listener], [], [], 0.2)
            if ready:
                conn, _ = self._listener.accept()
                conn.settimeout(2.0)  # a child that stops reading is stuck, not a hang here
                return conn
        if proc.poll() is None and not self._stop.is_set():
            self.log.warning("exabgp: relay did not connect within %.0f s", CONNECT_WAIT)
        return None

    def _serve(self, proc: subprocess.Popen[bytes], conn: socket.socket) -> None:
        self.log.info("exabgp: started (pid %d), its API connected", proc.pid)
        with self._lock:
            self._conn = conn
            for prefix in sorted(self._wanted, key=str):
                for peer in self._peers_for(prefix):
                    self._send(codec.announce(peer, prefix))
        self.on_change()
        buf = b""
        last_ping = self.clock()
        # Not ended by `stop`: the connection stays open until the child has exited, since
        # closing it makes the relay kill ExaBGP before its Cease is out.
        while proc.poll() is None:
            now = self.clock()
            if now - last_ping >= PING_EVERY:
                with self._lock:
                    self._send(codec.PING)
                last_ping = now
            oldest = self._pending[0] if self._pending else None
            if codec.stuck(now, oldest, self.stuck_after):
                self.kills += 1
                self.log.warning(
                    "exabgp: a command unanswered for %.1f s: killed", self.stuck_after
                )
                return
            ready, _, _ = select.select([conn], [], [], 0.2)
            if not ready:
                continue
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            if len(buf) > codec.MAX_LINE:
                self.bad_lines += 1
                buf = b""
            for raw in lines:
                self._handle(raw.decode("utf-8", "replace"))

    def _handle(self, line: str) -> None:
        if not line.strip():
            return
        try:
            event = codec.parse(line)
        except codec.BadLine as exc:
            self.bad_lines += 1
            self.log.debug("exabgp: dropped a line: %s", exc)
            return
        if isinstance(event, codec.Ack):
            with self._lock:
                if self._pending:
                    self._pending.popleft()
            if not event.ok:
                self.errors += 1
                self.log.warning("exabgp: a command was refused")
        elif isinstance(event, codec.SessionEvent):
            with self._lock:
                if event.peer not in self._up:
                    self.bad_lines += 1
                    return
                self._up[event.peer] = event.state == "up"
                if event.state != "up":
                    self._downs[event.peer] += 1
            self.log.info("exabgp: peer %s %s %s", event.peer, event.state, event.reason)
            self.on_change()
