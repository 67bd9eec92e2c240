"""The endpoint's token authentication against the bed's real kube-apiserver.

The endpoint runs with ``metrics.auth: token`` over TLS in the bed's client namespace, as a
child process, its reviews (TokenReview, SubjectAccessReview) going to one node's API server
with the credentials of a ServiceAccount bound to exactly what ``vipd manifest rbac`` renders
for that config. The scrapers are ServiceAccounts with TokenRequest tokens: one bound to a
ClusterRole granting ``get`` on the non-resource URL ``/metrics``, one with no RBAC at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vipd.deploy import manifest
from vipd.lab import pki
from vipd.lab.kubebed.bed import API_PORT, KubeBed
from vipd.lab.topology import python_env

PORT = 2113  # beside the bed's own vipd endpoints (2112) in the client namespace

CHILD = """
import json, sys, threading, time
from vipd import config
from vipd.endpoint import server
keys = json.loads(sys.argv[1])
cfg = config.parse({"vip": "10.0.0.100", "election": {"vrrp": {"vrid": 51}}, "metrics": keys},
                   env={}, hostname="endpoint")
ep = server.Endpoint.bind(cfg.metrics.listen, cfg.metrics)
ep.start()

def beat():
    while True:
        ep.beat(time.monotonic())
        time.sleep(0.2)

threading.Thread(target=beat, daemon=True).start()
print("serving", flush=True)
sys.stdin.read()
"""

SCRAPER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "vipd-metrics-reader"},
    "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
}
SCRAPER_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "vipd-metrics-reader"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "vipd-metrics-reader",
    },
    "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "kube-system"}],
}


def apply(bed: KubeBed, docs: list[dict[str, Any]]) -> None:
    text = "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)
    bed.kubectl("apply", "-f", "-", input_text=text)


class Client:
    def __init__(self, bed: KubeBed, cert: Path) -> None:
        self.bed, self.cert = bed, cert

    def get(self, path: str, token: str | None = None) -> tuple[int, str]:
        argv = [
            "curl",
            "-s",
            "--max-time",
            "20",
            "--cacert",
            str(self.cert),
            "-w",
            "\n%{http_code}",
        ]
        if token is not None:
            argv += ["-H", f"Authorization: Bearer {token}"]
        proc = self.bed.lab.exec(
            self.bed.lab.client_ns, [*argv, f"https://127.0.0.1:{PORT}{path}"], check=False
        )
        body, _, code = proc.stdout.rpartition("\n")
        return int(code or 0), body


@pytest.fixture(scope="module")
def endpoint(bed: KubeBed) -> Iterator[Client]:
    work = bed.lab.workdir / "metrics-auth"
    work.mkdir(exist_ok=True)
    cert, key = pki.make_cert(work, "endpoint", sans=("127.0.0.1",))
    keys = {
        "listen": f"127.0.0.1:{PORT}",
        "cert_file": str(cert),
        "key_file": str(key),
        "auth": "token",
        "api_server": f"https://{bed.serving().ipv4}:{API_PORT}",
        "tls_server_name": "kubernetes",
    }
    # What `vipd manifest rbac` renders for this config, applied as it is.
    opts = manifest.Options(name="vipd-metrics")
    plan = manifest.plan({"vip": "10.0.0.100", "election": {"vrrp": {"vrid": 51}}, "metrics": keys})
    rendered = manifest.rbac(plan, opts)
    assert {o["kind"] for o in rendered} >= {"ClusterRole", "ClusterRoleBinding"}
    apply(bed, rendered)
    reviewer = bed.account_kubeconfig("vipd-metrics", {})
    keys["kubeconfig"] = str(reviewer)
    for account in ("scraper", "nosy"):
        bed.kubectl("create", "serviceaccount", account, "-n", "kube-system", check=False)
    apply(bed, [SCRAPER_ROLE, SCRAPER_BINDING])
    proc = bed.lab.spawn(
        bed.lab.client_ns,
        [sys.executable, "-c", CHILD, json.dumps(keys)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=python_env(),
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "serving", line
    try:
        yield Client(bed, cert)
    finally:
        proc.kill()
        proc.wait()


def test_a_token_allowed_by_rbac_gets_metrics_others_401_or_403_probes_open(
    bed: KubeBed, endpoint: Client
) -> None:
    allowed, nosy = bed.token("scraper"), bed.token("nosy")
    # RBAC bindings reach every API server's authorizer cache within a moment.
    deadline = time.monotonic() + 30
    code, body = endpoint.get("/metrics", allowed)
    while code != 200 and time.monotonic() < deadline:
        time.sleep(1)
        code, body = endpoint.get("/metrics", allowed)
    assert code == 200, body
    assert "vipd_http_auth_total" in body
    code, body = endpoint.get("/metrics", nosy)
    assert code == 403 and "system:serviceaccount:kube-system:nosy" in body, body
    assert endpoint.get("/metrics")[0] == 401
    assert endpoint.get("/metrics", "not-a-token")[0] == 401
    # The scraper's ClusterRole names /metrics only: /status is another question.
    assert endpoint.get("/status", allowed)[0] == 403
    assert endpoint.get("/healthz") == (200, "ok\n")
    assert endpoint.get("/readyz")[0] == 503  # open (not 401): "starting", no election here
