"""vipd's BFD (vipd.bfd) against FRR 8.4's bfdd, single-hop, over a veth pair: IPv4, IPv6 and
IPv6 link-local (the peer's zone from the interface).

Two namespaces: ``<prefix>-f`` runs Debian's FRR (zebra and bfdd, a configured ``bfd peer``
at 100 ms × 3, as the routed lab's) and ``<prefix>-v`` runs ``python -m vipd.bfd`` (the
driver alone, printing every change as a JSON line with its CLOCK_MONOTONIC time). What is
checked: the session comes Up on both ends; vipd killed (SIGKILL: nothing is sent) → FRR
declares Down on its detection time; bfdd killed, or vipd's receive path dropped with nft →
vipd's ``on_state`` says Down with diag Control Detection Time Expired; FRR's ``shutdown`` of
the peer → vipd's ``on_state`` says Down with diag Administratively Down; and back Up.

Times are printed (run with ``-s``): measurements. The assertions are the protocol bound
(RFC 5880 §6.8.4: the detection time, 3 × 100 ms) plus ``MARGIN`` for this shared machine,
as the other netns tests do.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prereq import missing
from vipd.lab.routed import FRR_DIR, VTYSH, frr_problem
from vipd.lab.topology import IP, _run, delete_namespaces, python_env

INTERVAL_MS = 100
MULT = 3
DETECTION = MULT * INTERVAL_MS / 1000  # s: RFC 5880 §6.8.4, the same on both ends here
MARGIN = 0.5  # s on top of every protocol bound: a shared, noisy 2-core machine
UP_TIMEOUT = 15.0  # s: both ends start at the one-second slow rate (RFC 5880 §6.8.3)

FLAPPED = (
    "the session went down before the event under test (vipd or bfdd starved for a detection "
    "time on a loaded machine?): what came after says nothing about vipd; re-run"
)

FAMILIES = {
    "ipv4": ("10.91.0.0", "10.91.0.1", 31),
    "ipv6": ("fd00:91::1", "fd00:91::2", 64),
    "ipv6-link-local": ("fe80::91:1", "fe80::91:2", 64),
}


class Bed:
    """FRR's bfdd in one namespace, vipd's BFD in the other, a veth between them."""

    def __init__(self, family: str) -> None:
        self.prefix = "bf" + secrets.token_hex(3)
        self.frr_ns, self.vipd_ns = f"{self.prefix}-f", f"{self.prefix}-v"
        self.frr_addr, self.vipd_addr, self.plen = FAMILIES[family]
        self.workdir = Path(tempfile.mkdtemp(prefix=f"vipd-bfd-{self.prefix}-"))
        self.workdir.chmod(0o755)  # the daemons drop to user frr
        self.frr: dict[str, subprocess.Popen[bytes]] = {}
        self.vipd: subprocess.Popen[str] | None = None
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    # -- building ------------------------------------------------------------------------

    def build(self) -> None:
        for ns in (self.frr_ns, self.vipd_ns):
            _run([IP, "netns", "add", ns])
            _run([IP, "-n", ns, "link", "set", "lo", "up"])
        _run(
            [
                IP,
                "-n",
                self.frr_ns,
                "link",
                "add",
                "f0",
                "type",
                "veth",
                "peer",
                "name",
                "v0",
                "netns",
                self.vipd_ns,
            ]
        )
        for ns, dev, addr in (
            (self.frr_ns, "f0", self.frr_addr),
            (self.vipd_ns, "v0", self.vipd_addr),
        ):
            extra = ["nodad"] if ":" in addr else []
            _run([IP, "-n", ns, "addr", "add", f"{addr}/{self.plen}", "dev", dev, *extra])
            _run([IP, "-n", ns, "link", "set", dev, "up"])
        self.start_frr()
        self.start_vipd()

    def _peer_line(self) -> str:
        return f" peer {self.vipd_addr} local-address {self.frr_addr} interface f0"

    def start_frr(self) -> None:
        run = self.workdir / "frr"
        run.mkdir(exist_ok=True)
        shutil.chown(run, "frr", "frr")
        zserv = run / "zserv.api"
        confs = {
            "zebra": ["hostname frr"],
            "bfdd": [
                f"log file {run / 'bfdd.debug.log'} debugging",
                "log timestamp precision 6",
                "debug bfd peer",
                "debug bfd network",
                "bfd",
                self._peer_line(),
                f"  receive-interval {INTERVAL_MS}",
                f"  transmit-interval {INTERVAL_MS}",
                f"  detect-multiplier {MULT}",
                " exit",
                "exit",
            ],
        }
        for daemon, extra in (
            ("zebra", ["-z", str(zserv)]),
            ("bfdd", ["-z", str(zserv), "--bfdctl", str(run / "bfdd.sock")]),
        ):
            conf = run / f"{daemon}.conf"
            conf.write_text("\n".join(confs[daemon]) + "\n")
            log = open(run / f"{daemon}.log", "ab")  # noqa: SIM115 - owned by the child
            argv = [
                str(FRR_DIR / daemon),
                *("-u", "frr", "-g", "frr", "--vty_socket", str(run), "-P", "0"),
                *("-f", str(conf), "-i", str(run / f"{daemon}.pid"), *extra),
            ]
            self.frr[daemon] = subprocess.Popen(
                [IP, "netns", "exec", self.frr_ns, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            deadline = time.monotonic() + 10
            while not (run / f"{daemon}.vty").exists():
                assert time.monotonic() < deadline, f"{daemon} did not start: {self.frr_log()}"
                time.sleep(0.02)

    def start_vipd(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "vipd.bfd",
            "--peer",
            f"{self.frr_addr},{self.vipd_addr},v0",
            *("--tx-ms", str(INTERVAL_MS), "--rx-ms", str(INTERVAL_MS), "--mult", str(MULT)),
        ]
        self.vipd = subprocess.Popen(
            [IP, "netns", "exec", self.vipd_ns, *argv],
            stdout=subprocess.PIPE,
            stderr=open(self.workdir / "vipd.err", "ab"),  # noqa: SIM115
            text=True,
            env=python_env(),
        )
        proc = self.vipd
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        self.wait_event(lambda e: e["event"] == "ready", 10)

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()

    # -- observing -----------------------------------------------------------------------

    def wait_event(self, pred: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for event in self.events[seen:]:
                    if pred(event):
                        return event
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such event in {timeout} s: {self.events}")
                self._cond.wait(left)

    def down_after(self, t0: float) -> dict[str, Any]:
        """vipd's first on_state(down) after ``t0``, which must be the first change since the
        session came Up: a flap before it says nothing about what happened at ``t0``."""
        event = self.wait_event(
            lambda e: e["event"] == "state" and not e["up"] and e["t"] >= t0,
            DETECTION + MARGIN + 5,
        )
        states = [e for e in self.state_events(0) if e["t"] < t0]
        assert states and states[-1]["up"] and len(states) == 1, (FLAPPED, states)
        return event

    def state_events(self, since: float) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e["event"] == "state" and e["t"] >= since]

    def vtysh(self, *args: str) -> str:
        return _run(
            [
                IP,
                "netns",
                "exec",
                self.frr_ns,
                VTYSH,
                "--vty_socket",
                str(self.workdir / "frr"),
                *args,
            ]
        ).stdout

    def frr_peer(self) -> dict[str, Any]:
        peers = json.loads(self.vtysh("-c", "show bfd peers json") or "[]")
        for peer in peers:
            if peer.get("peer") == self.vipd_addr:
                return dict(peer)
        return {}

    def wait_frr(self, status: str, timeout: float) -> tuple[float, dict[str, Any]]:
        """Poll FRR until its session is in ``status``; (when it was seen, the peer)."""
        deadline = time.monotonic() + timeout
        while True:
            peer = self.frr_peer()
            now = time.monotonic()
            if peer.get("status") == status:
                return now, peer
            assert now < deadline, f"FRR not {status} in {timeout} s: {peer}\n{self.frr_log()}"
            time.sleep(0.01)

    def frr_log(self) -> str:
        path = self.workdir / "frr" / "bfdd.debug.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def shutdown_peer(self, shut: bool) -> None:
        self.vtysh(
            "-c",
            "configure terminal",
            "-c",
            "bfd",
            "-c",
            self._peer_line().strip(),
            "-c",
            "shutdown" if shut else "no shutdown",
        )

    def nft_drop_incoming(self, drop: bool) -> None:
        if drop:
            rules = (
                "table inet bfdtest {\n chain in {\n  type filter hook input priority 0;\n"
                "  udp dport 3784 drop\n }\n}\n"
            )
            _run([IP, "netns", "exec", self.vipd_ns, "nft", "-f", "-"], input_text=rules)
        else:
            _run([IP, "netns", "exec", self.vipd_ns, "nft", "delete", "table", "inet", "bfdtest"])

    def kill_vipd(self) -> None:
        assert self.vipd is not None
        self.vipd.send_signal(signal.SIGKILL)
        self.vipd.wait(timeout=5)

    def teardown(self) -> None:
        procs: list[subprocess.Popen[Any]] = [*self.frr.values()]
        if self.vipd is not None:
            procs.append(self.vipd)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        delete_namespaces([self.frr_ns, self.vipd_ns])
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture(params=list(FAMILIES))
def bed(request: pytest.FixtureRequest, netns_ok: None) -> Iterator[Bed]:
    problem = frr_problem()
    if problem is not None:
        missing(problem)
    if shutil.which("nft") is None:
        missing("needs nft (apt-get install nftables)")
    b = Bed(request.param)
    try:
        b.build()
        yield b
    finally:
        b.teardown()


def wait_up(bed: Bed) -> dict[str, Any]:
    """Both ends Up; FRR's view of the session."""
    bed.wait_event(lambda e: e["event"] == "state" and e["up"], UP_TIMEOUT)
    _, peer = bed.wait_frr("up", UP_TIMEOUT)
    return peer


