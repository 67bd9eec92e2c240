"""`vipd manifest`: the committed examples match the generator, validate against a current
Kubernetes schema, and carry the guarantees the handover depends on (capabilities, probes,
tolerations, update strategy, the adopt init container, RBAC limited to one Lease)."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from vipd import config
from vipd.deploy import manifest
from vipd.deploy.manifest.model import SPEAKER_GRACE_S
from vipd.vrrp import state

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
# The newest schema kubernetes-validate ships; strict: unknown fields are errors too.
K8S_VERSION = kubernetes_validate.latest_version()

# (committed file, source config, extra CLI arguments)
EXAMPLES = [
    ("vrrp/pod.yaml", "vipd.yaml", ["pod"]),
    ("vrrp/config.yaml", "vipd.yaml", ["config"]),
    ("vrrp/daemonset.yaml", "vipd.yaml", ["daemonset"]),
    ("vrrp/rbac.yaml", "vipd.yaml", ["rbac"]),
    ("lease/pod.yaml", "vipd-lease.yaml", ["pod"]),
    ("lease/pod-super-admin.yaml", "vipd-lease.yaml", ["pod", "--super-admin"]),
    ("lease/config.yaml", "vipd-lease.yaml", ["config"]),
    ("lease/daemonset.yaml", "vipd-lease.yaml", ["daemonset"]),
    ("lease/rbac.yaml", "vipd-lease.yaml", ["rbac"]),
]


def vipd(*args: str, cwd: Path = MANIFESTS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vipd", *args], capture_output=True, text=True, cwd=cwd, check=False
    )


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def load(name: str) -> list[dict[str, Any]]:
    return docs((MANIFESTS / name).read_text())


def one(name: str) -> dict[str, Any]:
    (obj,) = load(name)
    return obj


def workload(name: str) -> dict[str, Any]:
    """The Pod or the DaemonSet of a committed file (a DaemonSet's comes with its ConfigMap)."""
    (obj,) = [o for o in load(name) if o["kind"] in ("Pod", "DaemonSet")]
    return obj


def pod_config(name: str) -> dict[str, Any]:
    """The config the pod of a committed file reads: the static pod's file beside it
    (``vipd manifest config``), the DaemonSet's ConfigMap."""
    if name.endswith("daemonset.yaml"):
        (cm,) = [o for o in load(name) if o["kind"] == "ConfigMap"]
        text = cm["data"]["vipd.yaml"]
    else:
        text = (MANIFESTS / name.split("/")[0] / "config.yaml").read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def main_container(obj: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod_spec(obj)["containers"]
    assert isinstance(c, dict) and c["name"] == "vipd"
    return c


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize(("committed", "source", "args"), EXAMPLES)
def test_committed_example_is_what_the_generator_prints(
    committed: str, source: str, args: list[str]
) -> None:
    out = vipd("manifest", *args, "--config", source)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (MANIFESTS / committed).read_text(), (
        f"manifests/{committed} is stale: run scripts/render-manifests"
    )


@pytest.mark.parametrize("committed", [e[0] for e in EXAMPLES if "config" not in e[0]])
def test_example_validates_against_the_kubernetes_schema(committed: str) -> None:
    for obj in load(committed):
        # Raises ValidationError naming the field on a schema violation.
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_schema_check_catches_a_broken_object() -> None:
    obj = workload("vrrp/daemonset.yaml")
    pod_spec(obj)["tolerations"] = [{"operator": "Exists", "tolerationSeconds": "forever"}]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    obj = one("vrrp/pod.yaml")
    obj["spec"]["hostNetwrok"] = True  # strict: an unknown field is an error
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    "committed",
    ["vrrp/pod.yaml", "vrrp/daemonset.yaml", "lease/pod.yaml", "lease/daemonset.yaml"],
)
def test_vipd_container_has_only_the_two_capabilities_and_its_probes(committed: str) -> None:
    obj = workload(committed)
    spec = pod_spec(obj)
    assert spec["hostNetwork"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    c = main_container(obj)
    ctx = c["securityContext"]
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]}
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["readOnlyRootFilesystem"] is True
    assert "privileged" not in ctx
    if obj["kind"] == "DaemonSet":
        assert c["ports"] == [{"name": "metrics", "containerPort": 2112, "protocol": "TCP"}]
    else:
        # kube-scheduler counts a mirror pod's host ports: a static pod declaring 2112 would
        # keep the DaemonSet pod (which declares it) off its node forever.
        assert "ports" not in c
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"]["port"] == 2112
    assert env(c)["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert c["args"] == ["run", "--config", "/etc/vipd/vipd.yaml"]


@pytest.mark.parametrize("mode", ["vrrp", "lease"])
def test_daemonset_hands_over_from_the_static_pod(mode: str) -> None:
    ds = workload(f"{mode}/daemonset.yaml")
    static = workload(f"{mode}/pod.yaml")
    spec = pod_spec(ds)
    strategy = ds["spec"]["updateStrategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    # Tolerates every taint: one toleration with operator Exists and no key or effect.
    assert spec["tolerations"] == [{"operator": "Exists"}]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {
        "matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]
    }
    pull, adopt = spec["initContainers"]
    main = main_container(ds)
    assert pull["name"] == "pull" and adopt["name"] == "adopt"
    assert pull["image"] == adopt["image"] == main["image"] == main_container(static)["image"]
    # adopt removes the static manifest from a directory mount, never a single-file one.
    (vol,) = [v for v in spec["volumes"] if v["name"] == "manifests"]
    assert vol["hostPath"] == {"path": "/etc/kubernetes/manifests", "type": "Directory"}
    assert adopt["volumeMounts"] == [
        {"name": "manifests", "mountPath": "/etc/kubernetes/manifests"}
    ]
    args = adopt["args"]
    assert args[0] == "adopt"
    assert args[args.index("--manifest") + 1] == "/etc/kubernetes/manifests/vipd.yaml"
    assert args[args.index("--listen") + 1] == "0.0.0.0:2112"
    assert float(args[args.index("--timeout") + 1]) == 120
    for init in (pull, adopt):
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # The same capabilities, identity and election as the static pod.
    assert main["securityContext"] == main_container(static)["securityContext"]
    assert env(main)["NODE_NAME"] == env(main_container(static))["NODE_NAME"]
    ds_cfg = pod_config(f"{mode}/daemonset.yaml")
    static_cfg = pod_config(f"{mode}/pod.yaml")
    if mode == "vrrp":
        assert ds_cfg == static_cfg
        assert spec["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in spec
    else:
        # Same Lease; only how the API is reached differs (kubeconfig vs ServiceAccount).
        static_lease = dict(static_cfg["election"]["lease"])
        assert static_lease.pop("kubeconfig") == "/etc/kubernetes/admin.conf"
        assert ds_cfg["election"]["lease"] == static_lease
        assert {k: v for k, v in ds_cfg.items() if k != "election"} == {
            k: v for k, v in static_cfg.items() if k != "election"
        }
        assert spec["serviceAccountName"] == "vipd"
        assert env(main)["KUBERNETES_SERVICE_HOST"] == {"fieldRef": {"fieldPath": "status.hostIP"}}


def test_lease_static_pod_mounts_admin_conf_or_super_admin_conf() -> None:
    for name, host_path in [
        ("lease/pod.yaml", "/etc/kubernetes/admin.conf"),
        ("lease/pod-super-admin.yaml", "/etc/kubernetes/super-admin.conf"),
    ]:
        obj = one(name)
        (vol,) = [v for v in pod_spec(obj)["volumes"] if v["name"] == "kubeconfig"]
        assert vol == {"name": "kubeconfig", "hostPath": {"path": host_path, "type": "File"}}
        # Inside the container it is admin.conf either way; switching back is one sed.
        (mount,) = [m for m in main_container(obj)["volumeMounts"] if m["name"] == "kubeconfig"]
        assert mount == {
            "name": "kubeconfig",
            "mountPath": "/etc/kubernetes/admin.conf",
            "readOnly": True,
        }
    text = (MANIFESTS / "lease/pod-super-admin.yaml").read_text()
    assert "s#/etc/kubernetes/super-admin.conf#/etc/kubernetes/admin.conf#" in text
    # VRRP mode reads no kubeconfig at all.
    vrrp = one("vrrp/pod.yaml")
    assert all(v["name"] != "kubeconfig" for v in pod_spec(vrrp).get("volumes", []))
    assert all(m["name"] != "kubeconfig" for m in main_container(vrrp).get("volumeMounts", []))


def test_rbac_may_only_read_watch_and_update_its_own_lease_and_create_one() -> None:
    sa, role, binding = load("lease/rbac.yaml")
    assert (sa["kind"], sa["metadata"]["name"]) == ("ServiceAccount", "vipd")
    assert role["kind"] == "Role"  # namespaced: no ClusterRole
    by_verb: dict[str, list[dict[str, Any]]] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == ["coordination.k8s.io"]
        assert rule["resources"] == ["leases"]
        for verb in rule["verbs"]:
            by_verb.setdefault(verb, []).append(rule)
    assert sorted(by_verb) == ["create", "get", "list", "update", "watch"]
    for verb in ("get", "list", "update", "watch"):
        assert all(r.get("resourceNames") == ["vipd-cp-lock"] for r in by_verb[verb])
    assert role["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "vipd",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "vipd", "namespace": "kube-system"}
    ]
    # VRRP: nothing at all.
    assert load("vrrp/rbac.yaml") == []


def test_embedded_config_is_the_users_config_without_node(tmp_path: Path) -> None:
    src = tmp_path / "vipd.yaml"
    src.write_text(
        "node: cp-1\nvip: 10.0.0.100\ninterface: eth0\n"
        "election: {vrrp: {vrid: 7, priority: 120, advert_interval: 0.5, unicast_peers: "
        "[10.0.0.11, 10.0.0.12]}}\ngarp: {repeat: 3}\n"
    )
    out = vipd("manifest", "pod", "--config", str(src))
    assert out.returncode == 0, out.stderr
    assert "node ('cp-1') left out" in out.stderr
    c = main_container(docs(out.stdout)[0])
    assert c["args"] == ["run", "--config", "/etc/vipd/vipd.yaml"]
    out = vipd("manifest", "config", "--config", str(src))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# vipd ") and "/etc/vipd/vipd.yaml" in out.stdout
    embedded = config.parse(yaml.safe_load(out.stdout), env={"NODE_NAME": "cp-2"})
    original = config.load(str(src), env={"VIPD_NODE": "cp-2"})
    assert embedded == original
    (cm, _) = docs(vipd("manifest", "daemonset", "--config", str(src)).stdout)
    in_map = config.parse(yaml.safe_load(cm["data"]["vipd.yaml"]), env={"NODE_NAME": "cp-2"})
    assert in_map == original


def test_grace_period_outlasts_the_longest_graceful_stop() -> None:
    # The slowest stop vipd allows: VRRPv3 at the longest advert interval.
    data = {"vip": "10.0.0.100", "election": {"vrrp": {"vrid": 1, "advert_interval": 40.95}}}
    p = manifest.plan(data)
    deadline = state.skew_time(3, 1, 4095) + 40.95
    assert p.stop_deadline_s == pytest.approx(deadline)
    assert manifest.grace_period(p) > deadline
    assert manifest.grace_period(manifest.plan({**data, "election": {"vrrp": {"vrid": 1}}})) == 30


def test_grace_period_leaves_room_for_the_stop_hooks() -> None:
    data: dict[str, object] = {"vip": "10.0.0.100", "election": {"vrrp": {"vrid": 1}}}
    base = manifest.plan(data).stop_deadline_s
    hooked = {**data, "notify": {"stop": "/bin/true", "all": "/bin/true", "timeout": 40}}
    assert manifest.plan(hooked).stop_deadline_s == pytest.approx(base + 80)
    assert manifest.grace_period(manifest.plan(hooked)) > base + 80
    leader_only = {**data, "notify": {"leader": "/bin/true", "timeout": 40}}
    assert manifest.plan(leader_only).stop_deadline_s == pytest.approx(base)


def test_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    src = tmp_path / "bad.yaml"
    src.write_text("vip: api.example.com\nelection: {vrrp: {vrid: 51}}\n")
    out = vipd("manifest", "daemonset", "--config", str(src))
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("vipd: config error: vip:")
    out = vipd("manifest", "pod", "--super-admin", "--config", "vipd.yaml")
    assert out.returncode == 2 and "--super-admin" in out.stderr


def test_loopback_metrics_endpoint_is_probed_on_loopback() -> None:
    p = manifest.plan({"vip": "10.0.0.100", "election": {"vrrp": {"vrid": 1}}})
    p = dataclasses.replace(p, listen_host="127.0.0.1")
    c = main_container(manifest.pod(p, manifest.Options()))
    assert c["livenessProbe"]["httpGet"]["host"] == "127.0.0.1"


def test_vipd_still_reads_a_config_from_the_environment() -> None:
    """Without --config, $VIPD_CONFIG (what the manifests of earlier versions carried)."""
    base = {"PATH": "/usr/bin:/bin", "NODE_NAME": "cp-2"}
    run = [sys.executable, "-m", "vipd", "check"]
    bad = subprocess.run(
        run, env={**base, "VIPD_CONFIG": "vip: [\n"}, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and bad.stderr.startswith("vipd: config error: $VIPD_CONFIG")
    none = subprocess.run(run, env=base, capture_output=True, text=True, check=False)
    assert none.returncode == 2 and "$VIPD_CONFIG" in none.stderr
    # The pods' config files are valid (the host check may still fail here: no 10.0.0.0/24).
    for name in ("vrrp/pod.yaml", "vrrp/daemonset.yaml"):
        assert config.parse(pod_config(name), env={"NODE_NAME": "cp-2"}).node == "cp-2"


def test_files_the_config_names_are_mounted_from_the_node_in_both_pods() -> None:
    want_mount = {
        "name": "host-file-0",
        "mountPath": "/etc/kubernetes/pki/ca.crt",
        "readOnly": True,
    }
    want_volume = {
        "name": "host-file-0",
        "hostPath": {"path": "/etc/kubernetes/pki/ca.crt", "type": "File"},
    }
    for name in ("vrrp/pod.yaml", "vrrp/daemonset.yaml"):
        obj = workload(name)
        assert main_container(obj)["volumeMounts"] == [TMP_MOUNT, CONFIG_MOUNT, want_mount], name
        assert want_volume in pod_spec(obj)["volumes"], name


TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}
CONFIG_MOUNT = {"name": "config", "mountPath": "/etc/vipd", "readOnly": True}


WORKLOADS = [e[0] for e in EXAMPLES if "pod" in e[0] or "daemonset" in e[0]]


@pytest.mark.parametrize("committed", WORKLOADS)
def test_read_only_root_with_a_small_memory_tmp(committed: str) -> None:
    # The Kubernetes client writes a kubeconfig's embedded certificates to temporary files.
    obj = workload(committed)
    assert main_container(obj)["securityContext"]["readOnlyRootFilesystem"] is True
    assert TMP_MOUNT in main_container(obj)["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}} in pod_spec(obj)[
        "volumes"
    ]


def test_node_label_gates_the_daemonset_for_a_first_roll_one_node_at_a_time() -> None:
    out = vipd("manifest", "daemonset", "--node-label", "vipd.example/handover", "--config",
               "vipd.yaml")  # fmt: skip
    assert out.returncode == 0, out.stderr
    (term,) = pod_spec(docs(out.stdout)[1])["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        {"key": "vipd.example/handover", "operator": "Exists"},
    ]
    kubernetes_validate.validate(docs(out.stdout)[1], K8S_VERSION, strict=True)


@pytest.mark.parametrize("mode", ["vrrp", "lease"])
def test_ipvs_discovery_gets_a_token_and_may_list_and_watch_endpointslices(
    tmp_path: Path, mode: str
) -> None:
    election = "{mode: lease}" if mode == "lease" else "{vrrp: {vrid: 7}}"
    src = tmp_path / "vipd.yaml"
    src.write_text(
        f"vip: 10.0.0.100\ninterface: eth0\nelection: {election}\nhealth: {{}}\n"
        "ipvs: {enabled: true, backends: [10.0.0.11, 10.0.0.12],\n"
        "       discovery: {enabled: true, kubeconfig: /etc/kubernetes/admin.conf}}\n"
    )
    out = vipd("manifest", "rbac", "--config", str(src))
    assert out.returncode == 0, out.stderr
    objs = docs(out.stdout)
    assert "nothing to apply" not in out.stdout
    roles = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "Role"}
    slices = [r for r in roles["default"]["rules"] if r["resources"] == ["endpointslices"]]
    assert slices == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["list", "watch"]}
    ]  # fmt: skip
    bindings = [o for o in objs if o["kind"] == "RoleBinding"]
    assert {b["metadata"]["namespace"] for b in bindings} == set(roles)
    assert ("kube-system" in roles) == (mode == "lease")
    out = vipd("manifest", "daemonset", "--config", str(src))
    assert out.returncode == 0, out.stderr
    (cm, ds) = docs(out.stdout)
    spec = pod_spec(ds)
    assert spec["serviceAccountName"] == "vipd"
    assert spec.get("automountServiceAccountToken", True) is True
    c = main_container(ds)
    assert env(c)["KUBERNETES_SERVICE_HOST"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    embedded = yaml.safe_load(cm["data"]["vipd.yaml"])
    assert "kubeconfig" not in embedded["ipvs"]["discovery"]  # the token, not a host file


@pytest.mark.parametrize("super_admin", [False, True])
def test_vrrp_static_pod_with_ipvs_discovery_mounts_the_kubeconfig(
    tmp_path: Path, super_admin: bool
) -> None:
    src = tmp_path / "vipd.yaml"
    src.write_text(
        "vip: 10.0.0.100\ninterface: eth0\nelection: {vrrp: {vrid: 7}}\nhealth: {}\n"
        "ipvs: {enabled: true, backends: [10.0.0.11, 10.0.0.12], discovery: {enabled: true}}\n"
    )
    out = vipd("manifest", "pod", *(["--super-admin"] if super_admin else []), "--config", str(src))
    assert out.returncode == 0, out.stderr
    (pod,) = docs(out.stdout)
    host = "/etc/kubernetes/super-admin.conf" if super_admin else "/etc/kubernetes/admin.conf"
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["kubeconfig"]["hostPath"] == {"path": host, "type": "File"}
    c = main_container(pod)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["kubeconfig"]["mountPath"] == "/etc/kubernetes/admin.conf"
    out = vipd("manifest", "config", "--config", str(src))
    assert out.returncode == 0, out.stderr
    embedded = yaml.safe_load(out.stdout)
    assert embedded["ipvs"]["discovery"]["kubeconfig"] == "/etc/kubernetes/admin.conf"
    assert "lease" not in embedded["election"]
    pod_text = vipd("manifest", "pod", *(["--super-admin"] if super_admin else []), "--config",
                    str(src)).stdout  # fmt: skip
    assert f"kubeconfig from the host: {host}" in pod_text
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


# -- names: two vipd DaemonSets side by side --------------------------------------------------


def _all_objects(name: str | None, cfg: str = "vipd-lease.yaml") -> list[dict[str, Any]]:
    args = ["--name", name] if name is not None else []
    out: list[dict[str, Any]] = []
    for kind in ("pod", "daemonset", "rbac"):
        res = vipd("manifest", kind, *args, "--config", cfg)
        assert res.returncode == 0, res.stderr
        out += docs(res.stdout)
    return out


def test_default_name_is_vipd_everywhere() -> None:
    objs = _all_objects(None)
    assert {o["metadata"]["name"] for o in objs} == {"vipd"}
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    adopt = next(c for c in pod_spec(ds)["initContainers"] if c["name"] == "adopt")
    assert adopt["args"][adopt["args"].index("--manifest") + 1] == manifest.DEFAULT_STATIC_MANIFEST


def test_two_names_give_disjoint_objects_and_selectors() -> None:
    """A second vipd (another cluster's endpoint, say) next to the first in one namespace:
    no object name, no selector and no static manifest file in common."""
    a, b = _all_objects("vipd"), _all_objects("vipd-edge")

    def keys(objs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs}

    assert keys(a).isdisjoint(keys(b)) and len(keys(b)) == len(b)
    ds_a = next(o for o in a if o["kind"] == "DaemonSet")
    ds_b = next(o for o in b if o["kind"] == "DaemonSet")
    sel_a, sel_b = ds_a["spec"]["selector"]["matchLabels"], ds_b["spec"]["selector"]["matchLabels"]
    # Neither selector matches the other's pods.
    pods_b = ds_b["spec"]["template"]["metadata"]["labels"]
    pods_a = ds_a["spec"]["template"]["metadata"]["labels"]
    assert not all(pods_b.get(k) == v for k, v in sel_a.items())
    assert not all(pods_a.get(k) == v for k, v in sel_b.items())
    assert pod_spec(ds_b)["serviceAccountName"] == "vipd-edge"
    binding = next(o for o in b if o["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == "vipd-edge"
    assert binding["subjects"][0]["name"] == "vipd-edge"
    adopt = next(c for c in pod_spec(ds_b)["initContainers"] if c["name"] == "adopt")
    assert "/etc/kubernetes/manifests/vipd-edge.yaml" in adopt["args"]
    for obj in b:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("name", ["Vipd", "vipd_edge", "-vipd", "v" * 64, ""])
def test_a_name_that_is_not_a_dns_label_is_exit_2(name: str) -> None:
    out = vipd("manifest", "daemonset", f"--name={name}", "--config", "vipd.yaml")
    assert out.returncode == 2 and out.stdout == "", out
    assert "--name must be a DNS-1123 label" in out.stderr


# -- least privilege (docs/operations.md#security) ---------------------------------------------


@pytest.mark.parametrize("committed", WORKLOADS)
def test_seccomp_runtime_default_and_a_memory_request_and_limit(committed: str) -> None:
    obj = workload(committed)
    assert pod_spec(obj)["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    res = main_container(obj)["resources"]
    api = committed.startswith("lease/")
    assert res == {
        "requests": {"cpu": "100m", "memory": "128Mi" if api else "64Mi"},
        "limits": {"memory": "256Mi"},  # no CPU limit: throttling would delay adverts
    }


@pytest.mark.parametrize("committed", WORKLOADS)
def test_the_config_is_a_read_only_file_never_an_environment_variable(committed: str) -> None:
    obj = workload(committed)
    c = main_container(obj)
    assert all(e["name"] != "VIPD_CONFIG" for e in c["env"])
    assert all("election" not in str(e.get("value", "")) for e in c["env"])
    assert CONFIG_MOUNT in c["volumeMounts"]
    (vol,) = [v for v in pod_spec(obj)["volumes"] if v["name"] == "config"]
    if obj["kind"] == "Pod":
        # A static pod cannot use a ConfigMap: the node's /etc/vipd, the directory (an editor
        # replacing the file would leave a single-file bind mount on the old inode).
        assert vol == {"name": "config", "hostPath": {"path": "/etc/vipd", "type": "Directory"}}
        assert c["args"][-1] == "/etc/vipd/vipd.yaml"
        assert "Its config: /etc/vipd/vipd.yaml" in (MANIFESTS / committed).read_text()
    else:
        assert vol == {"name": "config", "configMap": {"name": "vipd"}}
        (cm,) = [o for o in load(committed) if o["kind"] == "ConfigMap"]
        assert cm["metadata"]["namespace"] == obj["metadata"]["namespace"]
        assert c["args"][-1] == "/etc/vipd/" + next(iter(cm["data"]))
        # A config change is a new pod template: the DaemonSet rolls it out.
        note = obj["spec"]["template"]["metadata"]["annotations"]["vipd.io/config-sha256"]
        assert note == hashlib.sha256(cm["data"]["vipd.yaml"].encode()).hexdigest()


def test_a_new_config_rolls_the_daemonset() -> None:
    base = {"vip": "10.0.0.100", "election": {"vrrp": {"vrid": 1}}}
    opts = manifest.Options()
    a = manifest.daemonset(manifest.plan(base), opts)
    b = manifest.daemonset(manifest.plan({**base, "garp": {"repeat": 2}}), opts)
    assert a["spec"]["template"] != b["spec"]["template"]
    assert a == manifest.daemonset(manifest.plan(dict(base)), opts)


def _render(kind: str, text: str, tmp_path: Path) -> list[dict[str, Any]]:
    src = tmp_path / "vipd.yaml"
    src.write_text(text)
    out = vipd("manifest", kind, "--config", str(src))
    assert out.returncode == 0, out.stderr
    return docs(out.stdout)


@pytest.mark.parametrize(
    ("extra", "api"),
    [
        ("election: {vrrp: {vrid: 7}}\n", False),
        ("election: {vrrp: {vrid: 7}}\nhealth: {}\nipvs: {enabled: true, backends: [10.0.0.11]}\n",
         False),
        ("election: {mode: lease}\n", True),
        ("election: {vrrp: {vrid: 7}}\nhealth: {}\n"
         "ipvs: {enabled: true, backends: [10.0.0.11], discovery: {enabled: true}}\n", True),
    ],
)  # fmt: skip
def test_kubernetes_credentials_only_where_the_mode_needs_them(
    tmp_path: Path, extra: str, api: bool
) -> None:
    text = "vip: 10.0.0.100\ninterface: eth0\n" + extra
    (pod,) = _render("pod", text, tmp_path)
    (_, ds) = _render("daemonset", text, tmp_path)
    spec = pod_spec(pod)
    assert spec["automountServiceAccountToken"] is False  # a static pod never has a token
    mounted = {m["mountPath"] for m in main_container(pod)["volumeMounts"]}
    assert ("/etc/kubernetes/admin.conf" in mounted) == api
    assert any(v["name"] == "kubeconfig" for v in spec["volumes"]) == api
    ds_spec = pod_spec(ds)
    assert ds_spec.get("automountServiceAccountToken", True) is api
    assert ("serviceAccountName" in ds_spec) == api
    assert (_render("rbac", text, tmp_path) != []) == api
    memory = main_container(pod)["resources"]["requests"]["memory"]
    assert memory == ("128Mi" if api else "64Mi")


def test_routing_table_mode_renders_with_a_grace_period_covering_its_drain() -> None:
    """A config without an election (announce.mode: routing-table) renders every kind, and the
    pods' grace period covers the withdrawal: the route off, the drain, the binding off."""
    data = {
        "vip": "10.0.0.100",
        "interface": "eth0",
        "announce": {"mode": "routing-table", "drain": 20},
        "health": {"peers": ["10.0.0.11", "10.0.0.12"]},
    }
    p = manifest.plan(data)
    assert p.stop_deadline_s >= 20
    opts = manifest.Options(image="registry.example/vipd:1")
    for kind in ("pod", "daemonset", "rbac", "config"):
        manifest.render(kind, p, opts, "vipd.yaml")
    spec = pod_spec(manifest.pod(p, opts))
    assert spec["terminationGracePeriodSeconds"] >= 21
    assert manifest.rbac(p, opts) == []  # no Kubernetes API used in this mode


BGP_ANNOUNCE: dict[str, Any] = {
    "mode": "bgp",
    "drain": 3,
    "bgp": {
        "local_asn": 65100,
        "peers": [
            {"address": "10.78.1.0", "asn": 65000, "password_file": "/etc/vipd-bgp/tor1"},
            {"address": "10.78.2.0", "asn": 65000},
        ],
    },
}


def _caps(obj: dict[str, Any]) -> list[str]:
    add = main_container(obj)["securityContext"]["capabilities"]["add"]
    assert isinstance(add, list)
    return add


def test_bgp_mode_mounts_the_password_files_and_asks_only_what_the_code_needs() -> None:
    data = {
        "vip": "10.79.0.100",
        "interface": "eth0",
        "announce": BGP_ANNOUNCE,
        "health": {"peers": ["10.78.2.1"]},
    }
    p = manifest.plan(data)
    opts = manifest.Options(image="registry.example/vipd:1")
    want_mount = {"name": "host-file-0", "mountPath": "/etc/vipd-bgp/tor1", "readOnly": True}
    want_volume = {
        "name": "host-file-0",
        "hostPath": {"path": "/etc/vipd-bgp/tor1", "type": "File"},
    }
    for obj in (manifest.pod(p, opts), manifest.daemonset(p, opts)):
        # The ECMP pool elects nothing and sends no ARP: netlink alone (the AnyIP binding).
        assert _caps(obj) == ["NET_ADMIN"]
        assert want_mount in main_container(obj)["volumeMounts"]
        assert want_volume in pod_spec(obj)["volumes"]
        assert (
            len([m for m in main_container(obj)["volumeMounts"] if "host-file" in m["name"]]) == 1
        )
        assert main_container(obj)["resources"]["requests"]["memory"] == "128Mi"  # + ExaBGP
        # the drain, the route calls, ExaBGP's graceful exit, the margin
        assert pod_spec(obj)["terminationGracePeriodSeconds"] >= 3 + 1 + 5
    assert manifest.rbac(p, opts) == []
    for kind in ("pod", "daemonset"):
        for d in docs(manifest.render(kind, p, opts, "vipd.yaml")):
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    static = yaml.safe_load(manifest.render("config", p, opts, "vipd.yaml"))
    assert static["announce"]["bgp"]["peers"][0]["password_file"] == "/etc/vipd-bgp/tor1"
    assert p.stop_deadline_s == 3 + 1.0 + SPEAKER_GRACE_S


def test_speaker_grace_in_the_manifests_is_the_drivers() -> None:
    from vipd.routed import exabgp

    assert exabgp.TEARDOWN_WAIT + exabgp.GRACE == SPEAKER_GRACE_S


@pytest.mark.parametrize(
    ("announce", "election", "raw"),
    [
        ({"mode": "routing-table"}, None, False),
        ({**BGP_ANNOUNCE, "bgp": {**BGP_ANNOUNCE["bgp"], "bfd": {"enabled": True}}}, None, True),
        ({**BGP_ANNOUNCE, "pool": "leader"}, {"vrrp": {"vrid": 7}}, True),
        ({"mode": "routing-table", "pool": "leader"}, {"mode": "lease"}, True),
        ({"mode": "arp"}, {"vrrp": {"vrid": 7}}, True),
        ({"mode": "arp"}, {"mode": "lease"}, True),
    ],
)
def test_net_raw_only_where_a_raw_socket_is_opened(
    announce: dict[str, Any], election: dict[str, Any] | None, raw: bool
) -> None:
    data: dict[str, Any] = {"vip": "10.79.0.100", "interface": "eth0", "announce": announce}
    if election is None:
        data["health"] = {}
    else:
        data["election"] = election
    p = manifest.plan(data)
    opts = manifest.Options()
    want = ["NET_ADMIN", "NET_RAW"] if raw else ["NET_ADMIN"]
    assert _caps(manifest.pod(p, opts)) == want
    assert _caps(manifest.daemonset(p, opts)) == want


def test_the_leader_pool_in_bgp_mode_covers_the_election_and_the_drain() -> None:
    data = {
        "vip": "10.79.0.100",
        "interface": "lan0",
        "announce": {**BGP_ANNOUNCE, "pool": "leader"},
        "election": {"vrrp": {"vrid": 7, "advert_interval": 2}},
    }
    v = manifest.plan(data)
    skew = state.skew_time(3, 1, 200)
    assert v.stop_deadline_s == pytest.approx(skew + 2 + 3 + 1.0 + SPEAKER_GRACE_S)
