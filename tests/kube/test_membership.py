"""Membership that follows the control plane, against three real kube-apiservers and etcd.

What it tests, on one bed (``vipd.lab.kubebed``: three etcd members and three
kube-apiservers in network namespaces n1..n3; no vipd of the bed's own), with the RBAC that
``vipd manifest rbac`` renders for a config with ``unicast_peers_from: [endpointslices,
nodes]`` applied and vipd running with the ServiceAccount's token:

- the set follows the API: the ``default/kubernetes`` EndpointSlices drop an API server
  that is SIGKILLed and list it again once it is back; a control-plane Node created or
  deleted is added to or dropped from the set (vipd's "membership source changed" lines);
- a fourth node joins VRRP unicast (three vipd nodes n1..n3 whose static
  ``unicast_peers`` are each other; the fourth in the lab's client namespace, where no API
  server runs, so it reads through another node's): while its address is in no set the
  master does not advertise to it and its start probe keeps it out; the others learn it
  from its Node object, it joins after the admission rule's wait, it is heard, and when the
  master dies (link down, SIGKILL) it takes over; at no sample do two live nodes hold the
  VIP. Its control (n2 and n3 on static lists) ends with two holders: the judge can fail;
- Lease mode: ``health.peers_from: [endpointslices]`` gives the health checker the other
  API servers (their series on /metrics) and drops one whose API server is killed.

The fourth node runs in the lab's client namespace (the bed has three node namespaces, each
with its etcd and API server); the API objects are served by the real kube-apiserver, not an
emulator.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.prereq import missing
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.faults import drop_address
from vipd.lab.kubebed.bed import API_PORT, KubeBed, usable
from vipd.lab.topology import CLIENT4, VIP4, Node, python_argv, python_env

pytestmark = pytest.mark.kube

INTERVAL = 1.0  # membership.interval in these configs
TTL = 15.0  # kube-apiserver's endpoint lease TTL
PASS = 10.0  # how often every API server reconciles the endpoints
SLACK = 15.0  # three API servers and three etcds on two shared cores
SETTLE = INTERVAL + 5.0  # the admission rule's wait (vipd.membership.reader.TIMEOUT)
PRIORITIES = {"n1": 120, "n4": 110, "n2": 100, "n3": 90}


@pytest.fixture(scope="module")
def bed() -> Iterator[KubeBed]:
    why = usable()
    if why is not None:
        missing(why)
    with KubeBed(start_vipd=False, start_prober=False) as b:
        print(f"\nbed up in {b.startup_s:.1f} s ({b.apiserver_version}, {b.etcd_version})")
        yield b


class MemberVipd(VipdDaemon):
    """vipd in VRRP unicast mode whose peers follow the bed's API."""

    def __init__(
        self, bed: KubeBed, node: Node, static: list[Node], api: list[str], follow: bool = True
    ) -> None:
        super().__init__(bed.lab, node, VrrpSpec(vip=VIP4, unicast=True), static)
        self.bed = bed
        self.follow = follow
        self.static = [n.ipv4 for n in static]
        self.api = api
        self.priority = PRIORITIES[node.name]

    def config(self) -> dict[str, Any]:
        out = super().config()
        vrrp = out["election"]["vrrp"]
        vrrp["unicast_peers"] = self.static
        vrrp["unicast_peers_from"] = ["endpointslices", "nodes"] if self.follow else []
        out["membership"] = {
            "interval": INTERVAL,
            # the bed's ServiceAccount token (the rendered RBAC is applied below)
            "kubeconfig": str(self.bed.vipd_kubeconfig(self.bed.nodes[0])),
            "api_servers": self.api,
        }
        out["metrics"] = {"listen": "0.0.0.0:2112"}
        return out


def status_of(d: MemberVipd) -> dict[str, Any]:
    """The daemon's /status document, read from its node's namespace."""
    code = (
        "import sys, urllib.request; "
        "sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:2112/status', timeout=5)"
        ".read().decode())"
    )
    argv = ["ip", "netns", "exec", d.node.ns, sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=True).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def node_object(name: str, ip: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/control-plane": ""}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
    }


