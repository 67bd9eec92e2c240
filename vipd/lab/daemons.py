"""Start and stop a VRRP daemon (vipd, or keepalived for comparison) on one lab node.

What it is: ``VrrpSpec`` (what the cluster agrees on: VIP, VRID, interval, version, preempt,
unicast, auth) and two daemon kinds behind one small interface, ``Daemon``:
``start(priority)``, ``stop(sig)``, ``running()``, ``pid``, ``log_path`` and ``state()``.

- ``VipdDaemon`` writes ``<node>-vipd.yaml`` (the config shape in docs/design/architecture.md) and
  runs ``ip netns exec NS <python> -m vipd run --config FILE``.
- ``KeepalivedDaemon`` writes an equivalent ``keepalived.conf``, checks it with ``keepalived
  -t``, and runs ``ip netns exec NS env TMPDIR=DIR keepalived -n -l -D -G -P -f CONF -p … -r …
  -c … -b …`` with all four pid files in a fresh directory per start: keepalived refuses to
  start when a pid file names a live process, and on these machines a killed process can
  linger as an unreaped zombie, so a reused pid file could block a restart. Its ``state()`` is
  the last ``(VI_x) Entering MASTER|BACKUP|FAULT STATE`` line of the current start's log.

Each start appends to one log per node and daemon kind (``<node>-<kind>.log`` in the lab's
workdir), after a ``=== start …`` header line; stdout and stderr both go there.

What it must not do: decide whether a failover was good (that is the runner's and
analysis's job), judge who is leader from logs (``Lab.holders`` is the truth: who has the
VIP bound), or rely on pid files or process liveness for anything.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import yaml

from vipd.lab.topology import Lab, LabError, Node, python_argv, python_env

DaemonKind = Literal["vipd", "keepalived", "kube-vip"]
KINDS: tuple[DaemonKind, ...] = ("vipd", "keepalived")  # VRRP; kube-vip: the Kubernetes bed

# vipd's line once its Lease election runs (the Kubernetes client imported).
LEASE_STARTED = "lease election started"
STATE_RE = re.compile(r"\((\S+)\) Entering (MASTER|BACKUP|FAULT) STATE")
# vipd logs role changes as logfmt `msg="became active"`; read for diagnostics only.
VIPD_STATE_RE = re.compile(r'msg="?became (\w+)')


def default_priority(index: int) -> int:
    """n1 → 200, n2 → 150, n3 → 100, n4 → 50, then 45, 40, … (never below 1)."""
    if index <= 4:
        return 250 - 50 * index
    return max(1, 50 - 5 * (index - 4))


@dataclass(frozen=True, slots=True)
class HealthSpec:
    """vipd's ``health`` section in the lab: checks of the node's own stand-in API server
    (``vipd.lab.fakes.apiserver`` inside the responder) on ``port``."""

    port: int = 6444
    interval: float = 0.2
    timeout: float = 0.15
    rise: int = 2
    fall: int = 2
    path: str = "/readyz"
    weight: int | None = None  # None: vipd's default

    def section(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "port": self.port,
            "interval": self.interval,
            "timeout": self.timeout,
            "rise": self.rise,
            "fall": self.fall,
        }
        if self.weight is not None:
            out["weight"] = self.weight
        return out

    def detection_bound(self) -> float:
        """Longest time from the API server failing to the node noticing: the first failing
        check starts within one interval, ``fall`` of them end within ``fall`` intervals, a
        hung server's last one ``timeout`` later."""
        return self.fall * self.interval + self.timeout


@dataclass(frozen=True, slots=True)
class LeaseSpec:
    """Lease election in the lab: the emulator's URL and the timings (vipd only).

    Each node's kubeconfig (its own token) is ``<workdir>/<node>.kubeconfig``, written by the
    runner from the emulator (``vipd.lab.fakes.lease_emulator``).
    """

    api_server: str
    duration: int = 5
    renew_deadline: float = 3.0
    retry_period: float = 1.0
    keep_on_unreachable: bool = True


