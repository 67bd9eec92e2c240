"""Interoperability of vipd with FRR's vrrpd (Debian's frr 8.4) on one VRID, in network namespaces.

What it tests: keepalived (tests/netns/test_interop.py) is one implementation; FRR's vrrpd is a
second, independent one (its own codec, timers and state machine, and a different way to hold
the VIP: a macvlan with the virtual MAC that zebra sets protodown in Backup; see
``vipd.lab.frr_vrrp``). FRR runs on n1, vipd on n2; in each direction one of them has the
higher priority H (200), the other L (150). For VRRPv3 over IPv4 and IPv6 (advert 0.1 s) and
VRRPv2 over IPv4 (advert 1 s) one life cycle:

1. H starts alone and becomes master; L starts and stays backup for longer than its
   Master_Down_Interval;
2. H gets SIGTERM: both send a priority-0 advert on the way out (RFC 9568 §6.4.3), so L takes
   over after its Skew_Time (+ MARGIN);
3. H starts again and preempts: L goes back to backup;
4. H dies (eth0 down, then SIGKILL): L takes over within its Master_Down_Interval (+ MARGIN),
   wire to wire from H's last advert to L's first.

After every phase three views must agree: the daemons' own states (vipd's ``became …`` log
lines, FRR's ``show vrrp json``), who holds the VIP (vipd: bound on eth0; FRR: its macvlan up
and not protodown), and where it answers: the client namespace's ARP (IPv4) or neighbour
discovery (IPv6) resolves the VIP to the master's MAC (vipd's node's eth0 MAC, or FRR's virtual
MAC), with its cache flushed before each look. Finally every captured advert of either side
is checked against the wire contract (``vipd.lab.wire.contract_problems``: TTL 255, lengths,
the checksum form, interval, VIP; it shows that FRR's v2 checksum is over the message only, as
RFC 3768 §5.3.8 has it), and vipd's stop line must show no advert dropped as invalid.

Timing theory (RFC 3768 §6.1 / RFC 9568 §6.1), for the backup's priority p and the master's
interval A: v2 Skew = (256 - p) / 256 s; v3 Skew = (256 - p) x A / 256; Master_Down_Interval =
3 x A + Skew.

``test_negative_control_version_mismatch_is_dual_master`` is the NEGATIVE CONTROL: vipd on
VRRPv2 against FRR on VRRPv3 must be caught as a dual master by the same checks.

Runtime: about a minute and a half (the v2 cases dominate). On a failure the lab's logs and
pcaps are copied to the test's tmp_path.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import pytest

from tests.netns.test_interop import VIPD_STOPPED_RE
from tests.prereq import missing
from vipd.lab.daemons import Daemon, VrrpSpec, make_daemon
from vipd.lab.frr_vrrp import FrrVrrp, frr_problem
from vipd.lab.topology import Lab, vip_for
from vipd.lab.wire import Capture, WireAdvert, contract_problems

pytestmark = pytest.mark.netns

HIGH, LOW = 200, 150
MARGIN = 0.5  # s allowed beyond the RFC time for a takeover (scheduling, netlink, capture)
EARLY = 0.01  # s a takeover may come before the theory (timestamp granularity), no more
STARTUP = {"vipd": 3.0, "frr": 2.0}  # s from spawn to a running state machine, at most
POLL = 0.05

# Sends one datagram to the VIP from the client namespace: the kernel resolves the VIP first.
_POKE = (
    "import socket, sys\n"
    "a = sys.argv[1]\n"
    "s = socket.socket(socket.AF_INET6 if ':' in a else socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.sendto(b'x', (a, 9))\n"
)


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    version: Literal[2, 3]
    advert: float
    family: Literal[4, 6]

    def spec(self) -> VrrpSpec:
        return VrrpSpec(vip=vip_for(self.family), advert_interval=self.advert, version=self.version)


MODES = [Mode("v3-ipv4", 3, 0.1, 4), Mode("v3-ipv6", 3, 0.1, 6), Mode("v2-ipv4", 2, 1.0, 4)]


@pytest.fixture(scope="session")
def frr_ok(netns_ok: None) -> None:
    problem = frr_problem()
    if problem is not None:
        missing(problem)


def mdi(version: int, priority: int, adv: float) -> float:
    return 3 * adv + skew(version, priority, adv)


def skew(version: int, priority: int, adv: float) -> float:
    return (256 - priority) / 256 if version == 2 else (256 - priority) * adv / 256


class Duo:
    """FRR on n1, vipd on n2, a capture on both ports and the client's view of the VIP."""

    def __init__(
        self,
        lab: Lab,
        mode: Mode,
        high: Literal["frr", "vipd"],
        *,
        vipd_spec: VrrpSpec | None = None,
    ) -> None:
        self.lab, self.mode = lab, mode
        self.spec = mode.spec()
        n1, n2 = lab.nodes
        self.frr = FrrVrrp(lab, n1, self.spec, HIGH if high == "frr" else LOW)
        self.vipd: Daemon = make_daemon("vipd", lab, n2, vipd_spec or self.spec)
        self.vipd.priority = HIGH if high == "vipd" else LOW
        self.capture = Capture(lab, [n1, n2], arp=mode.family == 4)
        self.t0 = time.time()
        self.vipd_mac = self._mac(n2.ns)
        self.frr_eth0_mac = self._mac(n1.ns)

    def _mac(self, ns: str) -> str:
        return self.lab.exec(ns, ["cat", "/sys/class/net/eth0/address"]).stdout.strip()

    # -- the three views --------------------------------------------------------------------

    def state(self, who: str) -> str | None:
        if who == "frr":
            return self.frr.state()
        got = self.vipd.state()
        return "MASTER" if got == "ACTIVE" else got

    def holders(self) -> list[str]:
        out = []
        if self.frr.holds_vip() and self.lab.link_up(self.frr.node):
            out.append("frr")
        if self.vipd.node.name in self.lab.wire_holders(self.spec.vip):
            out.append("vipd")
        return out

    def answering(self, timeout: float = 1.0) -> str:
        """Whose MAC the client resolves the VIP to, its neighbour cache flushed first."""
        c, vip = self.lab.client_ns, self.spec.vip
        self.lab.ip(c, "neigh", "flush", "to", vip, check=False)
        self.lab.exec(c, [sys.executable, "-c", _POKE, vip], check=False)
        deadline = time.monotonic() + timeout
        while True:
            out = self.lab.ip(c, "-j", "neigh", "show", "to", vip, check=False).strip()
            for entry in json.loads(out or "[]"):
                mac = str(entry.get("lladdr", ""))
                if mac:
                    return {
                        self.frr.mac: "frr",
                        self.vipd_mac: "vipd",
                        self.frr_eth0_mac: "frr's eth0 (not its virtual MAC)",
                    }.get(mac, mac)
            if time.monotonic() > deadline:
                return "nobody"
            time.sleep(0.02)

    def wait(self, what: str, cond: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.2f} s waiting for {what}")
            time.sleep(POLL)

    def settled(self, master: str, backup: str, timeout: float) -> None:
        """``master`` says MASTER and alone holds the VIP, ``backup`` says BACKUP, and the
        client reaches the VIP at ``master``'s MAC."""
        self.wait(
            f"{master} MASTER holding the VIP alone, {backup} BACKUP",
            lambda: (
                self.state(master) == "MASTER"
                and self.state(backup) == "BACKUP"
                and self.holders() == [master]
            ),
            timeout,
        )
        got = self.answering()
        assert got == master, f"the client reaches the VIP at {got}, want {master}"

    def alone(self, master: str, timeout: float) -> None:
        self.wait(
            f"{master} MASTER holding the VIP alone",
            lambda: self.state(master) == "MASTER" and self.holders() == [master],
            timeout,
        )
        got = self.answering()
        assert got == master, f"the client reaches the VIP at {got}, want {master}"

    # -- the wire ---------------------------------------------------------------------------

    def adverts(
        self, who: str, *, after: float = 0.0, prio: Literal["live", "zero", "any"] = "any"
    ) -> list[WireAdvert]:
        node = self.frr.node.name if who == "frr" else self.vipd.node.name
        return [
            a
            for a in self.capture.adverts()
            if a.sender == node
            and a.ts > after
            and not (prio == "live" and a.priority == 0)
            and not (prio == "zero" and a.priority != 0)
        ]

    def first_advert(
        self, who: str, *, after: float, timeout: float, prio: Literal["live", "zero"] = "live"
    ) -> WireAdvert:
        deadline = time.monotonic() + timeout
        while True:
            found = self.adverts(who, after=after, prio=prio)
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no {prio} advert from {who} within {timeout:.2f} s")
            time.sleep(POLL)

    # -- actions ----------------------------------------------------------------------------

    def start(self, who: str) -> None:
        (self.frr if who == "frr" else self.vipd).start()

    def term(self, who: str) -> int | None:
        if who == "frr":
            return self.frr.stop(signal.SIGTERM)["vrrpd"]
        return self.vipd.stop(signal.SIGTERM, timeout=5.0)

    def kill(self, who: str) -> float:
        """Node death: eth0 down, then SIGKILL; returns when the link was down."""
        node = self.frr.node if who == "frr" else self.vipd.node
        self.lab.set_link(node, False)
        t_down = time.time()
        if who == "frr":
            self.frr.stop(signal.SIGKILL)
        else:
            self.vipd.stop(signal.SIGKILL, timeout=5.0)
        return t_down

    def close(self) -> None:
        self.vipd.stop(signal.SIGTERM, timeout=5.0)
        self.frr.close()
        self.capture.stop()

    @contextlib.contextmanager
    def explained(self, keep: Path) -> Iterator[None]:
        try:
            yield
        except AssertionError as exc:
            saved = keep / "lab"
            with contextlib.suppress(OSError):
                shutil.copytree(self.lab.workdir, saved, dirs_exist_ok=True)
            wire = "\n".join(
                f"  {a.ts - self.t0:+8.3f} {a.sender} v{a.version} prio {a.priority}"
                for a in self.capture.adverts()[-30:]
            )
            raise AssertionError(
                f"{exc}\nwire (last 30 adverts; n1 = frr, n2 = vipd):\n{wire}\n"
                f"--- frr log tail:\n{self.frr.log_tail(25)}\n"
                f"--- vipd log tail:\n{self.vipd.log_tail(25)}\nlab files: {saved}"
            ) from None