def apply_membership_rbac(bed: KubeBed, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    path = bed.lab.workdir / "membership-render.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = subprocess.run(
        python_argv("vipd", "manifest", "rbac", "--config", str(path)),
        capture_output=True, text=True, env=python_env(), check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    bed.kubectl("apply", "-f", "-", input_text=proc.stdout)
    return docs


def wait_log(d: VipdDaemon, pattern: str, timeout: float, since: int = 0) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern)
    while True:
        m = rx.search(d.log_text(), since)
        if m is not None:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"no /{pattern}/ in {d.node.name}'s log within {timeout:.0f} s:\n"
                                 + d.log_tail(30))  # fmt: skip
        time.sleep(0.2)


def source_re(source: str, addresses: list[str]) -> str:
    """vipd's line saying that ``source`` now reads exactly ``addresses``."""
    want = re.escape(",".join(addresses))
    return rf'membership source changed.*source={source} addresses="?{want}"?(\s|$)'


class Holders:
    """Who holds the VIP, sampled every 50 ms (the nodes n1..n3 and the client namespace)."""

    def __init__(self, bed: KubeBed, fourth: Node) -> None:
        self.bed = bed
        self.fourth = fourth
        self.samples: list[tuple[float, list[str]]] = []
        self.dead: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> list[str]:
        out = [n for n in self.bed.holders() if n not in self.dead]
        text = self.bed.lab.ip(self.fourth.ns, "-4", "-o", "addr", "show", "dev", "eth0")
        if f" {VIP4}/" in text:
            out.append(self.fourth.name)
        return sorted(out)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.now()))
            time.sleep(0.05)

    def __enter__(self) -> Holders:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def wait_one(self, name: str, timeout: float) -> float:
        t0 = time.monotonic()
        while self.now() != [name]:
            assert time.monotonic() - t0 < timeout, f"holders {self.now()}, want [{name}]"
            time.sleep(0.05)
        return time.monotonic() - t0

    def doubles(self, since: float) -> list[tuple[float, list[str]]]:
        return [(t - since, h) for t, h in self.samples if t >= since and len(h) > 1]


