"""The lab itself, on real namespaces: topology, responder, prober + analysis, nftables chaos,
and a full keepalived run through the runner.

These tests check the measuring instrument, not vipd: if they fail, no lab number is worth
anything. Every wait is bounded; the whole module runs in well under a minute.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.netns.waiting import wait_for as wait_until
from tests.prereq import missing
from vipd.lab import runner
from vipd.lab.analysis import measure, stable_on
from vipd.lab.daemons import VrrpSpec, make_fleet
from vipd.lab.faults import Chaos, move_vip
from vipd.lab.prober import Prober
from vipd.lab.responder import Responder
from vipd.lab.routed import frr_problem
from vipd.lab.topology import VIP4, VIP6, Lab, LabError, cleanup, lab_namespaces, netns_pids

pytestmark = pytest.mark.netns

CONNECT = (
    "import socket, sys\n"
    "s = socket.create_connection((sys.argv[1], 6443), timeout=2)\n"
    "print(s.recv(64).decode().strip())\n"
)


def start_responders(lab: Lab) -> list[Responder]:
    responders = [Responder(lab, n) for n in lab.nodes]
    for r in responders:
        r.start()
    return responders


# -- topology ------------------------------------------------------------------------------


def test_topology_builds_and_tears_down_leaving_nothing(netns_ok: None) -> None:
    lab = Lab(nodes=3)
    with lab:
        assert lab_namespaces(lab.prefix) == sorted(lab.namespaces)
        bridge = lab.ip(lab.lan_ns, "-d", "-j", "link", "show", "br0")
        assert json.loads(bridge)[0]["linkinfo"]["info_data"]["mcast_snooping"] == 0
        ports = lab.ip(lab.lan_ns, "-j", "link", "show", "master", "br0")
        assert sorted(p["ifname"] for p in json.loads(ports)) == ["c", "n1", "n2", "n3"]
        n2 = lab.node("n2")
        assert {"10.77.0.12", "fd00:77::12"} <= set(lab.addresses(n2))
        assert lab.holders("10.77.0.13") == ["n3"]
        assert lab.holders(VIP4) == []
        # Nothing of the lab in the host's namespace.
        host_links = subprocess.run(
            ["ip", "-j", "link", "show"], capture_output=True, text=True, check=True
        ).stdout
        assert not {"n1", "n2", "n3", "c", "br0"} & {x["ifname"] for x in json.loads(host_links)}
        sleeper = lab.spawn(n2.ns, ["sleep", "60"])
        # `ip netns exec` enters the namespace after the fork that Popen returns from.
        assert wait_until(lambda: sleeper.pid in netns_pids(n2.ns), 5.0) is not None
        workdir = lab.workdir
    assert lab_namespaces(lab.prefix) == []
    assert sleeper.poll() is not None  # killed and reaped
    assert not workdir.exists()


def test_teardown_on_exception_and_cleanup_of_leftovers(netns_ok: None) -> None:
    with pytest.raises(RuntimeError, match="boom"), Lab(nodes=2) as lab:
        raise RuntimeError("boom")
    assert lab_namespaces(lab.prefix) == []

    # A lab whose owner died without tearing down: cleanup(prefix) removes it.
    orphan = Lab(nodes=2)
    try:
        orphan.build()
        orphan.spawn(orphan.nodes[0].ns, ["sleep", "60"])
        assert len(lab_namespaces(orphan.prefix)) == 4
        # A second lab with the same prefix refuses to build and leaves the first one alone.
        with pytest.raises(LabError, match="already exist"), Lab(nodes=2, prefix=orphan.prefix):
            pass
        assert len(lab_namespaces(orphan.prefix)) == 4
        assert sorted(cleanup(orphan.prefix)) == sorted(orphan.namespaces)
        assert lab_namespaces(orphan.prefix) == []
    finally:
        orphan.teardown()


def test_runner_tears_down_on_sigterm(netns_ok: None, tmp_path: Path) -> None:
    prefix = "vlt" + str(int(time.monotonic() * 1000) % 100000)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vipd.lab",
            "--daemon",
            "keepalived",
            "--prefix",
            prefix,
            "--rounds",
            "50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: len(lab_namespaces(prefix)) == 5, 10), "lab never built"
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cleanup(prefix)
    assert lab_namespaces(prefix) == [], err
    assert proc.returncode in (2, 130), err  # 2: keepalived missing (preflight), else 130


# -- responder and prober ------------------------------------------------------------------


def test_responder_answers_client_through_node_address(lab: Lab) -> None:
    start_responders(lab)
    for addr in ("10.77.0.12", "fd00:77::12"):
        out = lab.exec(lab.client_ns, [sys.executable, "-c", CONNECT, addr]).stdout
        assert out.strip() == "n2"
    prober = Prober(lab, "10.77.0.13")
    prober.start()
    try:
        assert wait_until(lambda: stable_on(prober.attempts(), "n3", 0.3), 5)
    finally:
        prober.stop()
    got = prober.attempts()
    assert len(got) > 100 and all(a.ok and a.name == "n3" for a in got)


@pytest.mark.parametrize("vip", [VIP4, VIP6])
def test_prober_measures_a_manual_move(make_lab: Callable[..., Lab], vip: str) -> None:
    lab = make_lab(2)
    start_responders(lab)
    n1, n2 = lab.nodes
    move_vip(lab, None, n1, vip)
    prober = Prober(lab, vip, interval=0.002)
    prober.start()
    try:
        assert wait_until(lambda: stable_on(prober.attempts(), "n1", 0.3), 5)
        fault = move_vip(lab, n1, n2, vip, gap=0.3)
        assert wait_until(lambda: stable_on(prober.attempts(fault), "n2", 0.3, fault), 5)
        end = time.monotonic()
    finally:
        prober.stop()
    o = measure(prober.attempts(), fault, end, resolution=0.002)
    assert o.recovered and o.outage is not None
    # 0.3 s with no address anywhere, plus the add and the announcement (a Python start-up).
    assert 0.29 <= o.outage <= 0.8, o
    assert (o.before, o.after, o.final) == ("n1", "n2", "n2")
    assert o.switches == 1 and not o.flap and not o.interleaved
    assert o.failures > 0  # the attempts started in the gap failed, as they should


# -- nftables chaos ------------------------------------------------------------------------


def test_nft_vrrp_partition_gives_two_masters(
    make_lab: Callable[..., Lab], keepalived_ok: None
) -> None:
    lab = make_lab(2)
    spec = VrrpSpec(vip=VIP4, advert_interval=0.1)
    fleet = make_fleet("keepalived", lab, spec)
    fleet.start_all()
    try:
        assert wait_until(lambda: lab.holders(VIP4) == ["n1"], 5), lab.holders(VIP4)
        assert wait_until(lambda: fleet["n2"].state() == "BACKUP", 2)
        chaos = Chaos(lab)
        chaos.partition_vrrp(["n1"], ["n2"])
        assert wait_until(lambda: lab.holders(VIP4) == ["n1", "n2"], 3), lab.holders(VIP4)
        assert fleet["n1"].state() == "MASTER" and fleet["n2"].state() == "MASTER"
        counts = chaos.counters()
        assert counts["vrrp-v4 n1>n2"] > 0 and counts["vrrp-v4 n2>n1"] > 0, counts
        chaos.clear()  # healed: n2 hears n1's higher priority and steps back
        assert wait_until(lambda: lab.holders(VIP4) == ["n1"], 3), lab.holders(VIP4)
    finally:
        fleet.stop_all()


def test_nft_random_loss_drops_about_n_percent(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(2)
    start_responders(lab)
    move_vip(lab, None, lab.nodes[0], VIP4)
    chaos = Chaos(lab)
    prober = Prober(lab, VIP4, interval=0.002, timeout=0.2)
    prober.start()
    try:
        # Resolve the VIP's MAC before the loss starts: a dropped ARP request would make the
        # client wait a whole second (its retransmit time) and send almost nothing.
        time.sleep(0.3)
        chaos.loss(30, src="c")
        time.sleep(1.5)
    finally:
        prober.stop()
    counts = chaos.counters()
    seen, dropped = counts["seen c>*"], counts["loss30 c>*"]
    assert seen > 300, counts
    assert 0.2 <= dropped / seen <= 0.4, counts
    attempts = prober.attempts()
    assert any(not a.ok for a in attempts) and any(a.ok for a in attempts)


# -- the runner, end to end with keepalived ------------------------------------------------


def test_runner_keepalived_three_nodes_recovers_every_round(
    keepalived_ok: None, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args(
        [
            "--daemon",
            "keepalived",
            "--rounds",
            "2",
            "--fault",
            "kill",
            "--advert-interval",
            "0.1",
            "--json",
        ]
    )
    code = runner.run(args)
    out = capsys.readouterr().out
    report = json.loads(out)
    assert code == 0, out
    assert report["summary"]["ok"] and len(report["rounds"]) == 2
    for rnd in report["rounds"]:
        assert rnd["ok"] and rnd["old_leader"] == "n1" and rnd["new_leader"] == "n2", rnd
        assert rnd["holders_after_convergence"] == ["n1"]
        assert 100 <= rnd["client_outage_ms"] <= 1000, rnd
        assert not rnd["failover"]["flap"]
    assert lab_namespaces(report["lab"]["prefix"]) == []


# -- the runner on a routed fabric (--announce routing-table) --------------------------------


def _lab_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_runner_routed_every_fault_once(netns_ok: None, capsys: pytest.CaptureFixture[str]) -> None:
    """Three vipd in routing-table mode behind a real FRR router: each fault has the effect
    it must have in the router's FIB, the client sees it, and the bed goes away."""
    problem = frr_problem()
    if problem is not None:
        missing(problem)
    code = runner.run(_lab_args("--announce", "routing-table", "--rounds", "1", "--json"))
    out = capsys.readouterr().out
    report = json.loads(out)
    assert code == 0, out
    rounds = {r["fault"]: r for r in report["rounds"]}
    assert list(rounds) == ["kill", "term", "apidown", "linkdown", "silent", "bgpreset"]
    assert all(r["ok"] and r["back"] for r in rounds.values()), out
    # SIGKILL leaves vipd's routes: the path never left and no connect failed meanwhile.
    assert rounds["kill"]["effect_ms"] is None and rounds["kill"]["failed"] == 0
    for fault in ("term", "apidown", "linkdown", "silent"):
        r = rounds[fault]
        paths = [w.split(": ")[1] for _, w in r["timeline"] if w.startswith("router paths: ")]
        assert r["effect_ms"] is not None and paths, r
        assert r["node"] not in paths[0].split(","), r["timeline"]  # its path left first
    # The instrument sees a dead path: connects hashed to a node without its API server, or
    # to a silent node, failed until the router dropped the path.
    for fault in ("apidown", "silent"):
        assert rounds[fault]["failed"] > 0, rounds[fault]
    # Every session reset: no path at all for a while, and the client saw that.
    reset = rounds["bgpreset"]
    assert any(w == "router paths: none" for _, w in reset["timeline"]), reset["timeline"]
    assert reset["full_outage_ms"] > 100, reset
    assert lab_namespaces(report["lab"]["prefix"]) == []


