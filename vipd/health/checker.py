"""The asyncio HTTPS health checker: one check loop per target, all on the election's loop.

What it is: :class:`HealthChecker` GETs ``https://<target>:<port><path>`` (``/readyz`` by
default) on every target once per ``interval``, each check bounded by ``timeout``, and feeds
each outcome to a rise/fall :class:`~vipd.health.tracker.Tracker`. The targets are the local
API server (``params.local``, always checked) and whatever the caller adds (the IPVS
backends). ``on_change(address, BackendHealth)`` is called on every transition of any target;
``healthy()``, ``local_healthy()`` and ``snapshot()`` answer at any time without waiting.

Why it never blocks the election: every check is a non-blocking asyncio stream (TCP connect,
TLS handshake, one write, one line read) on the same loop that sends adverts, each target in
its own task, every step under one deadline (``asyncio.timeout``). A stalled or black-holed
server costs a pending socket and a timer, never a blocked loop; a slow target does not delay
the others' checks, because each has its own schedule. A check that times out is aborted
(the socket is reset, no TLS close_notify is awaited). The CPU work of a TLS handshake
(ECDHE, a fraction of a millisecond) does run on the loop; ``bench/health.py`` measures it.

TLS: no verification by default, because the API server's certificate comes from the
cluster's own CA, which a node may not have when vipd starts (``kubeadm init`` creates it).
With ``ca_file`` the chain must verify against that CA; the name is not checked, because the
serving certificate lists the node's address and the ``kubernetes…`` names but not
necessarily the address we connect to (127.0.0.1): the chain proves the server holds a key
the cluster CA certified, which is what matters for a health check.

Failed checks: after a non-200 answer the checker reads up to ``BODY_LIMIT`` bytes more, under
the same deadline, for the names of the failed checks. kube-apiserver's health handler lists
them in every failing answer, verbose or not (``[-]etcd failed: reason withheld``,
k8s.io/apiserver ``pkg/server/healthz/healthz.go``, ``handleRootHealth``); the Lease backend
tells "its store is down" from "it answers nothing" by them. A 200's body is never read.

What it must not do: decide anything from the health (``gate`` and the IPVS plan do), follow
redirects, read a healthy answer's body, resolve names (targets are IP addresses), or let an
exception from one check or from ``on_change`` stop the other checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import re
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from ipaddress import IPv4Address, IPv6Address
from types import MappingProxyType

from vipd import __version__
from vipd.config import Health
from vipd.health import http
from vipd.health.tracker import BackendHealth, Outcome, Tracker

__all__ = [
    "Address",
    "BackendHealth",
    "HealthChecker",
    "OnChange",
    "OnCheck",
    "Outcome",
    "make_ssl_context",
]

Address = IPv4Address | IPv6Address
OnChange = Callable[[Address, BackendHealth], None]
OnCheck = Callable[[Address, Outcome], None]
USER_AGENT = f"vipd/{__version__} (health check)"
# How much of a failing answer is read for its failed checks: kube-apiserver's list of every
# check is about 2 KiB.
BODY_LIMIT = 16384
_FAILED_CHECK = re.compile(rb"^\[-\]([^\s]+) failed", re.M)


def failed_checks(body: bytes) -> tuple[str, ...]:
    """The names in the ``[-]<name> failed`` lines of a health answer's body."""
    return tuple(m.decode("ascii", "replace") for m in _FAILED_CHECK.findall(body))


def make_ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """The client context: no verification, or the chain against ``ca_file`` (not the name).

    Raises ``ValueError`` naming the file when it cannot be loaded (the CLI turns that into a
    config error before anything on the host is touched).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    # HTTP/1.1 only: a server offered h2 would answer in frames we do not parse.
    ctx.set_alpn_protocols(["http/1.1"])
    if ca_file is None:
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    try:
        ctx.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ValueError(f"cannot load CA certificates from {ca_file}: {reason}") from None
    if not ctx.get_ca_certs():
        raise ValueError(f"cannot load CA certificates from {ca_file}: no certificate in it")
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _describe(exc: BaseException) -> str:
    """A short, stable description of why a check failed (it goes into logs and snapshots)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"tls: certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"tls: {exc.reason or exc}"
    if isinstance(exc, http.ProtocolError):
        return f"http: {exc}"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed before the status line"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{errno.errorcode.get(exc.errno, str(exc.errno))}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


class _Target:
    def __init__(self, addr: Address, tracker: Tracker, request: bytes) -> None:
        self.addr = addr
        self.tracker = tracker
        self.request = request
        self.task: asyncio.Task[None] | None = None


