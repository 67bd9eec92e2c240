"""The kubelet bed: three kubeadm control-plane nodes with real kubelets and containerd.

What it is: ``KubeletBed`` builds, on the lab's bridge (``vipd.lab.topology.Lab``: nodes
n1…n3 and a client namespace), three ``Machine``s (each its own network, mount and PID
namespace, running containerd and a real kubelet, see node.py), then bootstraps a cluster the
way docs/install.md tells a user to:

1. on n1, vipd's static pod (``vipd manifest pod``, from the bed's vipd config) goes into
   ``/etc/kubernetes/manifests`` before ``kubeadm init --upload-certs`` with
   ``controlPlaneEndpoint: VIP:6443``: the kubelet starts vipd alongside etcd and the API
   server, vipd binds the VIP (a lone bootstrap node may hold it while its API server is not
   up yet), and kubeadm's wait for the API server through the VIP succeeds;
2. n2 and n3 get the same static pod and ``kubeadm join --control-plane`` through the VIP.

With ``bootstrap="kube-vip"`` (Lease election only) the static pod is kube-vip's instead, as
``kube-vip manifest pod`` (the real binary ``scripts/setup-kube`` builds) prints it for the
bed's VIP and timings, its image a local one holding that binary; vipd's config is then what
``vipd import kube-vip`` makes of that manifest (kube-vip's own Lease, ``plndr-cp-lock``) and
its DaemonSet's ``adopt`` removes ``kube-vip.yaml``: the migration docs/operations.md
describes ("Replacing kube-vip").

The kubeadm config (``init_config``/``join_config``, pure) is what a user of this sandbox
would write: the images kubeadm lists are imported beforehand (``imagePullPolicy: Never``),
the CoreDNS and kube-proxy addons are disabled (no pod network here; nothing in the bed
needs cluster DNS or Service routing, and their images are not built), and the one preflight
error ignored is named with its reason. Per-node kubelet settings (``cgroupRoot``) go in as
kubeadm patches, so the cluster-wide kubelet config that joins download stays shared.

What it must not do: pull images, touch the host's network, sysctls or firewall (everything
is inside the lab's namespaces and the nodes' own mount namespaces), or leave processes,
namespaces or cgroups behind after ``teardown``.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from vipd.lab.kubebed import binaries
from vipd.lab.kubelet_bed import images
from vipd.lab.kubelet_bed.clients import COLUMNS, PodWatch, ReadyzLoop
from vipd.lab.kubelet_bed.node import CONTAINERD_SOCKET, Machine, MachineError
from vipd.lab.kubelet_bed.podlogs import PodLogKeeper, cri_time
from vipd.lab.podman import Podman
from vipd.lab.prober import Prober
from vipd.lab.responder import Responder
from vipd.lab.topology import VIP4, Lab, LabError, Node, python_argv, python_env

Election = Literal["vrrp", "lease"]
Bootstrap = Literal["vipd", "kube-vip"]
API_PORT = 6443
POD_SUBNET = "10.244.0.0/16"
SERVICE_SUBNET = "10.96.0.0/12"
VIPD_IMAGE = "localhost/vipd:kubelet-bed"
# The "new release" an image roll applies: a second tag of the same locally built image (same
# layers; the DaemonSet's spec changes, so every pod is replaced as for a real upgrade).
VIPD_IMAGE_NEXT = "localhost/vipd:kubelet-bed-next"
# An image no node has and no registry serves: DaemonSet pods that never come up.
VIPD_IMAGE_MISSING = "localhost/vipd:kubelet-bed-missing"
# kube-vip's binary in a scratch image: kube-vip's own manifest with this image and no pull
KUBE_VIP_IMAGE = "localhost/kube-vip:kubelet-bed"
DAEMONSET_SELECTOR = "app.kubernetes.io/component=daemonset"
LEASE_TIMING = {"duration": 5, "renew_deadline": 3.0, "retry_period": 1.0}
SUPER_ADMIN_CONF = "/etc/kubernetes/super-admin.conf"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
# The lab's responder on every node: the 2 ms prober through the VIP learns who answers (the
# API server's TLS port says nothing before a handshake). Part of the instrument, not of the
# node: it runs in the node's network namespace, outside its PID namespace.
WHO_PORT = 7443
ADOPT_LABEL = "vipd.example/daemonset"
# The host is cgroup v1 (hybrid); the kubelet config says failCgroupV1: false, and kubeadm's
# SystemVerification check still fails on v1 until it is told to skip it (its own message:
# "You must also explicitly skip this validation", KEP-5573).
IGNORED_PREFLIGHT = ("SystemVerification",)
# Besides kube-apiserver, kubectl, etcd and etcdctl (binaries.REQUIRED).
KUBELET_BINS = ("kubelet", "kubeadm", "kube-controller-manager", "kube-scheduler", "pause")
CONTAINERD_BINS = ("containerd", "containerd-shim-runc-v2", "ctr", "crictl")


def _log(msg: str) -> None:
    print(f"[kubelet-bed {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def find_binaries() -> tuple[Path, Path]:
    """(Kubernetes binaries, containerd binaries) or ``binaries.Missing`` saying what lacks."""
    kube = binaries.find()
    lacking = [n for n in KUBELET_BINS if not os.access(kube / n, os.X_OK)]
    pointer = kube / "containerd.dir"
    ctr = Path(pointer.read_text().strip()) if pointer.is_file() else None
    if ctr is None:
        lacking.append("containerd.dir")
    else:
        lacking += [n for n in CONTAINERD_BINS if not os.access(ctr / n, os.X_OK)]
    if lacking or ctr is None:
        raise binaries.Missing(f"{kube} lacks {', '.join(lacking)} (build: scripts/setup-kube)")
    return kube, ctr


def kube_version(kube_bin: Path) -> str:
    out = subprocess.run(
        [str(kube_bin / "kubeadm"), "version", "-o", "short"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    return out.strip()


def etcd_tag(kube_bin: Path) -> str:
    """The image tag for the etcd we built, in kubeadm's style (``3.6.16-0``)."""
    return binaries.version(kube_bin / "etcd").split()[-1] + "-0"


