"""A stacked Kubernetes control plane in network namespaces, with vipd on every node.

What it is: ``KubeBed``, a context manager that builds, on the lab's topology
(``vipd.lab.topology.Lab``: three node namespaces and a client on one bridge, every name with
a per-run prefix), the control plane kubeadm users run:

- per node, an **etcd** member of one 3-member cluster over TLS (peer and client
  certificates, client certificate authentication on both), and a **kube-apiserver** that
  talks to its local member only (``--etcd-servers=https://127.0.0.1:2379``, as kubeadm's
  stacked etcd does), advertises the node's address, serves a certificate whose SANs hold the
  VIP, the node addresses, 127.0.0.1 and the ``kubernetes.default`` names, authorises with
  ``Node,RBAC`` and keeps ``default/kubernetes`` to the live API servers with the lease
  endpoint reconciler; ServiceAccount tokens are signed by one key all three share;
- per node, **vipd** in Lease mode talking to its own API server at https://127.0.0.1:6443
  (``election.lease``'s default, checked against the name ``kubernetes``), authenticated as
  the ServiceAccount that ``vipd manifest rbac`` renders — applied with kubectl, the token
  from the TokenRequest API (``kubectl create token``) — and checking the local and the peers'
  ``/readyz`` (``health``);
- the **observers**: ``ip monitor address`` in every node (``vipd.lab.watch.HolderWatch``),
  each vipd's ``/status`` belief (``vipd.lab.kubebed.beliefs``), and the 2 ms TCP prober
  (``vipd.lab.prober``) from the client namespace through the VIP, answered by a responder on
  ``WHO_PORT`` of every node so that the client sees *which* node holds the VIP (kube-apiserver
  speaks TLS first and does not say who it is);
- the **faults** the Lease backend must survive, injected for real (see the methods under
  "faults"): nftables between the namespaces, signals to etcd, kube-apiserver or vipd, a
  FlowSchema and PriorityLevelConfiguration that ``Reject`` vipd's ServiceAccount plus a load
  generator, etcd's ``NOSPACE`` alarm, the whole etcd cluster down, a node cut off the bridge,
  and libfaketime on one vipd.

Every process runs inside the bed's namespaces, and teardown (always, also after a failed
start) kills them and deletes the namespaces; its files live in the bed's work directory.

What it must not do: fake a component (every server is the real binary that
``scripts/setup-kube`` built), touch anything outside its namespaces and work directory, or
judge a run (``vipd.lab.kubebed.verdict`` and the tests do).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml

from vipd.lab.daemons import LEASE_STARTED, Daemon, DaemonKind, VipdDaemon, VrrpSpec
from vipd.lab.faults import drop_address
from vipd.lab.kubebed import binaries
from vipd.lab.kubebed.beliefs import Beliefs
from vipd.lab.kubebed.pki import Authority, signing_key
from vipd.lab.prober import Prober
from vipd.lab.responder import Responder
from vipd.lab.topology import VIP4, Lab, LabError, Node, python_argv, python_env
from vipd.lab.watch import HolderWatch

API_PORT = 6443
WHO_PORT = 7443  # the responder every node runs: the prober learns who answers at the VIP
STATUS_PORT = 2112  # vipd's metrics.listen default: /status
ETCD_CLIENT = 2379
ETCD_PEER = 2380
# Small enough to fill in seconds (fault: NOSPACE), large enough for a fresh control plane.
QUOTA_BYTES = 48 * 1024 * 1024
FILL_PREFIX = "/vipd-bed/fill/"
SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
LEASE = ("kube-system", "vipd-cp-lock")
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
APF_NAME = "vipd-bed-reject"
LOAD_SA = "vipd-bed-load"
READY_TIMEOUT = 240.0  # three API servers starting at once on two shared cores


@dataclass(frozen=True, slots=True)
class Timing:
    """The Lease timings every vipd of the bed runs with (seconds)."""

    duration: int = 5
    renew_deadline: float = 3.0
    retry_period: float = 1.0

    def takeover_bound(self) -> float:
        """Longest time a follower waits for a Lease nobody renews any more: it must see
        ``duration`` pass unchanged, and tries again every ``retry_period``."""
        return self.duration + self.retry_period


def _log(msg: str) -> None:
    print(f"kubebed: {msg}", file=sys.stderr, flush=True)


class Proc:
    """One long-running server of the bed (etcd or kube-apiserver) on one node."""

    def __init__(
        self, lab: Lab, node: Node, kind: str, argv: Sequence[str], env: Mapping[str, str]
    ) -> None:
        self.lab = lab
        self.node = node
        self.kind = kind
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = lab.workdir / f"{node.name}-{kind}.log"
        self.proc: subprocess.Popen[Any] | None = None
        self.stopped = False  # SIGSTOPped right now
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        if self.running():
            return
        self._close()
        self._log = self.log_path.open("ab")
        header = f"=== start {self.kind} {self.node.name} at {time.monotonic():.6f}\n"
        self._log.write(header.encode())
        self._log.flush()
        self.proc = self.lab.spawn(
            self.node.ns,
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        self.stopped = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise LabError(f"{self.kind} on {self.node.name} is not running")
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.stopped = False
        self._close()

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class BedVipd(VipdDaemon):
    """vipd on a bed node: the config is the bed's (Lease mode, its own API server)."""

    def __init__(self, bed: KubeBed, node: Node) -> None:
        super().__init__(bed.lab, node, VrrpSpec(vip=VIP4), bed.lab.nodes)
        self.bed = bed
        self.faketime: str | None = None  # e.g. "+1h": this vipd's wall clock is that far off

    def config(self) -> dict[str, Any]:
        return self.bed.vipd_config(self.node)

    def election_started(self) -> bool:
        return LEASE_STARTED in self.log_text()  # the bed's vipd runs Lease mode only

    def _env(self) -> dict[str, str]:
        extra = {"NODE_NAME": self.node.name}
        if self.faketime is not None:
            # The wall clock only: CLOCK_MONOTONIC stays true, as on a host whose NTP is off.
            extra |= {
                "LD_PRELOAD": FAKETIME_LIB,
                "FAKETIME": self.faketime,
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_DONT_RESET": "1",
            }
        return python_env(extra)