def final_checks(duo: Duo) -> None:
    """After both stopped: vipd's receive counters, and the wire contract for every advert."""
    problems: list[str] = []
    stops = VIPD_STOPPED_RE.findall(duo.vipd.log_path.read_text(errors="replace"))
    if not stops:
        problems.append("vipd never logged its stop counters")
    for received, invalid in stops:
        if invalid != "{}":
            problems.append(f"vipd dropped adverts as invalid: {invalid}")
        if int(received) == 0:
            problems.append("vipd received no valid advert at all")
    s = duo.spec
    for a in duo.capture.adverts():
        why = contract_problems(
            a,
            version=s.version,
            vrid=s.vrid,
            vip=s.vip,
            interval=s.advert_interval,
            auth_pass=None,
            unicast_dst=None,
        )
        if why:
            who = "frr" if a.sender == duo.frr.node.name else "vipd"
            problems.append(f"{who} advert at {a.ts - duo.t0:.3f} s: " + "; ".join(why))
    assert not problems, "\n".join(problems[:20])


def run_life_cycle(duo: Duo, high: str, low: str) -> dict[str, float]:
    s = duo.spec
    adv = s.advert_interval
    mdi_low = mdi(s.version, LOW, adv)
    mdi_high = mdi(s.version, HIGH, adv)
    got: dict[str, float] = {}

    # 1. H alone, then L joins and stays backup past its Master_Down_Interval.
    duo.start(high)
    duo.alone(high, STARTUP[high] + mdi_high + MARGIN)
    t_low = time.time()
    duo.start(low)
    duo.wait(f"{low} to say BACKUP", lambda: duo.state(low) == "BACKUP", STARTUP[low])
    time.sleep(mdi_low + 0.3)
    duo.settled(high, low, 0.0)
    leaked = duo.adverts(low, after=t_low, prio="live")
    assert not leaked, f"DUAL MASTER: backup {low} sent {len(leaked)} live adverts"

    # 2. SIGTERM to H: its priority-0 advert; L takes over after its Skew_Time.
    t_term = time.time()
    code = duo.term(high)
    zero = duo.first_advert(high, after=t_term - 0.001, timeout=2.0, prio="zero")
    first = duo.first_advert(low, after=zero.ts, timeout=skew(s.version, LOW, adv) + 2.0)
    got["term_takeover"] = first.ts - zero.ts
    theory = skew(s.version, LOW, adv)
    assert theory - EARLY <= got["term_takeover"] <= theory + MARGIN, (
        f"{low} took over {got['term_takeover']:.3f} s after the priority-0 advert; "
        f"theory: Skew_Time {theory:.3f} s (+{MARGIN} s allowed)"
    )
    assert code == 0, f"{high} exited with {code} on SIGTERM"
    duo.alone(low, MARGIN + 0.5)

    # 3. H again: it preempts (after its own Master_Down_Interval) and L steps down.
    duo.start(high)
    duo.settled(high, low, STARTUP[high] + mdi_high + 2 * adv + MARGIN)

    # 4. H dies: L takes over within its Master_Down_Interval of H's last advert.
    t_down = duo.kill(high)
    last = duo.adverts(high, prio="live")[-1]
    assert last.ts <= t_down + 0.001, f"{high} advertised after its link went down"
    first = duo.first_advert(low, after=last.ts, timeout=mdi_low + MARGIN + 1.0)
    got["kill_takeover"] = first.ts - last.ts
    assert mdi_low - EARLY <= got["kill_takeover"] <= mdi_low + MARGIN, (
        f"{low} took over {got['kill_takeover']:.3f} s after {high}'s last advert; "
        f"theory: Master_Down_Interval {mdi_low:.3f} s (+{MARGIN} s allowed)"
    )
    duo.alone(low, MARGIN + 0.5)
    return got


