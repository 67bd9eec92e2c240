"""The thin reader of membership: lists the ``default/kubernetes`` EndpointSlices and the
control-plane Nodes through one of ``membership.api_servers``, with the credentials and the
rules of IPVS discovery (``vipd.kube``: the kubeconfig, the ``super-admin.conf`` fallback,
no retries of its own, the ``kubernetes`` certificate name).

What it is: `Reader.read(source)` tries the API servers in order and returns the JSON of
the first answer and the server that gave it (a node whose own API server is not up yet
reads through another node's or the VIP, and says so); it raises when none answers. It is
called from a worker thread, one call at a time.

What it must not do: interpret the objects (``vipd.membership.policy`` does), retry or
sleep (the follower decides when to read again), or write anything to the API.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from vipd import kube
from vipd.config import Membership
from vipd.membership.policy import CONTROL_PLANE_LABEL, ENDPOINTSLICES, SERVICE_LABEL

# Seconds one request may take; the admission rule's settle time counts one of them.
TIMEOUT = 5.0

# What membership asks of the API (``vipd check``, ``vipd manifest rbac``, the chart).
NEEDS = {
    ENDPOINTSLICES: [
        kube.Need("list", "discovery.k8s.io", "endpointslices", "default"),
        kube.Need("watch", "discovery.k8s.io", "endpointslices", "default"),
    ],
    "nodes": [
        kube.Need("list", "", "nodes", ""),
        kube.Need("watch", "", "nodes", ""),
    ],
}


class ReadError(Exception):
    """No API server answered for a source; the message has each server's error."""


class Reader:
    def __init__(self, m: Membership, log: logging.Logger | None = None) -> None:
        self.m = m
        self.log = log
        self.sessions: dict[str, kube.Session] = {}

    def session(self, server: str) -> kube.Session:
        s = self.sessions.get(server)
        if s is None:
            s = self.sessions[server] = kube.Session.open(self.m.access(server), self.log)
        return s

    def read(self, source: str) -> tuple[str, Any]:
        """(the API server that answered, the list as JSON data); raises `ReadError`."""
        errors: list[str] = []
        for server in self.m.api_servers:
            try:
                return server, self._list(self.session(server), source)
            except Exception as exc:
                errors.append(f"{server}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300])
        raise ReadError("; ".join(errors))

    def _list(self, session: kube.Session, source: str) -> Any:
        from kubernetes import client

        api: Any = session.api_client()
        resp: Any
        try:
            if source == ENDPOINTSLICES:
                resp = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
                    "default",
                    label_selector=SERVICE_LABEL,
                    _preload_content=False,
                    _request_timeout=TIMEOUT,
                )
            else:
                resp = client.CoreV1Api(api).list_node(
                    label_selector=CONTROL_PLANE_LABEL,
                    _preload_content=False,
                    _request_timeout=TIMEOUT,
                )
        except client.ApiException as exc:
            session.fall_back(int(exc.status or 0))
            raise
        return json.loads(resp.data)