def cluster_config(*, version: str, endpoint: str, etcd_image_tag: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": version,
        "controlPlaneEndpoint": endpoint,
        # Our etcd is the one scripts/setup-kube built (kubeadm 1.37 would ask for 3.7.0-0).
        "etcd": {"local": {"imageTag": etcd_image_tag}},
        # No pod network here (no CNI); nothing in the bed needs cluster DNS or Services.
        "dns": {"disabled": True},
        "proxy": {"disabled": True},
        "networking": {"podSubnet": POD_SUBNET, "serviceSubnet": SERVICE_SUBNET},
    }


def kubelet_config() -> dict[str, Any]:
    """The cluster-wide KubeletConfiguration kubeadm uploads (per-node parts are patches)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",  # no systemd as PID 1 here
        "failCgroupV1": False,  # the host is cgroup v1 (hybrid)
        "failSwapOn": False,
        # No CAP_SYS_RESOURCE: the kubelet cannot lower its own oom_score_adj (-999).
        "oomScoreAdj": 0,
    }


def _node_registration(machine: Machine) -> dict[str, Any]:
    return {
        "name": machine.name,
        "criSocket": f"unix://{CONTAINERD_SOCKET}",
        "imagePullPolicy": "Never",
        "ignorePreflightErrors": list(IGNORED_PREFLIGHT),
        "kubeletExtraArgs": [{"name": "node-ip", "value": machine.ipv4}],
    }


def init_config(
    machine: Machine,
    *,
    cluster: dict[str, Any],
    token: str,
    certificate_key: str,
    patches: Path,
) -> str:
    init = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "bootstrapTokens": [{"token": token, "ttl": "2h0m0s"}],
        "certificateKey": certificate_key,
        "localAPIEndpoint": {"advertiseAddress": machine.ipv4, "bindPort": API_PORT},
        "nodeRegistration": _node_registration(machine),
        "patches": {"directory": str(patches)},
    }
    return yaml.safe_dump_all([init, cluster, kubelet_config()], sort_keys=False)


def join_config(
    machine: Machine,
    *,
    endpoint: str,
    token: str,
    ca_hash: str,
    certificate_key: str,
    patches: Path,
) -> str:
    join = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": endpoint,
                "token": token,
                "caCertHashes": [ca_hash],
            }
        },
        "controlPlane": {
            "localAPIEndpoint": {"advertiseAddress": machine.ipv4, "bindPort": API_PORT},
            "certificateKey": certificate_key,
        },
        "nodeRegistration": _node_registration(machine),
        "patches": {"directory": str(patches)},
    }
    return yaml.safe_dump(join, sort_keys=False)


def new_token() -> str:
    """A bootstrap token, ``[a-z0-9]{6}.[a-z0-9]{16}`` (kubeadm's format)."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    pick = "".join(secrets.choice(alphabet) for _ in range(22))
    return f"{pick[:6]}.{pick[6:]}"


class KubeletBed:
    """Three kubeadm control-plane nodes with vipd; a context manager that always tears down."""

    def __init__(
        self,
        election: Election = "vrrp",
        *,
        prefix: str | None = None,
        workdir: Path | None = None,
        keep: bool = False,
        bootstrap: Bootstrap = "vipd",
        spare: int = 0,
        unicast: bool = False,
    ) -> None:
        if not 0 <= spare <= 3:
            raise ValueError(f"spare machines: 0..3 (got {spare})")
        if unicast and election != "vrrp":
            raise ValueError("unicast is a VRRP mode")
        self.unicast = unicast
        if bootstrap == "kube-vip" and election != "lease":
            raise ValueError("the kube-vip bootstrap is for Lease election (kube-vip's Lease)")
        self.election = election
        self.bootstrap = bootstrap
        self.static_name = "vipd" if bootstrap == "vipd" else "kube-vip"
        self.kube_bin, self.ctr_bin = find_binaries()
        # Spare machines (n4…) are on the bridge from the start, powered off until
        # ``add_machine``: the machines a control-plane replacement brings in.
        self.lab = Lab(nodes=3 + spare, prefix=prefix, workdir=workdir, keep_workdir=keep)
        self.vip = VIP4
        self.endpoint = f"{VIP4}:{API_PORT}"
        self.version = kube_version(self.kube_bin)
        self.token = new_token()
        self.certificate_key = secrets.token_hex(32)
        self.machines: dict[str, Machine] = {}
        # The machines that are the cluster's (booted): n1…n3, then those added, less those
        # retired (powered off for good).
        self.members: list[str] = ["n1", "n2", "n3"]
        self._ca_hash: str | None = None
        self.responders: list[Responder] = []
        self.prober: Prober | None = None
        self.kubectl_loop: ReadyzLoop | None = None
        self.pod_logs: PodLogKeeper | None = None
        self.pod_watch: PodWatch | None = None
        self.events: list[tuple[float, str]] = []  # (monotonic, what) for the timeline

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> KubeletBed:
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))
        _log(what)

    def build(self) -> None:
        self.lab.build()
        cluster = self.cluster_config()
        cfg = self.lab.workdir / "images.yaml"
        cfg.write_text(yaml.safe_dump(cluster))
        names = subprocess.run(
            [str(self.kube_bin / "kubeadm"), "config", "images", "list", "--config", str(cfg)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()  # fmt: skip
        specs = images.plan(names)
        if os.access(self.kube_bin / binaries.KUBE_VIP, os.X_OK):
            # always in the archive, so every bed on these binaries shares one archive
            specs.append(images.ImageSpec(name=KUBE_VIP_IMAGE, programs=(binaries.KUBE_VIP,)))
        elif self.bootstrap == "kube-vip":
            raise binaries.Missing(f"kube-vip is not built in {self.kube_bin}")
        sandbox = next(s.name for s in specs if s.programs == ("pause",))
        t0 = time.monotonic()
        archive = images.ensure_archive(
            Podman(),
            specs,
            self.kube_bin,
            vipd_image=VIPD_IMAGE,
            vipd_tags=(VIPD_IMAGE_NEXT,),
            source_root=Path(__file__).resolve().parents[3],
        )
        self.note(f"images ready in {time.monotonic() - t0:.1f} s: {', '.join(names)}")
        for node in self.lab.nodes:
            self.machines[node.name] = Machine(
                node.name,
                node.ns,
                node.ipv4,
                self.lab.workdir / node.name,
                cgroup=f"vipd-{self.lab.prefix}-{node.name}",
                keep_addresses=[node.ipv4, node.ipv6],
                path=[self.ctr_bin, self.kube_bin],
                archive=archive,
                sandbox_image=sandbox,
            )
        t0 = time.monotonic()
        self.boot_all(self.members)
        self.note(
            f"3 nodes booted (containerd up, images imported) in {time.monotonic() - t0:.1f} s"
        )
        # From the first static vipd on: a replaced pod's log goes with the pod.
        self.pod_logs = PodLogKeeper({name: m.root for name, m in self.machines.items()})
        self.pod_logs.start()

    def teardown(self) -> None:
        if self.prober is not None:
            self.prober.stop()
        if self.kubectl_loop is not None:
            self.kubectl_loop.stop()
        if self.pod_logs is not None:
            self.pod_logs.stop()
        if self.pod_watch is not None:
            self.pod_watch.stop()
        for machine in self.machines.values():
            try:
                machine.remove()
            except (MachineError, OSError) as exc:
                _log(f"teardown {machine.name}: {exc}")
        self.lab.teardown()

    def boot_all(self, names: Sequence[str] | None = None) -> None:
        chosen = [self.machines[n] for n in (names or self.members)]
        with concurrent.futures.ThreadPoolExecutor(len(chosen)) as pool:
            for fut in [pool.submit(m.boot) for m in chosen]:
                fut.result()

    def power_off_all(self) -> None:
        chosen = [self.machines[n] for n in self.members]
        with concurrent.futures.ThreadPoolExecutor(len(chosen)) as pool:
            for fut in [pool.submit(m.power_off) for m in chosen]:
                fut.result()

    def add_machine(self, name: str) -> None:
        """Power on spare machine ``name`` (containerd up, images in): a new member, to be
        joined with ``join``."""
        if name in self.members or name not in self.machines:
            raise MachineError(f"{name} is not a spare machine")
        t0 = time.monotonic()
        self.machines[name].boot()
        self.members.append(name)
        self.note(f"{name}: booted (a new machine) in {time.monotonic() - t0:.1f} s")

    def retire(self, name: str) -> None:
        """Power machine ``name`` off for good: no longer a member (its files stay)."""
        self.machines[name].power_off()
        self.members.remove(name)
        self.note(f"{name}: powered off for good")

    # -- configs -------------------------------------------------------------------------

    def cluster_config(self) -> dict[str, Any]:
        return cluster_config(
            version=self.version, endpoint=self.endpoint, etcd_image_tag=etcd_tag(self.kube_bin)
        )

    def kube_vip_manifest(self) -> str:
        """``kube-vip manifest pod`` for the bed's VIP, interface and Lease timings, as the
        real kube-vip prints it (its flags as kube-vip's docs give them for ARP mode)."""
        t = LEASE_TIMING
        proc = subprocess.run(
            [str(self.kube_bin / binaries.KUBE_VIP), "manifest", "pod", "--interface", "eth0",
             "--address", self.vip, "--controlplane", "--arp", "--leaderElection",
             "--leaseDuration", str(t["duration"]),
             "--leaseRenewDuration", str(int(t["renew_deadline"])),
             "--leaseRetry", str(int(t["retry_period"]))],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise MachineError(f"kube-vip manifest pod: {proc.stderr.strip()}")
        return proc.stdout

    def vipd_config(self) -> dict[str, Any]:
        """One config for every node's vipd (each pod's identity is its node name). Lease
        mode: the timings 5/3/1 (as tests/kube), no kubeconfig (the static pod's comes from
        the host, the DaemonSet's is its ServiceAccount), the node's own API server. VRRP
        ``unicast``: the peers n1...n3 and those the cluster lists (``unicast_peers_from``). After a
        kube-vip bootstrap: ``vipd import kube-vip`` of kube-vip's manifest, unchanged."""
        if self.bootstrap == "kube-vip":
            from vipd.importers import kubevip

            result = kubevip.convert(self.kube_vip_manifest(), "kube-vip.yaml")
            if result.errors:
                raise MachineError(f"vipd import kube-vip: {'; '.join(result.errors)}")
            doc: dict[str, Any] = yaml.safe_load(result.yaml)
            return doc
        election: dict[str, Any] = (
            {"mode": "vrrp", "vrrp": {"vrid": 51, "advert_interval": 0.1}}
            if self.election == "vrrp"
            else {"mode": "lease", "lease": dict(LEASE_TIMING)}
        )
        cfg: dict[str, Any] = {
            "vip": self.vip,
            "interface": "eth0",
            "election": election,
            "garp": {"repeat": 3, "interval": 0.01},
        }
        if self.unicast:
            # docs/install.md's unicast set-up: the first three machines are the static start
            # set, the rest (the replacement's n4...) come from the cluster: its own API
            # server first, the VIP while a joining node's is not up yet.
            election["vrrp"]["unicast_peers"] = [n.ipv4 for n in self.lab.nodes[:3]]
            election["vrrp"]["unicast_peers_from"] = ["endpointslices", "nodes"]
            cfg["membership"] = {
                "api_servers": [f"https://127.0.0.1:{API_PORT}", f"https://{self.endpoint}"]
            }
        return cfg

    def render(self, kind: str, *extra: str, image: str = VIPD_IMAGE) -> str:
        """``vipd manifest KIND`` for the bed's config, as a user runs it."""
        cfg = self.lab.workdir / "vipd.yaml"
        cfg.write_text(yaml.safe_dump(self.vipd_config()))
        proc = subprocess.run(
            python_argv("vipd", "manifest", kind, "--config", str(cfg), "--image", image,
                        *extra),
            capture_output=True, text=True, timeout=60, check=False, env=python_env(),
        )  # fmt: skip
        if proc.returncode != 0:
            raise MachineError(f"vipd manifest {kind}: {proc.stderr.strip()}")
        return proc.stdout

    def _patches(self, machine: Machine) -> Path:
        # A kubeadm patch for this node's kubelet config only: its own cgroup subtree.
        patches = machine.dir / "patches"
        patches.mkdir(exist_ok=True)
        (patches / "kubeletconfiguration+merge.yaml").write_text(
            yaml.safe_dump({"cgroupRoot": f"/{machine.cgroup}"})
        )
        return patches

    def write_static_pod(self, machine: Machine, *, super_admin: bool = False) -> None:
        """``vipd manifest pod`` into the node's manifests (``--super-admin``: Lease mode on
        the ``kubeadm init`` node, Kubernetes >= 1.29, where admin.conf is not yet
        authorised). kube-vip bootstrap: kube-vip's manifest, its image the local one, its
        kubeconfig's hostPath super-admin.conf on the init node (inside the container the
        file stays admin.conf), as kube-vip's docs say for Kubernetes >= 1.29."""
        manifests = machine.root / "etc/kubernetes/manifests"
        manifests.mkdir(parents=True, exist_ok=True)
        if self.bootstrap == "kube-vip":
            pod = yaml.safe_load(self.kube_vip_manifest())
            for c in pod["spec"]["containers"]:
                c["image"], c["imagePullPolicy"] = KUBE_VIP_IMAGE, "Never"
            for v in pod["spec"]["volumes"]:
                if super_admin and v.get("hostPath", {}).get("path") == ADMIN_CONF:
                    v["hostPath"]["path"] = SUPER_ADMIN_CONF
            (manifests / "kube-vip.yaml").write_text(yaml.safe_dump(pod))
            return
        # Its config first (`vipd manifest config`): the pod reads the node's /etc/vipd.
        config_dir = machine.root / "etc/vipd"
        config_dir.mkdir(parents=True, exist_ok=True)
        (config_dir / "vipd.yaml").write_text(self.render("config"))
        extra = ("--super-admin",) if super_admin else ()
        (manifests / "vipd.yaml").write_text(self.render("pod", *extra))

    # -- bootstrap -----------------------------------------------------------------------

    def kubeadm(self, machine: Machine, *args: str, timeout: float = 600.0) -> str:
        t0 = time.monotonic()
        proc = machine.run(["kubeadm", *args], timeout=timeout, check=False)
        log = machine.dir / "kubeadm.log"
        with log.open("a") as out:
            out.write(f"$ kubeadm {' '.join(args)}\n{proc.stdout}\n{proc.stderr}\n")
        if proc.returncode != 0:
            raise MachineError(
                f"{machine.name}: kubeadm {args[0]} failed (exit {proc.returncode}) after "
                f"{time.monotonic() - t0:.0f} s: {proc.stderr.strip()[-1500:]} (log: {log})"
            )
        return proc.stdout

    def init(self) -> None:
        first = self.machines["n1"]
        lease = self.election == "lease"
        self.write_static_pod(first, super_admin=lease)
        cfg = first.dir / "kubeadm-init.yaml"
        cfg.write_text(
            init_config(
                first,
                cluster=self.cluster_config(),
                token=self.token,
                certificate_key=self.certificate_key,
                patches=self._patches(first),
            )
        )
        t0 = time.monotonic()
        self.note(f"n1: kubeadm init ({self.static_name} static pod in place)")
        self.kubeadm(first, "init", "--config", str(cfg), "--upload-certs")
        self.note(f"n1: kubeadm init done in {time.monotonic() - t0:.1f} s")
        took = self.wait_settled(["n1"])
        self.note(f"n1: Ready, its API server ready {took:.1f} s later")
        if lease:
            self.back_to_admin_conf(first)

    def back_to_admin_conf(self, machine: Machine, timeout: float = 120.0) -> None:
        """After ``kubeadm init``: the static pod back on admin.conf, with the command the
        rendered manifest's header and docs/install.md give; then until the kubelet has
        replaced the static vipd (a new container, running) and the VIP answers again."""

        name = self.static_name

        def vipd_ids() -> set[str]:
            out = json.loads(machine.crictl("ps", "-o", "json", "--name", f"^{name}$"))
            return {c["id"] for c in out["containers"]}

        before = vipd_ids()
        machine.run(["sed", "-i", f"s#{SUPER_ADMIN_CONF}#{ADMIN_CONF}#",
                     f"/etc/kubernetes/manifests/{name}.yaml"])  # fmt: skip
        self.note(
            f"{machine.name}: {name}'s static pod switched from super-admin.conf to admin.conf"
        )
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            now = vipd_ids()
            if now and not now & before and len(self.holders()) == 1 and self.readyz():
                self.note(f"{machine.name}: static {name} restarted on admin.conf, VIP held, "
                          f"{time.monotonic() - t0:.1f} s")  # fmt: skip
                return
            time.sleep(0.5)
        raise MachineError(f"{machine.name}: static {name} not restarted in {timeout:.0f} s")

    def ca_hash(self) -> str:
        """``sha256:<hex>`` of the cluster CA's public key, as ``kubeadm join`` checks it
        (read once from n1: a replacement removes n1's files with ``kubeadm reset``)."""
        if self._ca_hash is None:
            self._ca_hash = self._read_ca_hash()
        return self._ca_hash

    def _read_ca_hash(self) -> str:
        ca = self.machines["n1"].root / "etc/kubernetes/pki/ca.crt"
        pub = subprocess.run(
            ["openssl", "x509", "-pubkey", "-noout", "-in", str(ca)],
            capture_output=True, check=True, timeout=10,
        ).stdout  # fmt: skip
        der = subprocess.run(
            ["openssl", "pkey", "-pubin", "-outform", "der"],
            input=pub, capture_output=True, check=True, timeout=10,
        ).stdout  # fmt: skip
        return "sha256:" + hashlib.sha256(der).hexdigest()

    def api_ready(self, name: str, timeout: float = 3.0) -> bool:
        """Does node ``name``'s own API server answer /readyz (anonymous, as probes do)?"""
        url = f"https://{self.lab.node(name).ipv4}:{API_PORT}/readyz"
        proc = self.lab.exec(
            self.lab.client_ns,
            ["curl", "-sk", "--max-time", str(timeout), url],
            check=False, timeout=timeout + 5,
        )  # fmt: skip
        return proc.stdout.strip() == "ok"

    def wait_settled(self, names: Sequence[str], timeout: float = 180.0) -> float:
        """Until each named node is Ready and its own API server is ready (seconds taken).

        A control-plane join adds an etcd member: joining the next node before the last
        one's member and API server are up risks quorum on a loaded machine, as it would
        for a user joining nodes back to back.
        """
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                ready = self.nodes_ready()
            except (LabError, subprocess.TimeoutExpired, json.JSONDecodeError):
                ready = {}
            if all(ready.get(n) for n in names) and all(self.api_ready(n) for n in names):
                return time.monotonic() - t0
            time.sleep(1)
        raise MachineError(f"nodes {', '.join(names)} not ready in {timeout:.0f} s")

    def join(self, name: str, *, static_pod: bool = True) -> None:
        """``kubeadm join --control-plane`` through the VIP, with vipd's static pod (or,
        ``static_pod=False``, without: a node joining a cluster already on the DaemonSet)."""
        machine = self.machines[name]
        if static_pod:
            self.write_static_pod(machine)
        cfg = machine.dir / "kubeadm-join.yaml"
        cfg.write_text(
            join_config(
                machine,
                endpoint=self.endpoint,
                token=self.token,
                ca_hash=self.ca_hash(),
                certificate_key=self.certificate_key,
                patches=self._patches(machine),
            )
        )
        t0 = time.monotonic()
        self.note(f"{name}: kubeadm join --control-plane")
        self.kubeadm(machine, "join", "--config", str(cfg))
        self.note(f"{name}: kubeadm join done in {time.monotonic() - t0:.1f} s")
        took = self.wait_settled([name])
        self.note(f"{name}: Ready, its API server ready {took:.1f} s later")

    # -- the handover to the DaemonSet ---------------------------------------------------

    def apply_daemonset(self, image: str = VIPD_IMAGE, *, server: str | None = None) -> None:
        """The rendered DaemonSet, placed by a node label so nodes hand over one by one (a
        new ``image``: the upgrade docs/install.md describes, ``vipd manifest daemonset
        --image NEW`` and ``kubectl apply``)."""
        if self.election == "lease" or self.unicast:  # the Lease's or the membership's
            rbac = self.lab.workdir / "vipd-rbac.yaml"
            rbac.write_text(self.render("rbac", image=image))
            self.kubectl("apply", "-f", str(rbac), server=server)
        path = self.lab.workdir / "vipd-daemonset.yaml"
        extra = ("--static-manifest", f"/etc/kubernetes/manifests/{self.static_name}.yaml")
        path.write_text(self.render("daemonset", "--node-label", ADOPT_LABEL, *extra, image=image))
        self.kubectl("apply", "-f", str(path), server=server)

    def rollout_status(self, timeout: float = 300.0, *, server: str | None = None) -> str:
        """``kubectl -n kube-system rollout status ds/vipd`` (MachineError if it fails).

        Through the VIP, its connection breaks when the VIP moves (the new holder answers the
        old connection with a reset), and kubectl gives up when that hits a request rather
        than its watch ("Please retry"): run again then, as a user would, within
        ``timeout`` in all. Any other failure is raised."""
        end = time.monotonic() + timeout
        while True:
            left = max(1.0, end - time.monotonic())
            proc = self.lab.exec(
                self.lab.client_ns,
                self.kubectl_argv("-n", "kube-system", "rollout", "status", "ds/vipd",
                                  f"--timeout={int(left)}s", server=server, timeout=left),
                timeout=left + 10, check=False,
            )  # fmt: skip
            if proc.returncode == 0:
                return proc.stdout
            said = (proc.stderr or proc.stdout).strip()
            if not any(m in said for m in CONNECTION_LOST) or time.monotonic() >= end:
                raise MachineError(f"rollout status ds/vipd: {said}")
            self.note(f"rollout status: connection lost ({said.splitlines()[-1][:160]}); again")

    def follow_logs(self, pod: str, server: str) -> Path:
        """``kubectl logs -f`` of a vipd pod's vipd container into the work directory: the
        kubelet deletes a replaced pod's log files with the pod (kept for a post-mortem)."""
        path = self.lab.workdir / f"{pod}.log"
        with path.open("ab") as out:
            self.lab.spawn(
                self.lab.client_ns,
                self.kubectl_argv("-n", "kube-system", "logs", "-f", pod, "-c", "vipd",
                                  server=server, timeout=0),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return path

    def static_manifest(self, name: str) -> Path:
        return self.machines[name].root / f"etc/kubernetes/manifests/{self.static_name}.yaml"

    def vipd_pods(self, *, server: str | None = None) -> dict[str, dict[str, Any]]:
        """The DaemonSet's pods by node name."""
        data = json.loads(
            self.kubectl("get", "pods", "-n", "kube-system", "-l", DAEMONSET_SELECTOR,
                         "-o", "json", server=server)
        )  # fmt: skip
        return {p["spec"].get("nodeName", ""): p for p in data["items"]}

    def adopt(self, name: str, timeout: float = 180.0) -> float:
        """Label node ``name`` and wait until its DaemonSet pod is ready and its static
        manifest gone (``vipd adopt`` removed it); seconds taken."""
        t0 = time.monotonic()
        self.note(f"{name}: label {ADOPT_LABEL} (adopt)")
        self.kubectl("label", "node", name, f"{ADOPT_LABEL}=")
        static = self.static_manifest(name)
        while time.monotonic() - t0 < timeout:
            try:
                pod = self.vipd_pods().get(name)
            except (LabError, subprocess.TimeoutExpired, json.JSONDecodeError):
                pod = None
            if pod_ready(pod) and not static.exists():
                took = time.monotonic() - t0
                self.note(f"{name}: DaemonSet pod ready, static pod gone, {took:.1f} s")
                return took
            time.sleep(0.5)
        phase = (pod or {}).get("status", {})
        raise MachineError(f"{name}: adopt not done in {timeout:.0f} s: pod status {phase}")

    # -- the client's view ---------------------------------------------------------------

    def start_client(self) -> Prober:
        """Responders on the nodes, the 2 ms TCP prober (real-time) through the VIP, kubectl's
        /readyz through the VIP in a loop, and a watch on the DaemonSet's pods."""
        for node in self.lab.nodes:
            responder = Responder(self.lab, node, WHO_PORT)
            responder.start()
            self.responders.append(responder)
        # SCHED_FIFO: the client stands for a machine elsewhere, not one more task on the
        # two cores three API servers and etcd members share (their load is not the VIP's).
        self.prober = Prober(self.lab, self.vip, WHO_PORT, realtime=True)
        self.prober.start()
        self.kubectl_loop = ReadyzLoop(self.readyz_error)
        self.kubectl_loop.start()
        # Against n3's own API server: the VIP moves under a watch through it. (n3 is never the
        # node the flow reboots while it needs the watch: the roll comes before the reboot.)
        self.pod_watch = PodWatch(
            self.lab,
            self.kubectl_argv("get", "pods", "-n", "kube-system", "-l", DAEMONSET_SELECTOR,
                              "-w", "--no-headers", "-o", f"custom-columns={COLUMNS}",
                              server=self.server("n3"), timeout=0),
        )  # fmt: skip
        self.pod_watch.start()
        return self.prober

    def client_kubeconfig(self) -> Path:
        """n1's admin.conf (server: the VIP), for the client namespace: a copy in the work
        directory once there is one (``kubeadm reset`` on n1 removes n1's)."""
        copy = self.lab.workdir / "admin.conf"
        if copy.is_file():
            return copy
        original = self.machines["n1"].root / "etc/kubernetes/admin.conf"
        if original.is_file():
            shutil.copyfile(original, copy)
            return copy
        return original

    def server(self, name: str) -> str:
        """Node ``name``'s own API server, for kubectl when the VIP may not answer."""
        return f"https://{self.lab.node(name).ipv4}:{API_PORT}"

    def kubectl_argv(
        self, *args: str, server: str | None = None, timeout: float = 30.0
    ) -> list[str]:
        """kubectl in the client namespace: through the VIP (admin.conf), or ``server``;
        ``timeout`` 0 for none (a watch)."""
        where = ["--server", server] if server else []
        if timeout > 0:
            where += ["--request-timeout", f"{max(1, int(timeout))}s"]
        return [str(self.kube_bin / "kubectl"), "--kubeconfig", str(self.client_kubeconfig()),
                *where, *args]  # fmt: skip

    def kubectl(
        self, *args: str, timeout: float = 30.0, check: bool = True, server: str | None = None
    ) -> str:
        proc = self.lab.exec(
            self.lab.client_ns,
            self.kubectl_argv(*args, server=server, timeout=timeout),
            timeout=timeout + 5, check=check,
        )  # fmt: skip
        return proc.stdout

    def readyz(self, timeout: float = 3.0) -> bool:
        """Does ``kubectl get --raw /readyz`` through the VIP answer ok right now?"""
        return not self.readyz_error(timeout)

    def readyz_error(self, timeout: float = 3.0) -> str:
        """``kubectl get --raw '/readyz?verbose'`` through the VIP: empty if the API server
        answered ready, else why not: the checks it failed, or kubectl's last line (the VIP
        not reachable, say), or that kubectl did not end in time."""
        argv = self.kubectl_argv("get", "--raw", "/readyz?verbose", timeout=timeout)
        try:
            proc = self.lab.exec(self.lab.client_ns, argv, timeout=timeout + 5, check=False)
        except subprocess.TimeoutExpired:
            return f"kubectl did not end within {timeout + 5:.0f} s"
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines and lines[-1] == "readyz check passed":
            return ""
        failed = [line for line in lines if line.startswith("[-]")]
        said = failed or (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:]
        return f"exit {proc.returncode}: {'; '.join(said)[:300] if said else '(no output)'}"

    def wait_readyz(self, timeout: float) -> float:
        """Seconds until /readyz through the VIP answers ok; MachineError after ``timeout``."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.readyz():
                return time.monotonic() - t0
            time.sleep(0.5)
        raise MachineError(f"/readyz through the VIP did not answer in {timeout:.0f} s")

    def nodes_ready(self, *, server: str | None = None) -> dict[str, bool]:
        data = json.loads(self.kubectl("get", "nodes", "-o", "json", server=server))
        out = {}
        for item in data["items"]:
            conds = {c["type"]: c["status"] for c in item["status"].get("conditions", [])}
            out[item["metadata"]["name"]] = conds.get("Ready") == "True"
        return out

    def holders(self) -> list[str]:
        return self.lab.holders(self.vip)

    def node(self, name: str) -> Node:
        return self.lab.node(name)

    def vipd_containers(self, name: str, program: str = "vipd") -> list[dict[str, Any]]:
        """Every vipd (or ``program``) container node ``name``'s containerd has (running or
        exited): its pod, state, exit code, start and finish (POSIX seconds, 0 when not yet)."""
        machine = self.machines[name]
        listed = json.loads(machine.crictl("ps", "-a", "--name", f"^{program}$", "-o", "json"))
        found = [self.container(name, c["id"]) for c in listed["containers"]]
        return [dict(c, id=i["id"]) for c, i in zip(found, listed["containers"], strict=True) if c]

    def container(self, name: str, container_id: str) -> dict[str, Any] | None:
        """One container of node ``name`` as ``vipd_containers`` gives it (None: gone)."""
        proc = self.machines[name].run(
            ["crictl", "--runtime-endpoint", f"unix://{CONTAINERD_SOCKET}", "inspect",
             container_id], check=False, timeout=10,
        )  # fmt: skip
        if proc.returncode != 0:
            return None
        status = json.loads(proc.stdout)["status"]
        return {
            "pod": status["labels"].get("io.kubernetes.pod.name", ""),
            "state": status["state"],
            "exit_code": status.get("exitCode"),
            "started": rfc3339(status.get("startedAt", "")),
            "finished": rfc3339(status.get("finishedAt", "")),
        }

    def running_containers(self, name: str) -> list[str]:
        """Names of the containers the node's containerd runs (``crictl ps``)."""
        out = self.machines[name].crictl("ps", "-o", "json")
        return sorted(c["metadata"]["name"] for c in json.loads(out)["containers"])


# What kubectl prints when its connection through the VIP broke (the VIP moved under it).
CONNECTION_LOST = ("connection reset by peer", "connection refused", "Please retry", "EOF")


def rfc3339(stamp: str) -> float:
    """POSIX seconds of an RFC 3339 time as containerd gives it (nanoseconds, trailing zeros
    trimmed, ``Z``); 0.0 for an empty or zero time (``0001-01-01T00:00:00Z``)."""
    if not stamp or stamp.startswith("0001-"):
        return 0.0
    return cri_time(stamp) or 0.0


def pod_ready(pod: dict[str, Any] | None) -> bool:
    """The pod (as the API returns it) has containers and every one of them is ready."""
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all(c.get("ready") for c in statuses)


def usable() -> str | None:
    """Why the kubelet bed cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return f"needs root for namespaces and cgroups (running as uid {os.geteuid()})"
    for tool in ("ip", "nsenter", "unshare", "openssl", "podman", "runc", "mmdebstrap"):
        if shutil.which(tool) is None:
            return f"needs the {tool} command (scripts/setup installs it)"
    if not os.access("/usr/sbin/runc", os.X_OK):
        return "needs Debian's runc at /usr/sbin/runc (scripts/setup installs it)"
    try:
        find_binaries()
    except binaries.Missing as exc:
        return f"{exc}; build them with {binaries.BUILD_COMMAND} (as root)"
    return None