# kube-vip's metrics listener (its default is vipd's port, which the bed's observers read).
KUBE_VIP_METRICS = 2113
# client-go's leader election logs this when kube-vip starts to campaign for its Lease.
KUBE_VIP_CAMPAIGN = "attempting to acquire leader lease"


class BedKubeVip(Daemon):
    """kube-vip on a bed node, for a comparison in the same run: its control-plane VIP (ARP
    mode, client-go leader election on the Lease ``plndr-cp-lock``), the bed's Lease timing
    (whole seconds, its flags' unit), talking to its own API server at https://127.0.0.1:6443
    with the bed's admin credentials (what it is allowed to do is not what is measured)."""

    kind: DaemonKind = "kube-vip"

    def __init__(self, bed: KubeBed, node: Node) -> None:
        super().__init__(bed.lab, node, VrrpSpec(vip=VIP4), bed.lab.nodes)
        self.bed = bed

    def argv(self, kubeconfig: Path) -> list[str]:
        t = self.bed.timing
        return [
            str(self.bed.bins / binaries.KUBE_VIP), "manager",
            "--controlplane", "--arp", "--leaderElection",
            "--address", VIP4, "--vipSubnet", "32", "--interface", "eth0",
            "--leaseDuration", _seconds(t.duration),
            "--leaseRenewDuration", _seconds(t.renew_deadline),
            "--leaseRetry", _seconds(t.retry_period),
            "--k8sConfigPath", str(kubeconfig),
            "--nodeName", self.node.name,
            "--prometheusHTTPServer", f"127.0.0.1:{KUBE_VIP_METRICS}",
        ]  # fmt: skip

    @property
    def home(self) -> Path:
        return self.lab.workdir / f"{self.node.name}-kube-vip"

    def _prepare(self) -> list[str]:
        # Its manager's client reads /etc/kubernetes/admin.conf, else $HOME/.kube/config, else
        # the in-cluster config (pkg/manager, v1.0.0); its election the --k8sConfigPath one.
        path = self.home / ".kube" / "config"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.bed.local_admin_kubeconfig(path)
        return self.argv(path)

    def _env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}

    def election_started(self) -> bool:
        return KUBE_VIP_CAMPAIGN in self.log_text()


def _seconds(value: float) -> str:
    if value != int(value) or value < 1:
        raise LabError(f"kube-vip takes its Lease timing in whole seconds (got {value})")
    return str(int(value))


@dataclass
class NodeProcs:
    etcd: Proc
    apiserver: Proc
    vipd: BedVipd
    responder: Responder


