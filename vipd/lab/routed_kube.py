"""kube-vip on the routed bed: a real control plane in the router's namespace and kube-vip's
two routed modes on the nodes, for bench/bgp.py's comparison.

What it is
    ``ControlPlane(bed, bins)``: one etcd member and one kube-apiserver (the real binaries,
    `vipd.lab.kubebed.binaries`) in the router's namespace, the API server on
    ``https://10.78.0.1:6443`` (the router's LAN address, which every node reaches through its
    default route). kube-vip needs an API server to start (its manager's client, the node
    lookup of its routing-table mode); it is not the API server the client reaches through
    the VIP, which is each node's stand-in (`vipd.lab.responder`). The stand-ins' certificate
    comes from the same CA (``standin_pair``), for kube-vip's routing-table check to verify.

    ``kube_vip_argv(...)``: kube-vip v1.0.0 ``manager`` with its environment variables
    (pkg/kubevip/config_envvar.go), under ``sh -c`` that first mounts a tmpfs on
    ``/etc/kubernetes`` and copies the admin kubeconfig there as ``admin.conf``: kube-vip's
    routing-table check (pkg/backend/backend.go, ``Entry.Check``) reads that exact path and
    otherwise uses the in-cluster config, which fails outside a pod. ``ip netns exec`` runs
    its command in a mount namespace of its own whose mounts do not propagate back, so the
    host's ``/etc/kubernetes`` is never touched.

    - ``bgp``: ``bgp_enable``, GoBGP inside kube-vip peering with the router (AS 65100 to
      65000), the VIP as an address on ``lo``, ``cp_enable`` without leader election: every
      node advertises it (pkg/manager/manager_bgp.go, ``StartVipService``), as vipd's ECMP
      pool does. No BFD (GoBGP has none), no API server health check (kube-vip adds
      ``control_plane_health_check_*`` in v1.2.0).
    - ``routing-table``: ``vip_routingtable``, kernel table 198 protocol 248, the node's own
      FRR exporting it, the VIP as an address on ``lo`` too; a node adds its route while
      ``GET https://127.0.0.1:<port>/version`` answers, checked every
      ``backend_health_check_interval`` seconds (pkg/cluster/service.go).

What it must not do: judge, or reach outside the bed's namespaces and directory.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from vipd.lab.kubebed.pki import Authority, Pair, signing_key
from vipd.lab.nsthread import in_netns
from vipd.lab.routed import NODE_AS, ROUTER_AS, ROUTER_LAN, TABLE, RoutedBed, RoutedNode
from vipd.lab.topology import LabError

__all__ = ["KUBE_VIP_MODES", "ControlPlane", "kube_vip_argv"]

API_PORT = 6443
ETCD_CLIENT = 2379
KUBE_VIP_MODES = ("bgp", "routing-table")
SERVICE_CIDR = "10.96.0.0/16"


class ControlPlane:
    """etcd and kube-apiserver in the router's namespace; ``stop`` kills them."""

    def __init__(self, bed: RoutedBed, bins: Path) -> None:
        self.bed = bed
        self.bins = bins
        self.dir = bed.workdir / "kube"
        self.dir.mkdir(exist_ok=True)
        self.dir.chmod(0o755)
        self.ca = Authority(self.dir, "ca")
        self.procs: list[subprocess.Popen[Any]] = []

    @property
    def server(self) -> str:
        return f"https://{ROUTER_LAN}:{API_PORT}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.conf"

    def standin_pair(self) -> Pair:
        """A serving certificate for the nodes' stand-in API servers, from the cluster CA."""
        return self.ca.issue(
            "standin",
            "kube-apiserver",
            usage="server",
            sans=["127.0.0.1", "localhost", *(n.addr for n in self.bed.nodes)],
        )

    def start(self, timeout: float = 120.0) -> None:
        pki = self.dir
        server = self.ca.issue(
            "apiserver", "kube-apiserver", usage="server",
            sans=[ROUTER_LAN, "127.0.0.1", "10.96.0.1", "kubernetes", "localhost"],
        )  # fmt: skip
        admin = self.ca.issue(
            "admin", "kubernetes-admin", usage="client", organisation="system:masters"
        )
        sa = signing_key(pki)
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "bed", "cluster": {"server": self.server,
                 "certificate-authority": str(self.ca.cert)}}
            ],
            "users": [{"name": "admin", "user": {"client-certificate": str(admin.cert),
                       "client-key": str(admin.key)}}],
            "contexts": [{"name": "bed", "context": {"cluster": "bed", "user": "admin"}}],
            "current-context": "bed",
        }  # fmt: skip
        self.admin_kubeconfig.write_text(yaml.safe_dump(doc, sort_keys=False))
        os.chmod(self.admin_kubeconfig, 0o600)
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
        env["GOMAXPROCS"] = "2"
        etcd = [
            str(self.bins / "etcd"), "--name=router",
            f"--data-dir={pki / 'etcd.data'}",
            f"--listen-client-urls=http://127.0.0.1:{ETCD_CLIENT}",
            f"--advertise-client-urls=http://127.0.0.1:{ETCD_CLIENT}",
            "--listen-peer-urls=http://127.0.0.1:2380", "--log-level=warn",
        ]  # fmt: skip
        api = [
            str(self.bins / "kube-apiserver"),
            f"--advertise-address={ROUTER_LAN}", "--bind-address=0.0.0.0",
            f"--secure-port={API_PORT}", f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT}",
            f"--tls-cert-file={server.cert}", f"--tls-private-key-file={server.key}",
            f"--client-ca-file={self.ca.cert}", "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa.cert}",
            f"--service-account-signing-key-file={sa.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false", "--v=0",
        ]  # fmt: skip
        for name, argv in (("etcd", etcd), ("kube-apiserver", api)):
            log = (self.dir / f"{name}.log").open("ab")
            self.procs.append(
                self.bed.spawn(self.bed.router, argv, stdout=log, stderr=subprocess.STDOUT, env=env)
            )
            log.close()
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise LabError(
                    f"the control plane did not become ready in {timeout:.0f} s; see {self.dir}"
                )
            time.sleep(0.5)

    def ready(self) -> bool:
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.ca.cert))
        ctx.check_hostname = False

        def get() -> int:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{API_PORT}/readyz", timeout=2, context=ctx
            ) as r:
                return int(r.status)

        try:
            return in_netns(self.bed.router, get) == 200
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def kube_vip_argv(
    binary: Path,
    mode: str,
    node: RoutedNode,
    vip: str,
    kubeconfig: Path,
    *,
    check_port: int,
    check_interval: int = 5,
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of kube-vip in ``mode`` on ``node``."""
    if mode not in KUBE_VIP_MODES:
        raise ValueError(f"kube-vip mode must be one of {KUBE_VIP_MODES} (got {mode!r})")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(kubeconfig.parent),
        "cp_enable": "true",
        "vip_leaderelection": "false",
        "vip_arp": "false",
        "address": vip,
        "vip_subnet": "32",
        "vip_interface": "lo",
        "vip_nodename": node.name,
        "port": str(check_port),
    }
    if mode == "bgp":
        env |= {
            "bgp_enable": "true",
            "bgp_routerid": node.addr,
            "bgp_as": str(NODE_AS),
            "bgp_peers": f"{node.router_addr}:{ROUTER_AS}::false",
        }
    else:
        env |= {
            "vip_routingtable": "true",
            "vip_routingtableid": str(TABLE),
            "backend_health_check_interval": str(check_interval),
        }
    script = (
        "mount -t tmpfs -o size=1m,mode=0755 tmpfs /etc/kubernetes && "
        f'cp "{kubeconfig}" /etc/kubernetes/admin.conf && '
        f'exec "{binary}" manager --k8sConfigPath "{kubeconfig}"'
    )
    return ["sh", "-c", script], env
