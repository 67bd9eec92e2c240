"""vipd with only the systemd unit's capabilities, on real kernels.

What it tests: systemd/vipd.service gives vipd an ambient and bounding set of exactly
CAP_NET_ADMIN and CAP_NET_RAW with NoNewPrivileges. This runs vipd the same way with
setpriv (uid 0 but SECBIT_NOROOT, so root's implicit capabilities are gone; the unit's
capabilities as the ambient and bounding sets; no_new_privs) on a lab node, and checks that
its effective set is exactly those two and that it still does everything: takes the VIP
over by priority, answers the client, re-adds a VIP deleted by hand, and stops gracefully.
As a Backup it follows its master with the classic filters (raw sockets only), as the
unconfined vipd beside it (root) does.
(The unit's non-root DynamicUser and filesystem sandbox need systemd as PID 1, which these
machines do not have; `systemd-analyze verify` checks them in tests/unit/test_packaging.py.)
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from pathlib import Path

from tests.netns import waiting
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.topology import VIP4, Lab

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "vipd.service"


# Each poll here is costly (an HTTP request, a log read, podman): not every 10 ms.
wait_for = functools.partial(waiting.wait_for, step=0.02)


def unit_caps(key: str) -> list[str]:
    (line,) = [ln for ln in UNIT.read_text().splitlines() if ln.startswith(key + "=")]
    return line.split("=", 1)[1].split()


class ConfinedVipd(VipdDaemon):
    def _prepare(self) -> list[str]:
        caps = ",".join(
            "+" + c.removeprefix("CAP_").lower() for c in unit_caps("AmbientCapabilities")
        )
        bounding = ",".join(
            "+" + c.removeprefix("CAP_").lower() for c in unit_caps("CapabilityBoundingSet")
        )
        return [
            "setpriv",
            "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked",
            f"--inh-caps=-all,{caps}",
            f"--ambient-caps=-all,{caps}",
            f"--bounding-set=-all,{bounding}",
            "--no-new-privs",
            "--",
            *super()._prepare(),
        ]


def _line(daemon: VipdDaemon, message: str) -> str:
    return next(ln for ln in daemon.log_text().splitlines() if message in ln)


def test_vipd_works_with_exactly_the_units_capabilities(make_lab: Callable[..., Lab]) -> None:
    assert unit_caps("AmbientCapabilities") == ["CAP_NET_ADMIN", "CAP_NET_RAW"]
    lab = make_lab(2)
    spec = VrrpSpec(vip=VIP4, advert_interval=0.1)
    plain = VipdDaemon(lab, lab.node("n2"), spec, lab.nodes)
    confined = ConfinedVipd(lab, lab.node("n1"), spec, lab.nodes)
    plain.start(priority=100)
    assert wait_for(lambda: lab.holders(VIP4) == ["n2"], 10), plain.log_tail()
    confined.start(priority=200)
    try:
        assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 10), confined.log_tail()
        assert confined.pid is not None
        status = Path(f"/proc/{confined.pid}/status").read_text()
        fields = dict(ln.split(":\t", 1) for ln in status.splitlines() if ":\t" in ln)
        assert int(fields["CapEff"], 16) == (1 << 12) | (1 << 13), fields["CapEff"]
        assert int(fields["CapBnd"], 16) == (1 << 12) | (1 << 13), fields["CapBnd"]
        assert fields["NoNewPrivs"].strip() == "1"
        # The repair path needs netlink writes too.
        lab.ip(lab.node("n1").ns, "addr", "del", f"{VIP4}/32", "dev", "eth0")
        assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 3), confined.log_tail()
        # The unconfined Backup follows the confined master with the classic filters.
        assert wait_for(lambda: "following the master quietly" in plain.log_text(), 3)
        assert "filter=classic" in _line(plain, "following the master quietly")
        assert confined.stop(signal.SIGTERM, timeout=10) == 0, confined.log_tail()
        assert "new leader heard: releasing the VIP" in confined.log_text()
        assert wait_for(lambda: lab.holders(VIP4) == ["n2"], 3)
        # Confined and a Backup: the same classic filters, with the unit's capabilities.
        confined.start(priority=50)
        assert wait_for(lambda: "following the master quietly" in confined.log_text(), 10), (
            confined.log_tail()
        )
        line = _line(confined, "following the master quietly")
        assert "filter=classic" in line, line
        assert lab.holders(VIP4) == ["n2"]
    finally:
        confined.stop(signal.SIGKILL)
        plain.stop(signal.SIGTERM)
