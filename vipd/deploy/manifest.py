"""Kubernetes manifests for vipd, rendered from one config: static pod, DaemonSet, RBAC.

What it is: pure functions from a vipd config (the YAML mapping a user wrote, validated here
with ``vipd.config``) to Kubernetes objects as plain dicts, and to YAML text. The static pod
that bootstraps the VIP before ``kubeadm init`` and the DaemonSet that takes over later are
rendered from the *same* config, so they cannot drift apart (two hand-written manifests for
one VIP, the usual static-pod-then-DaemonSet procedure, have to be kept in step by hand).
The config is a file in both pods, never an environment variable (every child process and
every dump of a pod's environment would carry it): the DaemonSet's is a ConfigMap rendered
with it (``vipd manifest daemonset``), the static pod's a file on each node, since a static
pod cannot use a ConfigMap (``vipd manifest config``: ``/etc/vipd/<name>.yaml``, the node's
``/etc/vipd`` mounted read-only). Both leave out the ``node`` key: every pod takes its
identity from ``spec.nodeName`` through the downward API (``NODE_NAME``).

What the objects guarantee (asserted in tests/unit/test_manifest.py):

- both pods: ``hostNetwork``, capabilities NET_ADMIN and NET_RAW only (drop ALL), no
  privilege escalation, a read-only root filesystem, the runtime's default seccomp profile,
  a memory request and limit (no CPU limit), priority class system-node-critical,
  liveness on ``/healthz`` and readiness on ``/readyz`` of vipd's own endpoint (the
  metrics port is declared on the DaemonSet's pod only: kube-scheduler counts a mirror pod's
  host ports, so a static pod declaring it would keep the DaemonSet pod off its node), and
  a termination grace period longer than vipd's stop deadline (the make-before-break wait,
  at most Skew_Time(priority 1) + one advert interval);
- DaemonSet: a ``pull`` init container (the same image, so it is on the node before the
  static pod goes away), an ``adopt`` init container (``vipd adopt``: delete the static
  manifest, wait until the static instance released the metrics port), the manifests
  directory mounted as a directory (a single-file hostPath is a bind mount and cannot be
  removed), every taint tolerated, control-plane nodes only, ``maxUnavailable: 1`` and no
  surge (an old and a new pod on one node would fight over the port and the election);
- Lease mode: the static pod reads a kubeconfig by hostPath (``admin.conf``, or
  ``super-admin.conf`` on the node that runs ``kubeadm init`` on Kubernetes >= 1.29, where
  admin.conf only works once init has finished), the DaemonSet a ServiceAccount that may get
  and update only its own Lease (``resourceNames``) and create Leases (``create`` cannot be
  narrowed by name in RBAC); it talks to its own node's API server (KUBERNETES_SERVICE_HOST
  is the host IP), so it does not need the VIP or a service proxy to start.
- IPVS discovery (either mode) lists the default/kubernetes EndpointSlices: the static pod
  mounts the same kubeconfig, the DaemonSet's ServiceAccount may list and watch
  EndpointSlices in default. VRRP mode without discovery needs no API access: no RBAC, no
  token, no kubeconfig.

Names: every object is named after ``Options.name`` (``--name``, default ``vipd``): the static
pod (and so its mirror pods, ``<name>-<node>``), its file (``/etc/kubernetes/manifests/
<name>.yaml`` unless given), the DaemonSet, the ServiceAccount, the Roles and RoleBindings, and
the ``app.kubernetes.io/instance`` label that the DaemonSet's selector matches. Two vipd
DaemonSets (two clusters' endpoints served from one set of nodes, say) coexist in one
namespace under two names; they also need two VRIDs (or Leases) and two ``metrics.listen``
ports, which are their configs' business. The default stays ``vipd`` so that rendering again
after an upgrade names the objects that are already there.

What it must not do: read files, the environment or the clock (the caller passes the data;
``tests/unit/test_purity.py`` enforces it), or emit anything the static pod and the
DaemonSet could disagree on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from vipd import __version__, config
from vipd.vrrp import state

Kind = Literal["pod", "config", "daemonset", "rbac"]
KINDS: tuple[Kind, ...] = ("pod", "config", "daemonset", "rbac")

DEFAULT_IMAGE = f"localhost/vipd:{__version__}"
DEFAULT_NAMESPACE = "kube-system"
MANIFESTS_DIR = "/etc/kubernetes/manifests"
DEFAULT_STATIC_MANIFEST = f"{MANIFESTS_DIR}/vipd.yaml"
DEFAULT_ADOPT_TIMEOUT = 120.0
KUBECONFIG_IN_POD = "/etc/kubernetes/admin.conf"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
SUPER_ADMIN_CONF = "/etc/kubernetes/super-admin.conf"
DEFAULT_METRICS_LISTEN = "0.0.0.0:2112"
# The CPU request sets the container's CPU weight when the node is saturated (cgroup v1
# cpu.shares = millicores * 1024 / 1000), not just what the scheduler reserves. At 10m (weight 10
# beside kube-apiserver's 256) a 20 ms burst on a saturated node stretched to ~200 ms, most of a
# 0.1 s advert's Master_Down_Interval; at 100m (etcd's and kube-scheduler's request) a 0.1 s tick
# stayed within 3 ms of its time (bench/cpu_weight.py).
CPU_REQUEST = "100m"
# No CPU limit: CFS throttling would hold a due advert until the next period (100 ms), longer
# than a 0.1 s advert interval. Memory (docs/operations.md#security): peak RSS of the imports
# each mode loads 29 MiB for VRRP (28-42 MiB steady in docs/benchmarks.md), 52 MiB with the
# Kubernetes client (Lease; 59 MiB running against a real API server), 61 MiB with IPVS
# discovery and pyroute2. The request is what the node keeps for it (about 2x the measured
# peak, so a node under memory pressure evicts others first); the limit, 4x the largest,
# only stops a leak before it hurts the control plane: an OOM kill of the leader is a
# failover.
MEMORY_REQUEST = "64Mi"
MEMORY_REQUEST_API = "128Mi"
MEMORY_LIMIT = "256Mi"
# The config as a file, never in the environment (which every child process and every dump
# of the pod's environment would carry): the DaemonSet's from a ConfigMap, the static pod's
# from the node (a static pod cannot use a ConfigMap), written there from `vipd manifest config`.
CONFIG_DIR = "/etc/vipd"
CONFIG_KEY = "vipd.yaml"
CONFIG_HASH_ANNOTATION = "vipd.io/config-sha256"
NAME = "vipd"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# Added to vipd's own stop deadline for the grace period: Python's exit, the kubelet's
# bookkeeping. Kubernetes' default grace period (30 s) is the floor.
GRACE_MARGIN_S = 10
MIN_GRACE_S = 30


class ManifestError(ValueError):
    """A config or option the manifests cannot be rendered from; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class Options:
    image: str = DEFAULT_IMAGE
    namespace: str = DEFAULT_NAMESPACE  # where the pods and the ServiceAccount live
    # The static pod's file on each node; None: /etc/kubernetes/manifests/<name>.yaml.
    static_manifest: str | None = None
    adopt_timeout: float = DEFAULT_ADOPT_TIMEOUT
    super_admin: bool = False  # static pod on the `kubeadm init` node, Kubernetes >= 1.29
    # DaemonSet only on nodes that also carry this label: the first apply then replaces the
    # static pods one node at a time, as the nodes are labelled (leader last).
    node_label: str | None = None
    # The name of every object and the app.kubernetes.io/instance label (see the docstring).
    name: str = NAME

    def __post_init__(self) -> None:
        # A DNS-1123 label: a pod, a ServiceAccount and a label value all accept it, and the
        # mirror pod's name (<name>-<node>) still fits in 253 characters.
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", self.name):
            raise ManifestError(
                f"--name must be a DNS-1123 label: lower-case letters, digits and '-', at "
                f"most 63, starting and ending with a letter or digit (got {self.name!r})"
            )

    @property
    def manifest_path(self) -> str:
        """The static pod's file on each node."""
        return self.static_manifest or f"{MANIFESTS_DIR}/{self.name}.yaml"

    @property
    def static_config_path(self) -> str:
        """The static pod's config on each node (`vipd manifest config`), the same path in
        the pod (the node's /etc/vipd mounted read-only)."""
        return f"{CONFIG_DIR}/{self.name}.yaml"


