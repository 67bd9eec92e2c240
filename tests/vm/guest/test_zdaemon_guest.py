"""`vipd run` itself with IPVS on, in the guest's real kernel: a lone node takes the VIP,
programs VIP:6443 with the healthy backends (real HTTPS checks) and the source NAT, serves
a client through the VIP; SIGTERM removes the service and the NAT table and exits 0; after a
SIGKILL the next start (before it leads) removes the leftover. Runs after test_ipvs_guest.py
(file order: this file is named to come last), whose director is the same root namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vm.guest.ipvs_net import BACKENDS, PORT, VIP, Net, ipvs_table, sh, wait_for

OURS = f"TCP {VIP}:{PORT}"
UNRELATED = "TCP 10.96.0.1:443"
BOUND = 90.0  # process start under emulation (imports alone take ~5 s) plus the checks

CONFIG = f"""
node: director
vip: {VIP}
interface: br0
election:
  vrrp: {{vrid: 51, priority: 100, advert_interval: 0.1}}
health: {{interval: 3, timeout: 2.8, rise: 2, fall: 2}}
ipvs:
  enabled: true
  port: {PORT}
  backends: [{", ".join(str(a) for a in BACKENDS.values())}]
"""


def servers() -> set[str]:
    return {line.split()[0].split(":")[0] for line in ipvs_table().get(OURS, [])}


def nat_table() -> bool:
    return "vipd_ipvs" in sh("nft", "list", "tables")


class Runs:
    """Starts `vipd run` processes on one config and log; kills what is left at the end."""

    def __init__(self, cfg: Path) -> None:
        self.cfg = cfg
        self.log = open(cfg.with_suffix(".log"), "w+")  # noqa: SIM115
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, "-m", "vipd", "run", "--config", str(self.cfg)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(p)
        return p

    def text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()


@pytest.fixture
def vipd(net: Net) -> Iterator[Runs]:
    # the daemon binds the VIP itself
    sh("ip", "addr", "del", f"{VIP}/32", "dev", "br0", check=False)
    for b in net.backends.values():
        b.failing = False
    cfg = Path(tempfile.mkdtemp()) / "vipd.yaml"
    cfg.write_text(CONFIG)
    runs = Runs(cfg)
    yield runs
    for p in runs.procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    print(runs.text()[-8000:])
    # whatever happened, leave the guest as the other tests expect it
    sh("ipvsadm", "-D", "-t", f"{VIP}:{PORT}", check=False)
    sh("nft", "delete", "table", "ip", "vipd_ipvs", check=False)
    sh("ip", "addr", "add", f"{VIP}/32", "dev", "br0", "preferred_lft", "0", check=False)


def test_vipd_run_programs_ipvs_on_the_leader_and_removes_it_on_sigterm(
    net: Net, vipd: Runs
) -> None:
    p = vipd.start()
    assert wait_for(lambda: len(servers()) == 3, BOUND) is not None, "never programmed"
    assert wait_for(nat_table, BOUND) is not None, "no source NAT"
    names = {net.get_name() for _ in range(6)}
    assert len(names) >= 2, names
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    assert OURS not in ipvs_table() and not nat_table()
    assert UNRELATED in ipvs_table()


def test_vipd_removes_a_killed_runs_leftover_at_start(net: Net, vipd: Runs) -> None:
    p = vipd.start()
    assert wait_for(lambda: len(servers()) == 3, BOUND) is not None
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    # SIGKILL: nothing could clean up, so the service is left with whatever backends it had
    # at that moment (the pool may still be settling: a bootstrap backend swapped out as the
    # health checks come in).
    assert servers(), ipvs_table()
    sh("ip", "addr", "del", f"{VIP}/32", "dev", "br0", check=False)  # as a successor would
    before = vipd.text().count("DelService")
    # the next start: its first pass (as follower, before it has won the election) deletes
    # the leftover, then it leads and programs the service afresh
    p2 = vipd.start()
    assert wait_for(lambda: vipd.text().count("DelService") > before, BOUND) is not None
    assert wait_for(lambda: len(servers()) == 3, BOUND) is not None
    p2.send_signal(signal.SIGTERM)
    assert p2.wait(60) == 0
    assert OURS not in ipvs_table()
