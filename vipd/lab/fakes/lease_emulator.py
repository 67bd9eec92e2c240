"""An EMULATOR of the Kubernetes API's Lease endpoints, for tests and ``vipd lab``.

This is not a Kubernetes API server and not a substitute for one. No kube-apiserver can be
installed on the machines vipd is developed and tested on, so this module serves the one
resource vipd's Lease backend uses, ``coordination.k8s.io/v1`` Leases, with the semantics the
real server has for it, so that vipd's driver can be tested with the real ``kubernetes``
client, over real HTTPS, end to end:

- HTTPS with a self-signed certificate (made with the ``openssl`` command; SANs: the names and
  addresses it is given, plus ``kubernetes`` as kubeadm's API server certificate has), bearer
  tokens (one per client; a request without a known token is 401 ``Unauthorized``), and a
  kubeconfig per client written next to the certificate.
- ``GET``, ``PUT`` and ``DELETE`` on ``/apis/coordination.k8s.io/v1/namespaces/NS/leases/NAME``
  and ``POST`` (and ``GET``, a list) on ``…/namespaces/NS/leases``. ``resourceVersion`` is one
  counter for the whole store (like etcd's revision) and grows on every write; a ``PUT`` whose
  ``metadata.resourceVersion`` is not the current one is a 409 ``Conflict`` (an empty one is an
  unconditional update, which the real server allows for Leases); ``POST`` of an existing name
  is a 409 ``AlreadyExists`` and a new one is 201; a missing Lease is 404 ``NotFound``;
  ``acquireTime``/``renewTime`` must be RFC 3339 with exactly 6 fractional digits
  (``MicroTime``) and a bad body is a 400/422. Every error is a ``Status`` object, as the real
  server sends.
- Fault injection (`Faults`), set while it runs: added latency; a fraction of answers turned
  into an HTTP error (500 ``etcdserver: request timed out``, 503, 429 …), for all requests or
  writes only; a stall (no answer for N seconds, then the connection is closed) for all
  clients; and per-client faults keyed by the client's name (its token): ``stall`` (requests
  get no answer: a partition as the client sees it) and any HTTP status.
- A log of every request (time, client, verb, path, status), for tests.

What it does not emulate: watches, field selectors, server-side apply, admission, RBAC beyond
"known token", other resources. What it must not do: pretend to be more than that, or listen
anywhere but the address it is given.

Run it by hand: ``python -m vipd.lab.fakes.lease_emulator --listen 127.0.0.1:6443 --dir DIR
--clients n1,n2,n3`` (writes ``DIR/ca.crt``, its self-signed certificate, and
``DIR/<client>.kubeconfig``). ``serve_in_netns`` starts it inside a network namespace (the
lab's client namespace) from a thread of this process, so the lab and the tests drive faults
by calling methods, not over the network.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import secrets
import socket
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from vipd.lab.nsthread import in_netns
from vipd.lab.pki import make_cert

GROUP = "coordination.k8s.io"
API = f"/apis/{GROUP}/v1"
_ITEM = re.compile(rf"^{re.escape(API)}/namespaces/([a-z0-9-]{{1,63}})/leases/([^/?]+)$")
_COLLECTION = re.compile(rf"^{re.escape(API)}/namespaces/([a-z0-9-]{{1,63}})/leases$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_MICROTIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, name: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if name is not None:
        body["details"] = {"name": name, "group": GROUP, "kind": "leases"}
    return body


_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class ClientFault:
    """A fault for one client: ``stall`` (no answer) or an HTTP status to answer with."""

    mode: str  # "stall" | "status"
    code: int = 503
    writes_only: bool = False


@dataclass
class Faults:
    latency: float = 0.0  # seconds added before every answer
    error_rate: float = 0.0  # fraction of requests answered with error_code
    error_code: int = 500
    errors_writes_only: bool = False
    stall_until: float = 0.0  # time.monotonic(): until then, requests get no answer
    per_client: dict[str, ClientFault] = field(default_factory=dict)


@dataclass(frozen=True)
class Logged:
    time: float  # time.monotonic()
    client: str
    verb: str
    path: str
    status: int  # 0: no answer (stalled)


class Store:
    """Leases by (namespace, name), with one resourceVersion counter."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.revision = 100

    def _bump(self) -> str:
        self.revision += 1
        return str(self.revision)

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((ns, name))
            return _copy(obj) if obj is not None else None

    def put_raw(self, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Write a Lease as someone else would (tests: "another holder appears")."""
        with self.lock:
            old = self.objects.get((ns, name))
            meta = dict(old["metadata"]) if old else self._new_meta(ns, name)
            meta["resourceVersion"] = self._bump()
            obj = {"kind": "Lease", "apiVersion": f"{GROUP}/v1", "metadata": meta, "spec": spec}
            self.objects[(ns, name)] = obj
            return _copy(obj)

    def _new_meta(self, ns: str, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": ns,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": _now_rfc3339(),
        }


class _ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.body = status(code, reason, message, name)
        self.code = code


def _clean_spec(spec: object) -> dict[str, Any]:
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise _ApiError(400, "BadRequest", "spec: must be an object")
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if value is None:
            continue
        if key in ("holderIdentity", "strategy", "preferredHolder"):
            if not isinstance(value, str):
                raise _ApiError(400, "BadRequest", f"spec.{key}: must be a string")
        elif key in ("leaseDurationSeconds", "leaseTransitions"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise _ApiError(400, "BadRequest", f"spec.{key}: must be an integer")
            if value < 0 or (key == "leaseDurationSeconds" and value == 0):
                raise _ApiError(
                    422,
                    "Invalid",
                    f"Lease.coordination.k8s.io is invalid: spec.{key}: Invalid value: {value}: "
                    "must be greater than "
                    + ("0" if key == "leaseDurationSeconds" else "or equal to 0"),
                )
        elif key in ("acquireTime", "renewTime"):
            if not isinstance(value, str) or not _MICROTIME.match(value):
                raise _ApiError(
                    400,
                    "BadRequest",
                    f'spec.{key}: parsing time "{value}" as RFC3339 with microseconds',
                )
        else:
            continue  # unknown fields are dropped, as without strict field validation
        out[key] = value
    return out


class Emulator:
    """The server. ``start()`` in this thread's network namespace, or `serve_in_netns`."""

    def __init__(
        self,
        workdir: Path,
        clients: Iterable[str],
        *,
        host: str = "127.0.0.1",
        port: int = 6443,
        sans: Iterable[str] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port
        self.store = Store()
        self.faults = Faults()
        self.log: list[Logged] = []
        self._log_lock = threading.Lock()
        self.tokens = {secrets.token_hex(16): c for c in clients}
        self.sans = sorted({"kubernetes", "localhost", "127.0.0.1", host, *sans})
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Self-signed: the certificate is its own CA (the kubeconfigs name it as such).
        self.ca_path, self.key_path = make_cert(self.workdir, "ca", sans=self.sans)

    # -- files --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def token(self, client: str) -> str:
        return next(t for t, c in self.tokens.items() if c == client)

    def kubeconfig(self, client: str, server: str | None = None) -> Path:
        """Write ``<workdir>/<client>.kubeconfig`` (server, CA, this client's token)."""
        path = self.workdir / f"{client}.kubeconfig"
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "emulator",
                    "cluster": {
                        "server": server or self.url,
                        "certificate-authority": str(self.ca_path),
                    },
                }
            ],
            "users": [{"name": client, "user": {"token": self.token(client)}}],
            "contexts": [{"name": client, "context": {"cluster": "emulator", "user": client}}],
            "current-context": client,
        }
        path.write_text(json.dumps(doc, indent=2) + "\n")  # JSON is YAML
        path.chmod(0o600)
        return path

    # -- faults (call from any thread) -------------------------------------------------

    def set_latency(self, seconds: float) -> None:
        self.faults.latency = seconds

    def set_errors(self, rate: float, code: int = 500, writes_only: bool = False) -> None:
        self.faults.error_rate, self.faults.error_code = rate, code
        self.faults.errors_writes_only = writes_only

    def stall(self, seconds: float) -> None:
        """Every request for the next ``seconds`` gets no answer (then the socket closes)."""
        self.faults.stall_until = time.monotonic() + seconds

    def partition(
        self, client: str, mode: str = "stall", code: int = 503, writes_only: bool = False
    ) -> None:
        if client not in self.tokens.values():
            raise KeyError(client)
        self.faults.per_client[client] = ClientFault(mode, code, writes_only)

    def heal(self, client: str | None = None) -> None:
        """Lift the per-client fault of ``client``, or every fault when None."""
        if client is None:
            self.faults = Faults()
        else:
            self.faults.per_client.pop(client, None)

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Listen in the calling thread's network namespace; serve from a thread."""
        self._server = _make_server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name="lease-emulator",
        )  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def record(self, entry: Logged) -> None:
        with self._log_lock:
            self.log.append(entry)

    def requests(self, client: str | None = None, since: float = 0.0) -> list[Logged]:
        with self._log_lock:
            return [
                e for e in self.log if e.time >= since and (client is None or e.client == client)
            ]