@pytest.mark.parametrize("high", ["frr", "vipd"], ids=["frr-high", "vipd-high"])
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_frr_interop_life_cycle(
    make_lab: Callable[..., Lab], frr_ok: None, tmp_path: Path, mode: Mode, high: str
) -> None:
    lab = make_lab(2)
    duo = Duo(lab, mode, "frr" if high == "frr" else "vipd")
    low = "vipd" if high == "frr" else "frr"
    with duo.explained(tmp_path):
        try:
            duo.capture.start()
            got = run_life_cycle(duo, high, low)
        finally:
            duo.close()
        final_checks(duo)
    print(f"\n[{mode.name} {high}-high] " + " ".join(f"{k}={v:.3f}" for k, v in got.items()))


def test_negative_control_version_mismatch_is_dual_master(
    make_lab: Callable[..., Lab], frr_ok: None, tmp_path: Path
) -> None:
    """NEGATIVE CONTROL: FRR on VRRPv3, vipd on VRRPv2. Neither accepts the other's adverts,
    so both become master; the very checks used above (states, holders, the client's view,
    vipd's invalid counters) must see it, or the tests above prove nothing."""
    lab = make_lab(2)
    mode = MODES[0]
    v2 = replace(mode.spec(), version=2, advert_interval=1.0)
    duo = Duo(lab, mode, "frr", vipd_spec=v2)
    with duo.explained(tmp_path):
        try:
            duo.capture.start()
            duo.start("frr")
            duo.alone("frr", STARTUP["frr"] + mdi(3, HIGH, mode.advert) + MARGIN)
            duo.start("vipd")
            duo.wait(
                "vipd to become master as well",
                lambda: duo.state("vipd") == "MASTER",
                STARTUP["vipd"] + mdi(2, LOW, 1.0) + MARGIN,
            )
            with pytest.raises(AssertionError) as caught:
                duo.settled("frr", "vipd", 0.5)
            both = (duo.holders(), duo.state("frr"), duo.state("vipd"))
        finally:
            duo.close()
        assert "timed out" in str(caught.value), caught.value
        assert both == (["frr", "vipd"], "MASTER", "MASTER"), both
        with pytest.raises(AssertionError, match="dropped adverts as invalid"):
            final_checks(duo)