def test_runner_routed_refuses_what_it_cannot_run(
    netns_ok: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert runner.run(_lab_args("--fault", "silent")) == 2
    assert "needs --announce routing-table" in capsys.readouterr().err
    args = _lab_args("--announce", "routing-table", "--election", "lease")
    assert runner.run(args) == 2
    assert "--election is not used with --announce routing-table" in capsys.readouterr().err
    if importlib.util.find_spec("vipd.routed.speaker") is None:
        assert runner.run(_lab_args("--announce", "bgp")) == 2
        assert "needs vipd's own BGP speaker" in capsys.readouterr().err


def test_runner_bgp_mode_speaker_goes_with_vipd(
    netns_ok: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """--announce bgp: vipd's own speaker on nodes without FRR; SIGKILL takes the speaker
    and so the path, SIGTERM withdraws it first."""
    problem = frr_problem()
    if problem is not None:
        missing(problem)
    if importlib.util.find_spec("vipd.routed.speaker") is None:
        pytest.skip("this vipd has no BGP speaker (announce.mode: bgp)")
    rounds = []
    for fault in ("kill", "term"):
        args = _lab_args("--announce", "bgp", "--fault", fault, "--rounds", "1", "--json")
        code = runner.run(args)
        out = capsys.readouterr().out
        assert code == 0, out
        rounds += json.loads(out)["rounds"]
    kill, term = rounds
    assert kill["expected"] == "path leaves" and kill["effect_ms"] is not None, kill
    assert term["effect_ms"] is not None and term["left_ms"] is not None, term
    # SIGTERM black-holes nothing: no connect timed out or met an unreachable node. The one
    # failure a graceful stop cannot prevent is a reset of a handshake under way when the
    # router drops the path (the router rehashes it onto a node that never saw the SYN; see
    # black_holed in test_routed): such a connect started before the path left (the path
    # watcher polls every 5 ms). A CI run on a loaded machine saw one; a bed whose client link
    # queues 20 ms (tbf) sees 0-3 per round, each ECONNRESET, started 18-34 ms before the
    # change.
    assert set(term["failure_reasons"]) <= {"ECONNRESET"}, term
    if term["failed"]:
        last = max(t for t, what in term["timeline"] if what.startswith("last failed connect"))
        assert last <= term["left_ms"] + 5.0, term["timeline"]
