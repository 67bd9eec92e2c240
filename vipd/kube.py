"""Kubernetes API access: which credentials, which server, and the fallback between them.

What it is
    One way to reach the API server, shared by the Lease backend (`vipd.lease.driver`) and
    IPVS discovery (`vipd.ipvs.discovery`); each passes the `Access` of its own config
    section (``election.lease``, ``ipvs.discovery``: `vipd.config.KubeAccess`, whose keys and
    rules both sections declare once), so a config error names that section's key.

    Credentials, in order (`candidates`):

    1. ``kubeconfig: in-cluster``: the pod's ServiceAccount (needs ``KUBERNETES_SERVICE_HOST``).
    2. ``kubeconfig: PATH``: that file; if it is named ``admin.conf`` and a
       ``super-admin.conf`` sits next to it, that one second.
    3. ``kubeconfig`` unset: ``/etc/kubernetes/admin.conf`` when it exists (plus
       ``super-admin.conf`` as in 2), else the pod's ServiceAccount, else a config error.

    The ``super-admin.conf`` fallback (`Session.fall_back`): on Kubernetes >= 1.29, during the
    first ``kubeadm init``, ``admin.conf`` is not authorised yet (its group's
    ClusterRoleBinding is created through the control-plane endpoint, which is this VIP), so a
    401/403 with ``admin.conf`` switches to ``super-admin.conf``, said in the log, for as long
    as the process runs (kubeadm's ``kubeconfig`` phase, see kubernetes/kubernetes
    ``cmd/kubeadm/app/phases/kubeconfig``).

    The server: never through the VIP. ``api_server`` (default ``https://127.0.0.1:6443``, this
    node's own API server, checked against ``tls_server_name``, default ``kubernetes``, which
    kubeadm always puts in the serving certificate) replaces the kubeconfig's server, which in
    kubeadm's ``admin.conf`` *is* the VIP. `configuration` re-applies it after the loaders'
    token-refresh hook, which would otherwise copy the kubeconfig's server back. The client
    retries nothing by itself (``retries=False``): the caller decides when to try again.

What it must not do: decide anything about elections or backends, or load the ``kubernetes``
package at import time (``vipd run`` in VRRP mode never pays for it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vipd import log as vlog
from vipd.config import ConfigError, KubeAccess

if TYPE_CHECKING:
    from vipd.config import Lease

ADMIN_CONF = "/etc/kubernetes/admin.conf"
SUPER_ADMIN_CONF = "super-admin.conf"
IN_CLUSTER = "in-cluster"
# 401/403: the credentials are not (yet) authorised; the next candidate may be.
NOT_AUTHORISED = (401, 403)


# Where and how one user of the API reaches it: a config section's access keys, as
# `vipd.config` declares them (``Access.from_lease``, ``Access.from_discovery``).
Access = KubeAccess


@dataclass(frozen=True, slots=True)
class Credentials:
    """One way to authenticate: a kubeconfig file, or the pod's ServiceAccount."""

    label: str  # for logs: the path, or "in-cluster"
    kubeconfig: str | None  # None: in-cluster


def candidates(
    access: Access, env: Mapping[str, str], exists: Callable[[str], bool]
) -> list[Credentials]:
    """The credentials to try, in order, or a `ConfigError` naming ``access.key``.

    ``exists`` and ``env`` are passed in so that the rule is testable without a host.
    """
    path = access.kubeconfig
    if path == IN_CLUSTER:
        if not env.get("KUBERNETES_SERVICE_HOST"):
            raise ConfigError(
                access.key, '"in-cluster" needs a pod (KUBERNETES_SERVICE_HOST is not set)'
            )
        return [Credentials(IN_CLUSTER, None)]
    if path is None:
        if exists(ADMIN_CONF):
            path = ADMIN_CONF
        elif env.get("KUBERNETES_SERVICE_HOST"):
            return [Credentials(IN_CLUSTER, None)]
        else:
            raise ConfigError(
                access.key,
                f"is not set, {ADMIN_CONF} does not exist and this is not a pod: set the path of "
                "a kubeconfig",
            )
    if not exists(path):
        raise ConfigError(access.key, "the file does not exist", path)
    out = [Credentials(path, path)]
    if Path(path).name == "admin.conf":
        sibling = str(Path(path).with_name(SUPER_ADMIN_CONF))
        if exists(sibling):
            out.append(Credentials(sibling, sibling))
    return out


def check(access: Access, env: Mapping[str, str] | None = None) -> None:
    """Start-up check: every kubeconfig candidate loads; raises `ConfigError` (exit 2)."""
    for c in candidates(access, dict(os.environ if env is None else env), os.path.exists):
        if c.kubeconfig is not None:
            try:
                configuration(access, c)
            except Exception as exc:
                raise ConfigError(access.key, f"cannot be loaded: {exc}", c.kubeconfig) from None


