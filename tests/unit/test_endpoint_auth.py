"""TLS and authentication of /metrics and /status (vipd.endpoint.auth), on a real endpoint.

The reviews themselves (TokenReview, SubjectAccessReview) are asked of a real kube-apiserver in
tests/kube/test_metrics_auth.py; here a `Reviewer` stand-in answers, so that the guard's
verdicts, its cache and the HTTP answers are checked without a cluster.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from vipd import config
from vipd.deploy import manifest
from vipd.endpoint import auth
from vipd.endpoint import server as httpd
from vipd.lab import pki

BASE: dict[str, object] = {"vip": "10.0.0.100", "election": {"vrrp": {"vrid": 51}}}
TOKENS = {
    "good": auth.Review("system:serviceaccount:monitoring:prometheus", True),
    "nosy": auth.Review("system:serviceaccount:default:nosy", False),
}


class Reviewer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = False

    def review(self, token: str, path: str) -> auth.Review:
        self.calls.append((token, path))
        if self.fail:
            raise ConnectionRefusedError("the API server is down")
        return TOKENS.get(token, auth.Review(None, False))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_guard_answers_401_403_and_caches_verdicts_for_a_while() -> None:
    rev, clock = Reviewer(), Clock()
    guard = auth.TokenGuard(rev, auth.Cache(ttl=10, size=2), clock)
    none = guard.check("/metrics", {}, None)
    assert none is not None and none.code == 401
    assert dict(none.headers)["WWW-Authenticate"].startswith("Bearer")
    bad = guard.check("/metrics", {"authorization": "Bearer who"}, None)
    assert bad is not None and bad.code == 401
    nosy = guard.check("/metrics", {"authorization": "Bearer nosy"}, None)
    assert nosy is not None and nosy.code == 403 and "default:nosy" in nosy.why
    assert guard.check("/metrics", {"authorization": "bearer good"}, None) is None
    calls = len(rev.calls)
    assert guard.check("/metrics", {"authorization": "Bearer good"}, None) is None
    assert len(rev.calls) == calls  # from the cache
    clock.now += 10
    assert guard.check("/metrics", {"authorization": "Bearer good"}, None) is None
    assert len(rev.calls) == calls + 1  # expired: asked again
    # A path is its own question: allowed /metrics says nothing of /status.
    guard.check("/status", {"authorization": "Bearer good"}, None)
    assert rev.calls[-1] == ("good", "/status")
    assert len(guard.cache) == 2  # bounded


def test_an_api_server_that_cannot_be_asked_is_503_and_not_remembered() -> None:
    rev = Reviewer()
    guard = auth.TokenGuard(rev, auth.Cache(), Clock())
    rev.fail = True
    down = guard.check("/metrics", {"authorization": "Bearer good"}, None)
    assert down is not None and down.code == 503
    rev.fail = False
    assert guard.check("/metrics", {"authorization": "Bearer good"}, None) is None


def test_bearer_parsing() -> None:
    assert auth.bearer({"authorization": "Bearer abc"}) == "abc"
    assert auth.bearer({"authorization": "Basic abc"}) is None
    assert auth.bearer({"authorization": "Bearer "}) is None
    assert auth.bearer({}) is None


# -- over TLS ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = pki.make_ca(d, "client-ca")
    server = pki.make_cert(d, "endpoint", sans=("127.0.0.1", "localhost"))
    client = pki.make_cert(d, "scraper", sans=("scraper",), ca=ca)
    stranger_ca = pki.make_ca(d, "stranger-ca")
    stranger = pki.make_cert(d, "stranger", sans=("stranger",), ca=stranger_ca)
    return {
        "ca": ca[0],
        "cert": server[0],
        "key": server[1],
        "client_cert": client[0],
        "client_key": client[1],
        "stranger_cert": stranger[0],
        "stranger_key": stranger[1],
    }


def metrics_config(certs: dict[str, Path], **keys: object) -> config.Metrics:
    data = {"cert_file": str(certs["cert"]), "key_file": str(certs["key"]), **keys}
    return config.parse({**BASE, "metrics": data}, env={}, hostname="cp-1").metrics


def https(
    port: int,
    path: str,
    certs: dict[str, Path],
    token: str | None = None,
    client: str | None = None,
) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(certs["cert"]))
    if client is not None:
        ctx.load_cert_chain(str(certs[f"{client}_cert"]), str(certs[f"{client}_key"]))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


@pytest.fixture
def token_endpoint(certs: dict[str, Path]) -> Iterator[httpd.Endpoint]:
    cfg = metrics_config(certs)  # TLS, no auth: then the guard is put in by hand
    tls, guard = httpd.security(cfg)
    assert tls is not None and guard is None
    ep = httpd.Endpoint(httpd.Endpoint.bind("127.0.0.1:0").sock, "127.0.0.1:0", tls)
    ep.guard = auth.TokenGuard(Reviewer())
    ep.start()
    yield ep
    ep.close()


def test_tls_with_tokens_guards_metrics_and_status_not_the_probes(
    token_endpoint: httpd.Endpoint, certs: dict[str, Path]
) -> None:
    port = token_endpoint.port
    assert https(port, "/healthz", certs)[0] == 200
    assert https(port, "/readyz", certs)[0] == 503  # open, and "starting"
    assert https(port, "/metrics", certs)[0] == 401
    assert https(port, "/status", certs)[0] == 401
    assert https(port, "/metrics", certs, token="nosy")[0] == 403
    code, body = https(port, "/metrics", certs, token="good")
    assert code == 200 and "vipd_http_auth_total" in body
    code, body = https(port, "/status", certs, token="good")
    assert code == 200 and json.loads(body)["ready"] is False


def test_plain_http_to_a_tls_endpoint_gets_nothing(
    token_endpoint: httpd.Endpoint, certs: dict[str, Path]
) -> None:
    with socket.create_connection(("127.0.0.1", token_endpoint.port), timeout=5) as c:
        c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        try:
            while chunk := c.recv(4096):
                got += chunk
        except OSError:
            pass
    assert b"vipd_" not in got
    assert https(token_endpoint.port, "/healthz", certs)[0] == 200  # and it goes on


def test_client_certificates_from_the_ca_only(certs: dict[str, Path]) -> None:
    cfg = metrics_config(certs, auth="client-cert", client_ca_file=str(certs["ca"]))
    ep = httpd.Endpoint.bind("127.0.0.1:0", cfg)
    ep.start()
    try:
        assert https(ep.port, "/healthz", certs)[0] == 200  # a probe sends no certificate
        assert https(ep.port, "/metrics", certs)[0] == 401
        assert https(ep.port, "/metrics", certs, client="client")[0] == 200
        # The handshake refuses a stranger's certificate: with TLS 1.3 the client may hear
        # the server's alert only when it reads the answer (an SSLError, not a URLError).
        with pytest.raises(OSError):  # no answer, whichever way the refusal shows
            https(ep.port, "/metrics", certs, client="stranger")
    finally:
        ep.close()


# -- the keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ({"auth": "tokens"}, "metrics.auth: must be one of none, token, client-cert"),
        ({"auth": "token"}, "metrics.auth: needs TLS"),
        ({"cert_file": "/c.pem"}, "metrics.key_file: must be set with metrics.cert_file"),
        (
            {"cert_file": "/c", "key_file": "/k", "client_ca_file": "/ca"},
            'metrics.client_ca_file: must be set exactly when metrics.auth is "client-cert"',
        ),
        (
            {"cert_file": "/c", "key_file": "/k", "auth": "client-cert"},
            "metrics.client_ca_file: must be set exactly",
        ),
        ({"api_server": "http://x"}, "metrics.api_server: must be an https://"),
        ({"kubeconfig": ""}, "metrics.kubeconfig: must be the path of a file"),
    ],
)
def test_bad_keys_are_one_line_errors(keys: dict[str, object], error: str) -> None:
    with pytest.raises(config.ConfigError) as info:
        config.parse({**BASE, "metrics": keys}, env={}, hostname="cp-1")
    assert str(info.value).startswith(error) and "\n" not in str(info.value)


def test_files_are_checked_at_start(tmp_path: Path, certs: dict[str, Path]) -> None:
    missing = metrics_config(certs, auth="none")
    missing = config.Metrics(cert_file=str(tmp_path / "nope.crt"), key_file=missing.key_file)
    with pytest.raises(config.ConfigError, match=r"^metrics\.cert_file: the file does not exist"):
        httpd.check_security(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(config.ConfigError, match=r"^metrics\.cert_file: cannot be loaded"):
        httpd.check_security(config.Metrics(cert_file=str(garbage), key_file=str(garbage)))
    with pytest.raises(config.ConfigError, match=r"^metrics\.client_ca_file: cannot be loaded"):
        httpd.check_security(metrics_config(certs, auth="client-cert", client_ca_file=str(garbage)))


def test_manifest_rbac_grants_the_reviews_when_tokens_are_checked(certs: dict[str, Path]) -> None:
    opts = manifest.Options()
    plain = manifest.plan(BASE)
    assert manifest.rbac(plain, opts) == []
    data = {
        **BASE,
        "metrics": {
            "cert_file": "/etc/vipd/tls.crt",
            "key_file": "/etc/vipd/tls.key",
            "auth": "token",
        },
    }
    objs = manifest.rbac(manifest.plan(data), opts)
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    assert {(r["apiGroups"][0], r["resources"][0], tuple(r["verbs"])) for r in role["rules"]} == {
        ("authentication.k8s.io", "tokenreviews", ("create",)),
        ("authorization.k8s.io", "subjectaccessreviews", ("create",)),
    }
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == opts.name
