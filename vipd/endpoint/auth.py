"""Who may read the endpoint's /metrics and /status: TLS, bearer tokens, client certificates.

What it is: the TLS context of ``metrics.cert_file``/``metrics.key_file`` and the `Guard` of
``metrics.auth``, the way Kubernetes components protect their metrics:

- ``token``: the request's ``Authorization: Bearer`` token is sent to the local API server in
  a TokenReview (who is it?, authentication.k8s.io/v1), then a SubjectAccessReview for that
  user, verb ``get`` and the request's path as a non-resource URL (may it?,
  authorization.k8s.io/v1). This is what controller-runtime's secure metrics serving
  (``pkg/metrics/filters``: ``WithAuthenticationAndAuthorization``) and kube-rbac-proxy do,
  and what an RBAC rule ``nonResourceURLs: ["/metrics"], verbs: ["get"]`` grants. No token:
  401; a token the API server does not know: 401; known but not allowed: 403; the API server
  cannot be asked: 503, so a scraper retries rather than believing it is denied. Verdicts are
  kept for `CACHE_TTL` s, at most `CACHE_SIZE` of them (the oldest goes first), keyed by a
  SHA-256 of the token and the path: a scraper every few seconds costs the API server two
  requests per `CACHE_TTL`.
- ``client-cert``: the TLS client certificate must verify against ``metrics.client_ca_file``
  (the handshake asks for one but lets a client without one in, for the probes); none: 401.

/healthz and /readyz are never guarded (the kubelet's probes send no credentials).

What it must not do: answer HTTP (``vipd.endpoint.server`` does) or reach the API server
other than through ``vipd.kube`` (the credentials and the never-through-the-VIP server).
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from vipd import kube
from vipd import log as vlog
from vipd.config import ConfigError

if TYPE_CHECKING:
    from vipd.config import Metrics

CACHE_TTL = 10.0
CACHE_SIZE = 256
REVIEW_TIMEOUT = 5.0
_CHALLENGE = (("WWW-Authenticate", 'Bearer realm="vipd"'),)


@dataclass(frozen=True, slots=True)
class Denied:
    code: int  # 401, 403 or 503
    why: str
    headers: tuple[tuple[str, str], ...] = ()


class Guard(Protocol):
    def check(
        self, path: str, headers: Mapping[str, str], peer_cert: Mapping[str, Any] | None
    ) -> Denied | None: ...


def tls_context(config: Metrics) -> ssl.SSLContext | None:
    """The server's TLS context, or None for plain HTTP; `ConfigError` naming the key."""
    if config.cert_file is None or config.key_file is None:
        return None
    for key, path in (
        ("metrics.cert_file", config.cert_file),
        ("metrics.key_file", config.key_file),
    ):
        if not os.path.isfile(path):
            raise ConfigError(key, "the file does not exist", path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.cert_file, config.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            "metrics.cert_file", f"cannot be loaded with metrics.key_file: {exc}", config.cert_file
        ) from None
    if config.client_ca_file is not None:
        if not os.path.isfile(config.client_ca_file):
            raise ConfigError(
                "metrics.client_ca_file", "the file does not exist", config.client_ca_file
            )
        try:
            ctx.load_verify_locations(cafile=config.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                "metrics.client_ca_file", f"cannot be loaded: {exc}", config.client_ca_file
            ) from None
        # Asked for, verified when sent, not required: the probes of /healthz send none.
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def guard(config: Metrics) -> Guard | None:
    if config.auth == "token":
        access = kube.Access(
            config.kubeconfig, config.api_server, config.tls_server_name, "metrics.kubeconfig"
        )
        kube.check(access)  # the credentials are found and load, or exit 2
        return TokenGuard(KubeReviewer(access))
    if config.auth == "client-cert":
        return CertGuard()
    return None


class CertGuard:
    def check(
        self, path: str, headers: Mapping[str, str], peer_cert: Mapping[str, Any] | None
    ) -> Denied | None:
        if peer_cert:
            return None  # the handshake verified it against metrics.client_ca_file
        return Denied(401, f"{path} needs a client certificate signed by metrics.client_ca_file")


