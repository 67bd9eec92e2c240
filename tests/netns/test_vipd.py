"""vipd on real kernels: several nodes in network namespaces on one bridge.

What it tests: the daemon as users run it (`python -m vipd run --config FILE` in each node's
namespace), with real raw sockets, real addresses and a client that connects to the VIP:
election by priority, node death, graceful SIGTERM handover after Skew_Time, the VIP deleted
by hand coming back, IPv6, unicast, VRRPv2 with a password, a stale VIP cleaned at start,
link down/up, garbage on the wire, config errors that leave the host untouched, and the crash
path (ordered cleanup, exit 1).

Timing assertions compare with the RFC formulas and separate mechanisms (a takeover after
Skew_Time vs after Master_Down_Interval), with generous margins: these machines are shared.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.netns.waiting import wait_for
from vipd.lab import faults
from vipd.lab.addrwatch import AddressWatch
from vipd.lab.daemons import Daemon, VipdDaemon, VrrpSpec, make_daemon
from vipd.lab.responder import Responder
from vipd.lab.topology import VIP4, VIP6, Lab, python_argv, python_env
from vipd.vrrp import state


@dataclass
class Cluster:
    lab: Lab
    spec: VrrpSpec
    daemons: dict[str, Daemon]
    responders: dict[str, Responder]

    def holders(self) -> list[str]:
        return self.lab.holders(self.spec.vip)

    def converge(self, expected: str, timeout: float = 5.0) -> None:
        """Wait until the VIP is on ``expected`` alone and every started daemon has a state:
        a slow start (imports on a loaded machine) must not read as "not a backup"."""
        took = wait_for(lambda: self.holders() == [expected], timeout)
        assert took is not None, (
            f"VIP on {self.holders()}, expected only {expected}\n" + self.logs()
        )
        running = [d for d in self.daemons.values() if d.proc is not None]
        took = wait_for(lambda: all(d.state() is not None for d in running), timeout)
        assert took is not None, "a daemon never reported a state\n" + self.logs()

    def ask(self, timeout: float = 1.0) -> str:
        """Connect to VIP:6443 from the client namespace; returns who answered, or ''."""
        code = textwrap.dedent(
            f"""
            import socket
            fam = socket.AF_INET6 if ':' in {self.spec.vip!r} else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout({timeout})
            try:
                s.connect(({self.spec.vip!r}, 6443))
                print(s.recv(64).decode().strip())
            except OSError:
                print('')
            """
        )
        out = self.lab.exec(self.lab.client_ns, [sys.executable, "-c", code], check=False)
        return out.stdout.strip()

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{d.log_tail(15)}" for name, d in sorted(self.daemons.items())
        )

    def rig(self, name: str) -> faults.NodeRig:
        return faults.NodeRig(self.lab.node(name), self.daemons[name], self.responders[name])


@pytest.fixture
def cluster(make_lab: Callable[..., Lab]) -> Iterator[Callable[..., Cluster]]:
    def build(spec: VrrpSpec | None = None, nodes: int = 3, start: bool = True) -> Cluster:
        lab = make_lab(nodes)
        spec = spec or VrrpSpec(vip=VIP4)
        daemons = {n.name: make_daemon("vipd", lab, n, spec) for n in lab.nodes}
        responders = {n.name: Responder(lab, n) for n in lab.nodes}
        for r in responders.values():
            r.start()
        c = Cluster(lab, spec, daemons, responders)
        if start:
            for d in daemons.values():
                d.start()
        return c

    yield build


def mdi(spec: VrrpSpec, priority: int) -> float:
    return state.master_down_interval(spec.version, priority, round(spec.advert_interval * 100))


def skew(spec: VrrpSpec, priority: int) -> float:
    return state.skew_time(spec.version, priority, round(spec.advert_interval * 100))


def test_highest_priority_holds_the_vip_and_the_client_reaches_it(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster()
    c.converge("n1")
    assert c.ask() == "n1"
    # The others really are backups (not just without the address).
    for name in ("n2", "n3"):
        # A daemon still starting (imports, the address probe) has not said so yet.
        backup = c.daemons[name].state
        assert wait_for(lambda: backup() == "BACKUP", 5.0) is not None, c.logs()  # noqa: B023
    # Bound as /32 with preferred_lft 0, so it is never picked as a source address.
    out = c.lab.ip(c.lab.node("n1").ns, "addr", "show", "dev", "eth0")
    line = next(ln for ln in out.splitlines() if f"{VIP4}/32" in ln)
    assert "deprecated" in line, out


def test_node_death_moves_the_vip_to_the_next_priority(cluster: Callable[..., Cluster]) -> None:
    c = cluster()
    c.converge("n1")
    faults.kill(c.lab, c.rig("n1"))
    bound = mdi(c.spec, c.daemons["n2"].priority) + 1.0
    took = wait_for(lambda: c.holders() == ["n1", "n2"] or c.holders() == ["n2"], bound)
    assert took is not None, c.logs()
    # n1 is dead with its link down: its stale copy does not answer. n2 does, alone among
    # the live nodes, and n3 stays backup.
    assert wait_for(lambda: c.ask(0.3) == "n2", 3.0) is not None, c.logs()
    assert "n3" not in c.holders()
    assert c.daemons["n3"].state() == "BACKUP"
    # The dead node comes back (as after a reboot) and preempts.
    faults.restore(
        c.lab, faults.NodeRig(c.lab.node("n1"), c.daemons["n1"], c.responders["n1"], fault="kill")
    )
    c.converge("n1", timeout=mdi(c.spec, c.daemons["n1"].priority) + 3.0)
    assert wait_for(lambda: c.ask(0.3) == "n1", 3.0) is not None


def test_sigterm_hands_over_after_skew_not_after_the_down_interval(
    cluster: Callable[..., Cluster],
) -> None:
    # 0.5 s adverts keep Skew (0.21 s for n2) and the down interval (1.71 s) far apart.
    spec = VrrpSpec(vip=VIP4, advert_interval=0.5)
    c = cluster(spec)
    c.converge("n1", timeout=6.0)
    n1 = c.daemons["n1"]
    sent = time.monotonic()
    n1.stop(signal.SIGTERM, timeout=None)
    took = wait_for(lambda: c.holders() == ["n2"], 5.0)
    assert took is not None, c.logs()
    elapsed = time.monotonic() - sent
    assert elapsed < mdi(spec, 150) - 0.5, f"took {elapsed:.3f} s: a timeout, not a handover"
    assert elapsed >= skew(spec, 150) - 0.05
    assert n1.wait(5.0) == 0, n1.log_tail()
    # Make-before-break: n1 kept the VIP until it heard n2's first advert, then let go.
    assert "new leader heard: releasing the VIP" in n1.log_text(), n1.log_tail()
    assert "VIP removed" in n1.log_text()


def test_a_lone_leader_stops_within_its_handover_bound(cluster: Callable[..., Cluster]) -> None:
    spec = VrrpSpec(vip=VIP4, advert_interval=0.1)
    c = cluster(spec, nodes=1)
    c.converge("n1")
    n1 = c.daemons["n1"]
    sent = time.monotonic()
    assert n1.stop(signal.SIGTERM, timeout=5.0) == 0, n1.log_tail()
    bound = skew(spec, 1) + spec.advert_interval
    assert time.monotonic() - sent < bound + 2.0  # Python exit and reaping on a busy host
    assert "no new leader heard: releasing the VIP" in n1.log_text(), n1.log_tail()
    assert c.holders() == []


def test_vip_deleted_by_hand_on_the_leader_comes_back(cluster: Callable[..., Cluster]) -> None:
    c = cluster()
    c.converge("n1")
    # The leader follows its address notifications: the VIP is back before anyone could
    # look, so only the repair's log line tells that it was gone.
    c.lab.ip(c.lab.node("n1").ns, "addr", "del", f"{VIP4}/32", "dev", "eth0")
    took = wait_for(lambda: c.holders() == ["n1"], 3.0)
    assert took is not None, c.logs()
    assert "VIP missing while leader: re-adding" in c.daemons["n1"].log_text()
    assert wait_for(lambda: c.ask(0.3) == "n1", 2.0) is not None


def test_ipv6_vip_elects_answers_and_fails_over(cluster: Callable[..., Cluster]) -> None:
    c = cluster(VrrpSpec(vip=VIP6))
    c.converge("n1")
    assert wait_for(lambda: c.ask(0.3) == "n1", 3.0) is not None, c.logs()
    faults.kill(c.lab, c.rig("n1"))
    assert wait_for(lambda: c.ask(0.3) == "n2", mdi(c.spec, 150) + 3.0) is not None, c.logs()


@pytest.mark.parametrize("family", [4, 6])
def test_unicast_peers(cluster: Callable[..., Cluster], family: int) -> None:
    c = cluster(VrrpSpec(vip=VIP4 if family == 4 else VIP6, unicast=True))
    c.converge("n1")
    for name in ("n2", "n3"):
        # A daemon still starting (imports, the address probe) has not said so yet.
        backup = c.daemons[name].state
        assert wait_for(lambda: backup() == "BACKUP", 5.0) is not None, c.logs()  # noqa: B023
    faults.kill(c.lab, c.rig("n1"))
    took = wait_for(lambda: "n2" in c.holders(), mdi(c.spec, 150) + 1.0)
    assert took is not None, c.logs()
    assert "n3" not in c.holders()


def test_vrrpv2_with_a_password(cluster: Callable[..., Cluster]) -> None:
    spec = VrrpSpec(vip=VIP4, version=2, advert_interval=1.0, auth_pass="s3cret")
    c = cluster(spec)
    c.converge("n1", timeout=mdi(spec, 200) + 2.0)
    for name in ("n2", "n3"):
        # A daemon still starting (imports, the address probe) has not said so yet.
        backup = c.daemons[name].state
        assert wait_for(lambda: backup() == "BACKUP", 5.0) is not None, c.logs()  # noqa: B023


def test_a_wrong_password_is_not_a_peer(cluster: Callable[..., Cluster]) -> None:
    # The control for the test above: a node with another password does not hear n1 and
    # takes the VIP as well (dual master), as keepalived would.
    spec = VrrpSpec(vip=VIP4, version=2, advert_interval=1.0, auth_pass="s3cret")
    c = cluster(spec, nodes=2, start=False)
    c.daemons["n1"].start()
    c.converge("n1", timeout=mdi(spec, 200) + 2.0)
    other = make_daemon(
        "vipd",
        c.lab,
        c.lab.node("n2"),
        VrrpSpec(vip=VIP4, version=2, advert_interval=1.0, auth_pass="other"),
    )
    c.daemons["n2"] = other
    other.start()
    took = wait_for(lambda: sorted(c.holders()) == ["n1", "n2"], mdi(spec, 150) + 2.0)
    assert took is not None, c.logs()


def test_stale_vip_from_a_crashed_run_is_removed_at_start(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster(start=False)
    n3 = c.lab.node("n3")
    c.lab.ip(n3.ns, "addr", "add", f"{VIP4}/32", "dev", "eth0", "preferred_lft", "0")
    for d in c.daemons.values():
        d.start()
    c.converge("n1")
    assert "stale VIP" in c.daemons["n3"].log_text()


def test_link_down_on_the_leader_releases_and_link_up_takes_back(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster()
    c.converge("n1")
    n1 = c.lab.node("n1")
    c.lab.set_link(n1, False)
    assert wait_for(lambda: c.holders() == ["n2"], mdi(c.spec, 150) + 1.0) is not None, c.logs()
    assert "interface is down" in c.daemons["n1"].log_text()
    c.lab.set_link(n1, True)
    # Back in the election, n1 preempts after its down interval and announces the VIP, so
    # the client follows it (it would keep asking n2's MAC otherwise).
    assert wait_for(lambda: c.ask(0.3) == "n1", mdi(c.spec, 200) + 3.0) is not None, c.logs()
    assert c.holders() == ["n1"]


def test_garbage_on_the_wire_is_counted_and_changes_nothing(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster()
    c.converge("n1")
    # From the client: truncated, bad version, bad checksum, wrong VRID and TTL 1 adverts
    # for our VRID with priority 254 (they would preempt n1 if they were accepted).
    script = textwrap.dedent(
        """
        import socket
        from ipaddress import ip_address
        from vipd.vrrp import packet
        src, dst = ip_address("10.77.0.2"), packet.GROUP_V4
        good = packet.encode(packet.Advert(3, 51, 254, 10, (ip_address("10.77.0.100"),)),
                             src, dst)
        other = packet.encode(packet.Advert(3, 52, 254, 10, (ip_address("10.77.0.100"),)),
                              src, dst)
        bad = [good[:5], bytes([0x51]) + good[1:], good[:6] + b"\\x00\\x00" + good[8:], other]
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 112)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(str(src)))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        for i in range(200):
            for b in bad:
                s.sendto(b, ("224.0.0.18", 0))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        for i in range(200):
            s.sendto(good, ("224.0.0.18", 0))
        """
    )
    c.lab.exec(c.lab.client_ns, [sys.executable, "-c", script], timeout=30)
    time.sleep(3 * c.spec.advert_interval + 0.2)
    assert c.holders() == ["n1"], c.logs()
    for name, d in c.daemons.items():
        assert d.running(), f"{name} died\n{d.log_tail()}"
    assert c.daemons["n1"].log_text().count("became active") == 1
    # Each reason is counted: SIGTERM makes vipd log its counters.
    n2 = c.daemons["n2"]
    assert n2.stop(signal.SIGTERM, timeout=5.0) == 0
    stopped = next(ln for ln in n2.log_text().splitlines() if "msg=stopped" in ln)
    for reason in ("truncated", "version", "checksum", "vrid", "ttl"):
        # Every one of them reached the daemon and was counted: the receive buffer holds a
        # burst like this one without dropping (and so without dropping real adverts).
        assert f"'{reason}': 200" in stopped, stopped


def test_bad_config_exits_2_with_one_line_and_touches_nothing(
    make_lab: Callable[..., Lab], tmp_path: object
) -> None:
    lab = make_lab(1)
    n1 = lab.node("n1")
    before = lab.ip(n1.ns, "addr", "show")
    cases = {
        # The VIP is the node's own address.
        f"vip: {n1.ipv4}\nelection: {{vrrp: {{vrid: 51}}}}\n": "vip: is already an address",
        "vip: api.example.com\nelection: {vrrp: {vrid: 51}}\n": "not a DNS name",
        f"vip: {VIP4}\nelection: {{vrrp: {{vrid: 256}}}}\n": "election.vrrp.vrid",
        f"vip: {VIP4}\ninterface: eth9\nelection: {{vrrp: {{vrid: 51}}}}\n": "interface",
    }
    for i, (text, needle) in enumerate(cases.items()):
        path = lab.workdir / f"bad{i}.yaml"
        path.write_text(text)
        out = lab.exec(n1.ns, python_argv("vipd", "run", "--config", str(path)), check=False)
        assert out.returncode == 2, (text, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (text, out.stderr)
    assert lab.ip(n1.ns, "addr", "show") == before


def test_crash_releases_the_vip_and_exits_1(cluster: Callable[..., Cluster]) -> None:
    """A bug in the loop (here: the state machine's advert timer raising once we are active) must
    take the same ordered way out as SIGTERM: priority 0, VIP removed, exit 1."""
    c = cluster(start=False)
    c.daemons["n2"].start()
    c.daemons["n3"].start()
    n1 = c.lab.node("n1")
    d1 = c.daemons["n1"]
    assert isinstance(d1, VipdDaemon)
    d1._prepare()
    script = textwrap.dedent(
        f"""
        import sys
        from vipd import cli
        from vipd.vrrp import state
        real = state.Machine.on_timer
        def on_timer(self, now):
            # The Active's every tick passes here (the steady one and the loop's).
            if self.state is state.State.ACTIVE and now - self.state_since > 0.5:
                raise RuntimeError("injected bug")
            return real(self, now)
        state.Machine.on_timer = on_timer
        sys.exit(cli.main(["run", "--config", {str(d1.config_path)!r}]))
        """
    )
    out = subprocess.run(
        ["ip", "netns", "exec", n1.ns, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=python_env(),
        check=False,
    )
    assert out.returncode == 1, out.stderr
    assert "crashed" in out.stderr and "injected bug" in out.stderr
    assert "VIP removed" in out.stderr, out.stderr
    assert "n1" not in c.holders()
    # The priority-0 advert made n2 take over after its skew, not after a down interval.
    c.converge("n2", timeout=2.0)


def test_equal_priorities_started_at_once_settle_on_one_holder(
    cluster: Callable[..., Cluster],
) -> None:
    # Whoever's down timer runs out first advertises; the others accept an advert of equal
    # priority (RFC 9568 §6.4.2) and stay backup. No flapping afterwards.
    c = cluster(start=False)
    for d in c.daemons.values():
        d.start(priority=100)
    assert wait_for(lambda: len(c.holders()) == 1, 5.0) is not None, c.logs()
    (holder,) = c.holders()
    time.sleep(1.0)
    assert c.holders() == [holder], c.logs()
    assert wait_for(lambda: c.ask(0.3) == holder, 2.0) is not None
    for name, d in c.daemons.items():
        assert d.state() == ("ACTIVE" if name == holder else "BACKUP"), c.logs()


def test_equal_priorities_after_a_sigterm_only_one_backup_binds(
    cluster: Callable[..., Cluster],
) -> None:
    """One priority everywhere (the DaemonSet's default). The holder's priority-0 advert
    starts both backups' Skew_Time timers at once, and Skew_Time depends on the priority
    only, so they fire together: the release contest (advert first, the bind a moment
    later unless a better router's advert came) lets only one of them bind: the first to
    advertise, or of two that advertised together the higher address. Every round, exactly
    one of the two backups adds the VIP, as the kernel reports it."""
    spec = VrrpSpec(vip=VIP4, advert_interval=0.1)
    c = cluster(spec, start=False)
    for d in c.daemons.values():
        d.start(priority=100)
    assert wait_for(lambda: len(c.holders()) == 1, 5.0) is not None, c.logs()
    watch = AddressWatch(c.lab, spec.vip)
    watch.start()

    def moved_from(holder: str) -> Callable[[], bool]:
        return lambda: len(c.holders()) == 1 and c.holders() != [holder]

    def backup(d: Daemon) -> Callable[[], bool]:
        return lambda: d.state() == "BACKUP"

    try:
        for _ in range(8):
            (holder,) = c.holders()
            stopped = time.time()
            d = c.daemons[holder]
            assert d.stop(signal.SIGTERM, timeout=5.0) == 0, d.log_tail()
            took = wait_for(moved_from(holder), 3.0)
            assert took is not None, f"VIP on {c.holders()}\n" + c.logs()
            (successor,) = c.holders()
            added = [e.node for e in list(watch.events) if e.added and e.at >= stopped]
            assert added == [successor], (
                f"after {holder}'s SIGTERM the VIP was added on {added}\n" + c.logs()
            )
            # It let go on its successor's gratuitous ARP, not when its wait ran out.
            assert "claim_seen=announcement" in d.log_text(), d.log_tail()
            d.start(priority=100)
            assert wait_for(backup(d), 5.0) is not None, d.log_tail()
            time.sleep(0.5)  # its start-up settles; equal priority: it stays a backup
            assert c.holders() == [successor], c.logs()
    finally:
        watch.stop()
