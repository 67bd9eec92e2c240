"""FRR's vrrpd (Debian's ``frr`` 8.4) as a VRRP peer on one lab node: a second, independent
implementation next to keepalived (``vipd.lab.daemons``).

What it is: ``FrrVrrp`` runs one ``zebra`` and one ``vrrpd`` inside a node's namespace, each
with this start's own vty socket directory (``--vty_socket``), zserv socket (``-z``) and pid
files (``-i``), so several FRRs (one per namespace) and Debian's own ``frr`` service never share
a path; no ``-N`` pathspace is needed. The VRRP router is configured through ``vtysh`` once
both daemons listen, and its state is read back with ``show vrrp json``.

How FRR's vrrpd differs from keepalived and vipd (FRR's VRRP documentation,
https://docs.frrouting.org/en/latest/vrrp.html):

- It never adds or removes the virtual address. It needs a macvlan in bridge mode on top of
  the parent interface, with the virtual MAC (RFC 9568 §7.3: 00-00-5E-00-01-VRID for IPv4,
  00-00-5E-00-02-VRID for IPv6) and the VIP bound, created beforehand; zebra then sets that
  macvlan's ``protodown`` on in Backup and off in Master. Here it is ``frr4.<vrid>`` (or
  ``frr6.<vrid>``); ``Lab.holders`` only looks at eth0 and vipd's ``vrrp.<vrid>``, so FRR's
  node never counts as a holder there: ``holds_vip`` is FRR's side of that question.
- The parent gets ``arp_ignore=1``: without it a Backup's eth0 answers ARP for the VIP bound
  on its (protodown) macvlan with the node's own MAC. It also gets ``arp_announce=2``: a reply
  from the VIP (say an ICMP port unreachable) leaves through the parent, and without it the
  parent's ARP request for the client carries the VIP as sender, which moves the client's
  entry for the VIP from the virtual MAC to the parent's MAC (seen in this lab).
- It has no authentication (RFC 9568 removed it; FRR has no v2 ``auth_type PASS``).
- The advertisement interval is configured in milliseconds (v2: whole seconds on the wire).

What it must not do: judge an election (the tests do), touch Debian's FRR service, its
``/etc/frr`` files or its sockets, or leave anything behind: ``close`` (also on a failed
start) kills both daemons and removes this start's run directory under ``/tmp`` (the run
directory cannot live in the lab's workdir: that one is root-only and FRR drops to user
``frr``; it is named ``vipd-lab-<prefix>-frr-…`` so ``topology.cleanup`` removes it after a
crash too); the daemons die with the lab's namespaces and the macvlan goes away with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Literal

from vipd.lab.daemons import VrrpSpec
from vipd.lab.topology import Lab, LabError, Node

FRR_LIBEXEC = Path("/usr/lib/frr")
ZEBRA = FRR_LIBEXEC / "zebra"
VRRPD = FRR_LIBEXEC / "vrrpd"
VTYSH = "vtysh"
FRR_USER = "frr"  # Debian's frr package runs its daemons as frr:frr (vty group frrvty)

FrrState = Literal["MASTER", "BACKUP", "INITIALIZE"]
_STATES: dict[str, FrrState] = {"Master": "MASTER", "Backup": "BACKUP", "Initialize": "INITIALIZE"}


def frr_problem() -> str | None:
    """Why FRR's vrrpd cannot run here, or None."""
    for path in (ZEBRA, VRRPD):
        if not os.access(path, os.X_OK):
            return f"needs FRR's {path} (apt-get install frr; scripts/setup does it)"
    if shutil.which(VTYSH) is None:
        return "needs FRR's vtysh (apt-get install frr; scripts/setup does it)"
    try:
        pwd.getpwnam(FRR_USER)
    except KeyError:
        return f"needs the user {FRR_USER!r} that Debian's frr package creates"
    return None


def virtual_mac(vrid: int, family: int) -> str:
    """RFC 9568 §7.3 (RFC 3768 §7.3 for IPv4)."""
    return f"00:00:5e:00:{1 if family == 4 else 2:02x}:{vrid:02x}"


