"""One machine of the kubelet bed: containerd and a real kubelet in namespaces of their own.

What it is: ``Machine`` turns a lab node (a network namespace on the lab's bridge) into
something that boots, runs and loses power like a host. Booting starts a process that is PID 1
of a new PID namespace, in a new mount namespace (propagation private), in the node's network
namespace (``nsenter --net`` then ``unshare --mount --pid --fork --mount-proc``). That init
(the script ``BOOT_SCRIPT``) gives the node its own view of the paths a kubeadm node owns:

- ``/etc/kubernetes``, ``/var/lib/kubelet``, ``/var/lib/etcd``, ``/var/lib/containerd``,
  ``/var/log/pods``, ``/var/log/containers``, ``/etc/containerd``: bind mounts of the node's
  directories under the bed's work directory, so they survive a power cycle as a disk does;
- ``/run/containerd`` and ``/run/netns``: a fresh tmpfs each boot, as ``/run`` is on a host
  (a stale containerd socket from the last boot must not look alive);
- the three kernel tunables the kubelet insists on (``vm.overcommit_memory=1``,
  ``kernel.panic=10``, ``kernel.panic_on_oops=1``, pkg/kubelet/cm/container_manager_linux.go
  ``setupKernelTunables``): files bind-mounted over /proc/sys in this node's mount namespace
  only, so the kubelet finds what it wants and never writes the shared host kernel's values.

It then starts containerd and the kubelet the way systemd would with kubeadm's drop-in
(``10-kubeadm.conf``: ``--bootstrap-kubeconfig``, ``--kubeconfig``, ``--config``, and
``$KUBELET_KUBEADM_ARGS`` from ``/var/lib/kubelet/kubeadm-flags.env``), each restarted one
second after it exits (``Restart=always``, ``RestartSec=1``): before ``kubeadm init`` the
kubelet exits at once for want of a config, exactly as on a fresh host. A ``systemctl`` of the
node's own (``SYSTEMCTL``, first on its PATH) lets kubeadm stop, start and restart that
kubelet as it would under systemd. On the first boot it imports the bed's image archive into
containerd's ``k8s.io`` namespace.

Power loss is SIGKILL to that init: the kernel kills every process of the PID namespace at
once (kubelet, containerd, shims, every container), and the mount namespace goes with them.
What a host loses with its RAM goes too: the link goes down, every address on it but the
node's own (a VIP vipd had bound) is removed, and the node's cgroup subtree is deleted (a
booting host starts with empty cgroup hierarchies; a kubelet that finds the last boot's pod
cgroups spends a minute on them before it starts any pod).

The sandbox's limits, and the settings that answer them (each also in docs/testing.md):

- cgroup v1 (hybrid; the host's ``/sys/fs/cgroup`` is a tmpfs with v1 hierarchies):
  ``failCgroupV1: false`` in the kubelet's config (kubelet >= 1.35 refuses v1 otherwise);
  three kubelets share one host's hierarchies, so each gets a ``cgroupRoot`` of its own
  (``/vipd-<prefix>-<node>``), made here in every hierarchy before the kubelet starts;
- no CAP_SYS_RESOURCE in this sandbox: no process may lower its ``oom_score_adj`` below 0,
  and runc fails a container whose spec asks for -997 (every static pod is
  system-node-critical) or -998 (containerd's sandbox default): containerd's CRI
  ``restrict_oom_score_adj = true`` clamps those to containerd's own value, the kubelet's
  ``oomScoreAdj: 0`` keeps it from trying for itself.

What it must not do: mount or write anything outside its own namespaces and work directory
(besides its own cgroup subtree), or leave a process or cgroup behind after ``power_off`` and
``remove``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
# Paths a kubeadm node keeps across reboots; each becomes a directory of the node's own.
PERSISTENT = (
    "etc/kubernetes",
    "etc/vipd",  # the static pod's config (vipd manifest config)
    "etc/containerd",
    "var/lib/kubelet",
    "var/lib/etcd",
    "var/lib/containerd",
    "var/log/pods",
    "var/log/containers",
)
VOLATILE = ("run/containerd", "run/netns", "run/vipd-node")
TUNABLES = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}

BOOT_SCRIPT = r"""#!/bin/bash
# PID 1 of a kubelet-bed node (vipd/lab/kubelet_bed/node.py says why each step is here).
set -u
NODE_DIR=$1 ARCHIVE=$2
export PATH=$VIPD_NODE_PATH
for d in __VOLATILE__; do mkdir -p "/$d" && mount -t tmpfs tmpfs "/$d" || exit 1; done
for d in __PERSISTENT__; do
    mkdir -p "$NODE_DIR/root/$d" "/$d" && mount --bind "$NODE_DIR/root/$d" "/$d" || exit 1
done
for t in __TUNABLES__; do
    mount --bind "$NODE_DIR/sysctl/${t//\//.}" "/proc/sys/$t" || exit 1