class HealthChecker:
    """Checks ``targets`` plus the local API server; see the module docstring.

    ``start()`` must be called on the running loop; ``stop()`` cancels every check (sync; an
    in-flight connection is aborted); ``await closed()`` waits until the tasks have ended.
    ``clock`` is the monotonic clock whose times appear in ``BackendHealth.since`` and
    ``checked_at`` (the daemon's clock, so times can be compared with the state machine's).
    ``on_check(address, Outcome)``, if given, sees every finished check (for metrics).
    """

    def __init__(
        self,
        targets: Iterable[Address],
        params: Health,
        on_change: OnChange | None = None,
        *,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_check: OnCheck | None = None,
    ) -> None:
        self.params = params
        self.on_change = on_change
        self.on_check = on_check
        self.log = log or logging.getLogger("vipd")
        self.clock = clock
        self.ssl = make_ssl_context(params.ca_file)
        self._targets: dict[Address, _Target] = {}
        self._running = False
        self._add(params.local)
        for addr in targets:
            self._add(addr)

    # -- what the others read -------------------------------------------------------------

    @property
    def local(self) -> Address:
        return self.params.local

    def url(self, addr: Address) -> str:
        return http.url(addr, self.params.port, self.params.path)

    def healthy(self, addr: Address) -> bool:
        """True if ``addr`` is a target and currently healthy (unknown targets are not)."""
        target = self._targets.get(addr)
        return target is not None and target.tracker.healthy

    def local_healthy(self) -> bool:
        return self.healthy(self.params.local)

    def snapshot(self) -> Mapping[Address, BackendHealth]:
        """Every target's current state (immutable values, a read-only mapping)."""
        return MappingProxyType({a: t.tracker.state for a, t in self._targets.items()})

    def targets(self) -> list[Address]:
        return list(self._targets)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._running:
            return
        self._running = True
        n = len(self._targets)
        for i, target in enumerate(self._targets.values()):
            # Spread the first checks over one interval so the TLS handshakes of many
            # backends do not all land in the same turn of the loop; the local API server
            # (first) is checked at once, so a healthy node rises as early as it can.
            self._spawn(target, offset=self.params.interval * i / n)

    def stop(self) -> None:
        self._running = False
        for target in self._targets.values():
            if target.task is not None:
                target.task.cancel()

    async def closed(self) -> None:
        tasks = [t.task for t in self._targets.values() if t.task is not None]
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def set_targets(self, targets: Iterable[Address]) -> None:
        """Check exactly ``targets`` (plus the local API server) from now on.

        New targets start unhealthy and are checked at once; removed ones stop being checked
        and vanish from ``snapshot()``; the others keep their state.
        """
        wanted = {self.params.local, *targets}
        for addr in list(self._targets):
            if addr not in wanted:
                target = self._targets.pop(addr)
                if target.task is not None:
                    target.task.cancel()
        for addr in wanted:
            if addr not in self._targets:
                target = self._add(addr)
                if self._running:
                    self._spawn(target, offset=0.0)

    def reconfigure(self, params: Health) -> None:
        """A reload's new ``health`` section (``params.local`` unchanged): every target keeps
        its healthy/unhealthy state and its run of results, so a reload never makes a healthy
        API server look down (which would lower the priority and move the VIP); the new
        rise/fall apply from the next check. A new path, port, interval or timeout restarts
        each target's loop (an in-flight check is aborted) with its first check at once."""
        if params.local != self.params.local:
            raise ValueError("health.local cannot change in a running checker")
        old, self.params = self.params, params
        if params.ca_file != old.ca_file:
            self.ssl = make_ssl_context(params.ca_file)
        restart = (params.path, params.port, params.interval, params.timeout) != (
            old.path,
            old.port,
            old.interval,
            old.timeout,
        )
        for target in self._targets.values():
            target.tracker.rise = params.rise
            target.tracker.fall = params.fall
            target.request = http.request(target.addr, params.port, params.path, USER_AGENT)
            if restart and self._running:
                if target.task is not None:
                    target.task.cancel()
                self._spawn(target, offset=0.0)

    # -- the checks -----------------------------------------------------------------------

    def _add(self, addr: Address) -> _Target:
        if not isinstance(addr, IPv4Address | IPv6Address):
            raise TypeError(f"a health-check target must be an IP address (got {addr!r})")
        target = self._targets.get(addr)
        if target is None:
            p = self.params
            target = _Target(
                addr,
                Tracker(p.rise, p.fall, self.clock()),
                http.request(addr, p.port, p.path, USER_AGENT),
            )
            self._targets[addr] = target
        return target

    def _spawn(self, target: _Target, offset: float) -> None:
        loop = asyncio.get_running_loop()
        target.task = loop.create_task(self._loop(target, offset), name=f"health {target.addr}")

    async def _loop(self, target: _Target, offset: float) -> None:
        loop = asyncio.get_running_loop()
        interval = self.params.interval
        if offset > 0:
            await asyncio.sleep(offset)
        next_at = loop.time()
        while True:
            try:
                outcome = await self.check(target.addr, target.request)
            except Exception as exc:
                # check() catches what a network can do; anything else is a bug. It counts
                # as a failed check (logged), so the target cannot freeze in its last state:
                # a local API server stuck at "healthy" would never gate anything.
                self.log.exception("health check failed unexpectedly")
                outcome = Outcome(ok=False, error=f"internal error: {exc!r}")
            now = self.clock()
            changed = target.tracker.record(now, outcome)
            if self.on_check is not None:
                try:
                    self.on_check(target.addr, outcome)
                except Exception:
                    self.log.exception("health on_check callback failed")
            if changed:
                self._changed(target)
            # Fixed rate: the next check is one interval after this one started. A late loop
            # skips ahead instead of firing a burst of checks to catch up.
            next_at += interval
            late = loop.time() - next_at
            if late > 0:
                next_at += interval * (int(late // interval) + 1)
            await asyncio.sleep(next_at - loop.time())

    async def check(self, addr: Address, request: bytes | None = None) -> Outcome:
        """One check of ``addr``, bounded by ``timeout``; never raises (but CancelledError)."""
        p = self.params
        if request is None:
            request = http.request(addr, p.port, p.path, USER_AGENT)
        started = time.monotonic()
        writer: asyncio.StreamWriter | None = None
        status: int | None = None
        error: str | None = None
        body = b""
        try:
            async with asyncio.timeout(p.timeout):
                reader, writer = await asyncio.open_connection(
                    str(addr), p.port, ssl=self.ssl, server_hostname=""
                )
                writer.write(request)
                line = await reader.readuntil(b"\n")
                status = http.parse_status_line(line)
                if status != 200:
                    # Connection: close: the server ends the answer; a deadline that passes
                    # meanwhile ends the read, not the check (the status is what it is).
                    # (The inner deadline ends a little before the outer one, so the outer
                    # never fires and turns an answered check into a timeout.)
                    left = started + p.timeout - time.monotonic() - 0.02
                    with contextlib.suppress(TimeoutError, OSError, asyncio.IncompleteReadError):
                        async with asyncio.timeout(max(0.0, left)):
                            while left > 0 and len(body) < BODY_LIMIT:
                                chunk = await reader.read(BODY_LIMIT - len(body))
                                if not chunk:
                                    break
                                body += chunk
        except TimeoutError:
            error = f"timeout after {p.timeout:g} s"
        except asyncio.LimitOverrunError:
            error = "http: no status line in the first 64 KiB"
        except (OSError, http.ProtocolError, asyncio.IncompleteReadError) as exc:
            error = _describe(exc)
        finally:
            if writer is not None:
                # Never wait for the peer here: abort (RST) after a failure or a cancel
                # (stop()), and after an answer a plain close (its TLS close_notify is not
                # waited for).
                if error is None and status is not None:
                    writer.close()
                else:
                    writer.transport.abort()
        duration = time.monotonic() - started
        if error is None and status != 200:
            error = f"http status {status}"
        return Outcome(
            ok=error is None,
            status=status,
            error=error,
            duration=duration,
            failed_checks=failed_checks(body),
        )

    def _changed(self, target: _Target) -> None:
        s = target.tracker.state
        self.log.log(
            logging.INFO if s.healthy else logging.WARNING,
            "API server healthy" if s.healthy else "API server unhealthy",
            extra={
                "fields": {
                    "url": self.url(target.addr),
                    "local": target.addr == self.params.local,
                    "status": s.status,
                    "error": s.error,
                    "check_ms": None if s.duration is None else round(s.duration * 1e3, 1),
                    "after": f"{s.successes if s.healthy else s.failures} checks",
                }
            },
        )
        if self.on_change is None:
            return
        try:
            self.on_change(target.addr, s)
        except Exception:
            # A bug in a consumer must not stop the checks of every target.
            self.log.exception("health on_change callback failed")
