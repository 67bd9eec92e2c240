"""The manifests' inputs: the options, the plan derived from a vipd config, the constants
every object shares (names, paths, resources), and the labels.

What it is: the pure part of ``vipd manifest`` that validates a config (with ``vipd.config``)
and reduces it to what the objects need (``plan``), and the stop deadline the pods' grace
period covers. The objects are built in ``pods`` and ``rbac``, the text in the package.

What it must not do: read files, the environment or the clock (the caller passes the data).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

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
# each mode loads 29 MiB for VRRP (33 MiB steady in docs/benchmarks.md), 52 MiB with the
# Kubernetes client (Lease; 59 MiB running against a real API server), 61 MiB with IPVS
# discovery and pyroute2. The request is what the node keeps for it (about 2x the measured
# peak, so a node under memory pressure evicts others first); the limit, 4x the largest,
# only stops a leak before it hurts the control plane: an OOM kill of the leader is a
# failover.
MEMORY_REQUEST = "64Mi"
MEMORY_REQUEST_API = "128Mi"
# bgp mode: ExaBGP and its relay run in the container's cgroup beside vipd (30 MB and 12 MB
# RSS, docs/design/routed.md), so vipd's 29 MiB becomes about 71 MiB: the API request.
MEMORY_REQUEST_BGP = MEMORY_REQUEST_API
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
# bgp mode: how long vipd waits for ExaBGP to close its sessions (vipd.routed.exabgp's
# TEARDOWN_WAIT for the Cease, then GRACE for its exit; a test keeps them equal: this module
# does not import the driver)
SPEAKER_GRACE_S = 6.0
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
    # files the config names on the node (health.ca_file, the auth_hmac key files...)
    host_files: tuple[str, ...] = ()
    discovery: bool = False  # IPVS discovery reads the default/kubernetes EndpointSlices
    # the sources the *_from keys follow (vipd.membership): "endpointslices", "nodes"
    membership: tuple[str, ...] = ()
    metrics_auth: bool = False  # metrics.auth: token (TokenReview, SubjectAccessReview)
    metrics_tls: bool = False  # metrics.cert_file: the endpoint (and so the probes) is HTTPS
    # CAP_NET_RAW: VRRP's raw socket, gratuitous ARP and the Lease's ARP watch (packet
    # sockets), BFD's SO_BINDTODEVICE; not in the routed modes' ECMP pool without BFD, where
    # nothing is elected and only netlink (CAP_NET_ADMIN: the AnyIP binding, table 198) is used
    raw_sockets: bool = True
    speaker: bool = False  # announce.mode: bgp: ExaBGP runs as vipd's child, in the pod

    @property
    def uses_api(self) -> bool:
        """The Kubernetes API is used: the Lease, IPVS discovery, or the endpoint's tokens."""
        return (
            self.lease is not None or self.discovery or self.metrics_auth or bool(self.membership)
        )


# -- from the config -------------------------------------------------------------------------


def _membership_sources(cfg: config.Config) -> tuple[str, ...]:
    """The sources some ``*_from`` key follows, in the order of ``config.MEMBERSHIP_SOURCES``."""
    lists = [cfg.health.peers_from if cfg.health is not None else ()]
    if cfg.election.mode == "vrrp":
        lists.append(cfg.election.vrrp.unicast_peers_from)
    if cfg.ipvs.enabled:
        lists.append(cfg.ipvs.backends_from)
    wanted = {s for sources in lists for s in sources}
    return tuple(s for s in config.MEMBERSHIP_SOURCES if s in wanted)


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
        )
        + _auth_key_files(cfg)
        + _bgp_password_files(cfg),
        discovery=cfg.ipvs.enabled and cfg.ipvs.discovery.enabled,
        membership=_membership_sources(cfg),
        metrics_auth=cfg.metrics.auth == "token",
        metrics_tls=cfg.metrics.cert_file is not None,
        raw_sockets=not cfg.announce.ecmp
        or (cfg.announce.speaker and cfg.announce.bgp.bfd.enabled),
        speaker=cfg.announce.speaker,
    )


def _bgp_password_files(cfg: config.Config) -> tuple[str, ...]:
    """announce.bgp's TCP MD5 password files (bgp mode): read in the pod from the node (root,
    0600) at start and passed to ExaBGP through its private runtime directory."""
    if not cfg.announce.speaker:
        return ()
    return tuple(p.password_file for p in cfg.announce.bgp.peers if p.password_file is not None)


def _auth_key_files(cfg: config.Config) -> tuple[str, ...]:
    """election.vrrp.auth_hmac's key files: read in the pod from the node (root, 0600)."""
    v = cfg.election.vrrp_section
    if cfg.election.mode != "vrrp" or v is None or v.auth_hmac is None:
        return ()
    return tuple(path for _, path in v.auth_hmac.keys)


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
    and then at most one retry period waiting for the next holder. The routed modes: the
    withdrawal (the announcement off, the drain, the binding off: vipd.routed.backend, or
    vipd.routed.leader after the election's own stop with ``pool: leader``), a second for the
    route calls around it and, in bgp mode, the Cease and ExaBGP's exit (`SPEAKER_GRACE_S`).
    Then the stop hooks (``notify.stop`` and ``notify.all``), each bounded by ``notify.timeout``."""
    lease = cfg.election.lease
    election = 0.0
    if cfg.announce.ecmp:
        pass  # nothing elected
    elif cfg.election.mode == "lease" and lease is not None:
        election = float(lease.renew_deadline + lease.retry_period)
    else:
        v = cfg.election.vrrp
        election = float(state.skew_time(v.version, 1, v.advert_interval_cs) + v.advert_interval)
    if cfg.announce.routed:
        election += cfg.announce.drain + 1.0
    if cfg.announce.speaker:
        election += SPEAKER_GRACE_S
    hooks = sum(1 for c in (cfg.notify.stop, cfg.notify.all) if c)
    return election + hooks * cfg.notify.timeout


def grace_period(p: Plan) -> int:
    return max(MIN_GRACE_S, math.ceil(p.stop_deadline_s) + GRACE_MARGIN_S)


def _labels(component: str, opts: Options) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/instance": opts.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/version": __version__,
    }