@dataclass(frozen=True, slots=True)
class Lease:
    """The Lease the pods share; names as under ``election.lease`` in the config."""

    name: str
    namespace: str
    kubeconfig: str | None


@dataclass(frozen=True, slots=True)
class Plan:
    """What the manifests are made of, derived once from the config."""

    config_text: str  # the YAML in $VIPD_CONFIG (the user's config without `node`)
    mode: Literal["vrrp", "lease"]
    lease: Lease | None
    listen_host: str
    listen_port: int
    stop_deadline_s: float
    dropped_node: str | None  # `node` from the file, which the manifests must not carry
    host_files: tuple[str, ...] = ()  # files the config names on the node (health.ca_file)
    discovery: bool = False  # IPVS discovery reads the default/kubernetes EndpointSlices
    metrics_auth: bool = False  # metrics.auth: token (TokenReview, SubjectAccessReview)
    metrics_tls: bool = False  # metrics.cert_file: the endpoint (and so the probes) is HTTPS

    @property
    def uses_api(self) -> bool:
        """The Kubernetes API is used: the Lease, IPVS discovery, or the endpoint's tokens."""
        return self.lease is not None or self.discovery or self.metrics_auth


# -- from the config -------------------------------------------------------------------------


def plan(data: object) -> Plan:
    """Validate the config data (as read from YAML) and derive what the manifests need.

    Raises `config.ConfigError` for an invalid config, `ManifestError` for one that cannot
    run in a pod.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise config.ConfigError("", "must be a mapping of keys to values")
    raw = dict(data)
    dropped = raw.pop("node", None)
    # Validated as vipd will see it, with a stand-in identity (a pod's comes from NODE_NAME).
    cfg = config.parse(raw, env={"NODE_NAME": "node-from-downward-api"}, hostname=None)
    lease = None
    if cfg.election.mode == "lease" and cfg.election.lease is not None:
        lc = cfg.election.lease
        lease = Lease(lc.name, lc.namespace, lc.kubeconfig)
    host, port = _split_listen(cfg.metrics.listen)
    return Plan(
        config_text=yaml.safe_dump(raw, sort_keys=False, default_flow_style=False),
        mode="lease" if lease is not None else "vrrp",
        lease=lease,
        listen_host=host,
        listen_port=port,
        stop_deadline_s=_stop_deadline(cfg),
        dropped_node=str(dropped) if dropped is not None else None,
        host_files=((cfg.health.ca_file,) if cfg.health and cfg.health.ca_file else ())
        + tuple(
            f
            for f in (cfg.metrics.cert_file, cfg.metrics.key_file, cfg.metrics.client_ca_file)
            if f is not None
        ),
        discovery=cfg.ipvs.enabled and cfg.ipvs.discovery.enabled,
        metrics_auth=cfg.metrics.auth == "token",
        metrics_tls=cfg.metrics.cert_file is not None,
    )


def _split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ManifestError(f"metrics.listen: must be HOST:PORT (got {listen!r})") from None
    return host.strip("[]") or "0.0.0.0", number


def _stop_deadline(cfg: config.Config) -> float:
    """vipd's longest graceful stop. VRRP: the make-before-break wait of the VRRP backend
    (``vipd.vrrp.driver``). Lease: the release (one request, bounded by the renew deadline)
    and then at most one retry period waiting for the next holder. Then the stop hooks
    (``notify.stop`` and ``notify.all``), each bounded by ``notify.timeout``."""
    lease = cfg.election.lease
    if cfg.announce.mode == "routing-table":
        # The withdrawal: the route off, the drain, the binding off (vipd.routed.backend),
        # and a second for the route calls around it.
        election = cfg.announce.drain + 1.0
    elif cfg.election.mode == "lease" and lease is not None:
        election = float(lease.renew_deadline + lease.retry_period)
    else:
        v = cfg.election.vrrp
        election = float(state.skew_time(v.version, 1, v.advert_interval_cs) + v.advert_interval)
    hooks = sum(1 for c in (cfg.notify.stop, cfg.notify.all) if c)
    return election + hooks * cfg.notify.timeout


def grace_period(p: Plan) -> int:
    return max(MIN_GRACE_S, math.ceil(p.stop_deadline_s) + GRACE_MARGIN_S)


# -- the objects -----------------------------------------------------------------------------


def _labels(component: str, opts: Options) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/instance": opts.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/version": __version__,
    }


# The container runtime's default seccomp filter (Kubernetes does not apply it unless asked):
# vipd needs raw and netlink sockets, ioctls and setuid/setgid for its hooks, all of which it
# allows; it blocks what vipd never calls (kexec, module loading, mount, bpf without
# CAP_BPF, keyctl, ...), so a compromised vipd cannot reach them either.
POD_SECURITY_CONTEXT: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


def _security_context(caps: bool) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    if caps:
        # Raw sockets (VRRP, gratuitous ARP) and netlink (the VIP): nothing else. The
        # process runs as root inside the container so that these two land in its
        # effective set; every other capability is dropped.
        ctx["capabilities"]["add"] = ["NET_ADMIN", "NET_RAW"]
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
                "memory": MEMORY_REQUEST_API if p.uses_api else MEMORY_REQUEST,
            },
            "limits": {"memory": MEMORY_LIMIT},
        },
        "securityContext": _security_context(caps=True),
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
    return _replace_text(p, text)


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
    if p.discovery:
        rules.setdefault("default", []).append(
            {
                # IPVS discovery lists the default/kubernetes EndpointSlices (selected by
                # label, so not narrowable by name) and may watch them.
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            }
        )
    for ns, ns_rules in rules.items():
        out += _role_and_binding(ns, ns_rules, opts, labels)
    if p.metrics_auth:
        out += _metrics_auth_role(opts, labels)
    return out


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


def objects(kind: Kind, p: Plan, opts: Options) -> list[dict[str, Any]]:
    if opts.super_admin and (kind != "pod" or not p.uses_api):
        raise ManifestError(
            "--super-admin: only for the static pod in Lease mode or with IPVS discovery (it "
            "chooses the kubeconfig the pod mounts; VRRP mode without discovery reads none)"
        )
    if kind == "pod":
        return [pod(p, opts)]
    if kind == "daemonset":
        return [config_map(p, opts), daemonset(p, opts)]
    if kind == "config":
        raise ManifestError("config: a file, not an object (render it)")
    return rbac(p, opts)


# -- text ------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block style, multi-line strings (the embedded config) as literal blocks, no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def header(kind: Kind, p: Plan, opts: Options, source: str) -> str:
    lines = [
        f"# vipd {__version__}: {kind} rendered by `vipd manifest {kind}` from {source}.",
        "# Do not edit: change the config and render again, so the static pod, the DaemonSet",
        "# and the RBAC stay in step.",
    ]
    if kind == "config":
        lines = [
            f"# vipd {__version__}: the static pod's config, rendered by `vipd manifest config` "
            f"from {source}.",
            f"# Install as {opts.static_config_path} (0644, root's) on every control-plane node,",
            f"# beside {opts.manifest_path} (`vipd manifest pod`): the pod reads it from there.",
        ]
    if kind == "pod":
        lines.append(f"# Install as {opts.manifest_path} on every control-plane node.")
        lines.append(f"# Its config: {opts.static_config_path} (`vipd manifest config`).")
        if p.uses_api:
            conf = SUPER_ADMIN_CONF if opts.super_admin else ADMIN_CONF
            lines.append(f"# kubeconfig from the host: {conf}.")
            if opts.super_admin:
                lines += [
                    "# For the node that runs `kubeadm init` (Kubernetes >= 1.29). Once init has",
                    "# finished, switch back to admin.conf:",
                    f"#   sed -i 's#{SUPER_ADMIN_CONF}#{ADMIN_CONF}#' {opts.manifest_path}",
                ]
    if kind == "rbac" and not p.uses_api:
        lines.append(
            "# election.mode is vrrp and IPVS discovery is off: vipd uses no Kubernetes API, "
            "so there is nothing to apply."
        )
    return "\n".join(lines) + "\n"


def render(kind: Kind, p: Plan, opts: Options, source: str) -> str:
    """The manifest as YAML text: a header comment, then one document per object (the
    static pod's config: the header, then the file)."""
    if kind == "config":
        if opts.super_admin:
            raise ManifestError("--super-admin: only for the static pod (`vipd manifest pod`)")
        return header(kind, p, opts, source) + static_config(p)
    docs = objects(kind, p, opts)
    body = "".join(
        "---\n" + yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
        for obj in docs
    )
    return header(kind, p, opts, source) + body