def serve_in_netns(emulator: Emulator, netns: str) -> None:
    """Start ``emulator`` listening inside the named network namespace (``ip netns``).

    The listening socket is created by a short-lived thread that first joins the namespace
    (setns(2) changes only the calling thread's namespace); a socket stays in the namespace it
    was created in, so the accepting thread can live anywhere.
    """
    emulator._server = in_netns(netns, lambda: _make_server(emulator))
    assert emulator._server is not None
    emulator._thread = threading.Thread(
        target=emulator._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
        name="lease-emulator",
    )  # fmt: skip
    emulator._thread.start()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64
    emulator: Emulator


def _make_server(emulator: Emulator) -> _Server:
    family = socket.AF_INET6 if ":" in emulator.host else socket.AF_INET

    class Server(_Server):
        address_family = family

    server = Server((emulator.host, emulator.port), _Handler)
    server.emulator = emulator
    emulator.port = int(server.server_address[1])  # port 0: the one the kernel chose
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(emulator.ca_path), str(emulator.key_path))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the emulator keeps its own request log

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stall(self, until: float) -> None:
        emu = self.server.emulator
        while time.monotonic() < until and not emu._stopping.is_set():
            time.sleep(0.02)
        self.close_connection = True

    def _handle(self, verb: str) -> None:
        emu = self.server.emulator
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        auth = self.headers.get("Authorization", "")
        # The auth scheme is case-insensitive (RFC 9110 §11.1): the client's in-cluster
        # config sends "bearer", a kubeconfig "Bearer".
        scheme, _, token = auth.partition(" ")
        client = emu.tokens.get(token.strip(), "") if scheme.lower() == "bearer" else ""
        code = 0
        try:
            if not client:
                code = 401
                self._send(401, status(401, "Unauthorized", "Unauthorized"))
                return
            faults = emu.faults
            if faults.latency > 0:
                time.sleep(faults.latency)
            write = verb != "GET"
            cf = faults.per_client.get(client)
            if time.monotonic() < faults.stall_until:
                self._stall(faults.stall_until)
                return
            if cf is not None and (write or not cf.writes_only):
                if cf.mode == "stall":
                    # No answer while the partition lasts; the client gives up first.
                    while client in emu.faults.per_client and not emu._stopping.is_set():
                        time.sleep(0.02)
                    self.close_connection = True
                    return
                code = cf.code
                self._send(code, _error_status(code))
                return
            if (
                faults.error_rate > 0
                and (write or not faults.errors_writes_only)
                and random.random() < faults.error_rate
            ):
                code = faults.error_code
                self._send(code, _error_status(code))
                return
            code, body = self._dispatch(verb, path, raw)
            self._send(code, body)
        finally:
            emu.record(Logged(time.monotonic(), client, verb, path, code))

    def _dispatch(self, verb: str, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        store = self.server.emulator.store
        try:
            if m := _ITEM.match(path):
                ns, name = m.group(1), m.group(2)
                if verb == "GET":
                    obj = store.get(ns, name)
                    if obj is None:
                        raise _NotFound(name)
                    return 200, obj
                if verb == "PUT":
                    return 200, self._update(ns, name, _body(raw))
                if verb == "DELETE":
                    with store.lock:
                        if store.objects.pop((ns, name), None) is None:
                            raise _NotFound(name)
                        store._bump()
                    return 200, status(200, "", "", name) | {"status": "Success"}
                raise _ApiError(405, "MethodNotAllowed", f"{verb} is not supported", name)
            if m := _COLLECTION.match(path):
                ns = m.group(1)
                if verb == "POST":
                    return 201, self._create(ns, _body(raw))
                if verb == "GET":
                    with store.lock:
                        items = [o for (n, _), o in sorted(store.objects.items()) if n == ns]
                        rv = str(store.revision)
                    return 200, {
                        "kind": "LeaseList",
                        "apiVersion": f"{GROUP}/v1",
                        "metadata": {"resourceVersion": rv},
                        "items": items,
                    }
                raise _ApiError(405, "MethodNotAllowed", f"{verb} is not supported")
            raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        except _ApiError as err:
            return err.code, err.body

    def _create(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        store = self.server.emulator.store
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise _ApiError(
                422,
                "Invalid",
                f"Lease.coordination.k8s.io is invalid: metadata.name: Invalid value: {name!r}",
            )
        if meta.get("namespace") not in (None, ns):
            raise _ApiError(
                400,
                "BadRequest",
                "the namespace of the object does not match the namespace on the request",
            )
        spec = _clean_spec(body.get("spec"))
        with store.lock:
            if (ns, name) in store.objects:
                raise _ApiError(
                    409,
                    "AlreadyExists",
                    f'leases.coordination.k8s.io "{name}" already exists',
                    name,
                )
            new_meta = store._new_meta(ns, name)
            for k in ("labels", "annotations"):
                if isinstance(meta.get(k), dict):
                    new_meta[k] = meta[k]
            new_meta["resourceVersion"] = store._bump()
            obj = {"kind": "Lease", "apiVersion": f"{GROUP}/v1", "metadata": new_meta, "spec": spec}
            store.objects[(ns, name)] = obj
            return _copy(obj)

    def _update(self, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        store = self.server.emulator.store
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise _ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        spec = _clean_spec(body.get("spec"))
        with store.lock:
            old = store.objects.get((ns, name))
            if old is None:
                raise _NotFound(name)
            rv = meta.get("resourceVersion")
            if rv not in (None, "") and rv != old["metadata"]["resourceVersion"]:
                raise _ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the '
                    "object has been modified; please apply your changes to the latest version "
                    "and try again",
                    name,
                )
            new_meta = dict(old["metadata"])
            for k in ("labels", "annotations"):
                if k in meta:
                    new_meta[k] = meta[k]
            new_meta["resourceVersion"] = store._bump()
            obj = {"kind": "Lease", "apiVersion": f"{GROUP}/v1", "metadata": new_meta, "spec": spec}
            store.objects[(ns, name)] = obj
            return _copy(obj)


class _NotFound(_ApiError):
    def __init__(self, name: str) -> None:
        super().__init__(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found', name)


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(obj))
    return out


def _body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:
        raise _ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _ApiError(400, "BadRequest", "the body must be a JSON object")
    if body.get("kind") not in (None, "Lease") or body.get("apiVersion") not in (
        None,
        f"{GROUP}/v1",
    ):
        raise _ApiError(400, "BadRequest", "the body must be a coordination.k8s.io/v1 Lease")
    return body


def _error_status(code: int) -> dict[str, Any]:
    if code == 500:
        return status(
            500, "InternalError", "Internal error occurred: etcdserver: request timed out"
        )
    if code == 403:
        return status(
            403,
            "Forbidden",
            'leases.coordination.k8s.io is forbidden: User cannot update resource "leases"',
        )
    return status(code, _REASONS.get(code, "InternalError"), f"emulated error {code}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m vipd.lab.fakes.lease_emulator",
        description="Lease API EMULATOR (not a Kubernetes API server): coordination.k8s.io/v1 "
        "Leases over HTTPS with bearer tokens, for testing vipd's Lease backend.",
    )
    p.add_argument("--listen", default="127.0.0.1:6443", help="HOST:PORT (default 127.0.0.1:6443)")
    p.add_argument("--dir", required=True, help="where to write ca.crt and the kubeconfigs")
    p.add_argument(
        "--clients", default="vipd", help="comma-separated client names (one token each)"
    )
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    emu = Emulator(Path(args.dir), args.clients.split(","), host=host.strip("[]"), port=int(port))
    emu.start()
    for c in args.clients.split(","):
        print(f"{c}: {emu.kubeconfig(c)}", flush=True)
    print(f"Lease API emulator on {emu.url} (an emulator, not a Kubernetes API server)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