def configuration(access: Access, cred: Credentials) -> Any:
    """A ``kubernetes.client.Configuration`` for ``cred`` with ``access``'s server override."""
    from kubernetes import client, config

    c = client.Configuration()
    if cred.kubeconfig is None:
        config.load_incluster_config(client_configuration=c)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=cred.kubeconfig, client_configuration=c, persist_config=False
        )

    def overrides(conf: Any) -> None:
        if access.api_server is not None:
            conf.host = access.api_server
        if access.tls_server_name is not None:
            conf.tls_server_name = access.tls_server_name

    overrides(c)
    # The loaders install a hook that re-reads the token before every request (rotation) and
    # copies the kubeconfig's server back over ours with it: re-apply ours after it, or every
    # request would go to the kubeconfig's server, the VIP. The kubeconfig loader's hook also
    # installs a fresh copy of itself each time it runs (kubernetes/config/kube_config.py,
    # ``_set_config``), so ours wraps whichever hook is there after every run, not only the
    # first one.

    def wrap(conf: Any) -> None:
        hook = conf.refresh_api_key_hook
        if hook is None:
            return

        def refresh(conf: Any) -> None:
            hook(conf)
            overrides(conf)
            if conf.refresh_api_key_hook is not refresh:
                wrap(conf)

        conf.refresh_api_key_hook = refresh

    wrap(c)
    c.retries = False  # the caller decides when to try again
    c.connection_pool_maxsize = 4
    return c


class Session:
    """The credentials in use and an ``ApiClient`` for them, made on first use.

    Not thread-safe: one caller thread at a time (the Lease backend's calls and the discovery
    poller's each run one request at a time)."""

    def __init__(
        self, access: Access, creds: list[Credentials], log: logging.Logger | None = None
    ) -> None:
        if not creds:
            raise ValueError("no credentials to try")
        self.access = access
        self.creds = creds
        self.log = log or vlog.get()
        self.index = 0
        self._client: Any = None

    @classmethod
    def open(cls, access: Access, log: logging.Logger | None = None) -> Session:
        """The session for this host: `candidates` from the environment and the files."""
        return cls(access, candidates(access, dict(os.environ), os.path.exists), log)

    @property
    def using(self) -> Credentials:
        return self.creds[self.index]

    def api_client(self) -> Any:
        if self._client is None:
            from kubernetes import client

            self._client = client.ApiClient(configuration(self.access, self.using))
        return self._client

    def fall_back(self, status: int) -> bool:
        """After a ``status`` answer: switch to the next credentials if that may help."""
        if status not in NOT_AUTHORISED or self.index + 1 >= len(self.creds):
            return False
        old = self.using.label
        self.index += 1
        self._client = None
        vlog.event(
            self.log,
            logging.WARNING,
            "kubeconfig not authorised: falling back",
            **{"from": old},
            to=self.using.label,
            status=status,
            why="on Kubernetes >= 1.29 admin.conf only works once kubeadm init has finished; "
            "super-admin.conf is used until vipd restarts",
        )
        return True


# -- may it? (``vipd check``) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Need:
    """One thing vipd does with the API, as a SelfSubjectAccessReview asks it."""

    verb: str
    group: str  # "" for the core group
    resource: str
    namespace: str
    name: str | None = None  # None: any name (RBAC cannot narrow create or list by name)

    def describe(self) -> str:
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f"{self.namespace}/{self.name}" if self.name else f"in {self.namespace}"
        if not self.namespace:  # cluster-scoped (Nodes)
            where = "cluster-wide"
        return f"{self.verb} {what} {where}"


def lease_needs(lease: Lease) -> list[Need]:
    """The Lease backend: read and update its Lease, create it when it is missing."""
    g, ns = "coordination.k8s.io", lease.namespace
    return [
        Need("get", g, "leases", ns, lease.name),
        Need("update", g, "leases", ns, lease.name),
        Need("create", g, "leases", ns),
    ]


# IPVS discovery reads the ``default/kubernetes`` EndpointSlices (vipd.ipvs.discovery).
DISCOVERY_NEEDS = [
    Need("list", "discovery.k8s.io", "endpointslices", "default"),
    Need("watch", "discovery.k8s.io", "endpointslices", "default"),
]


def missing(api_client: Any, needs: list[Need], timeout: float = 5.0) -> list[Need]:
    """The needs the API server does not allow for these credentials (one
    SelfSubjectAccessReview each; any error of the API raises)."""
    from kubernetes import client

    authz = client.AuthorizationV1Api(api_client)
    out: list[Need] = []
    for n in needs:
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=n.verb,
                    group=n.group,
                    resource=n.resource,
                    namespace=n.namespace,
                    name=n.name,
                )
            )
        )
        got = authz.create_self_subject_access_review(review, _request_timeout=timeout)
        if not (got.status is not None and got.status.allowed):
            out.append(n)
    return out


@dataclass(frozen=True, slots=True)
class Review:
    """What `review` found: ``missing`` empty means allowed; ``error`` set means the API
    server could not be asked (nothing known)."""

    credentials: str
    missing: tuple[Need, ...] = ()
    error: str | None = None


def review(access: Access, needs: list[Need]) -> Review:
    """Ask the API server, through the credentials vipd would run with (the first candidate
    that is allowed everything, as the ``super-admin.conf`` fallback would find it), whether
    it may do ``needs``. Credentials that cannot be found raise `ConfigError`."""
    creds = candidates(access, dict(os.environ), os.path.exists)
    first: Review | None = None
    for cred in creds:
        from kubernetes import client

        try:
            api = client.ApiClient(configuration(access, cred))
            got = Review(cred.label, tuple(missing(api, needs)))
        except client.ApiException as exc:
            if int(exc.status or 0) in NOT_AUTHORISED:
                # Not even allowed to ask (401): counts as allowed nothing.
                got = Review(cred.label, tuple(needs))
            else:
                got = Review(cred.label, error=f"HTTP {exc.status}: {exc.reason}")
        except Exception as exc:  # no answer: timeout, refused, TLS
            got = Review(
                cred.label, error=f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:200]
            )
        if got.error is None and not got.missing:
            return got
        first = first or got
    assert first is not None
    return first