@pytest.mark.parametrize("followed", [True, False], ids=["followed", "control-n2-n3-static"])
def test_a_fourth_node_is_learnt_heard_and_takes_over(bed: KubeBed, followed: bool) -> None:
    """``followed=False`` is the control: n2 and n3 keep static lists (only n1 follows), so
    they drop n4's adverts, and when n1 dies two nodes hold the VIP: the judge can fail."""
    n1, n2, n3 = bed.nodes
    lab = bed.lab
    fourth = Node("n4", 4, lab.client_ns, "", CLIENT4, "")
    own = f"https://127.0.0.1:{API_PORT}"
    others = [f"https://{n.ipv4}:{API_PORT}" for n in (n1, n2, n3)]
    daemons = {
        n.name: MemberVipd(bed, n, [n1, n2, n3], [own], follow=followed or n is n1)
        for n in (n1, n2, n3)
    }
    # The joining node: no API server of its own yet, so it reads through the others'.
    d4 = MemberVipd(bed, fourth, [n1, n2, n3], [own, *others])
    docs = apply_membership_rbac(bed, daemons["n1"].config())
    kinds = sorted(d["kind"] for d in docs)
    assert "ClusterRole" in kinds and "Role" in kinds, kinds  # nodes, and the slices

    for n in (n1, n2, n3):
        bed.kubectl("create", "-f", "-", input_text=yaml.safe_dump(node_object(n.name, n.ipv4)))
    with Holders(bed, fourth) as holders:
        try:
            for d in daemons.values():
                d.start()
            holders.wait_one("n1", 60)
            three = sorted(n.ipv4 for n in (n1, n2, n3))
            for d in daemons.values():
                if not d.follow:
                    continue
                wait_log(d, source_re("nodes", three), 30)
                assert "held=true" not in d.log_text(), d.log_tail(20)

            # The fourth node starts: its address is in no set yet, so the master does not
            # advertise to it, and its start probe (RFC 5227) finds the VIP answered with no
            # advert: it waits, out of the election.
            t_join = time.monotonic()
            d4.start()
            wait_log(d4, r"VIP held by another host", 30)
            time.sleep(3)
            assert "became" not in d4.log_text() and holders.now() == ["n1"]

            # Its Node object appears: the others learn it, the master's adverts reach it,
            # it reads the set through another API server, and joins after the settle time.
            t_node = time.monotonic()
            bed.kubectl("create", "-f", "-", input_text=yaml.safe_dump(node_object("n4", CLIENT4)))
            for d in daemons.values():
                if d.follow:
                    wait_log(d, rf"unicast peers changed.*added={re.escape(CLIENT4)}", 30)
            learnt = time.monotonic() - t_node
            wait_log(
                d4, r"membership read through another API server.*server=https://10\.77\.0\.", 60
            )
            wait_log(d4, r"membership admission.*held=true.*waiting", 30)
            # /status says so too (its membership part follows the rounds).
            member = status_of(d4)["membership"]
            assert member["held"] is True and member["held_why"], member
            assert set(member["read_through"].values()) <= set(others), member
            wait_log(d4, r"membership: joining the election", SETTLE + 3 * INTERVAL + 15)
            joined = time.monotonic() - t_node
            print(f"\nthe others learnt n4 {learnt:.1f} s after its Node was created; "
                  f"n4 joined the election after {joined:.1f} s (settle {SETTLE:g} s)")  # fmt: skip
            assert holders.now() == ["n1"]
            member = status_of(d4)["membership"]
            assert member["held"] is False, member
            assert set(member["lists"][0]["members"]) == {n.ipv4 for n in (n1, n2, n3)}, member
            # It is heard: n2 and n3 have its adverts' source in their sets (no drops of it)
            # and stay backups; n4 backs up n1 (lower priority), sending nothing meanwhile.
            time.sleep(3)
            assert holders.now() == ["n1"]

            # The master dies: link down, then SIGKILL. n4 (110) must win over n2 and n3.
            t_kill = time.monotonic()
            marks = {name: len(d.log_text()) for name, d in daemons.items()}
            lab.set_link(n1, False)
            holders.dead.add("n1")
            daemons["n1"].stop(signal.SIGKILL, timeout=5)
            if not followed:
                # n2 (and n3) drop n4's adverts: n2 takes over too, and both stay.
                deadline = time.monotonic() + 15
                while not holders.doubles(t_kill) and time.monotonic() < deadline:
                    time.sleep(0.1)
                doubles = holders.doubles(t_kill)
                assert doubles, holders.samples[-5:]
                print(f"\ncontrol: two holders {doubles[0][0]:.2f} s after n1 died: "
                      f"{doubles[0][1]}")  # fmt: skip
                return
            took = holders.wait_one("n4", 30)
            print(f"n4 holds the VIP {took:.2f} s after n1 died")
            time.sleep(4)
            assert holders.now() == ["n4"]
            for name in ("n2", "n3"):  # neither took over, even for a moment
                after = daemons[name].log_text()[marks[name] :]
                assert "became active" not in after, after[-3000:]
            doubles = holders.doubles(t_join)
            assert not doubles, doubles[:10]
            count = len([s for s in holders.samples if s[0] >= t_join])
            print(f"{count} samples since n4 started, two holders at none; kill at "
                  f"+{t_kill - t_join:.1f} s")  # fmt: skip
        finally:
            for d in (*daemons.values(), d4):
                d.stop(signal.SIGTERM, timeout=10)
            drop_address(lab, n1, VIP4)  # left by the SIGKILL
            lab.set_link(n1, True)
            bed.kubectl("delete", "node", "n1", "n2", "n3", "n4", "--ignore-not-found", check=False)
            holders.dead.clear()
        for name in ("n2", "n3"):
            drop_address(lab, bed.node(name), VIP4)  # the control's second holder (stopped)


