"""IPVS backend discovery with the real ``kubernetes`` client against a small HTTPS stub of
the one API call it makes (list EndpointSlices in ``default`` by the ``kubernetes`` Service
label), with a bearer token from a kubeconfig. No root needed: the stub listens on 127.0.0.1.

The stub is not a Kubernetes API server: it answers that one list, checks the path, the
label selector and the token, and 401s anything else.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.prereq import missing
from vipd.config import IpvsDiscovery
from vipd.ipvs.discovery import EndpointSliceSource

TOKEN = "vipd-test-token"
SLICES: dict[str, Any] = {
    "kind": "EndpointSliceList",
    "apiVersion": "discovery.k8s.io/v1",
    "metadata": {"resourceVersion": "7"},
    "items": [
        {
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.11"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.13"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.12"], "conditions": {"ready": False}},
            ],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }
    ],
}


class Stub:
    def __init__(self, tmp: Path) -> None:
        if shutil.which("openssl") is None:
            missing("needs openssl (scripts/setup installs it)")
        key, crt = tmp / "key.pem", tmp / "crt.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "1",
             "-subj", "/CN=kubernetes", "-addext", "subjectAltName=DNS:kubernetes,IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.requests: list[tuple[str, dict[str, list[str]], str | None]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                stub.requests.append((url.path, query, self.headers.get("Authorization")))
                ok = (
                    url.path == "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
                    and query.get("labelSelector") == ["kubernetes.io/service-name=kubernetes"]
                    and self.headers.get("Authorization") == f"Bearer {TOKEN}"
                )
                body = json.dumps(SLICES if ok else {"kind": "Status", "code": 401}).encode()
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        port = self.server.server_address[1]
        self.kubeconfig = tmp / "kubeconfig"
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": f"https://127.0.0.1:{port}",
                                "certificate-authority": str(crt),
                            },
                        }
                    ],
                    "users": [{"name": "u", "user": {"token": TOKEN}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[Stub]:
    s = Stub(tmp_path)
    yield s
    s.server.shutdown()
    s.server.server_close()


def test_real_client_lists_the_ready_api_servers(stub: Stub) -> None:
    source = EndpointSliceSource(IpvsDiscovery(kubeconfig=str(stub.kubeconfig), api_server=None), 4)
    assert source.fetch() == (IPv4Address("10.0.0.11"), IPv4Address("10.0.0.13"))
    path, query, auth = stub.requests[-1]
    assert path.endswith("/namespaces/default/endpointslices")
    assert query["labelSelector"] == ["kubernetes.io/service-name=kubernetes"]
    assert auth == f"Bearer {TOKEN}"


def test_a_refused_list_raises_and_the_caller_keeps_its_backends(stub: Stub) -> None:
    text = stub.kubeconfig.read_text().replace(TOKEN, "wrong")
    stub.kubeconfig.write_text(text)
    source = EndpointSliceSource(IpvsDiscovery(kubeconfig=str(stub.kubeconfig), api_server=None), 4)
    with pytest.raises(Exception, match="401"):
        source.fetch()
