"""The config sections that reach the Kubernetes API: ``election.lease`` (`Lease`) and
``ipvs.discovery`` (`IpvsDiscovery`), and their one shared part, the API access
(`KubeAccess`: credentials, server, certificate name), whose keys both sections declare with
the rules below and which `vipd.kube` turns into a client.

What it must not do: look for the kubeconfig or talk to the API server (`vipd.kube` does, and
its errors name the section's key that `KubeAccess.key` carries), or do any I/O.

Where the rules come from: the Lease's timing is client-go's (``leaderelection.go``: the
renew deadline above 1.2 x the retry period, and below the lease duration);
``leaseDurationSeconds`` is an integer (``coordination.k8s.io/v1``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vipd.config.rules import DNS1123_LABEL, DNS1123_SUBDOMAIN, HOSTNAME_LIKE, file_or_null
from vipd.config.schema import Check, Rule, flag, is_number, seconds, spec

__all__ = ["IpvsDiscovery", "KubeAccess", "Lease"]


# -- the access: one dataclass, one set of rules ------------------------------------------


@dataclass(frozen=True, slots=True)
class KubeAccess:
    """Where and how one user of the API reaches it: a config section's access keys, and
    ``key``, the dotted key of its ``kubeconfig`` (for `vipd.kube`'s errors)."""

    kubeconfig: str | None
    api_server: str | None
    tls_server_name: str | None
    key: str

    @classmethod
    def from_lease(cls, lease: Lease) -> KubeAccess:
        return lease.access

    @classmethod
    def from_discovery(cls, discovery: IpvsDiscovery) -> KubeAccess:
        return discovery.access


kubeconfig = file_or_null(
    'must be the path of a kubeconfig file, "in-cluster", or null (auto: '
    "/etc/kubernetes/admin.conf, else in-cluster credentials)"
)


HOST_PORT_URL = re.compile(r"https://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?/?")


def host_port_url(rule: str, *, strip: bool) -> Rule:
    """``https://HOST[:PORT]`` or null, else ``rule`` as the error; ``strip``: a trailing
    ``/`` dropped."""

    def check(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
        if value is not None and (not isinstance(value, str) or not HOST_PORT_URL.fullmatch(value)):
            c.fail(key, rule, value)
        return value.rstrip("/") if strip and value else value

    return check


# The Lease: this node's own API server, so that the election's rules can tell whether it is
# the VIP.
api_server_host_port = host_port_url(
    "must be an https://HOST[:PORT] URL (this node's own API server), or null to use the "
    "kubeconfig's server",
    strip=True,
)


def api_server_url(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
    """Any ``https://`` URL (discovery: a path prefix, e.g. behind a proxy, is allowed)."""
    if value is not None and (
        not isinstance(value, str) or not re.fullmatch(r"https://\S+", value)
    ):
        c.fail(key, "must be an https:// URL, or null to use the kubeconfig's server", value)
    return value


def tls_server_name(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
    if value is not None and (not isinstance(value, str) or not HOSTNAME_LIKE.fullmatch(value)):
        c.fail(
            key, "must be a DNS name in the API server's certificate, or null for the host", value
        )
    return value


# -- election.lease ------------------------------------------------------------------------


def _object_name(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str:
    if not isinstance(value, str) or not DNS1123_SUBDOMAIN.fullmatch(value):
        c.fail(
            key,
            "must be a Kubernetes object name: 1 to 253 lower-case letters, digits, '-' "
            "or '.', starting and ending with a letter or digit",
            value,
        )
    return value


def _namespace(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str:
    if not isinstance(value, str) or not DNS1123_LABEL.fullmatch(value):
        c.fail(
            key,
            "must be a namespace name: 1 to 63 lower-case letters, digits or '-', "
            "starting and ending with a letter or digit",
            value,
        )
    return value


def _duration(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int:
    if not is_number(value) or value != int(value) or not 1 <= value <= 3600:
        c.fail(
            key,
            "must be a whole number of seconds from 1 to 3600 (leaseDurationSeconds is an integer)",
            value,
        )
    return int(value)


def _timing(c: Check, p: str, got: Mapping[str, Any], sec: Mapping[str, Any]) -> None:
    """client-go's rule, checked once the three durations are read."""
    renew, retry = got["renew_deadline"], got["retry_period"]
    if not renew > 1.2 * retry:
        c.fail(
            f"{p}.renew_deadline",
            f"must be greater than 1.2 x retry_period ({1.2 * retry:g} s), as in "
            "client-go, so that a renewal can be retried before the deadline",
            sec.get("renew_deadline", renew),
        )
    if not got["duration"] > renew:
        c.fail(
            f"{p}.duration",
            f"must be greater than renew_deadline ({renew:g} s): a leader must "
            "let go before its peers may take over",
            sec.get("duration", got["duration"]),
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """``election.lease``: a coordination.k8s.io/v1 Lease (``vipd.lease``)."""

    name: str = field(default="vipd-cp-lock", metadata=spec(_object_name))
    namespace: str = field(default="kube-system", metadata=spec(_namespace))
    # seconds; leaseDurationSeconds is an integer
    duration: int = field(default=15, metadata=spec(_duration))
    renew_deadline: float = field(default=10.0, metadata=spec(seconds(0.1, 3600)))
    retry_period: float = field(default=2.0, metadata=spec(seconds(0.05, 3600), then=_timing))
    # None: admin.conf (super-admin.conf fallback), else in-cluster
    kubeconfig: str | None = field(default=None, metadata=spec(kubeconfig))
    # None: the kubeconfig's server
    api_server: str | None = field(
        default="https://127.0.0.1:6443", metadata=spec(api_server_host_port)
    )
    tls_server_name: str | None = field(default="kubernetes", metadata=spec(tls_server_name))
    keep_on_unreachable: bool = field(default=True, metadata=spec(flag()))

    @property
    def access(self) -> KubeAccess:
        return KubeAccess(
            self.kubeconfig, self.api_server, self.tls_server_name, "election.lease.kubeconfig"
        )


# -- ipvs.discovery ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IpvsDiscovery:
    """``ipvs.discovery``: more backends from the ``default/kubernetes`` EndpointSlices."""

    enabled: bool = field(default=False, metadata=spec(flag()))
    # seconds between two lists
    interval: float = field(default=10.0, metadata=spec(seconds(1, 3600)))
    # None: admin.conf (super-admin.conf fallback), else in-cluster
    kubeconfig: str | None = field(default=None, metadata=spec(kubeconfig))
    # None: the kubeconfig's server
    api_server: str | None = field(default="https://127.0.0.1:6443", metadata=spec(api_server_url))

    @property
    def access(self) -> KubeAccess:
        # No key of its own for the certificate name: the Lease's default, the name kubeadm
        # always puts in the API server's serving certificate.
        name = Lease().tls_server_name
        return KubeAccess(self.kubeconfig, self.api_server, name, "ipvs.discovery.kubeconfig")
