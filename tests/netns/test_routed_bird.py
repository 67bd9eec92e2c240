"""Routing-table mode with BIRD 2 as the node's routing daemon: the configuration
docs/design/routed.md gives for BIRD, run as written on a node of the FRR fabric.

The bed (`vipd.lab.routed.RoutedBed`) has one node without FRR (``node_frr=False``) and the
FRR 8.4 router with BFD 100 ms × 3 toward it, its BGP neighbour tied to BFD
(``speaker_bfd=True``). On the node, Debian's BIRD 2 runs with the BIRD block of
docs/design/routed.md (taken from the document, not copied here, so the document is what is
tested), and vipd's route actuator writes and deletes the VIP's route in table 198 as
``announce.mode: routing-table`` does. What must hold: BIRD's session and its BFD come up; the
VIP reaches the router's FIB via the node, and a client behind the router is answered by the
node; another route of vipd's protocol in table 198 is not announced (the export filter);
the route deleted → out of the router's FIB. Times are printed (``-s``), not bounded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netns.test_routed import VIP, Listener, connect, wait_for
from tests.prereq import missing
from vipd.lab.routed import RoutedBed, frr_problem
from vipd.routed.actuator import RouteActuator
from vipd.routed.plan import Phase

DOC = Path(__file__).resolve().parents[2] / "docs" / "design" / "routed.md"
OTHER = "10.79.0.200/32"  # a route of vipd's protocol in table 198 that is not the VIP


def bird_block() -> str:
    """The BIRD configuration of docs/design/routed.md (the code block after "BIRD 2
    equivalent")."""
    text = DOC.read_text()
    found = re.search(r"BIRD 2 equivalent.*?```\n(.*?)```", text, re.S)
    assert found, "docs/design/routed.md has no BIRD 2 configuration block"
    return found.group(1)


class Bird:
    """BIRD in a namespace, in the foreground, with its own control socket."""

    def __init__(self, ns: str, conf: str, workdir: Path) -> None:
        self.ns = ns
        self.sock = workdir / "bird.ctl"
        path = workdir / "bird.conf"
        path.write_text(conf)
        self.log = (workdir / "bird.log").open("wb")
        argv = ["bird", "-f", "-c", str(path), "-s", str(self.sock), "-P", str(workdir / "pid")]
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv], stdout=self.log, stderr=subprocess.STDOUT
        )

    def show(self, *what: str) -> str:
        argv = ["birdc", "-s", str(self.sock), "show", *what]
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def bird_bed(netns_ok: None) -> Iterator[tuple[RoutedBed, Bird]]:
    problem = frr_problem()
    if problem is not None:
        missing(problem)
    if shutil.which("bird") is None or shutil.which("birdc") is None:
        missing("needs BIRD 2 (apt-get install bird2; scripts/setup does it)")
    with (
        RoutedBed(nodes=1, node_frr=False, speaker_bfd=True) as bed,
        tempfile.TemporaryDirectory(prefix="vipd-bird-") as tmp,
    ):
        bird = Bird(bed.nodes[0].ns, bird_block(), Path(tmp))
        try:
            yield bed, bird
        finally:
            bird.close()


def test_the_documented_bird_config_announces_what_vipd_writes(
    bird_bed: tuple[RoutedBed, Bird],
) -> None:
    bed, bird = bird_bed
    n1 = bed.nodes[0]
    up = wait_for("the router's session with BIRD", lambda: bed.sessions_up() == {n1.addr}, 30)
    print(f"\nBIRD: BGP Established {up:.2f} s after the bed")
    wait_for(
        "the router's BFD with BIRD up",
        lambda: any(
            p.get("peer") == n1.addr and p.get("status") == "up"
            for p in (bed.show(bed.router, "show bfd peers json") or [])
        ),
        10,
    )
    assert "Established" in bird.show("protocols", "all", "tor"), bird.show("protocols")
    act = RouteActuator(netns=n1.ns)
    listener = Listener(n1)
    try:
        act.converge({})
        start = time.monotonic()
        assert act.converge({VIP: Phase.ANNOUNCED})
        took = wait_for(
            "the VIP in the router's FIB via n1", lambda: bed.kernel_nexthops() == {n1.addr}
        )
        print(f"BIRD: the table route → the router's FIB {took:.3f} s")
        assert {connect(bed) for _ in range(5)} == {"n1"}
        assert time.monotonic() - start < 60  # sanity: the waits above ended

        # Only the VIP leaves the node: BIRD imports every route of protocol 248 from table
        # 198, and the BGP export filter passes the VIP alone.
        route = ["ip", "route", "add", OTHER, "dev", "lo", "table", "198", "proto", "248"]
        bed.exec(n1.ns, route)
        wait_for(
            "BIRD learns the other route", lambda: OTHER in bird.show("route", "table", "vipd4"), 10
        )
        time.sleep(1.0)  # the VIP reached the router well inside this
        assert bed.kernel_nexthops(OTHER) == set()
        assert bed.router_nexthops() == {n1.addr}

        start = time.monotonic()
        act.converge({VIP: Phase.DRAINING})  # the table route goes, the binding stays
        left = wait_for("the VIP out of the router's FIB", lambda: not bed.kernel_nexthops())
        print(f"BIRD: the table route deleted → out of the router's FIB {left:.3f} s")
    finally:
        listener.close()
        act.converge({})
        act.close()