@dataclass(frozen=True, slots=True)
class VrrpSpec:
    """What every node of one lab cluster agrees on (``lease`` set: Lease election)."""

    vip: str
    vrid: int = 51
    advert_interval: float = 0.1
    version: int = 3
    preempt: bool = True
    unicast: bool = False
    auth_pass: str | None = None  # VRRPv2 simple password; keepalived only for now
    garp_repeat: int = 5
    garp_interval: float = 0.01  # vipd only: see KeepalivedDaemon.config for why
    interface: str = "eth0"
    health: HealthSpec | None = None  # vipd only: health checks and gating
    lease: LeaseSpec | None = None
    vmac: bool = False  # vipd only: election.vrrp.vmac (the VIP on the macvlan vrrp.<vrid>)
    # More VIPs after ``vip`` (vipd's ``vips``; keepalived: one vrrp_instance per family).
    extra_vips: tuple[str, ...] = ()
    # vipd only: election.vrrp.auth_hmac as written (key files by id, mode...); None: off
    auth_hmac: dict[str, Any] | None = None
    # vipd only: election.vrrp.allowed_sources (multicast advert sources heard); () = any
    allowed_sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.version not in (2, 3):
            raise ValueError(f"version must be 2 or 3 (got {self.version})")
        if self.version == 2 and 6 in self.families:
            raise ValueError("VRRPv2 is IPv4 only (RFC 3768); use version 3 for IPv6")
        if self.version == 2 and (
            self.advert_interval < 1 or self.advert_interval != int(self.advert_interval)
        ):
            raise ValueError(
                f"VRRPv2 advert_interval is whole seconds, at least 1 (got {self.advert_interval})"
            )
        if self.version == 3 and not 0.01 <= self.advert_interval <= 40.95:
            raise ValueError(
                f"VRRPv3 advert_interval must be 0.01..40.95 s (got {self.advert_interval})"
            )
        if self.auth_pass is not None and self.version != 2:
            raise ValueError("auth_pass needs VRRPv2 (VRRPv3 has no authentication)")

    @property
    def family(self) -> Literal[4, 6]:
        return 4 if ipaddress.ip_address(self.vip).version == 4 else 6

    @property
    def vips(self) -> tuple[str, ...]:
        return (self.vip, *self.extra_vips)

    @property
    def families(self) -> tuple[Literal[4, 6], ...]:
        """The IP versions among the VIPs, IPv4 first (one virtual router each)."""
        found = {ipaddress.ip_address(v).version for v in self.vips}
        return tuple(f for f in (4, 6) if f in found)

    def family_vips(self, family: int) -> tuple[str, ...]:
        return tuple(v for v in self.vips if ipaddress.ip_address(v).version == family)

    def master_down_interval(self, priority: int) -> float:
        """RFC 3768 / RFC 9568 Master_Down_Interval for a backup with ``priority``."""
        if self.version == 2:
            return 3 * self.advert_interval + (256 - priority) / 256
        return 3 * self.advert_interval + (256 - priority) * self.advert_interval / 256


