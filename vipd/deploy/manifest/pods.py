"""The static pod, the DaemonSet and its ConfigMap, as plain dicts, from one plan.

What it is: the pod specs both ways of running vipd share (container, probes, security
context, volumes, the config as a file) and what differs (the static pod's host kubeconfig,
the DaemonSet's init containers, ServiceAccount, tolerations and update strategy); see the
package docstring for what they guarantee.

What it must not do: read files, the environment or the clock, or emit anything the static
pod and the DaemonSet could disagree on.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import yaml

from vipd.deploy.manifest.model import (
    ADMIN_CONF,
    CONFIG_DIR,
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    CONTROL_PLANE_LABEL,
    CPU_REQUEST,
    KUBECONFIG_IN_POD,
    MANIFESTS_DIR,
    MEMORY_LIMIT,
    MEMORY_REQUEST,
    MEMORY_REQUEST_API,
    MEMORY_REQUEST_BGP,
    NAME,
    SUPER_ADMIN_CONF,
    Options,
    Plan,
    _labels,
    grace_period,
)

# The container runtime's default seccomp filter (Kubernetes does not apply it unless asked):
# vipd needs raw and netlink sockets, ioctls and setuid/setgid for its hooks, all of which it
# allows; it blocks what vipd never calls (kexec, module loading, mount, bpf without
# CAP_BPF, keyctl, ...), so a compromised vipd cannot reach them either.
POD_SECURITY_CONTEXT: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


def _security_context(caps: bool, raw_sockets: bool = True) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    if caps:
        # Netlink (the VIP, or the routed modes' routes) and raw sockets (VRRP, gratuitous
        # ARP, Lease's ARP watch, BFD bound to the uplink): nothing else, and NET_RAW only
        # where one of those runs (`Plan.raw_sockets`). The process runs as root inside the
        # container so that these land in its effective set; every other capability is
        # dropped. bgp mode's ExaBGP child runs with none (vipd.routed.exabgp).
        ctx["capabilities"]["add"] = ["NET_ADMIN", "NET_RAW"] if raw_sockets else ["NET_ADMIN"]
    return ctx


def _probe(p: Plan, path: str, period: int, failures: int) -> dict[str, Any]:
    # HTTPS: the kubelet does not verify the certificate, and sends no credentials (the
    # probes' paths are always open).
    scheme = "HTTPS" if p.metrics_tls else "HTTP"
    get: dict[str, Any] = {"path": path, "port": p.listen_port, "scheme": scheme}
    if p.listen_host not in ("0.0.0.0", "::"):
        # hostNetwork: the kubelet would probe the node's address, which a loopback-only
        # endpoint does not answer.
        get["host"] = p.listen_host
    return {
        "httpGet": get,
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _vipd_container(
    p: Plan, opts: Options, *, in_cluster: bool, declare_port: bool, config_path: str
) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    if in_cluster:
        # The ServiceAccount's client talks to this node's API server, not to the Service
        # IP: it must work before the VIP and any service proxy exist (https://github.com/kube-vip/kube-vip/issues/721).
        env += [
            {
                "name": "KUBERNETES_SERVICE_HOST",
                "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}},
            },
            {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
        ]
    container: dict[str, Any] = {
        "name": NAME,
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["run", "--config", config_path],
        "env": env,
        **(
            {"ports": [{"name": "metrics", "containerPort": p.listen_port, "protocol": "TCP"}]}
            if declare_port
            else {}
        ),
        "livenessProbe": _probe(p, "/healthz", 10, 3),
        "readinessProbe": _probe(p, "/readyz", 2, 1),
        "resources": {
            "requests": {
                "cpu": CPU_REQUEST,
                "memory": _memory_request(p),
            },
            "limits": {"memory": MEMORY_LIMIT},
        },
        "securityContext": _security_context(caps=True, raw_sockets=p.raw_sockets),
    }
    # The root filesystem is read-only; the Kubernetes client writes a kubeconfig's embedded
    # certificates to temporary files, so /tmp is a small memory-backed volume.
    mounts: list[dict[str, Any]] = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
    ]
    mounts += [
        {"name": f"host-file-{i}", "mountPath": path, "readOnly": True}
        for i, path in enumerate(p.host_files)
    ]
    if p.uses_api and not in_cluster:
        mounts.append({"name": "kubeconfig", "mountPath": KUBECONFIG_IN_POD, "readOnly": True})
    container["volumeMounts"] = mounts
    return container


def _memory_request(p: Plan) -> str:
    if p.uses_api:
        return MEMORY_REQUEST_API
    return MEMORY_REQUEST_BGP if p.speaker else MEMORY_REQUEST


TMP_VOLUME: dict[str, Any] = {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}


def _host_file_volumes(p: Plan) -> list[dict[str, Any]]:
    return [TMP_VOLUME] + [
        {"name": f"host-file-{i}", "hostPath": {"path": path, "type": "File"}}
        for i, path in enumerate(p.host_files)
    ]


def _pod_config_for_static(p: Plan) -> Plan:
    """The static pod reads the Lease, and IPVS discovery the EndpointSlices, through the
    kubeconfig mounted from the host."""
    text = p.config_text
    if p.lease is not None:
        text = _with_kubeconfig(text, KUBECONFIG_IN_POD)
    if p.discovery:
        text = _with_discovery_kubeconfig(text, KUBECONFIG_IN_POD)
    if p.membership:
        text = _with_membership_kubeconfig(text, KUBECONFIG_IN_POD)
    return _replace_text(p, text)


def _with_membership_kubeconfig(text: str, path: str | None) -> str:
    data = yaml.safe_load(text)
    section = dict(data.get("membership") or {})
    if path is None:
        section.pop("kubeconfig", None)
    else:
        section["kubeconfig"] = path
    if section:
        data["membership"] = section
    else:
        data.pop("membership", None)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _with_discovery_kubeconfig(text: str, path: str | None) -> str:
    data = yaml.safe_load(text)
    ipvs = dict(data["ipvs"])
    disc = dict(ipvs.get("discovery") or {})
    if path is None:
        disc.pop("kubeconfig", None)
    else:
        disc["kubeconfig"] = path
    data["ipvs"] = {**ipvs, "discovery": disc}
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _pod_config_for_daemonset(p: Plan) -> Plan:
    """The DaemonSet uses its ServiceAccount: no kubeconfig in its config (nor in IPVS
    discovery's, which then finds no admin.conf in the container and uses the token)."""
    text = p.config_text
    if p.lease is not None:
        text = _with_kubeconfig(text, None)
    if p.discovery:
        text = _with_discovery_kubeconfig(text, None)
    if p.membership:
        text = _with_membership_kubeconfig(text, None)
    return _replace_text(p, text)


def _with_kubeconfig(text: str, path: str | None) -> str:
    data = yaml.safe_load(text)
    lease = dict(data["election"].get("lease") or {})
    if path is None:
        lease.pop("kubeconfig", None)
    else:
        lease["kubeconfig"] = path
    data["election"] = {**data["election"], "lease": lease}
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _replace_text(p: Plan, text: str) -> Plan:
    return dataclasses.replace(p, config_text=text)


def pod(p: Plan, opts: Options) -> dict[str, Any]:
    """The static pod, for ``/etc/kubernetes/manifests/vipd.yaml`` on each control-plane node."""
    sp = _pod_config_for_static(p)
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "securityContext": POD_SECURITY_CONTEXT,
        "priorityClassName": "system-node-critical",
        "terminationGracePeriodSeconds": grace_period(p),
        "automountServiceAccountToken": False,
        # No ``ports`` on the static pod: with hostNetwork a declared containerPort is a
        # hostPort, and kube-scheduler (NodePorts filter) counts the mirror pod's ports, so
        # the DaemonSet pod, which declares the same port, could never be scheduled onto a
        # node whose static pod is still there, and removing that static pod is its own
        # adopt init container's job. The probes name the port by number.
        "containers": [
            _vipd_container(
                sp,
                opts,
                in_cluster=False,
                declare_port=False,
                config_path=opts.static_config_path,
            )
        ],
    }
    # The node's /etc/vipd, not the one file: an editor that replaces the file (a new inode)
    # would leave a single-file bind mount on the old one.
    config_volume = {"name": "config", "hostPath": {"path": CONFIG_DIR, "type": "Directory"}}
    volumes = [*_host_file_volumes(p), config_volume]
    spec["volumes"] = volumes
    if p.uses_api:
        spec["volumes"] = [
            *volumes,
            {
                "name": "kubeconfig",
                "hostPath": {
                    "path": SUPER_ADMIN_CONF if opts.super_admin else ADMIN_CONF,
                    "type": "File",
                },
            },
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": opts.name,
            "namespace": opts.namespace,
            "labels": _labels("static", opts),
        },
        "spec": spec,
    }


