"""systemd/vipd.service under a real systemd: a Debian 12 tree booted with systemd-nspawn.

The tree (mmdebstrap: systemd, python3, iproute2) gets vipd as docs/install-image.md says a
host does: the wheel from scripts/build installed into /opt/vipd with the pinned
dependencies (offline, from a wheelhouse made on the host), the unit file as it is in the
repository, a config in /etc/vipd/vipd.yaml, the unit enabled. The container lives in a
network namespace of its own, joined by a veth to a "peer" namespace: nothing on the host's
network is touched. Then, with the unit exactly as shipped:

- journald priorities: a foreign host (the peer) answers for the VIP at boot, so vipd logs
  "VIP held by another host" as a warning until the peer lets go; ``journalctl -u vipd -p
  warning`` shows those lines (priority 4, the ``<4>`` prefix stripped by journald) and none
  of the info lines, which ``-p info`` has at priority 6.
- DynamicUser and the sandbox: the main process runs as a dynamic (non-root) user with
  exactly CAP_NET_ADMIN and CAP_NET_RAW effective, no_new_privs, a seccomp filter, a
  read-only root, an empty /home and a private /tmp; and those two capabilities suffice: it
  binds the VIP on the namespace's interface.
- the watchdog: systemd runs it with WatchdogSec (10 s) and sees the heartbeat's pings. A
  vipd stopped whole (SIGSTOP) misses them; at the timeout systemd sends SIGTERM (and
  SIGCONT), so its loop comes back and runs the ordered stop ("stopped" in its log) before
  the restart. A vipd whose event-loop thread stays blocked (held in a ptrace stop, which
  SIGCONT does not end, while its HTTP thread runs on) gets SIGTERM in vain, is killed
  TimeoutAbortSec later and restarted, and the new one binds the VIP again.
- the routed modes, each by a restart of the unit with a new config in the same container
  (the local API server's /readyz is the lab's HTTPS stand-in, run in the container's
  namespace from the host): routing-table mode writes the VIP's route into table 198 and
  its AnyIP binding, protocol 248, and at stop withdraws the route first and the binding
  announce.drain later, exiting 0; in bgp mode the ExaBGP child runs as the dynamic user, in
  vipd's cgroup, with no capability, its session with FRR's bgpd in the peer namespace
  comes up and carries the VIP, and the stop leaves no ExaBGP process; a TCP MD5 password
  reaches the dynamic user through a LoadCredential= drop-in (docs/operations.md).

Root only: it boots a container. Without root or the tools (scripts/setup installs
systemd-container and mmdebstrap) it skips with the reason, and fails under CI=true. The base
tree is made once per machine (~90 s) under ``$VIPD_NSPAWN_DIR`` (default
/var/tmp/vipd-nspawn) and extracted per run; a run takes about 2 minutes.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.prereq import missing

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "vipd.service"
CACHE = Path(os.environ.get("VIPD_NSPAWN_DIR", "/var/tmp/vipd-nspawn"))
PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "iproute2")
APT_SOURCES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
CAP_NET_ADMIN, CAP_NET_RAW = 12, 13
VIP = "10.231.0.100"
NODE_ADDR, PEER_ADDR = "10.231.0.2", "10.231.0.1"
# systemd's range for DynamicUser= (systemd.exec(5)).
DYNAMIC_UIDS = range(61184, 65520)


def wait_for(cond: Callable[[], bool], timeout: float, step: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def sh(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {out.returncode}: {out.stderr[-2000:]}")
    return out


def base_tarball() -> Path:
    """The Debian tree as a tarball, made once per machine and package list."""
    key = hashlib.sha256(" ".join(PACKAGES).encode()).hexdigest()[:12]
    tarball = CACHE / f"bookworm-{key}.tar"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "base.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs must not both make it
        if tarball.is_file():
            return tarball
        sources = next((s for s in APT_SOURCES if Path(s).is_file()), None)
        if sources is None:
            missing(f"no apt sources for mmdebstrap (looked at {APT_SOURCES})")
        # The format is said, not left to mmdebstrap's guess from the name: a target without
        # a tar suffix became a directory tree, renamed to the tarball's name and then
        # unreadable as one. Leftovers of an interrupted or that mistaken make go first.
        partial = CACHE / f"bookworm-{key}.partial.tar"
        for stale in (tarball, partial):
            if stale.is_dir():
                shutil.rmtree(stale)
            stale.unlink(missing_ok=True)
        sh(
            "mmdebstrap", "--quiet", "--variant=apt", "--format=tar",
            f"--include={','.join(PACKAGES)}",
            '--aptopt=APT::Install-Recommends "false"',
            *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale")),
            "bookworm", str(partial), sources,
            timeout=900,
        )  # fmt: skip
        partial.rename(tarball)
    return tarball


@dataclass
class Machine:
    """A booted container: its systemd's PID (for nsenter) and its network namespace."""

    proc: subprocess.Popen[bytes]
    leader: int
    netns: str
    peer_ns: str
    tree: Path
    console: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("nsenter", "-t", str(self.leader), "-a", *args, check=check)

    def show(self, prop: str) -> str:
        return self.run("systemctl", "show", "vipd", "-p", prop, "--value").stdout.strip()

    def journal(self, *args: str) -> list[dict[str, str]]:
        out = self.run("journalctl", "--no-pager", "-o", "json", "-u", "vipd", *args).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def system_journal(self) -> str:
        return self.run("journalctl", "--no-pager", "-o", "cat").stdout


