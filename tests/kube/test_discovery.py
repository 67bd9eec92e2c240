"""IPVS discovery against the real API servers, with the rendered DaemonSet's credentials.

What it tests: ``vipd manifest daemonset`` and ``vipd manifest rbac`` for a config with
``ipvs.discovery.enabled`` give the pod a ServiceAccount token (no kubeconfig in discovery's
config) bound to a Role that may list the EndpointSlices; with those RBAC objects applied,
a TokenRequest token mounted where a kubelet mounts it and the container's environment,
vipd's discovery source (``vipd.ipvs.discovery``, run by ``vipd.lab.kubebed.discovery``) on a
node lists the three API servers from the real ``default/kubernetes`` EndpointSlices, drops
one whose kube-apiserver is SIGKILLed (the lease endpoint reconciler's TTL, 15 s, plus its
10 s pass: ``DefaultEndpointReconcilerTTL`` and ``DefaultEndpointReconcilerInterval`` in
kubernetes' ``pkg/controlplane/instance.go``) and lists it again once it is back. The host
kernel has no IPVS: the backend set judged is discovery's, the input of the IPVS reconciler.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.conftest import Window
from vipd.lab.kubebed import discovery
from vipd.lab.kubebed.bed import READY_TIMEOUT, KubeBed
from vipd.lab.topology import Node, python_argv, python_env

pytestmark = pytest.mark.kube

INTERVAL = 1.0  # discovery's poll interval in this test's config
TTL = 15.0  # kube-apiserver's endpoint lease TTL
PASS = 10.0  # how often every API server reconciles the endpoints
SLACK = 15.0  # three API servers and three etcds on two shared cores


def _render(bed: KubeBed, cfg: dict[str, Any], what: str) -> list[dict[str, Any]]:
    path = bed.lab.workdir / "discovery-render.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = subprocess.run(
        python_argv("vipd", "manifest", what, "--config", str(path)),
        capture_output=True, text=True, env=python_env(), check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _container_env(container: dict[str, Any], node: Node) -> dict[str, str]:
    """The container's environment as a kubelet on ``node`` would fill it in."""
    fields = {"spec.nodeName": node.name, "status.hostIP": node.ipv4}
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _wait(path: Path, want: list[str], since: float, timeout: float) -> float:
    """Monotonic time of the first recorded answer at or after ``since`` equal to ``want``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in discovery.read(path):
            if rec["t"] >= since and rec.get("backends") == want:
                return float(rec["t"])
        time.sleep(0.2)
    tail = discovery.read(path)[-5:]
    raise AssertionError(f"discovery never answered {want} within {timeout:.0f} s: {tail}")


def test_discovery_follows_an_api_server_stopped_and_restarted(
    bed: KubeBed, window: Window
) -> None:
    node = bed.nodes[0]
    cfg = bed.vipd_config(node)
    cfg["ipvs"] = {
        "enabled": True,
        "backends": [node.ipv4],
        "discovery": {"enabled": True, "interval": INTERVAL},
    }
    rendered = _render(bed, cfg, "daemonset")
    (ds,) = [d for d in rendered if d["kind"] == "DaemonSet"]
    (config_map,) = [d for d in rendered if d["kind"] == "ConfigMap"]
    pod = ds["spec"]["template"]["spec"]
    account = pod["serviceAccountName"]
    assert pod.get("automountServiceAccountToken", True) is True, pod
    (container,) = [c for c in pod["containers"] if c["name"] == "vipd"]
    env = _container_env(container, node)
    assert "VIPD_CONFIG" not in env  # the config is the ConfigMap's file
    config_text = config_map["data"]["vipd.yaml"]
    in_pod = yaml.safe_load(config_text)
    assert "kubeconfig" not in in_pod["ipvs"]["discovery"], in_pod  # so: the token

    rbac = _render(bed, cfg, "rbac")
    namespace = ds["metadata"]["namespace"]
    accounts = {
        (d["metadata"]["name"], d["metadata"]["namespace"])
        for d in rbac
        if d["kind"] == "ServiceAccount"
    }
    assert (account, namespace) in accounts, rbac
    role = {
        d["roleRef"]["name"]
        for d in rbac
        if d["kind"] == "RoleBinding"
        and d["metadata"]["namespace"] == "default"
        and {"kind": "ServiceAccount", "name": account, "namespace": namespace} in d["subjects"]
    }
    slice_rules = [
        r for d in rbac
        if d["kind"] == "Role" and d["metadata"]["namespace"] == "default"
        and d["metadata"]["name"] in role
        for r in d["rules"] if "endpointslices" in r["resources"] and "list" in r["verbs"]
    ]  # fmt: skip
    assert slice_rules, rbac
    text = "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in rbac)
    bed.kubectl("apply", "-f", "-", input_text=text)

    token = bed.lab.workdir / "discovery.token"
    token.write_text(bed.token(account, namespace))
    token.chmod(0o600)
    out_path = bed.lab.workdir / "discovery.jsonl"
    all_three = sorted(n.ipv4 for n in bed.nodes)
    holder = bed.wait_one_holder(10)
    # Not the node discovery asks (its own API server must answer), not the VIP holder.
    victim = next(n for n in bed.nodes[1:] if n.name != holder)
    with out_path.open("ab") as out:
        rec = discovery.spawn_in_pod(
            bed.lab, node, config_text=config_text, env=env, token_file=token,
            ca_file=bed.pki / "ca.crt", namespace=namespace, out=out, interval=INTERVAL,
        )  # fmt: skip
    try:
        t_start = window.mark(f"discovery on {node.name} as {namespace}/{account}")
        _wait(out_path, all_three, t_start, 60)
        first = discovery.read(out_path)[0]
        assert first.get("using") == "in-cluster", first

        t_kill = window.mark(f"SIGKILL kube-apiserver on {victim.name}")
        bed.procs[victim.name].apiserver.kill()
        rest = sorted(n.ipv4 for n in bed.nodes if n is not victim)
        dropped = _wait(out_path, rest, t_kill, TTL + PASS + INTERVAL + SLACK)
        window.mark(f"discovery drops {victim.ipv4}")
        print(f"\ndiscovery dropped {victim.ipv4} {dropped - t_kill:.1f} s after SIGKILL")

        t_up = window.mark(f"kube-apiserver on {victim.name} started again")
        bed.procs[victim.name].apiserver.start()
        bed.wait_ready([victim.name], READY_TIMEOUT)
        ready = time.monotonic()
        back = _wait(out_path, all_three, t_up, READY_TIMEOUT + PASS + INTERVAL + SLACK)
        window.mark(f"discovery lists {victim.ipv4} again")
        print(
            f"discovery listed {victim.ipv4} again {back - t_up:.1f} s after the restart "
            f"({back - ready:.1f} s after its /readyz)"
        )
        assert back - ready <= PASS + INTERVAL + SLACK, back - ready
        recs = discovery.read(out_path)
        denied = [r for r in recs if "error" in r and ("401" in r["error"] or "403" in r["error"])]
        assert not denied, denied  # the rendered RBAC and the token are enough
        errors = [r for r in recs if "error" in r]
        print(f"{len(recs) - 1} answers, {len(errors)} failed: {errors[:3]}")
    finally:
        rec.kill()
        rec.wait(timeout=10)
    window.check()
