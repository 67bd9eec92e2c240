"""The Helm chart (charts/vipd) against `vipd manifest`: one config, the same objects.

For each config below, ``helm template`` with values equal to the config (plus the image,
namespace and handover options) and ``vipd manifest daemonset`` + ``vipd manifest rbac`` with
the matching options render YAML streams that are parsed and compared object by object. The
configs in the ConfigMap are compared as vipd reads them (`vipd.config.parse`: the same
effective config, whatever the key order or the defaults left out), and so the DaemonSet's
config hash annotation is only required on both; everything else must be equal as data. Both
sets pass the strict ``kubernetes-validate`` check of tests/unit/test_manifest.py. ``helm
lint`` passes, and the chart's PodMonitor and ServiceMonitor are the ones in
manifests/monitoring/.

``helm`` is the binary ``scripts/setup-kube`` builds from helm.sh/helm/v3 (``$VIPD_KUBE_BIN``,
else the newest build under ``$VIPD_KUBE_CACHE`` or /var/cache/vipd-kube), else one on PATH;
without it the tests skip with the reason, and fail under CI=true.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.prereq import missing
from vipd import config

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "vipd"
MONITORING = ROOT / "manifests" / "monitoring"
K8S_VERSION = kubernetes_validate.latest_version()
CACHE = "/var/cache/vipd-kube"
IMAGE = "registry.example.com/infra/vipd"


def helm() -> str:
    given = os.environ.get("VIPD_KUBE_BIN")
    candidates = [Path(given) / "helm"] if given else []
    cache = Path(os.environ.get("VIPD_KUBE_CACHE", CACHE))
    candidates += sorted(cache.glob("kube-*/helm"), reverse=True)
    on_path = shutil.which("helm")
    candidates += [Path(on_path)] if on_path else []
    for path in candidates:
        if os.access(path, os.X_OK):
            return str(path)
    missing(f"needs helm: scripts/setup-kube builds it (looked in $VIPD_KUBE_BIN, {cache}, PATH)")


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


# (id, config, manifest options, chart values besides the config)
CASES: list[tuple[str, dict[str, Any], list[str], dict[str, Any]]] = [
    (
        "vrrp-example",
        yaml.safe_load((ROOT / "manifests" / "vipd.yaml").read_text()),
        [],
        {},
    ),
    (
        "lease-example",
        yaml.safe_load((ROOT / "manifests" / "vipd-lease.yaml").read_text()),
        [],
        {},
    ),
    (
        "vrrp-v2-slow-loopback-endpoint-node-label",
        {
            "node": "cp-1",  # dropped by both: each pod takes its node's name
            "vip": "192.0.2.10",
            "interface": "eth1",
            "election": {
                "mode": "vrrp",
                "vrrp": {"vrid": 7, "version": 2, "advert_interval": 30, "auth_pass": "s3cret"},
            },
            "health": {"port": 6443, "fall": 5},
            "ipvs": {"enabled": True, "scheduler": "wrr", "backends": ["192.0.2.1", "192.0.2.2"]},
            "garp": {"repeat": 3, "refresh": 60},
            "metrics": {"listen": "127.0.0.1:9102"},
            "log": {"format": "json", "level": "debug"},
        },
        [
            "--node-label",
            "vipd.example/ready",
            "--adopt-timeout",
            "45.5",
            "--static-manifest",
            "/etc/kubernetes/manifests/vip.yaml",
        ],
        {
            "handover": {
                "nodeLabel": "vipd.example/ready",
                "adoptTimeout": 45.5,
                "staticManifest": "/etc/kubernetes/manifests/vip.yaml",
            }
        },
    ),
    (
        "vrrp-v3-longest-interval-ipv6-endpoint",
        {
            "vip": "2001:db8::10",
            "election": {"vrrp": {"vrid": 200, "advert_interval": 40.95, "priority": 150}},
            "metrics": {"listen": "[::1]:2112"},
        },
        [],
        {},
    ),
    (
        "lease-own-lock-and-kubeconfig",
        {
            "vip": "10.0.0.100",
            "election": {
                "mode": "lease",
                "lease": {
                    "name": "cp-vip",
                    "namespace": "vipd-system",
                    "duration": 40,
                    "renew_deadline": 30,
                    "retry_period": 5,
                    "kubeconfig": "/etc/kubernetes/admin.conf",  # not used in the DaemonSet
                },
                "vrrp": {"vrid": 51},  # the other mode's section may stay
            },
        },
        [],
        {},
    ),
    (
        "vrrp-ipvs-discovery-with-kubeconfig",
        {
            "vip": "10.0.0.100",
            "health": {"port": 6443},
            "election": {"vrrp": {"vrid": 9}},
            "ipvs": {
                "enabled": True,
                "backends": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
                "discovery": {"enabled": True, "kubeconfig": "/etc/kubernetes/admin.conf"},
            },
        },
        [],
        {},
    ),
    (
        "lease-in-default-with-ipvs-discovery",
        {
            "vip": "10.0.0.100",
            "health": {"port": 6443},
            "election": {"mode": "lease", "lease": {"namespace": "default"}},
            "ipvs": {"enabled": True, "backends": ["10.0.0.1"], "discovery": {"enabled": True}},
        },
        [],
        {},
    ),
    (
        "lease-with-ipvs-discovery",
        {
            "vip": "10.0.0.100",
            "health": {"port": 6443},
            "election": {"mode": "lease"},
            "ipvs": {
                "enabled": True,
                "backends": ["10.0.0.1", "10.0.0.2"],
                "discovery": {"enabled": True, "interval": 5},
            },
        },
        [],
        {},
    ),
    (
        "vrrp-tls-token-auth",
        {
            "vip": "10.0.0.100",
            "health": {"port": 6443, "ca_file": "/etc/kubernetes/pki/ca.crt"},
            "election": {"vrrp": {"vrid": 12}},
            "metrics": {
                "cert_file": "/etc/vipd/tls.crt",
                "key_file": "/etc/vipd/tls.key",
                "auth": "token",
            },
        },
        [],
        {},
    ),
    (
        "lease-tls-client-cert",
        {
            "vip": "10.0.0.100",
            "election": {"mode": "lease"},
            "metrics": {
                "listen": "127.0.0.1:2112",
                "cert_file": "/etc/vipd/tls.crt",
                "key_file": "/etc/vipd/tls.key",
                "auth": "client-cert",
                "client_ca_file": "/etc/vipd/clients.crt",
            },
        },
        [],
        {},
    ),
    (
        "vrrp-membership-endpointslices-and-nodes",
        {
            "vip": "10.0.0.100",
            "election": {
                "vrrp": {
                    "vrid": 7,
                    "unicast_peers": ["10.0.0.1", "10.0.0.2"],
                    "unicast_peers_from": ["endpointslices", "nodes"],
                }
            },
            "membership": {"interval": 5, "kubeconfig": "/etc/kubernetes/admin.conf"},
        },
        [],
        {},
    ),
    (
        "lease-membership-nodes-only",
        {
            "vip": "10.0.0.100",
            "election": {"mode": "lease"},
            "health": {"peers": ["10.0.0.2"], "peers_from": ["nodes"]},
        },
        [],
        {},
    ),
    (
        "dual-stack-second-instance",
        {
            "vips": ["10.0.0.100", "fd00::100"],
            "election": {"mode": "lease", "lease": {"name": "edge-vip"}},
            "metrics": {"listen": "0.0.0.0:2113"},
        },
        ["--name", "vipd-edge"],
        {"name": "vipd-edge"},
    ),
    (
        # The ECMP pool: no election in the config, NET_ADMIN alone, the drain and ExaBGP's
        # exit in the grace period, the password file mounted, the API modes' memory.
        "bgp-ecmp-password-file",
        {
            "vip": "10.79.0.100",
            "interface": "eth0",
            "announce": {
                "mode": "bgp",
                "drain": 30,
                "bgp": {
                    "local_asn": 65100,
                    "peers": [
                        {
                            "address": "10.78.1.0",
                            "asn": 65000,
                            "password_file": "/etc/vipd-bgp/tor1",
                        },
                        {"address": "10.78.2.0", "asn": 65000},
                    ],
                },
            },
            "health": {"peers": ["10.78.2.1", "10.78.3.1"]},
        },
        [],
        {},
    ),
    (
        "bgp-ecmp-bfd",  # BFD binds its sockets to the uplink: NET_RAW again
        {
            "vip": "10.79.0.100",
            "announce": {
                "mode": "bgp",
                "drain": 0,
                "bgp": {
                    "local_asn": 65100,
                    "peers": [{"address": "10.78.1.0", "asn": 65000}],
                    "bfd": {"enabled": True},
                },
            },
            "health": {},
        },
        [],
        {},
    ),
    (
        "bgp-leader-vrrp",
        {
            "vip": "10.79.0.100",
            "interface": "lan0",
            "announce": {
                "mode": "bgp",
                "pool": "leader",
                "drain": 25,
                "bgp": {"local_asn": 65100, "peers": [{"address": "10.78.1.0", "asn": 65000}]},
            },
            "election": {"mode": "vrrp", "vrrp": {"vrid": 9, "advert_interval": 3}},
        },
        [],
        {},
    ),
    (
        "routing-table-ecmp",
        {
            "vip": "10.79.0.100",
            "announce": {"mode": "routing-table", "table": 200},
            "health": {"peers": ["10.78.2.1"]},
        },
        [],
        {},
    ),
]


def manifest_objects(cfg: dict[str, Any], opts: list[str], tmp: Path, ns: str) -> list[Any]:
    path = tmp / "vipd.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out: list[Any] = []
    for kind in ("daemonset", "rbac"):
        run = subprocess.run(
            [sys.executable, "-m", "vipd", "manifest", kind, "--config", str(path),
             "--image", f"{IMAGE}:{chart_version()}", "--namespace", ns, *opts],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        out += docs(run.stdout)
    return out


def chart_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def chart_objects(values: dict[str, Any], tmp: Path, ns: str) -> list[Any]:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    run = subprocess.run(
        [helm(), "template", "vipd", str(CHART), "--namespace", ns, "--values", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return docs(run.stdout)


def values_for(cfg: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    values = {k: v for k, v in cfg.items() if k != "node"}
    return {**values, "image": {"repository": IMAGE}, **extra}


def effective(text: str) -> config.Config:
    return config.parse(yaml.safe_load(text), env={"NODE_NAME": "n1"}, hostname=None)


HASH = "vipd.io/config-sha256"


def split_config(obj: dict[str, Any]) -> tuple[dict[str, Any], config.Config | None]:
    """The object without the config text (the ConfigMap's) or its hash (the DaemonSet's
    annotation, of a text written in another key order), and that config as vipd reads it."""
    obj = yaml.safe_load(yaml.safe_dump(obj))  # a copy
    if obj["kind"] == "DaemonSet":
        annotations = obj["spec"]["template"]["metadata"]["annotations"]
        assert len(annotations.pop(HASH)) == 64
    if obj["kind"] != "ConfigMap":
        return obj, None
    return obj, effective(obj["data"].pop("vipd.yaml"))


def by_identity(objs: list[Any]) -> dict[tuple[str, str, str], Any]:
    out = {}
    for obj in objs:
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert key not in out, f"two objects {key}"
        out[key] = obj
    return out


def differences(ours: list[Any], theirs: list[Any]) -> list[str]:
    a, b = by_identity(ours), by_identity(theirs)
    found = [f"only from the chart: {k}" for k in a.keys() - b.keys()]
    found += [f"only from vipd manifest: {k}" for k in b.keys() - a.keys()]
    for key in a.keys() & b.keys():
        (obj_a, cfg_a), (obj_b, cfg_b) = split_config(a[key]), split_config(b[key])
        if obj_a != obj_b:
            found.append(f"{key} differs:\n{yaml.safe_dump(obj_a)}\nvs\n{yaml.safe_dump(obj_b)}")
        if cfg_a != cfg_b:
            found.append(f"{key}: the config differs: {cfg_a} vs {cfg_b}")
    return found


@pytest.mark.parametrize(
    ("cfg", "opts", "extra"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize("ns", ["kube-system", "vipd-system"])
def test_chart_renders_what_vipd_manifest_renders(
    cfg: dict[str, Any], opts: list[str], extra: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    theirs = manifest_objects(cfg, opts, tmp_path, ns)
    ours = chart_objects(values_for(cfg, extra), tmp_path, ns)
    assert not differences(ours, theirs), "\n".join(differences(ours, theirs))
    # One Role and binding per namespace the API is used in: the Lease's, default for IPVS
    # discovery's EndpointSlices.
    election = cfg.get("election") or {}
    namespaces = set()
    if election.get("mode") == "lease":
        namespaces.add((election.get("lease") or {}).get("namespace", "kube-system"))
    if cfg.get("ipvs", {}).get("discovery", {}).get("enabled"):
        namespaces.add("default")
    # Membership: the EndpointSlices in default, the Nodes cluster-wide.
    followed = {
        s
        for sources in (
            (election.get("vrrp") or {}).get("unicast_peers_from") or [],
            (cfg.get("health") or {}).get("peers_from") or [],
        )
        for s in sources
    }
    if "endpointslices" in followed:
        namespaces.add("default")
    api = ["Role", "RoleBinding"] * len(namespaces)
    if (cfg.get("metrics") or {}).get("auth") == "token":
        api += ["ClusterRole", "ClusterRoleBinding"]  # the token reviews, cluster-scoped
    if "nodes" in followed:
        api += ["ClusterRole", "ClusterRoleBinding"]  # the Nodes, cluster-scoped
    api += ["ServiceAccount"] if api else []
    assert sorted(o["kind"] for o in ours) == sorted(["ConfigMap", "DaemonSet", *api])
    assert {o["metadata"]["namespace"] for o in ours if o["kind"] == "Role"} == namespaces
    for obj in ours:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_comparison_sees_a_drift(tmp_path: Path) -> None:
    cfg = CASES[0][1]
    theirs = manifest_objects(cfg, [], tmp_path, "kube-system")
    ours = chart_objects(values_for(cfg, {}), tmp_path, "kube-system")
    assert not differences(ours, theirs)
    # The grace period, and a config that reads differently, are both caught.
    drifted = yaml.safe_load(yaml.safe_dump(ours))
    (ds,) = [o for o in drifted if o["kind"] == "DaemonSet"]
    ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] += 1
    assert differences(drifted, theirs)
    other = chart_objects(values_for({**cfg, "garp": {"repeat": 2}}, {}), tmp_path, "kube-system")
    assert any("the config differs" in d for d in differences(other, theirs))


def test_helm_lint_is_clean() -> None:
    for args in ([], ["--set", "vip=10.0.0.100", "--set", "election.vrrp.vrid=51"]):
        run = subprocess.run(
            [helm(), "lint", "--strict", str(CHART), *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        assert "[WARNING]" not in run.stdout and "[ERROR]" not in run.stdout, run.stdout


def test_a_missing_vip_is_an_error_that_names_it(tmp_path: Path) -> None:
    run = subprocess.run(
        [helm(), "template", "vipd", str(CHART)], capture_output=True, text=True, check=False
    )
    assert run.returncode != 0 and "vip: the VIP" in run.stderr, run.stderr


# The scrape objects of an endpoint with TLS and metrics.auth: token (manifests/monitoring/
# *-tls.yaml): its CA in a ConfigMap, one certificate name for every node, Prometheus's token in
# a Secret.
SECURE_METRICS = {
    "cert_file": "/etc/vipd/tls.crt",
    "key_file": "/etc/vipd/tls.key",
    "auth": "token",
}
SECURE_MONITORING = {
    "tlsConfig": {"ca": {"configMap": {"name": "vipd-metrics-ca", "key": "ca.crt"}},
                  "serverName": "vipd"},
    "tokenSecret": {"name": "prometheus-vipd-token", "key": "token"},
}  # fmt: skip


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls-token"])
@pytest.mark.parametrize("kind", ["podMonitor", "serviceMonitor"])
def test_chart_scrape_objects_are_the_ones_in_manifests_monitoring(
    kind: str, secure: bool, tmp_path: Path
) -> None:
    cfg = {**CASES[0][1], "metrics": SECURE_METRICS} if secure else CASES[0][1]
    monitoring: dict[str, Any] = {kind: {"enabled": True}}
    if secure:
        monitoring.update(SECURE_MONITORING)
    values = values_for(cfg, {"monitoring": monitoring})
    scrape = ("Service", "PodMonitor", "ServiceMonitor")
    ours = [o for o in chart_objects(values, tmp_path, "kube-system") if o["kind"] in scrape]
    name = "vipd-podmonitor" if kind == "podMonitor" else "vipd-servicemonitor"
    committed = docs((MONITORING / f"{name}{'-tls' if secure else ''}.yaml").read_text())
    assert ours == committed
    for obj in ours:
        if obj["apiVersion"] == "v1":
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