# -- tokens ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Review:
    """What the API server said of a token for a path: ``user`` None: not authenticated."""

    user: str | None
    allowed: bool
    reason: str = ""


class Reviewer(Protocol):
    def review(self, token: str, path: str) -> Review: ...


class Cache:
    """Verdicts by key for ``ttl`` s, at most ``size`` (the least recently stored goes)."""

    def __init__(self, ttl: float = CACHE_TTL, size: int = CACHE_SIZE) -> None:
        self.ttl, self.size = ttl, size
        self._items: OrderedDict[bytes, tuple[float, Review]] = OrderedDict()

    def get(self, key: bytes, now: float) -> Review | None:
        item = self._items.get(key)
        if item is None or item[0] <= now:
            return None
        return item[1]

    def put(self, key: bytes, review: Review, now: float) -> None:
        self._items.pop(key, None)
        self._items[key] = (now + self.ttl, review)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of ``Authorization: Bearer TOKEN`` (RFC 6750 section 2.1), or None."""
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class TokenGuard:
    """TokenReview + SubjectAccessReview through ``reviewer``, cached (see the docstring)."""

    def __init__(
        self,
        reviewer: Reviewer,
        cache: Cache | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reviewer = reviewer
        self.cache = cache if cache is not None else Cache()
        self.clock = clock
        self._lock = threading.Lock()  # one review at a time: the cache and the API client

    def check(
        self, path: str, headers: Mapping[str, str], peer_cert: Mapping[str, Any] | None
    ) -> Denied | None:
        token = bearer(headers)
        if token is None:
            return Denied(401, f"{path} needs a bearer token", _CHALLENGE)
        key = hashlib.sha256(f"{path}\0{token}".encode()).digest()
        if not self._lock.acquire(timeout=REVIEW_TIMEOUT):
            return Denied(503, "cannot check the token now: try again")
        try:
            got = self.cache.get(key, self.clock())
            if got is None:
                try:
                    got = self.reviewer.review(token, path)
                except Exception as exc:
                    _count("error")
                    vlog.event(
                        vlog.get(), logging.WARNING, "endpoint cannot review a token",
                        error=" ".join(str(exc).split())[:200],
                    )  # fmt: skip
                    return Denied(503, "cannot check the token: the API server did not answer")
                self.cache.put(key, got, self.clock())
        finally:
            self._lock.release()
        if got.user is None:
            _count("unauthenticated")
            return Denied(401, "the token is not valid", _CHALLENGE)
        if not got.allowed:
            _count("forbidden")
            return Denied(403, f'user "{got.user}" may not get {path}')
        _count("allowed")
        return None


def _count(result: str) -> None:
    from vipd import metrics

    metrics.HTTP_AUTH.labels(result=result).inc()


class KubeReviewer:
    """The reviews, asked of the API server through ``vipd.kube``'s credentials."""

    def __init__(self, access: kube.Access) -> None:
        self.access = access
        self._session: kube.Session | None = None

    def review(self, token: str, path: str) -> Review:
        from kubernetes import client

        if self._session is None:
            self._session = kube.Session.open(self.access)
        while True:
            try:
                return self._ask(client, self._session.api_client(), token, path)
            except client.ApiException as exc:
                if not self._session.fall_back(int(exc.status or 0)):
                    raise

    @staticmethod
    def _ask(client: Any, api: Any, token: str, path: str) -> Review:
        authn = client.AuthenticationV1Api(api)
        tr = authn.create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)),
            _request_timeout=REVIEW_TIMEOUT,
        )
        st = tr.status
        if st is None or not st.authenticated or st.user is None:
            return Review(None, False, (st.error or "") if st is not None else "")
        user = st.user
        authz = client.AuthorizationV1Api(api)
        sar = authz.create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=user.username,
                    groups=user.groups,
                    uid=user.uid,
                    extra=user.extra,
                    non_resource_attributes=client.V1NonResourceAttributes(path=path, verb="get"),
                )
            ),
            _request_timeout=REVIEW_TIMEOUT,
        )
        allowed = bool(sar.status is not None and sar.status.allowed)
        return Review(str(user.username), allowed, (sar.status.reason or "") if sar.status else "")