def test_session_comes_up_both_ways(bed: Bed) -> None:
    peer = wait_up(bed)
    # FRR heard our timers: 100 ms × 3 once Up (the slow start's one second is gone)
    assert peer["remote-transmit-interval"] == INTERVAL_MS, peer
    assert peer["remote-receive-interval"] == INTERVAL_MS, peer
    assert peer["remote-detect-multiplier"] == MULT, peer
    assert peer["local"] == bed.frr_addr and peer["interface"] == "f0", peer
    # and it stays Up (no flap over 20 detection times)
    time.sleep(20 * DETECTION)
    assert bed.frr_peer()["status"] == "up"
    assert [e["up"] for e in bed.state_events(0)] == [True], (FLAPPED, bed.events)


def test_vipd_killed_frr_declares_down(bed: Bed) -> None:
    wait_up(bed)
    t_kill = time.monotonic()
    bed.kill_vipd()
    seen, peer = bed.wait_frr("down", DETECTION + MARGIN + 5)
    print(
        f"\nFRR saw vipd's BFD down {seen - t_kill:.3f} s after SIGKILL (detection {DETECTION} s)"
    )
    assert peer["diagnostic"] == "control detection time expired", peer
    assert seen - t_kill <= DETECTION + MARGIN
    # a new vipd (new discriminator, new source port) gets a new session
    with bed._cond:
        bed.events.clear()
    bed.start_vipd()
    wait_up(bed)


