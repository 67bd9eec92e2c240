"""The lab's network: one bridge, N node namespaces and a client namespace, built with `ip`.

What it is: ``Lab`` builds, per run, a set of network namespaces that all carry one name
prefix (``vl`` + 4 random hex chars unless given), so several labs can share a machine:

- ``<prefix>-lan``: a bridge ``br0`` with multicast snooping off, so VRRP multicast (and IPv6
  neighbour discovery) floods to every port the way a dumb L2 segment does;
- ``<prefix>-n1`` … ``<prefix>-nN``: the "nodes", each with one ``eth0`` (a veth whose other
  end is the bridge port ``n1`` … ``nN`` inside the lan namespace);
- ``<prefix>-c``: the client, bridge port ``c``.

Addresses: node i has 10.77.0.(10+i)/24 and fd00:77::(10+i)/64, the client 10.77.0.2/24 and
fd00:77::2/64; the VIPs are 10.77.0.100 and fd00:77::100. Both veth ends are created directly
inside the namespaces (``ip -n LAN link add nI type veth peer name eth0 netns NODE``), so no
interface ever appears in the host's root namespace, and deleting the namespaces removes all.

It also offers the small process helpers the rest of the lab uses: ``exec`` (run to
completion inside a namespace) and ``spawn`` (start in the background, tracked so teardown can
reap it), ``holders`` (which nodes have the VIP bound right now) and ``cleanup`` (remove a
previous lab's leftovers by prefix).

What it must not do: touch anything outside its own namespaces (no host interfaces, routes,
sysctls or firewall rules), rely on pid files or process liveness checks (zombies are not
reaped by PID 1 on these machines), or know anything about VRRP or the daemons. The `ip`
command is used on purpose instead of netlink bindings: every step is a line a human can
replay from a shell.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

import vipd

IP = "ip"
Family = Literal[4, 6]

SUBNET4 = "10.77.0"
SUBNET6 = "fd00:77:"
VIP4 = "10.77.0.100"
VIP6 = "fd00:77::100"
CLIENT4 = "10.77.0.2"
CLIENT6 = "fd00:77::2"
MAX_NODES = 80  # node addresses .11 … .90 stay clear of the VIP at .100

# Where the ``vipd`` package we run inside the namespaces lives: child processes import it
# from the same checkout as this process even when the venv has no (or another) install.
_SOURCE_ROOT = str(Path(vipd.__file__).resolve().parent.parent)


class LabError(RuntimeError):
    """A lab plumbing step failed; the message names the command and its stderr."""


@dataclass(frozen=True, slots=True)
class Node:
    """One lab node: its name (``n1``), namespace, bridge port and addresses."""

    name: str
    index: int
    ns: str
    port: str  # the bridge-side veth end in the lan namespace
    ipv4: str
    ipv6: str

    def addr(self, family: Family) -> str:
        return self.ipv4 if family == 4 else self.ipv6


def vip_for(family: Family) -> str:
    return VIP4 if family == 4 else VIP6


def new_prefix() -> str:
    return "vl" + secrets.token_hex(2)


def check_prefix(prefix: str) -> str:
    """Reject prefixes that could collide with other labs or need shell quoting."""
    if not (1 <= len(prefix) <= 12 and prefix.isascii() and prefix.isalnum()):
        raise ValueError(f"lab prefix must be 1-12 ASCII letters/digits (got {prefix!r})")
    return prefix


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for ``python -m vipd…`` children: this checkout first on the path."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _SOURCE_ROOT + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"  # logs reach their files as they happen, not at exit
    # `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH: a bench
    # run from a checkout would start that checkout's vipd/ instead of its snapshot (or of
    # the --base tree). Without it, PYTHONPATH alone says which vipd runs.
    env["PYTHONSAFEPATH"] = "1"
    if extra:
        env.update(extra)
    return env


def python_argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def _run(
    argv: Sequence[str], *, check: bool = True, timeout: float = 30.0, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input_text,
        check=False,
    )
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def netns_list() -> list[str]:
    out = _run([IP, "-j", "netns", "list"], check=False).stdout.strip()
    if not out:  # `ip -j netns list` prints nothing at all when there are none
        return []
    return [str(entry["name"]) for entry in json.loads(out)]


def netns_pids(ns: str) -> list[int]:
    proc = _run([IP, "netns", "pids", ns], check=False)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def kill_netns_processes(ns: str, sig: int = signal.SIGKILL, *, rounds: int = 5) -> None:
    """Signal every process in ``ns`` until none is left (a dying parent may fork once more).

    Zombies no longer have a network namespace, so they drop out of ``ip netns pids`` as soon
    as they die; nothing here waits for anyone to reap them.
    """
    for _ in range(rounds):
        pids = [pid for pid in netns_pids(ns) if pid != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(0.02)


def delete_namespaces(names: Sequence[str]) -> None:
    for ns in names:
        kill_netns_processes(ns)
    for ns in names:
        _run([IP, "netns", "del", ns], check=False)


def lab_namespaces(prefix: str) -> list[str]:
    """The namespaces that belong to the lab with this exact prefix (``<prefix>-…``)."""
    return sorted(ns for ns in netns_list() if ns.startswith(prefix + "-"))


def cleanup(prefix: str) -> list[str]:
    """Remove a lab's leftovers: kill its processes, delete its namespaces and its temporary
    directories; returns the namespaces removed.

    Node and client namespaces go first and the lan (bridge) namespace last, so no veth end
    is ever orphaned into another namespace while we work.
    """
    names = lab_namespaces(check_prefix(prefix))
    names.sort(key=lambda ns: ns.endswith("-lan"))
    delete_namespaces(names)
    for workdir in Path(tempfile.gettempdir()).glob(f"vipd-lab-{prefix}-*"):
        shutil.rmtree(workdir, ignore_errors=True)  # logs of a --keep run or a failed one
    return names


class Lab:
    """A bridge, N nodes and a client in network namespaces; a context manager.

    ``with Lab(nodes=3) as lab:`` builds everything and always tears it down on exit, including
    on exceptions (KeyboardInterrupt, or the SystemExit a signal handler raises).
    """

    def __init__(
        self,
        nodes: int = 3,
        prefix: str | None = None,
        *,
        workdir: Path | None = None,
        keep_workdir: bool = False,
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes must be 1..{MAX_NODES} (got {nodes})")
        self.prefix = check_prefix(prefix) if prefix is not None else new_prefix()
        self.lan_ns = f"{self.prefix}-lan"
        self.client_ns = f"{self.prefix}-c"
        self.nodes: list[Node] = [
            Node(
                name=f"n{i}",
                index=i,
                ns=f"{self.prefix}-n{i}",
                port=f"n{i}",
                ipv4=f"{SUBNET4}.{10 + i}",
                ipv6=f"{SUBNET6}:{10 + i}",
            )
            for i in range(1, nodes + 1)
        ]
        self._workdir_given = workdir is not None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix=f"vipd-lab-{self.prefix}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.keep_workdir = keep_workdir
        self._procs: list[subprocess.Popen[Any]] = []
        self._created: list[str] = []
        self._torn_down = False

    # -- lookups -------------------------------------------------------------------------

    @property
    def namespaces(self) -> list[str]:
        return [self.lan_ns, *(n.ns for n in self.nodes), self.client_ns]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> Lab:
        try:
            self.build()
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

    def build(self) -> None:
        clash = set(self.namespaces) & set(netns_list())
        if clash:
            raise LabError(
                f"namespaces already exist (another lab with this prefix?): "
                f"{sorted(clash)}; remove them with cleanup({self.prefix!r})"
            )
        for ns in self.namespaces:
            _run([IP, "netns", "add", ns])
            self._created.append(ns)
        lan = self.lan_ns
        # STP off (the default) means ports forward at once; snooping off makes the bridge
        # flood multicast like a plain hub would, which is what VRRP on a LAN expects.
        self._ip(
            lan, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", "stp_state", "0"
        )
        self._ip(lan, "link", "set", "lo", "up")
        self._ip(lan, "link", "set", "br0", "up")
        for node in self.nodes:
            self._attach(node.ns, node.port, f"{node.ipv4}/24", f"{node.ipv6}/64", [])
        self._attach(
            self.client_ns,
            "c",
            f"{CLIENT4}/24",
            f"{CLIENT6}/64",
            # 500 connects/s for minutes must not run out of ephemeral ports.
            ["net.ipv4.ip_local_port_range=1024 65000"],
        )

    def _attach(self, ns: str, port: str, addr4: str, addr6: str, sysctls: list[str]) -> None:
        self._ip(
            self.lan_ns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns
        )
        self._ip(self.lan_ns, "link", "set", port, "master", "br0", "up")
        # Before eth0 comes up: no DAD, so the link-local address (keepalived's IPv6 advert
        # source) is usable at once and after every link flap; keep global addresses across
        # `ip link set down`, as the IPv4 address is kept, so `restore` only has to set it up.
        self.exec(
            ns,
            [
                "sysctl",
                "-q",
                "-w",
                "net.ipv6.conf.eth0.accept_dad=0",
                "net.ipv6.conf.eth0.keep_addr_on_down=1",
                *sysctls,
            ],
        )
        self._ip(ns, "addr", "add", addr4, "dev", "eth0")
        self._ip(ns, "addr", "add", addr6, "dev", "eth0", "nodad")
        self._ip(ns, "link", "set", "lo", "up")
        self._ip(ns, "link", "set", "eth0", "up")

    def teardown(self) -> None:
        """Kill every process in the lab's namespaces and delete them; idempotent."""
        if self._torn_down:
            return
        self._torn_down = True
        # Only what this Lab created: if build() failed on a name clash, the namespaces that
        # clashed belong to someone else and must survive.
        names = list(self._created)
        # Nodes and client first, the bridge's namespace last (see cleanup()).
        names.sort(key=lambda ns: ns == self.lan_ns)
        for ns in names:
            kill_netns_processes(ns)
        for proc in self._procs:
            # Processes we started are our children: reap them so they leave no zombies.
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        delete_namespaces(names)
        if not self.keep_workdir and not self._workdir_given:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- processes -----------------------------------------------------------------------

    def exec(
        self,
        ns: str,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 30.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``ns`` to completion; raise LabError on failure if ``check``."""
        return _run(
            [IP, "netns", "exec", ns, *argv], check=check, timeout=timeout, input_text=input_text
        )

    def spawn(
        self,
        ns: str,
        argv: Sequence[str],
        *,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        env: Mapping[str, str] | None = None,
        text: bool = False,
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``ns`` in the background; teardown kills and reaps it.

        `ip netns exec` execs the command in place, so the Popen's pid is the command's own.
        """
        proc: subprocess.Popen[Any] = subprocess.Popen(
            [IP, "netns", "exec", ns, *argv],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            text=text,
            # Own process group: a Ctrl-C on the terminal reaches only us, and we decide
            # the order in which the lab goes away.
            start_new_session=True,
        )
        self._procs.append(proc)
        return proc

    def _ip(self, ns: str, *args: str) -> None:
        _run([IP, "-n", ns, *args])

    def ip(self, ns: str, *args: str, check: bool = True) -> str:
        """``ip -n NS ARGS…``; returns stdout."""
        return _run([IP, "-n", ns, *args], check=check).stdout

    # -- observation ---------------------------------------------------------------------

    def addresses(self, node: Node) -> list[str]:
        """Addresses on eth0 and on a virtual-MAC macvlan ``vrrp.<vrid>`` (vipd.host.vmac)."""
        out = self.ip(node.ns, "-j", "addr", "show", check=False).strip()
        if not out:
            return []
        return [
            str(a["local"])
            for link in json.loads(out)
            if link.get("ifname") == "eth0" or str(link.get("ifname", "")).startswith("vrrp.")
            for a in link.get("addr_info", [])
        ]

    def holders(self, vip: str) -> list[str]:
        """Names of the nodes that have ``vip`` bound on eth0 (or its virtual-MAC macvlan)
        right now (link up or not)."""
        want = ipaddress.ip_address(vip)
        return [
            node.name
            for node in self.nodes
            if any(ipaddress.ip_address(a) == want for a in self.addresses(node))
        ]

    def wire_holders(self, vip: str) -> list[str]:
        """:meth:`holders` whose eth0 is up. A node killed by :func:`faults.kill` loses its
        link first; if its daemon died before it saw that and released the VIP, the address
        stays bound on the dead link, where nothing can reach it."""
        return [name for name in self.holders(vip) if self.link_up(self.node(name))]

    def link_up(self, node: Node) -> bool:
        out = self.ip(node.ns, "-j", "link", "show", "dev", "eth0").strip()
        return "UP" in json.loads(out)[0].get("flags", [])

    def set_link(self, node: Node, up: bool) -> None:
        self._ip(node.ns, "link", "set", "eth0", "up" if up else "down")

    def replug(self, node: Node, ipv4: str | None = None) -> None:
        """Delete the node's veth pair and make a new one of the same names: eth0 comes
        back with a new index and MAC (a NIC re-plugged, a bond rebuilt), attached to the
        bridge, with the node's addresses (or ``ipv4`` instead of its IPv4 one)."""
        self._ip(self.lan_ns, "link", "del", node.port)  # takes eth0, its peer, with it
        self._attach(node.ns, node.port, f"{ipv4 or node.ipv4}/24", f"{node.ipv6}/64", [])

    def readdress(self, node: Node, old: str, new: str) -> None:
        """Move the node's IPv4 address on eth0 from ``old`` to ``new`` (same /24) without
        an instant with none: ``new`` is added as a secondary, then ``old`` deleted, and the
        kernel promotes ``new`` to primary (``promote_secondaries``)."""
        self.exec(node.ns, ["sysctl", "-q", "-w", "net.ipv4.conf.eth0.promote_secondaries=1"])
        self._ip(node.ns, "addr", "add", f"{new}/24", "dev", "eth0")
        self._ip(node.ns, "addr", "del", f"{old}/24", "dev", "eth0")

    def iter_logs(self) -> Iterator[Path]:
        yield from sorted(self.workdir.glob("*.log"))