class Daemon(ABC):
    """One daemon on one node; at most one process at a time."""

    kind: DaemonKind

    def __init__(self, lab: Lab, node: Node, spec: VrrpSpec, peers: list[Node]) -> None:
        self.lab = lab
        self.node = node
        self.spec = spec
        self.peers = [p for p in peers if p.name != node.name]
        self.priority: int = default_priority(node.index)
        self.log_path: Path = lab.workdir / f"{node.name}-{self.kind}.log"
        self.proc: subprocess.Popen[Any] | None = None
        self.starts = 0
        self._log: IO[bytes] | None = None
        self._log_offset = 0

    # -- the interface ------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, priority: int | None = None) -> None:
        """Start the daemon with ``priority`` (default: the last one, or n1=200, n2=150…)."""
        if self.running():
            raise LabError(f"{self.kind} on {self.node.name} is already running")
        if priority is not None:
            self.priority = priority
        self.starts += 1
        argv = self._prepare()
        self._close_log()
        self._log = self.log_path.open("ab")
        self._log_offset = self._log.tell()
        self._log.write(
            f"=== start {self.starts} {self.kind} {self.node.name} prio "
            f"{self.priority} at {time.monotonic():.6f}\n".encode()
        )
        self._log.flush()
        self.proc = self.lab.spawn(
            self.node.ns,
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env(),
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = 5.0) -> int | None:
        """Send ``sig``; with a ``timeout``, wait that long for exit (then SIGKILL the tree).

        SIGKILL goes to the daemon's whole process tree (keepalived runs a VRRP child that
        would otherwise carry on alone). Returns the exit status if it has exited.
        """
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self._close_log()
            return proc.returncode if proc is not None else None
        targets = [proc.pid, *descendants(proc.pid)] if sig == signal.SIGKILL else [proc.pid]
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if timeout is None:
            return None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [proc.pid, *descendants(proc.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            code = proc.wait(timeout=5.0)
        self._close_log()
        return code

    def wait(self, timeout: float) -> int | None:
        """Wait for the process to exit (after a signal sent elsewhere); reap it."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._close_log()
        return code

    def log_text(self) -> str:
        """This start's part of the log."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def state(self) -> str | None:
        """The daemon's own idea of its VRRP state, if it tells us; None otherwise."""
        return None

    def election_started(self) -> bool:
        """This start has joined its election (a Lease daemon: it campaigns now)."""
        return True

    # -- per kind -----------------------------------------------------------------------

    @abstractmethod
    def _prepare(self) -> list[str]:
        """Write this start's config files; return the argv to run inside the node."""

    def _env(self) -> dict[str, str] | None:
        return None

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class VipdDaemon(Daemon):
    kind: DaemonKind = "vipd"

    @property
    def config_path(self) -> Path:
        return self.lab.workdir / f"{self.node.name}-vipd.yaml"

    def config(self) -> dict[str, Any]:
        s = self.spec
        vrrp: dict[str, Any] = {
            "vrid": s.vrid,
            "priority": self.priority,
            "advert_interval": s.advert_interval,
            "version": s.version,
            "preempt": s.preempt,
            "unicast_peers": [p.addr(s.family) for p in self.peers] if s.unicast else [],
        }
        if s.vmac:
            vrrp["vmac"] = True
        if s.auth_pass is not None:
            # Not in the documented config yet; written so a mismatch fails loudly at load.
            vrrp["auth_pass"] = s.auth_pass
        if s.auth_hmac is not None:
            vrrp["auth_hmac"] = s.auth_hmac
        if s.allowed_sources:
            vrrp["allowed_sources"] = list(s.allowed_sources)
        election: dict[str, Any] = {"mode": "vrrp", "vrrp": vrrp}
        if s.lease is not None:
            election = {
                "mode": "lease",
                "lease": {
                    "duration": s.lease.duration,
                    "renew_deadline": s.lease.renew_deadline,
                    "retry_period": s.lease.retry_period,
                    "kubeconfig": str(self.lab.workdir / f"{self.node.name}.kubeconfig"),
                    "api_server": s.lease.api_server,
                    "tls_server_name": None,
                    "keep_on_unreachable": s.lease.keep_on_unreachable,
                },
            }
        out: dict[str, Any] = {
            "node": self.node.name,
            **({"vips": list(s.vips)} if s.extra_vips else {"vip": s.vip}),
            "interface": s.interface,
            "election": election,
            "garp": {"repeat": s.garp_repeat, "interval": s.garp_interval},
            "log": {"format": "logfmt", "level": "info"},
        }
        if s.health is not None:
            out["health"] = s.health.section()
            if s.lease is not None:
                # Lease mode gives way only to a healthy peer: check the others' stand-ins.
                out["health"]["peers"] = [p.addr(s.family) for p in self.peers]
        return out

    def _prepare(self) -> list[str]:
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        return python_argv("vipd", "run", "--config", str(self.config_path))

    def state(self) -> str | None:
        """``ACTIVE``/``BACKUP`` (Lease: ``LEADER``/``FOLLOWER``) from the last ``became …``
        log line; None if there is none."""
        found = VIPD_STATE_RE.findall(self.log_text())
        return found[-1].upper() if found else None

    def election_started(self) -> bool:
        """Lease mode: the agent's line once the Kubernetes client is imported and the
        election runs (VRRP: at once)."""
        return self.spec.lease is None or LEASE_STARTED in self.log_text()

    def _env(self) -> dict[str, str]:
        return python_env({"NODE_NAME": self.node.name})


class KeepalivedDaemon(Daemon):
    kind: DaemonKind = "keepalived"

    def _run_dir(self) -> Path:
        return self.lab.workdir / f"{self.node.name}-keepalived.{self.starts}"

    def config(self) -> str:
        s = self.spec
        if s.health is not None:
            raise LabError("the lab's health checks are vipd's; keepalived runs without them")
        g = [
            "global_defs {",
            f"    router_id {self.lab.prefix}-{self.node.name}",
            f"    vrrp_version {s.version}",
            # No vrrp_garp_interval / vrrp_gna_interval (vipd's garp.interval) on purpose:
            # with it set to 0.01, keepalived 2.2.7 sent only 2 of its 5 GARPs (or NAs) per
            # takeover in this lab (tcpdump on br0); without it, all 5 go out back to back.
            "}",
        ]
        instances: list[str] = []
        for n, family in enumerate(s.families):
            instances += self._instance(family, "VI" if n == 0 else f"VI{family}")
        return "\n".join([*g, *instances]) + "\n"

    def _instance(self, family: Literal[4, 6], prefix: str) -> list[str]:
        """One ``vrrp_instance`` for the VIPs of ``family`` (keepalived: one per family, on
        the same virtual_router_id; the VIP list's family makes the instance's)."""
        s = self.spec
        i = [
            f"vrrp_instance {prefix}_{s.vrid} {{",
            "    state BACKUP",
            f"    interface {s.interface}",
            f"    virtual_router_id {s.vrid}",
            f"    priority {self.priority}",
            f"    advert_int {s.advert_interval:g}",
            f"    garp_master_repeat {s.garp_repeat}",
        ]
        if not s.preempt:
            i.append("    nopreempt")
        if s.unicast:
            i.append(f"    unicast_src_ip {self.node.addr(family)}")
            i.append("    unicast_peer {")
            i += [f"        {p.addr(family)}" for p in self.peers]
            i.append("    }")
        if s.auth_pass is not None:
            i += [
                "    authentication {",
                "        auth_type PASS",
                f"        auth_pass {s.auth_pass}",
                "    }",
            ]
        # The VIP list's family makes the instance IPv4 or IPv6 (native_ipv6 is deprecated);
        # keepalived warns that the first IPv6 VIP is not link-local, which is harmless.
        # A /128 VIP gets preferred_lft 0 by default, so it is never a source address.
        i += [
            "    virtual_ipaddress {",
            *(f"        {v}/{32 if family == 4 else 128}" for v in s.family_vips(family)),
            "    }",
            "}",
        ]
        return i

    def _pid_args(self, run_dir: Path) -> list[str]:
        return [
            "-p",
            str(run_dir / "keepalived.pid"),
            "-r",
            str(run_dir / "vrrp.pid"),
            "-c",
            str(run_dir / "checkers.pid"),
            "-b",
            str(run_dir / "bfd.pid"),
        ]

    def _prepare(self) -> list[str]:
        run_dir = self._run_dir()
        run_dir.mkdir(parents=True, exist_ok=False)
        conf = run_dir / "keepalived.conf"
        conf.write_text(self.config())
        env = ["env", f"TMPDIR={run_dir}"]
        check = self.lab.exec(
            self.node.ns,
            [*env, "keepalived", "-t", "-f", str(conf), *self._pid_args(run_dir)],
            check=False,
        )
        if check.returncode != 0:
            raise LabError(f"keepalived -t rejected {conf}: {check.stderr.strip()}")
        return [
            *env,
            "keepalived",
            "-n",
            "-l",
            "-D",
            "-G",
            "-P",
            "-f",
            str(conf),
            *self._pid_args(run_dir),
        ]

    def state(self) -> str | None:
        found = STATE_RE.findall(self.log_text())
        return found[-1][1] if found else None


@dataclass
class Fleet:
    """The daemons of one lab, by node name."""

    kind: DaemonKind
    spec: VrrpSpec
    daemons: dict[str, Daemon] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Daemon:
        return self.daemons[name]

    def start_all(self) -> None:
        for daemon in self.daemons.values():
            daemon.start()

    def stop_all(self, sig: int = signal.SIGTERM) -> None:
        for daemon in self.daemons.values():
            daemon.stop(sig, timeout=None)
        for daemon in self.daemons.values():
            daemon.stop(sig, timeout=5.0)

    def top(self, among: list[str] | None = None) -> str:
        """The node that should hold the VIP: highest priority, then highest address."""
        names = among if among is not None else list(self.daemons)
        return max(
            names,
            key=lambda n: (
                self.daemons[n].priority,
                ipaddress.ip_address(self.daemons[n].node.addr(self.spec.family)),
            ),
        )


def make_daemon(kind: DaemonKind, lab: Lab, node: Node, spec: VrrpSpec) -> Daemon:
    cls: type[Daemon] = VipdDaemon if kind == "vipd" else KeepalivedDaemon
    return cls(lab, node, spec, lab.nodes)


def make_fleet(kind: DaemonKind, lab: Lab, spec: VrrpSpec) -> Fleet:
    return Fleet(kind, spec, {n.name: make_daemon(kind, lab, n, spec) for n in lab.nodes})


def descendants(pid: int) -> list[int]:
    """All descendants of ``pid``, from /proc (children first found, then theirs)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may contain spaces.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