def test_bfdd_killed_vipd_sees_down(bed: Bed) -> None:
    wait_up(bed)
    t_kill = time.monotonic()
    bed.frr["bfdd"].send_signal(signal.SIGKILL)
    event = bed.down_after(t_kill)
    print(f"\nvipd's on_state(down) {event['t'] - t_kill:.3f} s after bfdd's SIGKILL")
    assert event["diag"] == "control_detection_time_expired", event
    assert event["t"] - t_kill <= DETECTION + MARGIN


def test_link_dropped_vipd_sees_down_and_recovers(bed: Bed) -> None:
    wait_up(bed)
    t_drop = time.monotonic()
    bed.nft_drop_incoming(True)
    event = bed.down_after(t_drop)
    print(f"\nvipd's on_state(down) {event['t'] - t_drop:.3f} s after the nft drop")
    assert event["diag"] == "control_detection_time_expired", event
    assert event["t"] - t_drop <= DETECTION + MARGIN
    # FRR still hears us but goes Down on its own detection time: our Down carries Your
    # Discriminator zero (RFC 5880 §6.8.1: reset when a Detection Time passes in silence),
    # which FRR 8.4 drops while Up ("'remote discriminator' is zero, not overridden"); and
    # our Down packets do not restart its detection timer.
    seen, peer = bed.wait_frr("down", 2 * DETECTION + MARGIN + 5)
    print(f"FRR down {seen - t_drop:.3f} s after the drop: {peer['diagnostic']}")
    assert seen - t_drop <= 2 * DETECTION + MARGIN
    t_back = time.monotonic()
    bed.nft_drop_incoming(False)
    back = bed.wait_event(
        lambda e: e["event"] == "state" and e["up"] and e["t"] > t_back, UP_TIMEOUT
    )
    print(f"back up {back['t'] - t_back:.3f} s after the drop was lifted")
    bed.wait_frr("up", UP_TIMEOUT)


def test_frr_admin_down_is_seen_as_admin_down(bed: Bed) -> None:
    wait_up(bed)
    t_shut = time.monotonic()
    bed.shutdown_peer(True)
    event = bed.down_after(t_shut)
    print(f"\nvipd's on_state(down, admin) {event['t'] - t_shut:.3f} s after FRR's shutdown")
    assert event["diag"] == "administratively_down", event
    change = bed.wait_event(
        lambda e: e["event"] == "change" and e["old"] == "UP" and e["t"] >= t_shut, 1
    )
    assert change["remote_state"] == "ADMIN_DOWN", change
    assert change["diag"] == "neighbor_signaled_session_down", change  # our own diag, §6.8.6
    # it stays down while FRR is shut, longer than a detection time, without flapping
    time.sleep(10 * DETECTION)
    assert [e["up"] for e in bed.state_events(t_shut)] == [False], (FLAPPED, bed.events)
    t_open = time.monotonic()
    bed.shutdown_peer(False)
    bed.wait_event(lambda e: e["event"] == "state" and e["up"] and e["t"] > t_open, UP_TIMEOUT)
    bed.wait_frr("up", UP_TIMEOUT)


def test_vipd_stopped_tells_frr_admin_down(bed: Bed) -> None:
    """SIGTERM: vipd's BFD closes its sessions with AdminDown (RFC 5880 §6.8.16), so FRR
    goes Down at once rather than after its detection time, and knows why."""
    wait_up(bed)
    assert bed.vipd is not None
    bed.vipd.send_signal(signal.SIGTERM)
    assert bed.vipd.wait(timeout=5) == 0
    _, peer = bed.wait_frr("down", DETECTION + MARGIN + 5)
    assert peer["remote-diagnostic"] == "administratively down", peer
    assert peer["diagnostic"] == "neighbor signaled session down", peer
