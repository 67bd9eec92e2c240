"""IPVS backends discovered from Kubernetes: the addresses in the EndpointSlices of the
``default/kubernetes`` Service, which the API servers themselves keep current (each live API
server is listed under its advertise address; kubeadm's lease-based endpoint reconciler drops
one that stops renewing).

What it is
    `backends_from_slices` (pure) reads a ``discovery.k8s.io/v1`` EndpointSliceList (as JSON
    data) and returns the ready addresses of the VIP's family. `merge` combines them with the
    static ``ipvs.backends`` (static first, in order; discovered ones after, sorted).
    `EndpointSliceSource` (shell) lists the slices with the ``kubernetes`` client, using the
    same credentials as the Lease backend (``vipd.lease.driver.candidates``: a kubeconfig,
    admin.conf, or in-cluster), against the local API server; it is called from a worker
    thread.

What it must not do: invent backends (an empty or failed answer keeps the last list: while
the API is down there is nothing better to know), or reach anything but the API server.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

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

    def __init__(self, kubeconfig: str | None, api_server: str | None, family: int) -> None:
        from vipd.config import Lease
        from vipd.lease.driver import candidates

        self.family = family
        self.lease = Lease(kubeconfig=kubeconfig, api_server=api_server)
        self.creds = candidates(self.lease, dict(os.environ), os.path.exists)
        self._api: Any = None

    def fetch(self) -> tuple[IPAddress, ...]:
        if self._api is None:
            from kubernetes import client

            from vipd.lease.driver import _configuration

            conf = _configuration(self.lease, self.creds[0])
            self._api = client.DiscoveryV1Api(client.ApiClient(conf))
        resp = self._api.list_namespaced_endpoint_slice(
            "default", label_selector=SERVICE_LABEL, _preload_content=False, _request_timeout=5
        )
        return backends_from_slices(json.loads(resp.data), self.family)
