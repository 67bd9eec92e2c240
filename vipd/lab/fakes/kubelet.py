"""A kubelet stand-in for the lab: runs the rendered vipd pods on a lab node as processes.

What it is: just enough of a kubelet to test the static pod → DaemonSet handover with the
manifests ``vipd manifest`` renders, on network-namespace nodes without Kubernetes:

- **static pods**: it rescans the node's manifests directory (``<root>/etc/kubernetes/
  manifests``) every ``rescan`` seconds (the real kubelet: 20 s), starts a pod for every new
  ``*.yaml`` and stops the pod of a file that is gone: SIGTERM, then SIGKILL after the pod's
  ``terminationGracePeriodSeconds``;
- **DaemonSet pods**: ``run_pod(template)`` runs the init containers one after the other
  (each must exit 0, as Kubernetes requires before the next) and then the main container.

A container becomes a process in the node's namespace (``hostNetwork: true`` is the only
network these pods use): the image's entrypoint is ``vipd``, so ``args`` go to ``python -m
vipd`` from this checkout; ``env`` is passed with the downward API's ``spec.nodeName`` and
``status.hostIP`` filled in; a hostPath volume is the same path under the node's ``root``,
and an argument that names a path under a volume's ``mountPath`` is rewritten to it (a
process cannot have the pod's mount namespace). Each container gets a ``NOTIFY_SOCKET``: the
kubelet stand-in reads vipd's sd_notify ``READY=1`` as the pod's readiness.

What it must not do: stand in for anything the handover does not need (no images, no
probes, no restarts, no API), or hide a container's failure: an init container that exits
non-zero stops the pod, and ``PodRun.failed`` says which and with what code.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vipd.lab.topology import Lab, Node, python_argv, python_env


class PodError(RuntimeError):
    """A pod spec this stand-in cannot run, or an init container that failed."""


@dataclass
class ContainerRun:
    name: str
    argv: list[str]
    proc: subprocess.Popen[Any]
    log: Path
    started: float
    ready_at: float | None = None
    notify: socket.socket | None = None
    exited_at: float | None = None

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def poll_ready(self) -> bool:
        """Drain sd_notify datagrams; True once READY=1 arrived."""
        if self.ready_at is None and self.notify is not None:
            while True:
                try:
                    data = self.notify.recv(4096)
                except BlockingIOError:
                    break
                if b"READY=1" in data.split(b"\n"):
                    self.ready_at = time.monotonic()
        return self.ready_at is not None


@dataclass
class PodRun:
    """One pod on one node: its containers in the order they started."""

    name: str
    grace: float
    containers: list[ContainerRun] = field(default_factory=list)
    failed: tuple[str, int] | None = None  # (init container, exit code)
    stopped: bool = False
    main: ContainerRun | None = None

    def ready(self) -> bool:
        return self.main is not None and self.main.proc.poll() is None and self.main.poll_ready()


class Kubelet:
    """The stand-in kubelet of one lab node; ``start()`` begins watching the manifests."""

    def __init__(self, lab: Lab, node: Node, root: Path, *, rescan: float = 1.0) -> None:
        self.lab = lab
        self.node = node
        self.root = root
        self.manifests = root / "etc" / "kubernetes" / "manifests"
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.rescan = rescan
        self.static: dict[str, PodRun] = {}
        self.pods: list[PodRun] = []
        self.events: list[tuple[float, str]] = []  # (monotonic time, what happened)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stoppers: list[threading.Thread] = []

    # -- static pods -----------------------------------------------------------------------

    def start(self) -> None:
        self._scan()
        self._thread = threading.Thread(
            target=self._watch, name=f"kubelet-{self.node.name}", daemon=True
        )
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.rescan):
            self._scan()

    def _scan(self) -> None:
        present = {p.name for p in self.manifests.glob("*.yaml")}
        with self._lock:
            for name in sorted(present - set(self.static)):
                pod = yaml.safe_load((self.manifests / name).read_text())
                self._event(f"static pod {name}: starting")
                self.static[name] = self.run_pod(pod, f"static-{Path(name).stem}")
            for name in sorted(set(self.static) - present):
                run = self.static.pop(name)
                self._event(f"static pod {name}: manifest gone, stopping")
                t = threading.Thread(target=self.stop_pod, args=(run,), daemon=True)
                t.start()
                self._stoppers.append(t)

    def _event(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    # -- pods ------------------------------------------------------------------------------

    def run_pod(self, obj: Mapping[str, Any], name: str) -> PodRun:
        """Run a Pod (or a DaemonSet's pod template): init containers, then the container.

        Returns once the main container has started (or an init container failed).
        """
        spec = obj["spec"]["template"]["spec"] if obj.get("kind") == "DaemonSet" else obj["spec"]
        if spec.get("hostNetwork") is not True:
            raise PodError(f"{name}: only hostNetwork pods can run in the lab")
        mounts = self._volumes(spec)
        run = PodRun(name=name, grace=float(spec.get("terminationGracePeriodSeconds", 30)))
        self.pods.append(run)
        for init in spec.get("initContainers", []):
            c = self._start(run, init, mounts)
            code = c.proc.wait()
            c.exited_at = time.monotonic()
            self._event(f"{name}/{init['name']}: exited {code}")
            if code != 0:
                run.failed = (init["name"], code)
                return run
        (main,) = spec["containers"]
        run.main = self._start(run, main, mounts)
        return run

    def _volumes(self, spec: Mapping[str, Any]) -> dict[str, Path]:
        """volume name → where its hostPath is for this node."""
        out: dict[str, Path] = {}
        for vol in spec.get("volumes", []):
            host = vol.get("hostPath")
            if "emptyDir" in vol:
                # A process writes where it likes; a fresh directory is only for the mapping.
                out[vol["name"]] = Path(tempfile.mkdtemp(dir=self.lab.workdir, prefix="empty-"))
                continue
            if host is None:
                raise PodError(f"volume {vol['name']}: only hostPath and emptyDir are supported")
            out[vol["name"]] = self.root / str(host["path"]).lstrip("/")
        return out

    def _start(
        self, run: PodRun, container: Mapping[str, Any], volumes: Mapping[str, Path]
    ) -> ContainerRun:
        if "command" in container:
            raise PodError(f"{container['name']}: the image's entrypoint (vipd) is assumed")
        paths = {
            str(m["mountPath"]).rstrip("/"): volumes[m["name"]]
            for m in container.get("volumeMounts", [])
        }
        args = [self._path(str(a), paths) for a in container.get("args", [])]
        env: dict[str, str] = {}
        for item in container.get("env", []):
            env[item["name"]] = self._env_value(item)
        log = self.lab.workdir / f"{self.node.name}-{run.name}-{container['name']}.log"
        notify_path = self.lab.workdir / f"{self.node.name}-{run.name}-{container['name']}.sock"
        with contextlib.suppress(FileNotFoundError):
            notify_path.unlink()
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(notify_path))
        notify.setblocking(False)
        env["NOTIFY_SOCKET"] = str(notify_path)
        argv = python_argv("vipd", *args)
        with log.open("ab") as out:
            proc = self.lab.spawn(
                self.node.ns,
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=python_env(env),
            )
        c = ContainerRun(
            name=container["name"],
            argv=argv,
            proc=proc,
            log=log,
            started=time.monotonic(),
            notify=notify,
        )
        run.containers.append(c)
        self._event(f"{run.name}/{c.name}: started pid {proc.pid}")
        return c

    @staticmethod
    def _path(arg: str, paths: Mapping[str, Path]) -> str:
        for mount, host in paths.items():
            if arg == mount or arg.startswith(mount + "/"):
                return str(host) + arg[len(mount) :]
        return arg

    def _env_value(self, item: Mapping[str, Any]) -> str:
        if "value" in item:
            return str(item["value"])
        field_path = item["valueFrom"]["fieldRef"]["fieldPath"]
        if field_path == "spec.nodeName":
            return self.node.name
        if field_path == "status.hostIP":
            return self.node.ipv4
        raise PodError(f"env {item['name']}: fieldRef {field_path} is not supported here")

    def stop_pod(self, run: PodRun) -> None:
        """SIGTERM the running containers; SIGKILL what is left after the grace period."""
        run.stopped = True
        live = [c for c in run.containers if c.proc.poll() is None]
        for c in live:
            with contextlib.suppress(ProcessLookupError):
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + run.grace
        for c in live:
            try:
                c.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
            c.exited_at = time.monotonic()
            self._event(f"{run.name}/{c.name}: exited {c.proc.returncode}")

    # -- the end ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop watching and stop every pod (the lab's teardown kills anything left)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for t in self._stoppers:
            t.join(timeout=60)
        for run in self.pods:
            if any(c.proc.poll() is None for c in run.containers):
                self.stop_pod(run)
        for run in self.pods:
            for c in run.containers:
                if c.notify is not None:
                    c.notify.close()


def write_manifest(path: Path, text: str) -> None:
    """Write a static manifest atomically, as an installer would (no half-read file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.rename(path)
