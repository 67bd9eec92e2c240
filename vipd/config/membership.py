"""The config of membership that follows the control plane: the ``membership`` section (how
and how often the sets are read) and the rule of the three ``*_from`` keys
(``election.vrrp.unicast_peers_from``, ``health.peers_from``, ``ipvs.backends_from``),
which name the sources a peer list follows (``vipd.membership``).

What it must not do: talk to the API server or do any I/O (`vipd.membership.reader` does,
through `vipd.kube` and the `KubeAccess` built here).

Where the rules come from: the sources are the two objects a control plane keeps about its
own members: the ``default/kubernetes`` EndpointSlices (the API servers' lease-based
endpoint reconciler, kubernetes/kubernetes ``pkg/controlplane/reconcilers``) and the Nodes
labelled ``node-role.kubernetes.io/control-plane`` (kubeadm's ``mark-control-plane``
phase), whose ``InternalIP`` is the address the kubelet reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vipd.config.kubeapi import HOST_PORT_URL, KubeAccess, kubeconfig
from vipd.config.schema import Check, seconds, spec

__all__ = ["SOURCES", "Membership", "members_from"]

# The membership sources, by the name a ``*_from`` key lists them under.
SOURCES = ("endpointslices", "nodes")
# kubeadm always puts this name in the API server's serving certificate, whichever address
# (its own, another node's, the VIP) the request goes to.
TLS_SERVER_NAME = "kubernetes"
DEFAULT_API_SERVERS = ("https://127.0.0.1:6443",)


def members_from(c: Check, key: str, value: object, _: Mapping[str, Any]) -> tuple[str, ...]:
    """A list of distinct sources out of `SOURCES`; null or [] follows nothing."""
    if value is None:
        return ()
    rule = (
        "must be a list of membership sources, each once: "
        + ", ".join(f'"{s}"' for s in SOURCES)
        + " (or [] for the static list only)"
    )
    if not isinstance(value, list):
        c.fail(key, rule, value)
    for i, item in enumerate(value):
        if item not in SOURCES or not isinstance(item, str) or value.index(item) != i:
            c.fail(f"{key}[{i}]", rule, item)
    return tuple(value)


def _api_servers(c: Check, key: str, value: object, _: Mapping[str, Any]) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_API_SERVERS
    rule = (
        "must be a list of 1 to 8 https://HOST[:PORT] URLs, tried in order (this node's own "
        "API server first; another node's or the VIP for a node whose own is not up yet)"
    )
    if not isinstance(value, list) or not 1 <= len(value) <= 8:
        c.fail(key, rule, value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not HOST_PORT_URL.fullmatch(item):
            c.fail(f"{key}[{i}]", rule, item)
        out.append(item.rstrip("/"))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Membership:
    """``membership``: how the ``*_from`` lists are read (used only when one is set)."""

    # seconds between two reads
    interval: float = field(default=10.0, metadata=spec(seconds(1, 3600)))
    # None: admin.conf (super-admin.conf fallback), else in-cluster
    kubeconfig: str | None = field(default=None, metadata=spec(kubeconfig))
    # tried in order until one answers
    api_servers: tuple[str, ...] = field(default=DEFAULT_API_SERVERS, metadata=spec(_api_servers))

    def access(self, api_server: str) -> KubeAccess:
        """The access to one of ``api_servers``: the credentials of the key ``kubeconfig``."""
        return KubeAccess(self.kubeconfig, api_server, TLS_SERVER_NAME, "membership.kubeconfig")
