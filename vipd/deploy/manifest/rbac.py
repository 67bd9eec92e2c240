"""The DaemonSet's ServiceAccount, Roles and RoleBindings: its own Lease, the
EndpointSlices of IPVS discovery and membership, the control-plane Nodes of membership
(``vipd.membership``), the endpoint's token reviews; nothing when vipd uses no
Kubernetes API.

What it must not do: grant more than the agent uses (a Lease by name wherever RBAC can
narrow it), read files, the environment or the clock.
"""

from __future__ import annotations

from typing import Any

from vipd.deploy.manifest.model import (
    Lease,
    Options,
    Plan,
    _labels,
)


def rbac(p: Plan, opts: Options) -> list[dict[str, Any]]:
    """ServiceAccount, Roles and RoleBindings for Lease mode and IPVS discovery; nothing
    when neither uses the API."""
    if not p.uses_api:
        return []
    labels = _labels("daemonset", opts)
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": opts.name, "namespace": opts.namespace, "labels": labels},
        }
    ]
    # One Role per namespace (the Lease's, and default for the EndpointSlices; the same one
    # when the Lease lives in default).
    rules: dict[str, list[dict[str, Any]]] = {}
    if p.lease is not None:
        rules.setdefault(p.lease.namespace, []).extend(_lease_rules(p.lease))
    if p.discovery or "endpointslices" in p.membership:
        rules.setdefault("default", []).append(
            {
                # IPVS discovery and membership list the default/kubernetes EndpointSlices
                # (selected by label, so not narrowable by name) and may watch them.
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            }
        )
    for ns, ns_rules in rules.items():
        out += _role_and_binding(ns, ns_rules, opts, labels)
    if "nodes" in p.membership:
        out += _nodes_role(opts, labels)
    if p.metrics_auth:
        out += _metrics_auth_role(opts, labels)
    return out


def _nodes_role(opts: Options, labels: dict[str, str]) -> list[dict[str, Any]]:
    """Membership from the control-plane Nodes: list and watch nodes (cluster-scoped, and
    selected by label, so neither a namespace nor a name narrows it)."""
    name = f"{opts.name}-nodes"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": opts.name, "namespace": opts.namespace}
            ],
        },
    ]


def _metrics_auth_role(opts: Options, labels: dict[str, str]) -> list[dict[str, Any]]:
    """metrics.auth: token asks the API server who a scraper's token is and whether it may get
    the path: the rules of Kubernetes' system:auth-delegator ClusterRole, cluster-scoped."""
    name = f"{opts.name}-metrics-auth"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": [
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["tokenreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["subjectaccessreviews"],
                    "verbs": ["create"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": opts.name, "namespace": opts.namespace}
            ],
        },
    ]


def _role_and_binding(
    ns: str, rules: list[dict[str, Any]], opts: Options, labels: dict[str, str]
) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": opts.name, "namespace": ns, "labels": labels},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": opts.name, "namespace": ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": opts.name},
            "subjects": [
                {"kind": "ServiceAccount", "name": opts.name, "namespace": opts.namespace}
            ],
        },
    ]


def _lease_rules(lease: Lease) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease.name],
            # list and watch (with a metadata.name field selector, which RBAC requires for a
            # rule narrowed by name): the holder learns of a write it did not make at once.
            "verbs": ["get", "update", "list", "watch"],
        },
        {
            # The first holder creates the Lease; RBAC cannot narrow create by name.
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create"],
        },
    ]
