"""A stand-in for kube-apiserver's health endpoints: HTTPS ``/readyz``, ``/healthz``, ``/livez``.

Run on a lab node as ``python -m vipd.lab.fakes.apiserver --port 6444 --cert C --key K --mode-file
F``, or inside the responder process (``vipd.lab.responder --health-port``), so that killing
the responder is an API server dying: its TCP port and its health endpoint go together.

How a test steers it: every connection reads the one-word mode in ``--mode-file`` (a missing
or empty file means ``ok``) and behaves accordingly:

- ``ok``: TLS, then ``200 OK`` with body ``ok`` (what kube-apiserver answers); ``/version``
  answers kube-apiserver's JSON (client-go's discovery reads it: kube-vip's routing-table
  check does).
- ``fail``: TLS, then ``500`` with a readyz-style body (an API server that is up, not ready).
- ``stall``: TLS, reads the request, never answers (a hung API server).
- ``stall1``: like ``stall`` for this one connection, and the mode becomes ``ok`` (one slow
  answer among good ones).
- ``hang``: accepts the TCP connection and never starts TLS.
- ``tls``: answers in plain text without TLS (the client's handshake fails).

Certificates come from ``vipd.lab.pki`` (self-signed, or a CA and a server certificate it
signs).

What it must not do: anything an API server would not: it answers only those three paths
and ``/version`` (404 otherwise) and closes every connection after one answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
import sys
import threading
from pathlib import Path

READY_LINE = "listening"
MODES = ("ok", "fail", "stall", "stall1", "hang", "tls")
PATHS = (b"/readyz", b"/healthz", b"/livez", b"/version")
VERSION = (
    b'{"major": "1", "minor": "37", "gitVersion": "v1.37.2-standin", "platform": "linux/amd64"}'
)


def read_mode(path: Path | None) -> str:
    if path is None:
        return "ok"
    try:
        mode = path.read_text().strip()
    except OSError:
        return "ok"
    return mode if mode in MODES else "ok"


class HealthServer:
    """The asyncio server; ``serve_forever`` on its own loop (``run_in_thread``)."""

    def __init__(self, port: int, cert: Path, key: Path, mode_file: Path | None) -> None:
        self.port = port
        self.mode_file = mode_file
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert), str(key))
        self.served = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            mode = read_mode(self.mode_file)
            if mode == "hang":
                await reader.read()  # until the client gives up
                return
            if mode == "tls":
                writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                await writer.drain()
                return
            await writer.start_tls(self.ctx)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            parts = head.split(b" ", 2)
            path = (parts[1] if len(parts) > 2 else b"").split(b"?", 1)[0]  # ?exclude=…
            if mode == "stall1" and self.mode_file is not None:
                self.mode_file.write_text("ok\n")
            if mode in ("stall", "stall1"):
                await reader.read()
                return
            if path not in PATHS:
                status, body = b"404 Not Found", b"404 page not found\n"
            elif mode == "fail":
                status, body = b"500 Internal Server Error", b"[-]etcd failed: reason withheld\n"
            elif path == b"/version":
                status, body = b"200 OK", VERSION
            else:
                status, body = b"200 OK", b"ok"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            await writer.drain()
            self.served += 1
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError):
            pass  # a client that resets or times out: nothing to do
        except asyncio.LimitOverrunError:
            pass
        finally:
            writer.transport.abort()

    async def serve_forever(self, ready: threading.Event | None = None) -> None:
        server = await asyncio.start_server(self._handle, host=None, port=self.port)
        if ready is not None:
            ready.set()
        async with server:
            await server.serve_forever()

    def run_in_thread(self, timeout: float = 5.0) -> threading.Thread:
        """Serve on a daemon thread with its own loop; returns once the port is bound."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def main() -> None:
            try:
                asyncio.run(self.serve_forever(ready))
            except BaseException as exc:
                errors.append(exc)
                ready.set()

        thread = threading.Thread(target=main, name="health-server", daemon=True)
        thread.start()
        if not ready.wait(timeout) or errors:
            raise RuntimeError(f"health server on port {self.port} did not start: {errors}")
        return thread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vipd.lab.fakes.apiserver",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--cert", required=True, type=Path)
    parser.add_argument("--key", required=True, type=Path)
    parser.add_argument("--mode-file", type=Path, default=None)
    args = parser.parse_args(argv)
    server = HealthServer(args.port, args.cert, args.key, args.mode_file)
    ready = threading.Event()

    async def run() -> None:
        task = asyncio.create_task(server.serve_forever(ready))
        while not ready.is_set() and not task.done():
            await asyncio.sleep(0.01)
        print(f"{READY_LINE} port={args.port}", flush=True)
        await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