done
sysctl -qw net.ipv4.ip_forward=1  # kubeadm's preflight wants it; per network namespace
cp "$NODE_DIR/containerd.toml" /etc/containerd/config.toml
(while :; do
    containerd --config /etc/containerd/config.toml >>"$NODE_DIR/containerd.log" 2>&1
    sleep 1
done) &
for _ in $(seq 300); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
if [ ! -e /var/lib/containerd/.vipd-imported ]; then
    ctr -n k8s.io images import "$ARCHIVE" >"$NODE_DIR/import.log" 2>&1 &&
        touch /var/lib/containerd/.vipd-imported
fi
touch "$NODE_DIR/booted"
(while :; do
    # "systemctl stop kubelet" (the SYSTEMCTL shim) holds it down until "start".
    if [ -e /run/vipd-node/kubelet.stopped ]; then sleep 0.2; continue; fi
    KUBELET_KUBEADM_ARGS=""
    [ -f /var/lib/kubelet/kubeadm-flags.env ] && . /var/lib/kubelet/kubeadm-flags.env
    # shellcheck disable=SC2086 # kubeadm writes the flags to be split, as systemd does
    kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
        --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
        $KUBELET_KUBEADM_ARGS >>"$NODE_DIR/kubelet.log" 2>&1 &
    echo $! >/run/vipd-node/kubelet.pid
    wait $!
    rm -f /run/vipd-node/kubelet.pid
    sleep 1
done) &
wait
"""


# kubeadm drives the kubelet through the init system it finds on PATH (cmd/kubeadm/app/util/
# initsystem: systemctl daemon-reload, start, stop, restart, status, is-enabled, is-active).
# The host's own systemctl is there but no systemd runs: without this, kubeadm cannot stop the
# kubelet while it rewrites its config and flags, and a kubelet restarted in between starts
# without kubeadm's flags (--hostname-override, --node-ip) and registers under the host's name.
SYSTEMCTL = r"""#!/bin/bash
# systemctl for kubeadm on a kubelet-bed node: the kubelet "unit" of the node's boot script.
cmd="" unit=""
for a in "$@"; do
    case $a in -*) ;; *) if [ -z "$cmd" ]; then cmd=$a; else unit=${a%.service}; fi ;; esac
done
stopped=/run/vipd-node/kubelet.stopped pidfile=/run/vipd-node/kubelet.pid
kill_kubelet() {
    [ -f $pidfile ] || return 0
    pid=$(cat $pidfile); kill "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null; return 0
}
case $cmd in
    daemon-reload) exit 0 ;;
esac
[ "$unit" = kubelet ] || { echo "Unit $unit.service could not be found." >&2; exit 4; }
case $cmd in
    enable|disable) exit 0 ;;
    is-enabled) echo enabled ;;
    is-active) if [ -e $stopped ]; then echo inactive; exit 3; fi; echo active ;;
    status) echo "kubelet.service - kubelet (vipd kubelet bed)"; echo "   Loaded: loaded" ;;
    stop) touch $stopped; kill_kubelet ;;
    start) rm -f $stopped ;;
    restart) touch $stopped; kill_kubelet; rm -f $stopped ;;
    *) echo "systemctl $cmd: not supported on a kubelet-bed node" >&2; exit 1 ;;
esac
"""


class MachineError(RuntimeError):
    """A boot or command in the node failed; the message says what and where the logs are."""


def containerd_config(sandbox_image: str) -> str:
    """containerd 2.x (config version 3) for one node: CRI with Debian's runc, cgroupfs."""
    return f"""version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "{CONTAINERD_SOCKET}"
[plugins."io.containerd.cri.v1.runtime"]
  # No CAP_SYS_RESOURCE here: never ask runc for an oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{sandbox_image}"
"""


