"""vipd's health checker and health-gated leadership on real kernels.

What it tests:

- the checker (``vipd.lab.healthwatch``: the real ``HealthChecker`` on uvloop, in the client
  namespace) against a real HTTPS server on another node (``vipd.lab.fakes.apiserver``) that the
  test makes answer 500, hang after TLS, hang before TLS, speak plain text, refuse (killed),
  answer slowly once, and recover; TLS verification against a CA file, right and wrong; and
  that a hung server never holds up the checker's event loop;
- the gate, with vipd nodes whose stand-in API servers the test breaks: (a) the leader's API
  server dies (killed, 500, hung) → the VIP moves to a healthy node within fall × interval +
  timeout + the backup's Master_Down_Interval + a margin, and comes back when it recovers
  (preempt); (b) a lone node with no API server still takes the VIP and keeps it; (c) a node
  that joins with an unhealthy API server and a higher priority does not preempt the healthy
  leader, and does once healthy; (d) ``vipd lab --fault apidown``.

Timing assertions are protocol bounds plus a margin for these shared machines.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.netns.waiting import wait_for
from vipd.lab import faults, runner
from vipd.lab.daemons import Daemon, HealthSpec, VrrpSpec, make_daemon
from vipd.lab.healthwatch import HealthWatch
from vipd.lab.pki import make_ca, make_cert
from vipd.lab.responder import Responder
from vipd.lab.topology import VIP4, Lab, python_argv, python_env
from vipd.vrrp import state

MARGIN = 1.0  # scheduling on a shared 2-core machine, Python start-up excluded

# -- the checker against real HTTPS servers --------------------------------------------------


class Server:
    """The stand-in API server's health endpoint, alone, on one node."""

    def __init__(self, lab: Lab, node_index: int, port: int, cert: tuple[Path, Path]) -> None:
        self.lab = lab
        self.node = lab.nodes[node_index]
        self.port = port
        self.cert = cert
        self.mode_file = lab.workdir / f"{self.node.name}-server.mode"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = self.lab.spawn(
            self.node.ns,
            python_argv(
                "vipd.lab.fakes.apiserver", "--port", str(self.port), "--cert", str(self.cert[0]),
                "--key", str(self.cert[1]), "--mode-file", str(self.mode_file),
            ),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=python_env(), text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening"), line

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def mode(self, mode: str) -> float:
        self.mode_file.write_text(mode + "\n")
        return time.monotonic()


def change(w: HealthWatch, healthy: bool, since: float, timeout: float) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = [e for e in w.seen("change", since) if e["healthy"] is healthy]
        return bool(found)

    took = wait_for(seen, timeout)
    assert took is not None, (
        f"no change to healthy={healthy} within {timeout:.2f} s; last events: {w.seen()[-8:]}"
    )
    return found[0]


@pytest.fixture
def two_nodes(make_lab: Callable[..., Lab]) -> Lab:
    return make_lab(2)


def test_checker_against_a_real_https_server_that_fails_and_recovers(two_nodes: Lab) -> None:
    lab = two_nodes
    interval, timeout, rise, fall = 0.5, 0.4, 2, 2
    server = Server(lab, 0, 6444, make_cert(lab.workdir))
    server.mode("ok")
    server.start()
    w = HealthWatch.on(
        lab, None, lab.nodes[0].ipv4, "--port", "6444", "--interval", str(interval),
        "--timeout", str(timeout), "--rise", str(rise), "--fall", str(fall), "--lag",
    ).start()  # fmt: skip
    try:
        start = change(w, True, 0.0, 10.0)  # includes the interpreter's start
        assert start["status"] == 200
        rise_bound = rise * interval + timeout + MARGIN
        fall_bound = fall * interval + timeout + MARGIN

        t = server.mode("fail")
        e = change(w, False, t, fall_bound)
        assert (e["status"], e["error"]) == (500, "http status 500")
        change(w, True, server.mode("ok"), rise_bound)

        for mode in ("stall", "hang"):
            t = server.mode(mode)
            e = change(w, False, t, fall_bound)
            assert e["error"] == f"timeout after {timeout:g} s" and e["status"] is None
            t_ok = server.mode("ok")
            change(w, True, t_ok, rise_bound)
            # While checks hung for `timeout` each, the loop kept turning: a blocking check
            # would have held it for the whole timeout.
            lags = [x["max_ms"] for x in w.seen("lag", t) if x["t"] <= t_ok]
            assert lags and max(lags) < timeout * 1e3 * 0.75, lags

        t = server.mode("tls")
        e = change(w, False, t, fall_bound)
        assert e["error"].startswith("tls: "), e
        change(w, True, server.mode("ok"), rise_bound)

        # One slow answer among good ones changes nothing (fall = 2).
        t = server.mode("stall1")
        assert wait_for(lambda: server.mode_file.read_text().strip() == "ok", 3.0) is not None
        time.sleep(3 * interval + timeout)
        slow = [c for c in w.seen("check", t) if not c["ok"]]
        assert [c["error"] for c in slow] == [f"timeout after {timeout:g} s"], slow
        assert not w.seen("change", t)

        # Refused: the server dies; then it comes back.
        server.kill()
        t = time.monotonic()
        e = change(w, False, t, fall_bound)
        assert e["error"] == "connection refused"
        server.start()
        change(w, True, time.monotonic(), rise_bound)
    finally:
        events = w.stop()
    end = [e for e in events if e["event"] == "end"]
    assert end and end[0]["checks"] > 20


def test_checker_verifies_the_chain_against_the_ca_file(two_nodes: Lab) -> None:
    lab = two_nodes
    ca_dir = lab.workdir / "ca"
    other_dir = lab.workdir / "other"
    ca_dir.mkdir()
    other_dir.mkdir()
    ca = make_ca(ca_dir)
    other = make_ca(other_dir)
    server = Server(lab, 0, 6444, make_cert(ca_dir, "apiserver", ca=ca))
    server.start()
    args = ("--port", "6444", "--interval", "0.2", "--timeout", "0.15", "--rise", "2")
    good = HealthWatch.on(lab, None, lab.nodes[0].ipv4, *args, "--ca-file", str(ca[0])).start()
    bad = HealthWatch.on(lab, None, lab.nodes[0].ipv4, *args, "--ca-file", str(other[0])).start()
    try:
        change(good, True, 0.0, 10.0)
        assert wait_for(lambda: len(bad.seen("check")) >= 5, 10.0) is not None
    finally:
        good.stop()
        bad_events = bad.stop()
    assert not [e for e in bad_events if e["event"] == "change"]
    errors = {e["error"] for e in bad_events if e["event"] == "check"}
    assert errors and all("certificate verify failed" in err for err in errors), errors


# -- the gate --------------------------------------------------------------------------------

HEALTH = HealthSpec(port=6444, interval=0.2, timeout=0.15, rise=2, fall=2)


class Gated:
    def __init__(self, lab: Lab, spec: VrrpSpec) -> None:
        self.lab = lab
        self.spec = spec
        self.daemons: dict[str, Daemon] = {
            n.name: make_daemon("vipd", lab, n, spec) for n in lab.nodes
        }
        self.api = {n.name: Responder(lab, n, 6443, HEALTH.port) for n in lab.nodes}

    def holders(self) -> list[str]:
        return self.lab.holders(self.spec.vip)

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{d.log_tail(12)}" for n, d in sorted(self.daemons.items()))

    def converge(self, node: str, timeout: float) -> None:
        took = wait_for(lambda: self.holders() == [node], timeout)
        assert took is not None, f"holders {self.holders()}, expected {node}\n{self.logs()}"

    def rig(self, name: str) -> faults.NodeRig:
        return faults.NodeRig(self.lab.node(name), self.daemons[name], self.api[name])


@pytest.fixture
def gated(make_lab: Callable[..., Lab]) -> Iterator[Callable[[int], Gated]]:
    made: list[Gated] = []

    def build(nodes: int) -> Gated:
        g = Gated(make_lab(nodes), VrrpSpec(vip=VIP4, advert_interval=0.1, health=HEALTH))
        made.append(g)
        return g

    yield build
    for g in made:
        for d in g.daemons.values():
            d.stop(signal.SIGTERM, timeout=5.0)


def mdi(spec: VrrpSpec, priority: int) -> float:
    return state.master_down_interval(spec.version, priority, round(spec.advert_interval * 100))


@pytest.mark.parametrize("failure", ["killed", "fail", "stall"])
def test_the_vip_leaves_a_leader_whose_api_server_fails_and_comes_back(
    gated: Callable[[int], Gated], failure: str
) -> None:
    g = gated(3)
    for r in g.api.values():
        r.start()
    for d in g.daemons.values():
        d.start()
    g.converge("n1", timeout=10.0)
    t0 = time.monotonic()
    if failure == "killed":
        faults.apidown(g.lab, g.rig("n1"))
    else:
        g.api["n1"].set_health(failure)
    bound = HEALTH.detection_bound() + mdi(g.spec, 150) + MARGIN
    took = wait_for(lambda: g.holders() == ["n2"], bound)
    assert took is not None, f"after {bound:.2f} s: {g.holders()}\n{g.logs()}"
    n1 = g.daemons["n1"].log_text()
    assert "local API server unhealthy: priority lowered" in n1 and "priority_to=1" in n1
    assert g.daemons["n3"].state() == "BACKUP"
    # Recovery: the priority comes back and n1 preempts (preempt is on).
    t1 = time.monotonic()
    if failure == "killed":
        g.api["n1"].start()
    else:
        g.api["n1"].set_health("ok")
    back = HEALTH.rise * HEALTH.interval + HEALTH.interval + mdi(g.spec, 200) + MARGIN
    g.converge("n1", timeout=back + (time.monotonic() - t1))
    assert "local API server healthy: priority restored" in g.daemons["n1"].log_text()
    assert t0 < t1


def test_a_lone_node_without_an_api_server_still_takes_the_vip(
    gated: Callable[[int], Gated],
) -> None:
    g = gated(1)
    n1 = g.daemons["n1"]
    n1.start()  # no API server at all: kubeadm init has not started it yet
    g.converge("n1", timeout=mdi(g.spec, 1) + 2.0 + MARGIN)  # + the interpreter's start
    assert "priority_unhealthy=1" in n1.log_text()
    # It keeps the VIP while the API server stays down …
    lost = wait_for(lambda: g.holders() != ["n1"], 2.0, step=0.02)
    assert lost is None, g.logs()
    # … and when it comes up.
    g.api["n1"].start()
    assert wait_for(lambda: "priority restored" in n1.log_text(), 2.0 + MARGIN) is not None, (
        g.logs()
    )
    assert g.holders() == ["n1"]
    assert n1.log_text().count("became active") == 1
    # What it exports on :2112 says so too.
    text = fetch(g.lab, "metrics")
    assert 'vipd_health_backend_healthy{local="true",target="127.0.0.1"} 1.0' in text, text
    assert f'vipd_vrrp_priority{{vip="{VIP4}"}} 200.0' in text
    for result, least in (("ok", 1), ("fail", 2)):
        m = re.search(
            rf'vipd_health_checks_total{{result="{result}",target="127.0.0.1"}} (\S+)', text
        )
        assert m and float(m.group(1)) >= least, (result, text)
    (local,) = json.loads(fetch(g.lab, "status"))["backends"]
    assert local["name"] == "local" and local["healthy"] is True, local
    assert local["url"] == "https://127.0.0.1:6444/readyz"


def fetch(lab: Lab, path: str) -> str:
    """GET http://127.0.0.1:2112/<path> inside n1 (vipd's metrics endpoint)."""
    code = (
        "import urllib.request as u; "
        f"print(u.urlopen('http://127.0.0.1:2112/{path}', timeout=5).read().decode())"
    )
    return lab.exec(lab.nodes[0].ns, ["python3", "-c", code]).stdout


def test_an_unhealthy_joiner_with_a_higher_priority_does_not_preempt(
    gated: Callable[[int], Gated],
) -> None:
    g = gated(2)
    g.api["n2"].start()
    g.daemons["n2"].start(priority=150)
    g.converge("n2", timeout=5.0)
    g.api["n1"].set_health("fail")  # its API server is up but not ready
    g.api["n1"].start()
    g.daemons["n1"].start(priority=200)
    # Long enough for n1 to have preempted several times over, were it not gated.
    watch = 3 * mdi(g.spec, 200) + HEALTH.rise * HEALTH.interval + 2.0
    moved = wait_for(lambda: g.holders() != ["n2"], watch, step=0.02)
    assert moved is None, f"the VIP moved to {g.holders()}\n{g.logs()}"
    assert "became active" not in g.daemons["n1"].log_text()
    assert g.daemons["n1"].state() == "BACKUP"
    # Healthy now: its priority 200 beats 150 and it preempts.
    g.api["n1"].set_health("ok")
    back = HEALTH.rise * HEALTH.interval + HEALTH.interval + mdi(g.spec, 200) + MARGIN
    g.converge("n1", timeout=back)


def test_lab_fault_apidown(netns_ok: None) -> None:
    report = runner.execute(runner.Options(fault="apidown", rounds=2))
    assert report["summary"]["ok"], runner.render_table(report)
    assert report["lab"]["health"]["port"] == HEALTH.port
    for r in report["rounds"]:
        assert r["new_leader"] == "n2" and r["holders_after_convergence"] == ["n1"]


def test_vipd_check_loads_the_ca_file_or_exits_2(two_nodes: Lab) -> None:
    lab = two_nodes
    node = lab.nodes[0]
    ca = make_ca(lab.workdir)
    path = lab.workdir / "check.yaml"

    def check(ca_file: str) -> subprocess.CompletedProcess[str]:
        path.write_text(
            f"vip: {VIP4}\ninterface: eth0\nnode: n1\nelection: {{vrrp: {{vrid: 51}}}}\n"
            f"health: {{ca_file: {ca_file}, interval: 2, rise: 1}}\n"
        )
        return lab.exec(node.ns, python_argv("vipd", "check", "--config", str(path)), check=False)

    bad = check(str(lab.workdir / "missing.pem"))
    assert bad.returncode == 2, bad
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith("vipd: config error: health.ca_file: cannot load CA certificates"), line
    assert "No such file or directory" in line
    good = check(str(ca[0]))
    assert good.returncode == 0, good.stderr
    assert (
        "health: /readyz on 127.0.0.1 port 6443 every 2s (timeout 1.6s, rise 1, fall 3), "
        f"TLS verified against {ca[0]}; while unhealthy priority 1" in good.stdout
    ), good.stdout
    assert lab.holders(VIP4) == []