class FrrVrrp:
    """zebra + vrrpd on one node for one VRID and one address family; at most one start at a
    time. ``kind`` is ``"frr"`` for messages."""

    kind = "frr"

    def __init__(self, lab: Lab, node: Node, spec: VrrpSpec, priority: int) -> None:
        if spec.auth_pass is not None:
            raise LabError("FRR's vrrpd has no authentication (auth_pass)")
        if spec.unicast:
            raise LabError("FRR's vrrpd speaks multicast only")
        if len(spec.families) != 1:
            raise LabError("one FrrVrrp serves one address family")
        self.lab = lab
        self.node = node
        self.spec = spec
        self.priority = priority
        self.family = spec.family
        self.link = f"frr{self.family}.{spec.vrid}"
        self.mac = virtual_mac(spec.vrid, self.family)
        self.log_path = lab.workdir / f"{node.name}-frr.log"
        self.run_dir: Path | None = None
        self.starts = 0
        self._procs: dict[str, subprocess.Popen[Any]] = {}
        self._log: IO[bytes] | None = None
        self._log_offset = 0

    # -- the node's plumbing --------------------------------------------------------------

    def _ensure_vmac(self) -> None:
        """The macvlan FRR drives (made once per node; kept across restarts, as a
        configured interface would be) and arp_ignore=1 on the parent."""
        ns, s = self.node.ns, self.spec
        self.lab.exec(
            ns,
            [
                "sysctl",
                "-q",
                "-w",
                f"net/ipv4/conf/{s.interface}/arp_ignore=1",
                f"net/ipv4/conf/{s.interface}/arp_announce=2",
            ],
        )
        if self.link in self.lab.ip(ns, "-o", "link", "show", check=False):
            return
        self.lab.ip(
            ns, "link", "add", self.link, "link", s.interface, "type", "macvlan", "mode", "bridge"
        )
        self.lab.ip(ns, "link", "set", self.link, "address", self.mac)
        # No DAD: the link-local address (FRR's IPv6 advert source) is usable at once. The
        # sysctl name uses slashes because the link's name has a dot.
        self.lab.exec(ns, ["sysctl", "-q", "-w", f"net/ipv6/conf/{self.link}/accept_dad=0"])
        plen = 32 if self.family == 4 else 128
        extra = [] if self.family == 4 else ["nodad"]
        self.lab.ip(ns, "addr", "add", f"{s.vip}/{plen}", "dev", self.link, *extra)
        self.lab.ip(ns, "link", "set", self.link, "up")

    def holds_vip(self) -> bool:
        """FRR's macvlan is up and not protodown (FRR's Master), with the VIP bound."""
        out = self.lab.ip(self.node.ns, "-j", "-d", "addr", "show", "dev", self.link, check=False)
        if not out.strip():
            return False
        link = json.loads(out)[0]
        up = link.get("operstate") == "UP"  # protodown or a dead parent: DOWN/LOWERLAYERDOWN
        bound = any(a.get("local") == self.spec.vip for a in link.get("addr_info", []))
        return up and bound and not link.get("proto_down", False)

    # -- the daemons ----------------------------------------------------------------------

    def running(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for p in self._procs.values())

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values() if p.poll() is None]

    def commands(self) -> list[str]:
        """The vtysh configuration of this VRRP router (FRR's ``vrrp`` interface commands)."""
        s, v = self.spec, self.spec.vrid
        out = [
            f"vrrp {v} version {s.version}",
            f"vrrp {v} priority {self.priority}",
            f"vrrp {v} advertisement-interval {round(s.advert_interval * 1000)}",
            f"vrrp {v} {'ip' if self.family == 4 else 'ipv6'} {s.vip}",
        ]
        if not s.preempt:
            out.append(f"no vrrp {v} preempt")
        return out

    def start(self, priority: int | None = None, timeout: float = 10.0) -> None:
        if self.running():
            raise LabError(f"FRR on {self.node.name} is already running")
        if priority is not None:
            self.priority = priority
        self.close()
        self.starts += 1
        self._ensure_vmac()
        # Named like the lab's own workdir, so topology.cleanup(prefix) also finds it.
        self.run_dir = run_dir = Path(
            tempfile.mkdtemp(prefix=f"vipd-lab-{self.lab.prefix}-frr-{self.node.name}-")
        )
        user = pwd.getpwnam(FRR_USER)
        os.chown(run_dir, user.pw_uid, user.pw_gid)
        empty = run_dir / "empty.conf"
        empty.write_text("")
        self._log = self.log_path.open("ab")
        self._log_offset = self._log.tell()
        self._log.write(
            f"=== start {self.starts} frr {self.node.name} prio {self.priority} "
            f"at {time.monotonic():.6f}\n".encode()
        )
        self._log.flush()
        try:
            deadline = time.monotonic() + timeout
            for name, binary in (("zebra", ZEBRA), ("vrrpd", VRRPD)):
                self._procs[name] = self.lab.spawn(
                    self.node.ns,
                    [
                        str(binary),
                        *("-u", FRR_USER, "-g", FRR_USER),
                        *("--vty_socket", str(run_dir), "-P", "0"),
                        *("-i", str(run_dir / f"{name}.pid")),
                        *("-z", str(run_dir / "zserv.api")),
                        *("-f", str(empty)),
                        *("--log", "stdout", "--log-level", "info"),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                )
                self._wait_socket(run_dir / f"{name}.vty", name, deadline)
            self.vtysh("configure terminal", f"interface {self.spec.interface}", *self.commands())
        except BaseException:
            self.close()
            raise

    def _wait_socket(self, path: Path, name: str, deadline: float) -> None:
        while not path.exists():
            proc = self._procs[name]
            if proc.poll() is not None:
                raise LabError(f"FRR {name} on {self.node.name} exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise LabError(f"FRR {name} on {self.node.name} did not open {path}")
            time.sleep(0.02)

    def vtysh(self, *commands: str) -> str:
        """Run ``commands`` in this start's vtysh; a ``%`` line (FRR's error) raises."""
        if self.run_dir is None:
            raise LabError(f"FRR on {self.node.name} was never started")
        argv = [VTYSH, "--vty_socket", str(self.run_dir)]
        for c in commands:
            argv += ["-c", c]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("%")]
        if proc.returncode != 0 or errors:
            raise LabError(
                f"vtysh {list(commands)} on {self.node.name}: exit {proc.returncode}: "
                f"{proc.stderr.strip()} {' '.join(errors)}"
            )
        return proc.stdout

    def show(self) -> dict[str, Any]:
        """This VRID's entry of ``show vrrp json`` (empty if FRR does not list it)."""
        for vr in json.loads(self.vtysh("show vrrp json") or "[]"):
            if isinstance(vr, dict) and vr.get("vrid") == self.spec.vrid:
                return vr
        return {}

    def state(self) -> FrrState | None:
        """vrrpd's own state for this family (None when it does not run or answer)."""
        if not self.running():
            return None
        try:
            status = self.show().get(f"v{self.family}", {}).get("status")
        except (LabError, subprocess.TimeoutExpired, json.JSONDecodeError):
            return None
        return _STATES.get(str(status))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> dict[str, int | None]:
        """``sig`` to vrrpd (then zebra); wait up to ``timeout`` each, then SIGKILL. Returns
        the exit codes by daemon name."""
        codes: dict[str, int | None] = {}
        for name in ("vrrpd", "zebra"):  # vrrpd first: its last adverts need the link
            proc = self._procs.get(name)
            if proc is None:
                continue
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
            try:
                codes[name] = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait(timeout=5.0)
        return codes

    def kill(self) -> None:
        """Node death as ``faults.kill`` has it: eth0 down first, then SIGKILL to both
        daemons (the VIP stays bound on the macvlan, now without a carrier)."""
        self.lab.set_link(self.node, False)
        self.stop(signal.SIGKILL)

    def close(self) -> None:
        """Stop whatever runs (SIGKILL) and remove the run directory; idempotent."""
        if self._procs:
            self.stop(signal.SIGKILL)
            self._procs = {}
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

    # -- logs -----------------------------------------------------------------------------

    def log_text(self) -> str:
        """This start's part of the log (zebra's and vrrpd's lines)."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
