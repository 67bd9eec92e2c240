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

- both pods: ``hostNetwork``, capabilities NET_ADMIN and NET_RAW only (drop ALL; NET_ADMIN
  alone in the routed modes' ECMP pool without BFD, where no raw socket is opened), no
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
- Membership (a ``*_from`` key, ``vipd.membership``): the same kubeconfig or ServiceAccount;
  list and watch of EndpointSlices in default and/or of Nodes (a ClusterRole: Nodes are
  cluster-scoped).
- bgp mode (``announce.mode: bgp``): every ``announce.bgp.peers[].password_file`` mounted
  read-only from the node like the other files the config names; the memory request of the
  API modes (ExaBGP and its relay run in the pod's cgroup); a grace period that also covers
  the drain and ExaBGP's graceful exit. ExaBGP gets no capability and needs no writable
  path but its runtime directory in the pod's ``/tmp``.

Names: every object is named after ``Options.name`` (``--name``, default ``vipd``): the static
pod (and so its mirror pods, ``<name>-<node>``), its file (``/etc/kubernetes/manifests/
<name>.yaml`` unless given), the DaemonSet, the ServiceAccount, the Roles and RoleBindings, and
the ``app.kubernetes.io/instance`` label that the DaemonSet's selector matches. Two vipd
DaemonSets (two clusters' endpoints served from one set of nodes, say) coexist in one
namespace under two names; they also need two VRIDs (or Leases) and two ``metrics.listen``
ports, which are their configs' business. The default stays ``vipd`` so that rendering again
after an upgrade names the objects that are already there.

The parts: ``model`` (the options, the plan from a config, the shared constants), ``pods``
(the static pod, the DaemonSet and its ConfigMap), ``rbac``; here, which objects a kind is
and their YAML text.

What it must not do: read files, the environment or the clock (the caller passes the data;
``tests/unit/test_purity.py`` enforces it), or emit anything the static pod and the
DaemonSet could disagree on.
"""

from __future__ import annotations

from typing import Any

import yaml

from vipd import __version__
from vipd.deploy.manifest.model import (
    ADMIN_CONF,
    CONFIG_DIR,
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    CONTROL_PLANE_LABEL,
    CPU_REQUEST,
    DEFAULT_ADOPT_TIMEOUT,
    DEFAULT_IMAGE,
    DEFAULT_METRICS_LISTEN,
    DEFAULT_NAMESPACE,
    DEFAULT_STATIC_MANIFEST,
    GRACE_MARGIN_S,
    KINDS,
    KUBECONFIG_IN_POD,
    MANIFESTS_DIR,
    MEMORY_LIMIT,
    MEMORY_REQUEST,
    MEMORY_REQUEST_API,
    MIN_GRACE_S,
    NAME,
    SUPER_ADMIN_CONF,
    Kind,
    Lease,
    ManifestError,
    Options,
    Plan,
    grace_period,
    plan,
)
from vipd.deploy.manifest.pods import config_map, daemonset, pod, static_config
from vipd.deploy.manifest.rbac import rbac

__all__ = [
    "ADMIN_CONF",
    "CONFIG_DIR",
    "CONFIG_HASH_ANNOTATION",
    "CONFIG_KEY",
    "CONTROL_PLANE_LABEL",
    "CPU_REQUEST",
    "DEFAULT_ADOPT_TIMEOUT",
    "DEFAULT_IMAGE",
    "DEFAULT_METRICS_LISTEN",
    "DEFAULT_NAMESPACE",
    "DEFAULT_STATIC_MANIFEST",
    "GRACE_MARGIN_S",
    "KINDS",
    "KUBECONFIG_IN_POD",
    "MANIFESTS_DIR",
    "MEMORY_LIMIT",
    "MEMORY_REQUEST",
    "MEMORY_REQUEST_API",
    "MIN_GRACE_S",
    "NAME",
    "SUPER_ADMIN_CONF",
    "Kind",
    "Lease",
    "ManifestError",
    "Options",
    "Plan",
    "config_map",
    "daemonset",
    "grace_period",
    "header",
    "objects",
    "plan",
    "pod",
    "rbac",
    "render",
    "static_config",
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