def test_the_set_follows_endpointslices_and_nodes(bed: KubeBed) -> None:
    n1, n2, n3 = bed.nodes
    own = f"https://127.0.0.1:{API_PORT}"
    d = MemberVipd(bed, n1, [n1, n2, n3], [own])
    apply_membership_rbac(bed, d.config())
    all_three = sorted(n.ipv4 for n in (n1, n2, n3))
    try:
        d.start()
        wait_log(d, source_re("endpointslices", all_three), 60)

        # A Node appears and goes.
        t = time.monotonic()
        bed.kubectl(
            "create", "-f", "-", input_text=yaml.safe_dump(node_object("cp-9", "10.77.0.99"))
        )
        wait_log(d, source_re("nodes", ["10.77.0.99"]), 30)
        print(f"\nNode added: in the set after {time.monotonic() - t:.1f} s")
        t = time.monotonic()
        bed.kubectl("delete", "node", "cp-9")
        wait_log(d, r"membership read failed: keeping the last good set.*nodes", 30)
        print(f"last Node deleted: an empty answer keeps the set ({time.monotonic() - t:.1f} s)")
        bed.kubectl(
            "create", "-f", "-", input_text=yaml.safe_dump(node_object("cp-8", "10.77.0.98"))
        )
        wait_log(d, source_re("nodes", ["10.77.0.98"]), 30)

        # An API server dies: the API servers' lease reconciler drops it from the slices.
        t_kill = time.monotonic()
        bed.procs[n3.name].apiserver.kill()
        rest = sorted(n.ipv4 for n in (n1, n2))
        since = len(d.log_text())
        wait_log(d, source_re("endpointslices", rest), TTL + PASS + INTERVAL + SLACK, since)
        print(f"API server on n3 killed: dropped after {time.monotonic() - t_kill:.1f} s")
        t_up = time.monotonic()
        bed.procs[n3.name].apiserver.start()
        since = len(d.log_text())
        wait_log(d, source_re("endpointslices", all_three), 60 + PASS + SLACK, since)
        print(f"listed again {time.monotonic() - t_up:.1f} s after its restart")
        log = d.log_text()
        # the rendered RBAC is enough: no read was refused
        assert "Forbidden" not in log and "Unauthorized" not in log, d.log_tail(40)
    finally:
        d.stop(signal.SIGTERM, timeout=10)
        bed.kubectl("delete", "node", "cp-8", "cp-9", "--ignore-not-found", check=False)


class LeaseMember(VipdDaemon):
    """vipd in Lease mode whose health peers follow the EndpointSlices."""

    def __init__(self, bed: KubeBed, node: Node) -> None:
        super().__init__(bed.lab, node, VrrpSpec(vip=VIP4), bed.nodes)
        cfg = bed.vipd_config(node)
        cfg["health"]["peers"] = []
        cfg["health"]["peers_from"] = ["endpointslices"]
        cfg["membership"] = {"interval": INTERVAL, "kubeconfig": str(bed.vipd_kubeconfig(node))}
        self.cfg = cfg

    def config(self) -> dict[str, Any]:
        return self.cfg


def test_lease_health_peers_follow_the_endpointslices(bed: KubeBed) -> None:
    n1, n2, n3 = bed.nodes
    d = LeaseMember(bed, n1)
    apply_membership_rbac(bed, d.config())
    try:
        d.start()
        peers = rf"{re.escape(n2.ipv4)},{re.escape(n3.ipv4)}"
        wait_log(d, rf"membership changed.*list=health\.peers .*members=\"?{peers}\"?(\s|$)", 60)
        wait_log(d, r"became leader", 60)
        # The health checker checks the followed peers (its series appear on /metrics).
        deadline = time.monotonic() + 20
        while True:
            text = bed.lab.exec(
                n1.ns, ["curl", "-s", "http://127.0.0.1:2112/metrics"], check=False
            ).stdout
            found = {n.ipv4 for n in (n2, n3) if f'target="{n.ipv4}"' in text}
            if found == {n2.ipv4, n3.ipv4}:
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.5)

        # An API server goes: the Lease's health peers follow the slices.
        t_kill = time.monotonic()
        bed.procs[n3.name].apiserver.kill()
        since = len(d.log_text())
        wait_log(
            d,
            rf"membership changed.*list=health\.peers .*removed={re.escape(n3.ipv4)}",
            TTL + PASS + INTERVAL + SLACK,
            since,
        )
        print(f"\nhealth.peers dropped {n3.ipv4} {time.monotonic() - t_kill:.1f} s after SIGKILL")
    finally:
        d.stop(signal.SIGTERM, timeout=10)
        bed.procs[n3.name].apiserver.start()
        bed.wait_ready([n3.name], 120)
