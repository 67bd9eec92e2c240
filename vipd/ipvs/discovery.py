"""IPVS backends discovered from Kubernetes: the addresses in the EndpointSlices of the
``default/kubernetes`` Service, which the API servers themselves keep current (each live API
server is listed under its advertise address; kubeadm's lease-based endpoint reconciler drops
one that stops renewing).

What it is
    `backends_from_slices` (pure) reads a ``discovery.k8s.io/v1`` EndpointSliceList (as JSON
    data) and returns the ready addresses of the VIP's family. `merge` combines them with the
    static ``ipvs.backends`` (static first, in order; discovered ones after, sorted).
    `EndpointSliceSource` (shell) lists the slices with the ``kubernetes`` client, reaching
    the local API server the way the Lease backend does (``vipd.kube``: a kubeconfig,
    admin.conf with the super-admin.conf fallback, or in-cluster); it is called from a worker
    thread.

What it must not do: invent backends (an empty or failed answer keeps the last list: while
the API is down there is nothing better to know), or reach anything but the API server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import TYPE_CHECKING, Any

from vipd import kube

if TYPE_CHECKING:
    from vipd.config import IpvsDiscovery

IPAddress = IPv4Address | IPv6Address
SERVICE_LABEL = "kubernetes.io/service-name=kubernetes"


def backends_from_slices(data: Mapping[str, Any], family: int) -> tuple[IPAddress, ...]:
    """Ready endpoint addresses of IP ``family`` (4 or 6) in an EndpointSliceList, sorted."""
    want = "IPv4" if family == 4 else "IPv6"
    found: set[IPAddress] = set()
    for item in data.get("items") or []:
        if not isinstance(item, Mapping) or item.get("addressType") != want:
            continue
        for ep in item.get("endpoints") or []:
            if not isinstance(ep, Mapping):
                continue
            cond = ep.get("conditions") or {}
            if cond.get("ready") is False:  # absent means ready (the API's rule)
                continue
            for text in ep.get("addresses") or []:
                try:
                    ip = ip_address(str(text))
                except ValueError:
                    continue
                if ip.version == family:
                    found.add(ip)
    return tuple(sorted(found))


def merge(static: Sequence[IPAddress], discovered: Iterable[IPAddress]) -> tuple[IPAddress, ...]:
    extra = sorted(set(discovered) - set(static))
    return (*static, *extra)


class EndpointSliceSource:
    """Lists ``default/kubernetes`` EndpointSlices with the ``kubernetes`` client (blocking)."""

    def __init__(self, discovery: IpvsDiscovery, family: int) -> None:
        self.family = family
        self.session = kube.Session.open(kube.Access.from_discovery(discovery))
        self._api: Any = None

    def fetch(self) -> tuple[IPAddress, ...]:
        """The ready addresses now; raises on any failure (the caller keeps its list). A
        401/403 switches to the next credentials (``vipd.kube``) for the next call."""
        from kubernetes import client

        if self._api is None:
            self._api = client.DiscoveryV1Api(self.session.api_client())
        try:
            resp = self._api.list_namespaced_endpoint_slice(
                "default", label_selector=SERVICE_LABEL, _preload_content=False, _request_timeout=5
            )
        except client.ApiException as exc:
            if self.session.fall_back(int(exc.status or 0)):
                self._api = None
            raise
        return backends_from_slices(json.loads(resp.data), self.family)