class KubeBed:
    """``with KubeBed() as bed:`` — the control plane, vipd everywhere, the observers."""

    def __init__(
        self,
        *,
        bins: Path | None = None,
        timing: Timing = Timing(),
        prefix: str | None = None,
        quota_bytes: int = QUOTA_BYTES,
        start_vipd: bool = True,
        start_prober: bool = True,
        workdir: Path | None = None,
        keep_workdir: bool = False,
        faketime: Mapping[str, str] | None = None,
    ) -> None:
        self.bins = bins if bins is not None else binaries.find()
        self.timing = timing
        self.quota_bytes = quota_bytes
        self.start_vipd = start_vipd
        self.start_prober = start_prober
        self.lab = Lab(nodes=3, prefix=prefix, workdir=workdir, keep_workdir=keep_workdir)
        self.pki = self.lab.workdir / "pki"
        self.procs: dict[str, NodeProcs] = {}
        self.faketime = dict(faketime or {})
        self.watch: HolderWatch | None = None
        self.beliefs: Beliefs | None = None
        self.prober: Prober | None = None
        self.startup_s: float | None = None
        self.apiserver_version = binaries.version(self.bins / "kube-apiserver")
        self.etcd_version = binaries.version(self.bins / "etcd")
        self._load: subprocess.Popen[Any] | None = None
        self._cut: set[str] = set()
        self._parted: set[str] = set()

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> KubeBed:
        try:
            self.start()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.teardown()

    @property
    def nodes(self) -> list[Node]:
        return self.lab.nodes

    def node(self, name: str) -> Node:
        return self.lab.node(name)

    def start(self) -> None:
        began = time.monotonic()
        self.lab.build()
        self._make_pki()
        for node in self.nodes:
            self.procs[node.name] = NodeProcs(
                etcd=Proc(self.lab, node, "etcd", self._etcd_argv(node), self._go_env()),
                apiserver=Proc(
                    self.lab, node, "apiserver", self._apiserver_argv(node), self._go_env()
                ),
                vipd=BedVipd(self, node),
                responder=Responder(self.lab, node, WHO_PORT),
            )
            if node.name in self.faketime:
                self.procs[node.name].vipd.faketime = self.faketime[node.name]
        # All members at once: each waits for the others to form the first quorum.
        for p in self.procs.values():
            p.etcd.start()
        for p in self.procs.values():
            p.apiserver.start()
        self.wait_ready(list(self.procs), READY_TIMEOUT)
        _log(f"{self.apiserver_version} ready on 3 nodes after {time.monotonic() - began:.1f} s")
        self._bootstrap()
        for p in self.procs.values():
            p.responder.start()
        self.watch = HolderWatch(self.lab, VIP4)
        self.watch.start()
        self.beliefs = Beliefs(self.lab, {n.name: n.ipv4 for n in self.nodes}, STATUS_PORT)
        self.beliefs.start()
        if self.start_vipd:
            for p in self.procs.values():
                p.vipd.start()
            self.wait_one_holder(2 * self.timing.takeover_bound() + 30)
        if self.start_prober:
            self.prober = Prober(self.lab, VIP4, WHO_PORT)
            self.prober.start()
        self.startup_s = time.monotonic() - began
        _log(f"bed {self.lab.prefix} up in {self.startup_s:.1f} s; work dir {self.lab.workdir}")

    def teardown(self) -> None:
        self.stop_load()
        for obs in (self.prober, self.beliefs):
            if obs is not None:
                with contextlib.suppress(Exception):
                    obs.stop()
        if self.watch is not None:
            with contextlib.suppress(Exception):
                self.watch.stop()
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.vipd.stop(signal.SIGKILL, timeout=5)
            for proc in (p.apiserver, p.etcd):
                with contextlib.suppress(Exception):
                    proc.kill()
            with contextlib.suppress(Exception):
                p.responder.stop(signal.SIGKILL)
        self.lab.teardown()

    # -- certificates and arguments ------------------------------------------------------

    def _make_pki(self) -> None:
        etcd_ca = Authority(self.pki, "etcd-ca")
        kube_ca = Authority(self.pki, "ca")
        for node in self.nodes:
            etcd_ca.issue(
                f"{node.name}-etcd",
                node.name,
                usage="both",
                sans=[node.ipv4, "127.0.0.1", "localhost", node.name],
            )
            kube_ca.issue(
                f"{node.name}-apiserver",
                "kube-apiserver",
                usage="server",
                sans=[
                    VIP4,
                    *(n.ipv4 for n in self.nodes),
                    "127.0.0.1",
                    str(next(ipaddress.ip_network(SERVICE_CIDR).hosts())),
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                    node.name,
                ],
            )
        # kubeadm's apiserver-etcd-client and healthcheck-client in one: the bed's own etcdctl
        # and every API server present it to their member.
        etcd_ca.issue("etcd-client", "kube-apiserver-etcd-client", usage="client")
        kube_ca.issue("admin", "kubernetes-admin", usage="client", organisation="system:masters")
        signing_key(self.pki)
        self._write_kubeconfig(
            self.admin_kubeconfig,
            {"client-certificate": str(self.pki / "admin.crt"),
             "client-key": str(self.pki / "admin.key")},
        )  # fmt: skip

    @property
    def admin_kubeconfig(self) -> Path:
        return self.lab.workdir / "admin.kubeconfig"

    def _write_kubeconfig(self, path: Path, user: dict[str, str]) -> None:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "bed",
                    "cluster": {
                        "server": f"https://{VIP4}:{API_PORT}",
                        "certificate-authority": str(self.pki / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "bed", "context": {"cluster": "bed", "user": "user"}}],
            "current-context": "bed",
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        os.chmod(path, 0o600)

    def local_admin_kubeconfig(self, path: Path) -> None:
        """The admin kubeconfig at ``path``, its server the node's own API server (run
        inside the node's namespace)."""
        doc = yaml.safe_load(self.admin_kubeconfig.read_text())
        doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{API_PORT}"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        os.chmod(path, 0o600)

    def _go_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
        # Three API servers and three etcds share two cores: no server should think it owns
        # more, or their garbage collectors fight for the same CPUs.
        env["GOMAXPROCS"] = "2"
        return env

    def _etcd_argv(self, node: Node) -> list[str]:
        pki = self.pki
        cluster = ",".join(f"{n.name}=https://{n.ipv4}:{ETCD_PEER}" for n in self.nodes)
        return [
            str(self.bins / "etcd"),
            f"--name={node.name}",
            f"--data-dir={self.lab.workdir / f'{node.name}-etcd.data'}",
            f"--listen-peer-urls=https://{node.ipv4}:{ETCD_PEER}",
            f"--initial-advertise-peer-urls=https://{node.ipv4}:{ETCD_PEER}",
            f"--listen-client-urls=https://{node.ipv4}:{ETCD_CLIENT},https://127.0.0.1:{ETCD_CLIENT}",
            f"--advertise-client-urls=https://{node.ipv4}:{ETCD_CLIENT}",
            f"--initial-cluster={cluster}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={self.lab.prefix}",
            f"--cert-file={pki / f'{node.name}-etcd.crt'}",
            f"--key-file={pki / f'{node.name}-etcd.key'}",
            f"--trusted-ca-file={pki / 'etcd-ca.crt'}",
            "--client-cert-auth=true",
            f"--peer-cert-file={pki / f'{node.name}-etcd.crt'}",
            f"--peer-key-file={pki / f'{node.name}-etcd.key'}",
            f"--peer-trusted-ca-file={pki / 'etcd-ca.crt'}",
            "--peer-client-cert-auth=true",
            f"--quota-backend-bytes={self.quota_bytes}",
            # etcd's (and kubeadm's) default heartbeat 100 ms and election timeout 1000 ms: a
            # node death that takes the raft leader with it stalls writes, the Lease's among
            # them, for about one election timeout, and that is part of what vipd meets.
            "--snapshot-count=10000",
            "--log-level=warn",
        ]

    def _apiserver_argv(self, node: Node) -> list[str]:
        pki = self.pki
        return [
            str(self.bins / "kube-apiserver"),
            f"--advertise-address={node.ipv4}",
            "--bind-address=0.0.0.0",
            f"--secure-port={API_PORT}",
            f"--etcd-servers=https://127.0.0.1:{ETCD_CLIENT}",
            f"--etcd-cafile={pki / 'etcd-ca.crt'}",
            f"--etcd-certfile={pki / 'etcd-client.crt'}",
            f"--etcd-keyfile={pki / 'etcd-client.key'}",
            f"--tls-cert-file={pki / f'{node.name}-apiserver.crt'}",
            f"--tls-private-key-file={pki / f'{node.name}-apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=lease",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",  # kubeadm's: vipd's pods are hostNetwork with NET_ADMIN
            "--profiling=false",
            "--v=0",
        ]

    # -- kubectl and etcdctl -------------------------------------------------------------

    def serving(self, exclude: Sequence[str] = ()) -> Node:
        """A node whose API server should answer (running, not stopped, not cut off)."""
        for node in self.nodes:
            p = self.procs[node.name]
            if (
                node.name not in exclude
                and p.apiserver.running()
                and not p.apiserver.stopped
                and node.name not in self._cut
                and node.name not in self._parted
            ):
                return node
        raise LabError("no API server of the bed is serving")

    def kubectl(
        self,
        *args: str,
        via: str | None = None,
        kubeconfig: Path | None = None,
        input_text: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """kubectl from the client namespace: through the VIP (``via="vip"``), or straight to
        one node's API server (``via`` a node name; default: one that is serving)."""
        if via == "vip":
            server = f"https://{VIP4}:{API_PORT}"
        else:
            node = self.node(via) if via is not None else self.serving()
            server = f"https://{node.ipv4}:{API_PORT}"
        argv = [
            str(self.bins / "kubectl"),
            f"--kubeconfig={kubeconfig or self.admin_kubeconfig}",
            f"--server={server}",
            f"--request-timeout={max(1, int(timeout) - 1)}s",
            *args,
        ]
        return self.lab.exec(
            self.lab.client_ns, argv, check=check, timeout=timeout, input_text=input_text
        )

    def etcdctl(
        self, *args: str, on: str | None = None, check: bool = True, timeout: float = 30.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """etcdctl against one member (default n1's), from that node's namespace."""
        node = self.node(on) if on is not None else self.nodes[0]
        argv = [
            str(self.bins / "etcdctl"),
            f"--endpoints=https://127.0.0.1:{ETCD_CLIENT}",
            f"--cacert={self.pki / 'etcd-ca.crt'}",
            f"--cert={self.pki / 'etcd-client.crt'}",
            f"--key={self.pki / 'etcd-client.key'}",
            "--command-timeout=10s",
            *args,
        ]
        return self.lab.exec(node.ns, argv, check=check, timeout=timeout, input_text=input_text)

    def readyz(self, name: str, timeout: float = 3.0) -> tuple[int, str]:
        """HTTP status and body of ``/readyz`` on one node's API server (0: no answer)."""
        node = self.node(name)
        proc = self.lab.exec(
            node.ns,
            ["curl", "-s", "-o", "/dev/stdout", "-w", "\n%{http_code}", "--max-time",
             str(timeout), "--cacert", str(self.pki / "ca.crt"),
             f"https://127.0.0.1:{API_PORT}/readyz"],
            check=False,
            timeout=timeout + 5,
        )  # fmt: skip
        body, _, code = proc.stdout.rpartition("\n")
        return (int(code) if code.strip().isdigit() else 0), body

    def wait_ready(self, names: Sequence[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        todo = set(names)
        while todo:
            with concurrent.futures.ThreadPoolExecutor(len(todo)) as pool:
                codes = dict(zip(todo, pool.map(lambda n: self.readyz(n)[0], todo), strict=True))
            todo = {n for n, code in codes.items() if code != 200}
            if not todo:
                return
            for n in todo:
                for proc in (self.procs[n].etcd, self.procs[n].apiserver):
                    if not proc.running():
                        raise LabError(
                            f"{proc.kind} on {n} exited: see {proc.log_path}\n"
                            + _tail(proc.log_path)
                        )
            if time.monotonic() > deadline:
                raise LabError(
                    f"kube-apiserver not ready on {sorted(todo)} within {timeout:.0f} s: "
                    + "; ".join(f"{n}: {self.readyz(n)[1][-300:]}" for n in sorted(todo))
                )
            time.sleep(0.5)

    # -- vipd's identity, RBAC and config ------------------------------------------------

    def vipd_kubeconfig(self, node: Node) -> Path:
        return self.lab.workdir / f"{node.name}-vipd.kubeconfig"

    def vipd_config(self, node: Node, **lease_extra: Any) -> dict[str, Any]:
        t = self.timing
        return {
            "node": node.name,
            "vip": VIP4,
            "interface": "eth0",
            "election": {
                "mode": "lease",
                "lease": {
                    "duration": t.duration,
                    "renew_deadline": t.renew_deadline,
                    "retry_period": t.retry_period,
                    "kubeconfig": str(self.vipd_kubeconfig(node)),
                    **lease_extra,
                },
            },
            "health": {
                "path": "/readyz",
                "port": API_PORT,
                "interval": 0.5,
                "timeout": 0.4,
                "rise": 2,
                "fall": 2,
                "ca_file": str(self.pki / "ca.crt"),
                "peers": [n.ipv4 for n in self.nodes if n.name != node.name],
            },
            "garp": {"repeat": 3, "interval": 0.01},
            "metrics": {"listen": f"0.0.0.0:{STATUS_PORT}"},
            "log": {"format": "logfmt", "level": "info"},
        }

    def render(self, what: str, node: Node | None = None) -> str:
        """``vipd manifest pod|daemonset|rbac`` for this bed's Lease config."""
        node = node or self.nodes[0]
        cfg = self.lab.workdir / f"{node.name}-render.yaml"
        cfg.write_text(yaml.safe_dump(self.vipd_config(node), sort_keys=False))
        proc = subprocess.run(
            python_argv("vipd", "manifest", what, "--config", str(cfg)),
            capture_output=True,
            text=True,
            env=python_env(),
            check=False,
            timeout=60,
        )
        if proc.returncode != 0:
            raise LabError(f"vipd manifest {what}: exit {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def token(self, account: str, namespace: str = "kube-system") -> str:
        """A token for ``account`` from the TokenRequest API."""
        return self.kubectl(
            "create", "token", account, "-n", namespace, "--duration=24h"
        ).stdout.strip()

    def account_kubeconfig(self, account: str, rules: dict[str, list[dict[str, Any]]]) -> Path:
        """A ServiceAccount ``account`` (kube-system) bound to a Role per namespace with
        ``rules`` ({namespace: rules}), and a kubeconfig with its token (for ``vipd check``)."""
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": account, "namespace": "kube-system"}},
        ]  # fmt: skip
        for ns, ns_rules in rules.items():
            meta = {"name": account, "namespace": ns}
            docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                         "metadata": meta, "rules": ns_rules})  # fmt: skip
            docs.append({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                            "name": account},
                "subjects": [{"kind": "ServiceAccount", "name": account,
                              "namespace": "kube-system"}],
            })  # fmt: skip
        text = "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)
        self.kubectl("apply", "-f", "-", input_text=text)
        path = self.lab.workdir / f"{account}.kubeconfig"
        self._write_kubeconfig(path, {"token": self.token(account)})
        return path

    def _bootstrap(self) -> None:
        # No kube-controller-manager runs here: its ServiceAccount controller would make the
        # namespaces' "default" accounts, which the ServiceAccount admission plugin wants for a
        # pod that names none (the static pod's dry run).
        for ns in ("kube-system", "default"):
            self.kubectl("create", "serviceaccount", "default", "-n", ns, check=False)
        self.kubectl("apply", "-f", "-", input_text=self.render("rbac"))
        token = self.token("vipd")
        for node in self.nodes:
            self._write_kubeconfig(self.vipd_kubeconfig(node), {"token": token})

    # -- observation ---------------------------------------------------------------------

    def holders(self) -> list[str]:
        return self.lab.holders(VIP4)

    def wait_one_holder(self, timeout: float, *, among: Sequence[str] | None = None) -> str:
        deadline = time.monotonic() + timeout
        while True:
            # A dead node (link down) may still have the VIP on its interface: only the
            # nodes in ``among`` count.
            h = [n for n in self.holders() if among is None or n in among]
            if len(h) == 1:
                return h[0]
            if time.monotonic() > deadline:
                raise LabError(f"not exactly one VIP holder after {timeout:.0f} s: {h}\n"
                               + self.vipd_report())  # fmt: skip
            time.sleep(0.05)

    def vipd_report(self, lines: int = 12) -> str:
        return "\n".join(
            f"--- {n} vipd ({'running' if p.vipd.running() else 'exited'})\n"
            + p.vipd.log_tail(lines)
            for n, p in self.procs.items()
        )

    def lease(self) -> dict[str, Any]:
        out = self.kubectl("get", "lease", "-n", LEASE[0], LEASE[1], "-o", "json").stdout
        spec: dict[str, Any] = json.loads(out)["spec"]
        return spec

    def settle(self, timeout: float | None = None) -> str:
        """After a fault: every fault undone, everything running and ready, exactly one
        holder; returns it."""
        self.apf_heal()
        for name in list(self._cut):
            self.heal_etcd(name)
        for name in list(self._parted):
            self.heal_partition(name)
        for node in self.nodes:
            if not self.lab.link_up(node):
                if not self.procs[node.name].vipd.running():
                    drop_address(self.lab, node, VIP4)  # a rebooted node binds nothing
                self.lab.set_link(node, True)
        for p in self.procs.values():
            if p.etcd.stopped:
                p.etcd.signal(signal.SIGCONT)
            if p.apiserver.stopped:
                p.apiserver.signal(signal.SIGCONT)
            p.etcd.start()
            p.apiserver.start()
        self.wait_ready(list(self.procs), READY_TIMEOUT)
        if "NOSPACE" in self.alarms():
            self.disarm_etcd()
        for p in self.procs.values():
            if not p.responder.running():
                p.responder.start()
            if not p.vipd.running():
                p.vipd.start()
        deadline = time.monotonic() + 60
        while not all(p.vipd.election_started() for p in self.procs.values()):
            if time.monotonic() > deadline:
                raise LabError("a vipd did not start its election\n" + self.vipd_report())
            time.sleep(0.1)
        bound = timeout if timeout is not None else 3 * self.timing.takeover_bound() + 10
        return self.wait_one_holder(bound)

    # -- faults --------------------------------------------------------------------------

    def cut_etcd(self, name: str) -> None:
        """nftables in ``name``'s namespace: its etcd member exchanges nothing with the others
        (peer 2380 and client 2379, both directions); its API server still reaches it."""
        others = ", ".join(n.ipv4 for n in self.nodes if n.name != name)
        ports = f"{{ {ETCD_CLIENT}, {ETCD_PEER} }}"
        rules = (
            "add table inet kbcut\n"
            "add chain inet kbcut in { type filter hook input priority 0; }\n"
            "add chain inet kbcut out { type filter hook output priority 0; }\n"
            f"add rule inet kbcut in ip saddr {{ {others} }} tcp dport {ports} counter drop\n"
            f"add rule inet kbcut in ip saddr {{ {others} }} tcp sport {ports} counter drop\n"
            f"add rule inet kbcut out ip daddr {{ {others} }} tcp dport {ports} counter drop\n"
            f"add rule inet kbcut out ip daddr {{ {others} }} tcp sport {ports} counter drop\n"
        )
        self.lab.exec(self.node(name).ns, ["nft", "-f", "-"], input_text=rules)
        self._cut.add(name)

    def heal_etcd(self, name: str) -> None:
        self.lab.exec(self.node(name).ns, ["nft", "delete", "table", "inet", "kbcut"], check=False)
        self._cut.discard(name)

    def partition(self, name: str) -> None:
        """The bridge drops everything to and from ``name``'s port; its link stays up and
        its processes run on (a switch port or cable failure, not a dead node)."""
        port = self.node(name).port
        rules = (
            "add table bridge kbpart\n"
            "add chain bridge kbpart drops { type filter hook forward priority 0; }\n"
            f'add rule bridge kbpart drops iifname "{port}" counter drop\n'
            f'add rule bridge kbpart drops oifname "{port}" counter drop\n'
        )
        self.lab.exec(self.lab.lan_ns, ["nft", "-f", "-"], input_text=rules)
        self._parted.add(name)

    def heal_partition(self, name: str) -> None:
        self.lab.exec(self.lab.lan_ns, ["nft", "delete", "table", "bridge", "kbpart"], check=False)
        self._parted.discard(name)

    def kill_node(self, name: str) -> None:
        """Node death: its link down, then SIGKILL to everything in its namespace."""
        node = self.node(name)
        self.lab.set_link(node, False)
        p = self.procs[name]
        for proc in (p.apiserver, p.etcd):
            proc.kill()
        p.vipd.stop(signal.SIGKILL, timeout=5)
        p.responder.stop(signal.SIGKILL)

    def revive_node(self, name: str) -> None:
        """A rebooted node: no VIP bound, link up, etcd, API server, responder, vipd again."""
        node = self.node(name)
        drop_address(self.lab, node, VIP4)
        self.lab.set_link(node, True)
        p = self.procs[name]
        p.etcd.start()
        p.apiserver.start()
        p.responder.start()
        self.wait_ready([name], READY_TIMEOUT)
        p.vipd.start()

    def etcd_down_all(self) -> None:
        for p in self.procs.values():
            p.etcd.kill()

    def etcd_up_all(self) -> None:
        for p in self.procs.values():
            p.etcd.start()

    def fill_etcd(self, limit: int = 400) -> int:
        """Write 1 MiB values until etcd raises its NOSPACE alarm; returns how many fitted."""
        blob = "x" * (1024 * 1024)
        for i in range(limit):
            proc = self.etcdctl("put", f"{FILL_PREFIX}{i:04d}", input_text=blob, check=False)
            if proc.returncode != 0:
                if "database space exceeded" in proc.stderr + proc.stdout:
                    return i
                raise LabError(f"etcdctl put: {proc.stderr.strip()}")
        raise LabError(f"etcd took {limit} MiB without raising NOSPACE (quota {self.quota_bytes})")

    def _etcd_status(self, name: str | None = None) -> dict[str, Any]:
        """``etcdctl endpoint status`` of one member (default n1's): its ``Status``."""
        status = json.loads(self.etcdctl("endpoint", "status", "-w", "json", on=name).stdout)
        st: dict[str, Any] = status[0]["Status"]
        return st

    def etcd_leads(self, name: str) -> bool:
        """Does ``name``'s etcd member lead the cluster now (its own status says so)?"""
        st = self._etcd_status(name)
        return int(st["header"]["member_id"]) == int(st["leader"])

    def move_etcd_leader(self, to: str) -> None:
        """Make ``to``'s etcd member the leader (``etcdctl move-leader``, sent to the current
        leader's member), and wait until ``to`` reports it."""
        st = self._etcd_status(to)
        target = int(st["header"]["member_id"])
        if target == int(st["leader"]):
            return
        leader = next(n.name for n in self.nodes if n.name != to and self.etcd_leads(n.name))
        self.etcdctl("move-leader", f"{target:x}", on=leader)
        deadline = time.monotonic() + 10
        while not self.etcd_leads(to):
            if time.monotonic() > deadline:
                raise LabError(f"etcd leadership did not move to {to} within 10 s")
            time.sleep(0.2)

    def lease_readable(self, name: str) -> bool:
        """One read of the Lease through ``name``'s API server, answered within a second."""
        try:
            proc = self.kubectl(
                "get", "lease", "-n", LEASE[0], LEASE[1], "-o", "name",
                via=name, check=False, timeout=2,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    def alarms(self) -> str:
        return self.etcdctl("alarm", "list").stdout.strip()

    def disarm_etcd(self) -> None:
        """Undo ``fill_etcd``: delete the filler, compact, defragment every member, disarm."""
        self.etcdctl("del", "--prefix", FILL_PREFIX)
        revision = int(self._etcd_status()["header"]["revision"])
        self.etcdctl("compaction", str(revision), check=False)
        for node in self.nodes:
            self.etcdctl("defrag", on=node.name, timeout=60)
        self.etcdctl("alarm", "disarm")

    def apf_reject(self, name: str, threads: int = 48) -> None:
        """429 from ``name``'s API server for vipd's ServiceAccount: a PriorityLevel with a
        tiny share, no borrowing and ``Reject``, a FlowSchema that puts vipd and a load
        account there, and a load generator keeping that level's seats busy on ``name`` only.
        """
        objs = [
            {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "PriorityLevelConfiguration",
                "metadata": {"name": APF_NAME},
                "spec": {
                    "type": "Limited",
                    "limited": {
                        "nominalConcurrencyShares": 1,
                        "lendablePercent": 0,
                        "borrowingLimitPercent": 0,
                        "limitResponse": {"type": "Reject"},
                    },
                },
            },
            {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "FlowSchema",
                "metadata": {"name": APF_NAME},
                "spec": {
                    "priorityLevelConfiguration": {"name": APF_NAME},
                    # Before kube-system-service-accounts (900), where vipd lands otherwise.
                    "matchingPrecedence": 50,
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [
                        {
                            "subjects": [
                                {
                                    "kind": "ServiceAccount",
                                    "serviceAccount": {"name": sa, "namespace": "kube-system"},
                                }
                                for sa in ("vipd", LOAD_SA)
                            ],
                            "resourceRules": [
                                {
                                    "verbs": ["*"],
                                    "apiGroups": ["*"],
                                    "resources": ["*"],
                                    "namespaces": ["*"],
                                    "clusterScope": True,
                                }
                            ],
                        }
                    ],
                },
            },
        ]
        self.kubectl("create", "serviceaccount", LOAD_SA, "-n", "kube-system", check=False)
        # cluster-admin: the aggregated roles (view, edit) stay empty here, with no
        # kube-controller-manager to aggregate them, and the load must be authorised LISTs.
        self.kubectl(
            "create", "clusterrolebinding", LOAD_SA, "--clusterrole=cluster-admin",
            f"--serviceaccount=kube-system:{LOAD_SA}", check=False,
        )  # fmt: skip
        doc = "\n---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs)
        self.kubectl("apply", "-f", "-", input_text=doc)
        token_file = self.lab.workdir / "load.token"
        token_file.write_text(self.token(LOAD_SA))
        os.chmod(token_file, 0o600)
        log = (self.lab.workdir / "load.log").open("ab")
        self._load = self.lab.spawn(
            self.lab.client_ns,
            python_argv(
                "vipd.lab.kubebed.load",
                "--url",
                f"https://{self.node(name).ipv4}:{API_PORT}/api/v1/configmaps",
                "--token-file",
                str(token_file),
                "--ca",
                str(self.pki / "ca.crt"),
                "--threads",
                str(threads),
            ),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=python_env(),
        )
        log.close()

    def stop_load(self) -> None:
        if self._load is not None and self._load.poll() is None:
            self._load.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._load.wait(timeout=10)
        self._load = None

    def apf_heal(self) -> None:
        self.stop_load()
        for kind in ("flowschema", "prioritylevelconfiguration"):
            self.kubectl("delete", kind, APF_NAME, "--ignore-not-found", check=False)

    def restart_vipd(self, name: str, *, faketime: str | None = None) -> None:
        p = self.procs[name]
        p.vipd.stop(signal.SIGTERM, timeout=15)
        p.vipd.faketime = faketime
        p.vipd.start()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def usable() -> str | None:
    """Why the bed cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return f"needs root for network namespaces (running as uid {os.geteuid()})"
    for tool in ("ip", "nft", "openssl", "curl"):
        if subprocess.run(["which", tool], capture_output=True, check=False).returncode != 0:
            return f"needs the {tool} command (scripts/setup installs it)"
    try:
        binaries.find()
    except binaries.Missing as exc:
        return f"{exc}; build them with {binaries.BUILD_COMMAND} (as root)"
    return None