def daemonset(p: Plan, opts: Options) -> dict[str, Any]:
    dp = _pod_config_for_daemonset(p)
    labels = _labels("daemonset", opts)
    # The instance label keeps two vipd DaemonSets' selectors apart (see the docstring).
    keys = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
    selector = {k: labels[k] for k in keys}
    manifests_mount = {"name": "manifests", "mountPath": MANIFESTS_DIR}
    adopt = {
        "name": "adopt",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "adopt",
            "--manifest",
            opts.manifest_path,
            "--listen",
            f"{_host_for_url(p.listen_host)}:{p.listen_port}",
            "--timeout",
            f"{opts.adopt_timeout:g}",
        ],
        "volumeMounts": [manifests_mount],
        "securityContext": _security_context(caps=False),
    }
    pull = {
        "name": "pull",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["version"],
        "securityContext": _security_context(caps=False),
    }
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "securityContext": POD_SECURITY_CONTEXT,
        "priorityClassName": "system-node-critical",
        "terminationGracePeriodSeconds": grace_period(p),
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": _node_match(opts)}]
                }
            }
        },
        # A NotReady or pressured control-plane node is when the VIP has to move.
        "tolerations": [{"operator": "Exists"}],
        "initContainers": [pull, adopt],
        "containers": [
            _vipd_container(
                dp,
                opts,
                in_cluster=p.uses_api,
                declare_port=True,
                config_path=f"{CONFIG_DIR}/{CONFIG_KEY}",
            )
        ],
        "volumes": [
            {"name": "manifests", "hostPath": {"path": MANIFESTS_DIR, "type": "Directory"}},
            *_host_file_volumes(p),
            # The directory, not a subPath: the kubelet updates it when the ConfigMap changes.
            {"name": "config", "configMap": {"name": opts.name}},
        ],
    }
    if p.uses_api:
        spec["serviceAccountName"] = opts.name
    else:
        spec["automountServiceAccountToken"] = False
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": opts.name, "namespace": opts.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "template": {
                # A new config is a new pod template: the DaemonSet rolls it out node by node,
                # as it did when the config was an environment variable.
                "metadata": {
                    "labels": labels,
                    "annotations": {CONFIG_HASH_ANNOTATION: config_hash(dp.config_text)},
                },
                "spec": spec,
            },
        },
    }


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def config_map(p: Plan, opts: Options) -> dict[str, Any]:
    """The DaemonSet's config, mounted as the file /etc/vipd/vipd.yaml."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": opts.name,
            "namespace": opts.namespace,
            "labels": _labels("daemonset", opts),
        },
        "data": {CONFIG_KEY: _pod_config_for_daemonset(p).config_text},
    }


def static_config(p: Plan) -> str:
    """The static pod's config file (`Options.static_config_path` on every node)."""
    return _pod_config_for_static(p).config_text


def _node_match(opts: Options) -> list[dict[str, str]]:
    exprs = [{"key": CONTROL_PLANE_LABEL, "operator": "Exists"}]
    if opts.node_label:
        exprs.append({"key": opts.node_label, "operator": "Exists"})
    return exprs


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host