def boot_script() -> str:
    return (
        BOOT_SCRIPT.replace("__VOLATILE__", " ".join(VOLATILE))
        .replace("__PERSISTENT__", " ".join(PERSISTENT))
        .replace("__TUNABLES__", " ".join(TUNABLES))
    )


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, name=systemd, and cgroup2)."""
    found = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
                path = Path(fields[1])
                if path.is_relative_to(CGROUP_ROOT):
                    found.append(path)
    return found


class Machine:
    """A node's boot, commands and power; ``name`` is its kubelet node name."""

    def __init__(
        self,
        name: str,
        netns: str,
        ipv4: str,
        directory: Path,
        *,
        cgroup: str,
        keep_addresses: Sequence[str],
        path: Sequence[Path],
        archive: Path,
        sandbox_image: str,
    ) -> None:
        self.name = name
        self.netns = netns
        self.ipv4 = ipv4
        self.dir = directory
        self.cgroup = cgroup  # the kubelet's cgroupRoot, without the leading slash
        self.keep_addresses = frozenset(keep_addresses)  # eth0's own, kept across power cycles
        shim = directory / "bin"
        self.path = ":".join(
            [str(shim), *(str(p) for p in path), "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        )
        self.archive = archive
        self._proc: subprocess.Popen[bytes] | None = None
        self.boots = 0
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "containerd.toml").write_text(containerd_config(sandbox_image))
        (self.dir / "boot.sh").write_text(boot_script())
        shim.mkdir(exist_ok=True)
        (shim / "systemctl").write_text(SYSTEMCTL)
        (shim / "systemctl").chmod(0o755)
        sysctl = self.dir / "sysctl"
        sysctl.mkdir(exist_ok=True)
        for key, value in TUNABLES.items():
            (sysctl / key.replace("/", ".")).write_text(value + "\n")

    @property
    def root(self) -> Path:
        """The node's "disk": what it sees as /etc/kubernetes is root/etc/kubernetes here."""
        return self.dir / "root"

    # -- power ---------------------------------------------------------------------------

    def boot(self, timeout: float = 120.0) -> None:
        """Start the node's init; return once containerd answers and the images are in."""
        if self.running():
            raise MachineError(f"{self.name} is already running")
        self._make_cgroups()
        self._ip("link", "set", "eth0", "up")
        (self.dir / "booted").unlink(missing_ok=True)
        log = (self.dir / "boot.log").open("ab")
        with log:
            self._proc = subprocess.Popen(
                [
                    "nsenter", f"--net=/run/netns/{self.netns}", "--",
                    "unshare", "--mount", "--pid", "--fork", "--mount-proc",
                    "--propagation", "private",
                    "/bin/bash", str(self.dir / "boot.sh"), str(self.dir), str(self.archive),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={"VIPD_NODE_PATH": self.path, "PATH": self.path, "LANG": "C.UTF-8"},
                start_new_session=True,
            )  # fmt: skip
        self.boots += 1
        deadline = time.monotonic() + timeout
        while not (self.dir / "booted").exists():
            if self._proc.poll() is not None:
                raise MachineError(f"{self.name}: init exited {self._proc.returncode}; "
                                   f"see {self.dir / 'boot.log'}")  # fmt: skip
            if time.monotonic() > deadline:
                raise MachineError(f"{self.name}: not booted in {timeout:.0f} s; see {self.dir}")
            time.sleep(0.1)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def init_pid(self) -> int:
        """PID (in the host's namespace) of the node's PID 1, the child ``unshare`` forked."""
        if self._proc is None or self._proc.poll() is not None:
            raise MachineError(f"{self.name} is not running")
        deadline = time.monotonic() + 5
        children = Path(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children")
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                pids = children.read_text().split()
                if pids:
                    return int(pids[0])
            time.sleep(0.02)
        raise MachineError(f"{self.name}: no init process under {self._proc.pid}")

    def power_off(self) -> None:
        """Pull the plug: SIGKILL the node's PID 1, so the kernel kills all it ran."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            with contextlib.suppress(MachineError, ProcessLookupError):
                os.kill(self.init_pid(), signal.SIGKILL)
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._proc = None
        self._ip("link", "set", "eth0", "down")
        addrs = json.loads(self._ip("-j", "addr", "show", "dev", "eth0"))
        for info in addrs[0].get("addr_info", []) if addrs else []:
            local, plen = info.get("local"), info.get("prefixlen")
            if local and local not in self.keep_addresses and info.get("scope") != "link":
                self._ip("addr", "del", f"{local}/{plen}", "dev", "eth0")
        self._remove_cgroups()

    def reboot(self, timeout: float = 120.0) -> None:
        self.power_off()
        self.boot(timeout)

    def remove(self) -> None:
        """Power off for good (its files stay for the logs)."""
        self.power_off()

    def _ip(self, *args: str) -> str:
        return subprocess.run(
            ["ip", "-n", self.netns, *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout

    # -- commands ------------------------------------------------------------------------

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run inside the node: its PID, mount and network namespaces."""
        return ["nsenter", "-t", str(self.init_pid()), "-m", "-n", "-p", "--", *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 60.0,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={"PATH": self.path, "LANG": "C.UTF-8", **(env or {})},
        )
        if check and proc.returncode != 0:
            raise MachineError(
                f"{self.name}: {' '.join(argv)}: exit {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
            )
        return proc

    def crictl(self, *args: str, timeout: float = 30.0) -> str:
        return self.run(
            ["crictl", "--runtime-endpoint", f"unix://{CONTAINERD_SOCKET}", *args],
            timeout=timeout,
        ).stdout

    # -- cgroups -------------------------------------------------------------------------

    def _make_cgroups(self) -> None:
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / self.cgroup
            path.mkdir(exist_ok=True)
            # A new v1 cpuset has no CPUs and no memory nodes: nothing could run in it.
            for knob in ("cpuset.cpus", "cpuset.mems"):
                mine, parent = path / knob, hierarchy / knob
                if parent.exists() and not mine.read_text().strip():
                    mine.write_text(parent.read_text())

    def _remove_cgroups(self, timeout: float = 10.0) -> None:
        # A killed task leaves its cgroup a moment after the kill: retry until all are gone.
        deadline = time.monotonic() + timeout
        while True:
            left = [h / self.cgroup for h in cgroup_hierarchies() if (h / self.cgroup).is_dir()]
            for top in left:
                # Deepest first: a cgroup directory goes only once it has no children.
                for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
                    with contextlib.suppress(OSError):
                        os.rmdir(dirpath)
            if not any(t.is_dir() for t in left):
                return
            if time.monotonic() > deadline:
                raise MachineError(f"{self.name}: cgroups still busy: {[str(t) for t in left]}")
            time.sleep(0.1)