def leader_of(nspawn: subprocess.Popen[bytes]) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(nspawn.pid) and fields["Name"] == "systemd":
            return int(entry.name)
    return None


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    if os.geteuid() != 0:
        missing("needs root: it boots a container with systemd-nspawn")
    absent = [t for t in ("systemd-nspawn", "mmdebstrap", "nsenter", "ip") if not shutil.which(t)]
    if absent:
        missing(f"needs {', '.join(absent)} (scripts/setup installs them)")
    work = tmp_path_factory.mktemp("nspawn")
    # The wheel and its pinned dependencies, for an offline install inside the tree.
    wheelhouse = work / "wheelhouse"
    dist = work / "dist"
    subprocess.run(
        [str(ROOT / "scripts" / "build")],
        env={**os.environ, "PYTHON": sys.executable, "OUTDIR": str(dist)},
        capture_output=True, check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = dist.glob("vipd-*.whl")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "-c", str(ROOT / "constraints.txt"), "-w", str(wheelhouse), str(wheel)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if pip.returncode != 0:
        missing(f"needs the package index for vipd's dependencies: {pip.stderr[-300:]}")
    shutil.copy(ROOT / "constraints.txt", wheelhouse)

    tree = work / "tree"
    tree.mkdir()
    with tarfile.open(base_tarball()) as tar:
        tar.extractall(tree, filter="fully_trusted")
    sh(
        "systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "-D", str(tree),
        f"--bind-ro={wheelhouse}:/wheelhouse", "/bin/sh", "-c",
        "python3 -m venv /opt/vipd && /opt/vipd/bin/pip install --quiet --no-index "
        "--disable-pip-version-check --find-links /wheelhouse -c /wheelhouse/constraints.txt "
        f"/wheelhouse/{wheel.name}",
        timeout=300,
    )  # fmt: skip
    (tree / "etc/systemd/system/vipd.service").write_text(UNIT.read_text())
    wants = tree / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "vipd.service").symlink_to("/etc/systemd/system/vipd.service")
    (tree / "etc/vipd").mkdir()
    (tree / "etc/vipd/vipd.yaml").write_text(
        yaml.safe_dump(
            {
                "node": "nspawn-1",
                "vip": VIP,
                "interface": "vx0",
                "election": {"vrrp": {"vrid": 42, "advert_interval": 0.2}},
            }
        )
    )

    tag = secrets.token_hex(3)
    netns, peer_ns = f"vsd-{tag}", f"vsd-{tag}-peer"
    for ns in (netns, peer_ns):
        sh("ip", "netns", "add", ns)
    proc = None
    try:
        sh("ip", "-n", netns, "link", "add", "vx0", "type", "veth", "peer", "name", "vx1",
           "netns", peer_ns)  # fmt: skip
        for ns, dev, addr in ((netns, "vx0", NODE_ADDR), (peer_ns, "vx1", PEER_ADDR)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        # The peer answers for the VIP when vipd starts: vipd must wait it out, warning.
        sh("ip", "-n", peer_ns, "addr", "add", f"{VIP}/32", "dev", "vx1")
        console = work / "console.log"
        with console.open("wb") as out:
            proc = subprocess.Popen(
                ["systemd-nspawn", "--quiet", "--boot", "--keep-unit", "-D", str(tree),
                 f"--machine=vipd-{tag}", "--register=no", "--console=passive",
                 # nspawn withholds NET_ADMIN unless it made the network namespace itself.
                 "--capability=CAP_NET_ADMIN",
                 f"--network-namespace-path=/run/netns/{netns}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        leader: list[int] = []

        def booted() -> bool:
            pid = leader_of(proc) if not leader else leader[0]
            if pid is None:
                return False
            leader[:] = [pid]
            state = sh("nsenter", "-t", str(pid), "-a", "systemctl", "is-system-running",
                       check=False).stdout.strip()  # fmt: skip
            return state in ("running", "degraded", "starting")

        assert wait_for(booted, 120), console.read_text()[-3000:]
        yield Machine(proc, leader[0], netns, peer_ns, tree, console)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # nspawn asks the container's systemd to power off
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        for ns in (netns, peer_ns):
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(work / "tree", ignore_errors=True)


def main_pid(m: Machine) -> int:
    return int(m.show("MainPID"))


def proc_status(m: Machine, pid: int) -> dict[str, str]:
    # The container shares the host's PID namespace view from outside: read through nsenter
    # so that the PID is the container's.
    text = m.run("cat", f"/proc/{pid}/status").stdout
    return {k: v.strip() for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":" in ln)}


def messages(m: Machine) -> str:
    return "\n".join(e["MESSAGE"] for e in m.journal())[-4000:]


def vip_holders(m: Machine) -> list[str]:
    out = sh("ip", "-n", m.netns, "-br", "addr", "show", "dev", "vx0").stdout
    return re.findall(r"(\d+\.\d+\.\d+\.\d+)/32", out)


def joined(m: Machine) -> None:
    """vipd waited out the peer's claim on the VIP (warning while it did), then joined: the
    peer lets go, vipd says READY=1 and binds the VIP. Each test starts from here."""

    def warned() -> bool:
        return any("VIP held by another host" in e["MESSAGE"] for e in m.journal("-p", "warning"))

    assert wait_for(warned, 60), messages(m)
    sh("ip", "-n", m.peer_ns, "addr", "del", f"{VIP}/32", "dev", "vx1", check=False)
    assert wait_for(lambda: m.show("ActiveState") == "active", 60), messages(m)
    assert wait_for(lambda: vip_holders(m) == [VIP], 20), messages(m)


def test_warnings_reach_the_journal_with_their_priority(machine: Machine) -> None:
    m = machine
    joined(m)

    warnings = m.journal("-p", "warning")
    assert warnings and all(int(e["PRIORITY"]) <= 4 for e in warnings)
    for e in warnings:
        assert not e["MESSAGE"].startswith("<"), e["MESSAGE"]  # journald took the prefix
        assert "level=warning" in e["MESSAGE"] or "level=error" in e["MESSAGE"], e["MESSAGE"]
    assert not any("VIP bound and announced" in e["MESSAGE"] for e in warnings)
    infos = [e for e in m.journal("-p", "info") if e.get("_PID") == str(main_pid(m))]
    bound = [e for e in infos if "VIP bound and announced" in e["MESSAGE"]]
    assert bound and all(e["PRIORITY"] == "6" for e in bound), infos


def test_dynamic_user_with_two_capabilities_in_the_sandbox(machine: Machine) -> None:
    m = machine
    joined(m)
    pid = main_pid(m)
    status = proc_status(m, pid)
    uids = {int(u) for u in status["Uid"].split()}
    assert len(uids) == 1 and uids.pop() in DYNAMIC_UIDS, status["Uid"]
    assert int(status["CapEff"], 16) == (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW)
    assert int(status["CapBnd"], 16) == (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW)
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
    # The mounts vipd sees: root read-only (ProtectSystem=strict), /home empty, its own /tmp.
    mounts = m.run("cat", f"/proc/{pid}/mountinfo").stdout.splitlines()
    by_point = {ln.split()[4]: ln for ln in mounts}
    assert " ro" in by_point["/"].split(" - ")[0] or ",ro" in by_point["/"], by_point["/"]
    assert "/tmp" in by_point and "/home" in by_point, sorted(by_point)
    # And with just those two it holds the VIP (netlink) and advertises (raw socket).
    assert vip_holders(m) == [VIP]
    assert m.show("DynamicUser") == "yes"


def host_pid(m: Machine, pid: int) -> int:
    """The host's PID of the container's process ``pid`` (same PID namespace as its systemd)."""
    ns = os.readlink(f"/proc/{m.leader}/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns" / "pid") != ns:
                continue
            status = (entry / "status").read_text()
        except OSError:
            continue
        nspid = next(ln for ln in status.splitlines() if ln.startswith("NSpid:")).split()[1:]
        if nspid[-1] == str(pid):
            return int(entry.name)
    raise AssertionError(f"no host PID for container PID {pid}")


class Freeze(threading.Thread):
    """Stops one thread of a process for good, as a loop blocked in a call would be: ptrace
    (PTRACE_SEIZE, PTRACE_INTERRUPT) holds it in a trace stop that SIGCONT does not end and
    SIGTERM cannot reach; only SIGKILL does. The other threads (vipd's HTTP endpoint) keep
    running. The tracer must reap the tracee's death before its parent may: this thread
    waits for it (ptrace(2))."""

    PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
    WALL = 0x40000000

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.attached = threading.Event()
        self.error = ""

    def run(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        for request in (self.PTRACE_SEIZE, self.PTRACE_INTERRUPT):
            if libc.ptrace(request, self.pid, None, None) != 0:
                self.error = os.strerror(ctypes.get_errno())
                self.attached.set()
                return
        self.attached.set()
        while True:
            try:
                _, status = os.waitpid(self.pid, self.WALL)
            except ChildProcessError:
                return
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                return  # stop events are left as they are: the thread stays stopped


def test_watchdog_stops_a_blocked_loop_in_order_and_kills_one_that_stays_blocked(
    machine: Machine,
) -> None:
    m = machine
    joined(m)
    assert m.show("WatchdogUSec") == "10s"
    # The pings arrive: systemd's record of the last one moves on.
    first = int(m.show("WatchdogTimestampMonotonic"))
    assert wait_for(lambda: int(m.show("WatchdogTimestampMonotonic")) > first, 12)
    restarts = int(m.show("NRestarts"))

    def replaced(old: int) -> Callable[[], bool]:
        def check() -> bool:
            pid = m.show("MainPID")
            return m.show("ActiveState") == "active" and pid not in ("0", str(old))

        return check

    # The whole process stopped (SIGSTOP): no pings. At the timeout systemd sends SIGTERM
    # and SIGCONT, so the loop comes back and runs the ordered stop; then the restart.
    blocked = main_pid(m)
    m.run("sh", "-c", f"kill -STOP {blocked}")
    assert wait_for(replaced(blocked), 60), m.system_journal()[-3000:]
    assert int(m.show("NRestarts")) == restarts + 1
    log = m.system_journal()
    assert "vipd.service: Watchdog timeout (limit 10s)!" in log, log[-3000:]
    assert f"Killing process {blocked} (vipd) with signal SIGTERM" in log
    assert f"Killing process {blocked} (vipd) with signal SIGKILL" not in log
    mine = [e["MESSAGE"] for e in m.journal() if e.get("_PID") == str(blocked)]
    assert any("msg=stopped" in msg for msg in mine), mine[-10:]
    assert wait_for(lambda: vip_holders(m) == [VIP], 20), messages(m)

    # The event loop's thread held for good: SIGTERM cannot run the stop, so systemd kills
    # the process TimeoutAbortSec (10 s) later and starts a new one.
    stuck = main_pid(m)
    freeze = Freeze(host_pid(m, stuck))
    freeze.start()
    assert freeze.attached.wait(10) and not freeze.error, freeze.error
    assert wait_for(replaced(stuck), 60), m.system_journal()[-3000:]
    freeze.join(10)
    assert int(m.show("NRestarts")) == restarts + 2
    log = m.system_journal()
    unit_lines = "\n".join(ln for ln in log.splitlines() if "vipd.service" in ln)
    assert f"Killing process {stuck} (vipd) with signal SIGTERM" in log, unit_lines
    assert re.search(rf"Killing process {stuck} \(vipd\) with signal SIGKILL", log), unit_lines
    mine = [e["MESSAGE"] for e in m.journal() if e.get("_PID") == str(stuck)]
    assert not any("msg=stopped" in msg for msg in mine), mine[-10:]
    # The new vipd takes the VIP again (the killed one's address is still on the link).
    assert wait_for(lambda: vip_holders(m) == [VIP], 20), messages(m)


# -- the routed announce modes under the same unit, in the same booted container ----------
# Each test writes a new /etc/vipd/vipd.yaml into the tree and restarts the unit: no new boot.

HEALTH_PORT = 6443
BGP_ASN, PEER_ASN = 64601, 64602
CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapAmb")


@pytest.fixture
def api_healthy(machine: Machine, tmp_path: Path) -> Iterator[None]:
    """An HTTPS /readyz answering 200 on 127.0.0.1:6443 of the container's namespace: the
    routed modes' ECMP pool announces only while the local API server is healthy, and this
    test is about the unit, not the API server (the lab's stand-in, run from the host)."""
    from vipd.lab.pki import make_cert

    cert, key = make_cert(tmp_path)
    log = tmp_path / "responder.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", machine.netns, sys.executable, "-m", "vipd.lab.responder",
             "--name", "nspawn-1", "--port", "16443", "--health-port", str(HEALTH_PORT),
             "--cert", str(cert), "--key", str(key)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        assert wait_for(lambda: "listening" in log.read_text() or proc.poll() is not None, 20)
        assert proc.poll() is None, log.read_text()
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class Router:
    """FRR's bgpd alone (no zebra, nothing into the kernel) in the peer namespace."""

    run: Path

    def show(self, m: Machine, command: str) -> dict[str, object]:
        out = sh("ip", "netns", "exec", m.peer_ns, "vtysh", "--vty_socket", str(self.run),
                 "-d", "bgpd", "-c", command).stdout  # fmt: skip
        answer: dict[str, object] = json.loads(out) if out.strip() else {}
        return answer

    def state(self, m: Machine) -> object:
        neighbor = self.show(m, f"show bgp neighbors {NODE_ADDR} json").get(NODE_ADDR, {})
        return neighbor.get("bgpState") if isinstance(neighbor, dict) else None

    def has_vip(self, m: Machine) -> bool:
        routes = self.show(m, "show bgp ipv4 unicast json").get("routes", {})
        return isinstance(routes, dict) and f"{VIP}/32" in routes


@contextlib.contextmanager
def frr_bgpd(machine: Machine, password: str | None = None) -> Iterator[Router]:
    from vipd.lab.routed import FRR_DIR, frr_problem

    problem = frr_problem()
    if problem is not None:
        missing(problem)
    # Not under tmp_path: bgpd drops to the frr user, which cannot enter pytest's 0700 tree.
    run = Path(tempfile.mkdtemp(prefix="vipd-unit-frr-"))
    shutil.chown(run, "frr", "frr")
    conf = run / "bgpd.conf"
    conf.write_text(
        "frr defaults datacenter\n"
        f"router bgp {PEER_ASN}\n bgp router-id {PEER_ADDR}\n no bgp ebgp-requires-policy\n"
        f" neighbor {NODE_ADDR} remote-as {BGP_ASN}\n"
        + (f" neighbor {NODE_ADDR} password {password}\n" if password else "")
    )
    log = (run / "bgpd.log").open("wb")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", machine.peer_ns, str(FRR_DIR / "bgpd"), "-Z", "-n",
         "-u", "frr", "-g", "frr", "--vty_socket", str(run), "-P", "0",
         "-f", str(conf), "-i", str(run / "bgpd.pid")],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    log.close()
    try:
        assert wait_for(lambda: (run / "bgpd.vty").exists() or proc.poll() is not None, 20)
        assert proc.poll() is None, (run / "bgpd.log").read_text()
        yield Router(run)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(run, ignore_errors=True)


@pytest.fixture
def router(machine: Machine) -> Iterator[Router]:
    with frr_bgpd(machine) as r:
        yield r


def restart_with(m: Machine, config: dict[str, object]) -> str:
    """The unit restarted on ``config``; the cursor of the journal before the restart, so that
    a test reads only its own vipd's lines."""
    # The peer's claim on the VIP (the boot's VRRP scenario) is no part of these tests.
    sh("ip", "-n", m.peer_ns, "addr", "del", f"{VIP}/32", "dev", "vx1", check=False)
    cursor = m.run("journalctl", "--no-pager", "-n", "0", "--show-cursor").stdout
    cursor = cursor.strip().rsplit("cursor: ", 1)[-1]
    (m.tree / "etc/vipd/vipd.yaml").write_text(yaml.safe_dump(config))
    m.run("systemctl", "restart", "vipd")
    assert wait_for(lambda: m.show("ActiveState") == "active", 60), messages(m)
    return cursor


def since(m: Machine, cursor: str) -> list[dict[str, str]]:
    return m.journal(f"--after-cursor={cursor}")


def vipd_routes(m: Machine) -> tuple[bool, bool]:
    """(the announcement in table 198, the AnyIP binding in table local), both protocol 248."""
    table = sh("ip", "-n", m.netns, "route", "show", "table", "198", "proto", "248", check=False)
    # A table the kernel has never had a route in is an error to list: it has none.
    assert table.returncode == 0 or "table does not exist" in table.stderr, table.stderr
    announced = table.stdout
    bound = sh("ip", "-n", m.netns, "route", "show", "table", "local", "proto", "248").stdout
    return (
        re.search(rf"^{re.escape(VIP)}\b", announced, re.M) is not None,
        re.search(rf"^local {re.escape(VIP)} dev lo\b", bound, re.M) is not None,
    )


def stopped_clean(m: Machine) -> None:
    assert wait_for(lambda: m.show("ActiveState") == "inactive", 60), messages(m)
    assert m.show("Result") == "success", m.system_journal()[-3000:]
    assert m.show("ExecMainStatus") == "0"


def test_routing_table_mode_under_the_unit(machine: Machine, api_healthy: None) -> None:
    m = machine
    cursor = restart_with(
        m,
        {
            "node": "nspawn-1",
            "vip": VIP,
            "interface": "vx0",
            "announce": {"mode": "routing-table"},
            "health": {"interval": 0.2, "port": HEALTH_PORT},
        },
    )
    # With CAP_NET_ADMIN alone the dynamic user writes both routes, protocol 248.
    assert wait_for(lambda: vipd_routes(m) == (True, True), 30), since(m, cursor)[-20:]
    assert vip_holders(m) == []  # bound by the AnyIP route, never as an address

    # The stop: the announcement goes first, the binding announce.drain (2 s) later.
    m.run("systemctl", "stop", "--no-block", "vipd")
    seen: list[tuple[bool, bool]] = []

    def gone() -> bool:
        seen.append(vipd_routes(m))
        return seen[-1] == (False, False)

    assert wait_for(gone, 30, step=0.05), seen[-5:]
    assert (False, True) in seen and (True, False) not in seen, seen
    stopped_clean(m)
    mine = [e["MESSAGE"] for e in since(m, cursor)]
    assert any("msg=stopped" in msg for msg in mine), mine[-10:]


def test_bgp_mode_speaker_runs_in_the_sandbox_and_stops_with_the_unit(
    machine: Machine, api_healthy: None, router: Router
) -> None:
    m = machine
    cursor = restart_with(
        m,
        {
            "node": "nspawn-1",
            "vip": VIP,
            "interface": "vx0",
            "announce": {
                "mode": "bgp",
                "bgp": {"local_asn": BGP_ASN, "peers": [{"address": PEER_ADDR, "asn": PEER_ASN}]},
            },
            "health": {"interval": 0.2, "port": HEALTH_PORT},
        },
    )
    pid = main_pid(m)

    def started() -> bool:
        return any("exabgp: started" in e["MESSAGE"] for e in since(m, cursor))

    if not wait_for(started, 60):
        # ExaBGP's own output is in its runtime directory, in the unit's private /tmp.
        private = m.tree.glob("tmp/systemd-private-*-vipd.service-*/tmp/vipd-bgp-*/exabgp.log")
        exabgp = "\n".join(p.read_text()[-1500:] for p in private)
        mine = "\n".join(e["MESSAGE"] for e in since(m, cursor))[-3000:]
        raise AssertionError(f"{mine}\nExaBGP's log:\n{exabgp}")

    def speakers() -> list[int]:
        """ExaBGP's processes anywhere in the container (its /proc: no procps there)."""
        found = []
        for entry in m.run("ls", "/proc").stdout.split():
            if entry.isdigit():
                argv = m.run("cat", f"/proc/{entry}/cmdline", check=False).stdout.split("\0")
                if argv[1:4] == ["-m", "exabgp", "server"]:
                    found.append(int(entry))
        return found

    (child,) = speakers()
    main, status = proc_status(m, pid), proc_status(m, child)
    # vipd's dynamic user, not root; no capability at all in any set; the same sandbox.
    assert status["Uid"] == main["Uid"] and int(status["Uid"].split()[0]) in DYNAMIC_UIDS
    assert status["Gid"] == main["Gid"]
    for caps in CAP_SETS:
        assert int(status[caps], 16) == 0, (caps, status[caps])
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
    cgroup = m.run("cat", f"/proc/{child}/cgroup").stdout.strip()
    assert cgroup == m.run("cat", f"/proc/{pid}/cgroup").stdout.strip()
    assert cgroup.endswith("/system.slice/vipd.service"), cgroup
    # It took the VIP: the binding is in the kernel, the announcement is the speaker's, and
    # from the sandbox ExaBGP's session with FRR comes up and carries the VIP.
    assert wait_for(lambda: vipd_routes(m) == (False, True), 30), since(m, cursor)[-20:]
    assert wait_for(lambda: router.state(m) == "Established", 60), since(m, cursor)[-20:]
    assert wait_for(lambda: router.has_vip(m), 30), router.show(m, "show bgp ipv4 unicast json")

    m.run("systemctl", "stop", "vipd")
    stopped_clean(m)
    assert speakers() == []
    assert vipd_routes(m) == (False, False)
    assert router.state(m) != "Established" and not router.has_vip(m)
    lines = [e["MESSAGE"] for e in since(m, cursor)]
    assert any("msg=stopped" in msg for msg in lines), lines[-10:]
    # The Cease was reported down (ExaBGP reconnects at once: the wait must not miss it).
    assert any("down notification sent (6,2)" in msg for msg in lines), lines[-10:]
    assert not any("sessions not down" in msg for msg in lines), lines[-10:]


def test_bgp_md5_password_through_load_credential(machine: Machine, api_healthy: None) -> None:
    """The shipped unit's dynamic user cannot read a root-owned 0600 file; a drop-in with
    LoadCredential= hands it a copy that passes vipd's check: systemd makes it mode 0400,
    owned by the dynamic user, in /run/credentials/vipd.service (systemd.exec(5))."""
    m = machine
    secret = m.tree / "etc/vipd/bgp-password"
    secret.write_text("unit-md5-secret\n")
    secret.chmod(0o600)
    dropin = m.tree / "etc/systemd/system/vipd.service.d/credential.conf"
    dropin.parent.mkdir(exist_ok=True)
    dropin.write_text("[Service]\nLoadCredential=bgp-password:/etc/vipd/bgp-password\n")
    credential = "/run/credentials/vipd.service/bgp-password"
    try:
        m.run("systemctl", "daemon-reload")
        with frr_bgpd(m, password="unit-md5-secret") as router:
            peer = {"address": PEER_ADDR, "asn": PEER_ASN, "password_file": credential}
            cursor = restart_with(
                m,
                {
                    "node": "nspawn-1",
                    "vip": VIP,
                    "interface": "vx0",
                    "announce": {"mode": "bgp", "bgp": {"local_asn": BGP_ASN, "peers": [peer]}},
                    "health": {"interval": 0.2, "port": HEALTH_PORT},
                },
            )
            owner, mode = m.run("stat", "-c", "%u %a", credential).stdout.split()
            assert owner == proc_status(m, main_pid(m))["Uid"].split()[0] and mode == "400"
            assert wait_for(lambda: router.state(m) == "Established", 60), since(m, cursor)[-20:]
            assert wait_for(lambda: router.has_vip(m), 30)
            m.run("systemctl", "stop", "vipd")
            stopped_clean(m)
        lines = [e["MESSAGE"] for e in since(m, cursor)]
        assert not any("unit-md5-secret" in line for line in lines)
    finally:
        dropin.unlink()
        m.run("systemctl", "daemon-reload")
