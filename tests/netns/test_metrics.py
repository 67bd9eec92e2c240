"""vipd's endpoint with the real parts: Prometheus, promtool, and a daemon in trouble.

What it tests, on 3 vipd nodes in network namespaces (as users run them, `python -m vipd run`):

- Debian's ``prometheus`` server, started by the test in the client namespace, scrapes every
  node's :2112; its query API shows exactly one node with role leader, then the next one after
  the leader dies.
- ``promtool check metrics`` on a live leader's and follower's exposition is clean.
- A second vipd on a node exits 3 with one line, before touching anything.
- /readyz turns 503 (with the documented reason) when the interface goes down, and when the
  advert socket fails (nftables drops our adverts on output: the kernel refuses the send), and
  200 again after; /healthz stays 200 then.
- /healthz (and /readyz) turn 503 when the event loop is blocked — here on a write to a stderr
  pipe nobody reads, a real way for a daemon to hang — and 200 again once it is drained.

The endpoints are read from inside each namespace (a thread that setns()es into it), since
nothing of the lab is reachable from the host. Every wait has a bound derived from the
protocol (Master_Down_Interval, the scrape interval, HEALTHZ_MAX_AGE) plus a wide margin.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.netns import waiting
from tests.prereq import missing
from vipd.endpoint import server as httpd
from vipd.lab import faults
from vipd.lab.daemons import Daemon, HealthSpec, VipdDaemon, VrrpSpec, make_daemon
from vipd.lab.nsthread import in_netns
from vipd.lab.responder import Responder
from vipd.lab.topology import CLIENT4, VIP4, Lab, python_argv, python_env

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests" / "monitoring" / "vipd-rules.yaml"
DASHBOARD = ROOT / "manifests" / "monitoring" / "vipd-dashboard.json"
PORT = 2112
SCRAPE_INTERVAL = 0.5  # seconds; Prometheus accepts sub-second intervals


# Each poll here is costly (an HTTP request, a log read, podman): not every 10 ms.
wait_for = functools.partial(waiting.wait_for, step=0.05)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(ns: str, url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body) of GET ``url`` from inside ``ns``; (0, error) when nothing answers."""

    def get() -> tuple[int, str]:
        try:
            with _OPENER.open(url, timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            return 0, str(exc)

    return in_netns(ns, get)


def node_get(lab: Lab, name: str, path: str) -> tuple[int, str]:
    return http_get(lab.node(name).ns, f"http://127.0.0.1:{PORT}{path}")


def sample(text: str, name: str, labels: str = "") -> float | None:
    """The value of ``name{labels}`` in a text exposition, or None."""
    want = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        if key == want:
            return float(value)
    return None


class Cluster:
    def __init__(self, lab: Lab, spec: VrrpSpec) -> None:
        self.lab = lab
        self.spec = spec
        self.daemons: dict[str, Daemon] = {
            n.name: make_daemon("vipd", lab, n, spec) for n in lab.nodes
        }

    def start(self) -> None:
        for d in self.daemons.values():
            d.start()

    def holders(self) -> list[str]:
        return self.lab.holders(self.spec.vip)

    def converge(self, expected: str, timeout: float) -> None:
        ok = wait_for(lambda: self.holders() == [expected], timeout)
        assert ok, f"VIP on {self.holders()}, expected only {expected}\n{self.logs()}"

    def ready(self, name: str) -> bool:
        return node_get(self.lab, name, "/readyz")[0] == 200

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{d.log_tail(12)}" for n, d in sorted(self.daemons.items()))

    def mdi(self, priority: int) -> float:
        return self.spec.master_down_interval(priority)


@pytest.fixture
def cluster(make_lab: Callable[..., Lab]) -> Iterator[Cluster]:
    lab = make_lab(3)
    c = Cluster(lab, VrrpSpec(vip=VIP4, advert_interval=0.1))
    c.start()
    try:
        c.converge("n1", timeout=c.mdi(200) + 10.0)
        assert wait_for(lambda: all(c.ready(n) for n in c.daemons), 10.0), c.logs()
        yield c
    finally:
        for d in c.daemons.values():
            d.stop(signal.SIGTERM, timeout=None)
        for d in c.daemons.values():
            d.stop(signal.SIGTERM, timeout=10.0)


# -- Prometheus ------------------------------------------------------------------------------


class Prometheus:
    """Debian's prometheus in the lab's client namespace, scraping every node's :2112."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.dir = lab.workdir / "prometheus"
        self.dir.mkdir()
        self.listen = f"{CLIENT4}:9090"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "prometheus.log"

    def start(self) -> None:
        binary = shutil.which("prometheus")
        assert binary is not None
        conf = {
            "global": {
                "scrape_interval": f"{int(SCRAPE_INTERVAL * 1000)}ms",
                "scrape_timeout": f"{int(SCRAPE_INTERVAL * 800)}ms",
                "evaluation_interval": f"{int(SCRAPE_INTERVAL * 1000)}ms",
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "vipd",
                    "static_configs": [{"targets": [f"{n.ipv4}:{PORT}" for n in self.lab.nodes]}],
                }
            ],
        }
        path = self.dir / "prometheus.yml"
        path.write_text(yaml.safe_dump(conf))
        check = subprocess.run(
            ["promtool", "check", "config", str(path)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        with self.log.open("wb") as log:
            self.proc = self.lab.spawn(
                self.lab.client_ns,
                [
                    binary,
                    f"--config.file={path}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address={self.listen}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def api(self, path: str, **params: str) -> tuple[int, dict[str, Any]]:
        url = f"http://{self.listen}/api/v1/{path}?" + urllib.parse.urlencode(params)
        code, body = http_get(self.lab.client_ns, url)
        try:
            doc: dict[str, Any] = json.loads(body)
        except ValueError:
            doc = {"status": "error", "error": body}
        return code, doc

    def query(self, expr: str) -> list[dict[str, Any]]:
        code, doc = self.api("query", query=expr)
        if code != 200:
            return []
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def instances(self, expr: str) -> set[str]:
        return {r["metric"].get("instance", "") for r in self.query(expr)}


def run_in(ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m vipd ARGS`` inside ``ns``, this checkout first on the path."""
    return subprocess.run(
        ["ip", "netns", "exec", ns, *python_argv("vipd", *args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=python_env(),
    )


def addr(lab: Lab, name: str) -> str:
    return f"{lab.node(name).ipv4}:{PORT}"


def test_prometheus_sees_one_leader_then_the_next_after_a_failover(cluster: Cluster) -> None:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        missing("needs prometheus and promtool (apt-get install prometheus; scripts/setup)")
    lab = cluster.lab
    prom = Prometheus(lab)
    prom.start()
    try:
        every = {addr(lab, n) for n in cluster.daemons}
        # Every target scraped, and exactly one leader: n1 (priority 200).
        assert wait_for(lambda: prom.instances("up == 1") == every, 60, step=0.25), (
            prom.query("up"),
            prom.log.read_text()[-2000:],
        )
        leader = 'vipd_role{backend="vrrp",role="leader"} == 1'
        assert wait_for(lambda: prom.instances(leader) == {addr(lab, "n1")}, 30, step=0.25), (
            prom.query('vipd_role{role="leader"}')
        )
        assert prom.instances('vipd_role{role="follower"} == 1') == {
            addr(lab, "n2"),
            addr(lab, "n3"),
        }
        (bound,) = prom.query("sum by (vip) (vipd_vip_bound)")
        assert bound["metric"]["vip"] == VIP4 and float(bound["value"][1]) == 1
        names = prom.query('vipd_node_info{node="n1"}')
        assert [r["metric"]["instance"] for r in names] == [addr(lab, "n1")]
        check_dashboard_and_rules(prom)

        # The leader dies (link down, SIGKILL): n2 (priority 150) takes over.
        n2 = addr(lab, "n2")
        before = node_get(lab, "n2", "/metrics")[1]
        faults.kill(lab, faults.NodeRig(lab.node("n1"), cluster.daemons["n1"]))
        # n1's copy of the VIP stays on its dead link if it died before seeing the link go down.
        moved = wait_for(lambda: lab.wire_holders(VIP4) == ["n2"], cluster.mdi(150) + 10.0)
        assert moved is not None, f"VIP on {cluster.holders()}\n{cluster.logs()}"
        assert wait_for(lambda: prom.instances(leader) == {n2}, 30, step=0.25), (
            prom.query('vipd_role{role="leader"}'),
            prom.query("up"),
        )
        assert prom.instances("up == 0") == {addr(lab, "n1")}
        took = prom.query('vipd_role_transitions_total{role="leader",reason="master-down"} > 0')
        assert n2 in {r["metric"]["instance"] for r in took}
        # One more takeover observed on n2: its actuation, and the time since the dead
        # master's last advert, which is n2's Master_Down_Interval (plus scheduling).
        after = node_get(lab, "n2", "/metrics")[1]

        def delta(name: str, labels: str = "") -> float:
            return (sample(after, name, labels) or 0) - (sample(before, name, labels) or 0)

        assert delta("vipd_takeover_duration_seconds_count", 'stage="announced"') == 1
        assert delta("vipd_takeover_since_last_advert_seconds_count") == 1
        since = delta("vipd_takeover_since_last_advert_seconds_sum")
        assert cluster.mdi(150) - 0.01 <= since <= cluster.mdi(150) + 1.0, since
        announced = prom.query(f'vipd_takeover_duration_seconds_count{{instance="{n2}"}}')
        assert announced and all(float(r["value"][1]) >= 1 for r in announced)
        # The rules see it too: n1's target is down (VipdDown pending, it needs 1 minute),
        # and neither VIP alert is pending or firing: one node holds the VIP throughout.
        n1 = addr(lab, "n1")
        down = 'ALERTS{alertname="VipdDown"}'
        assert wait_for(lambda: prom.instances(down) == {n1}, 30, step=0.25), prom.query("ALERTS")
        vip_alerts = 'ALERTS{alertname=~"VipdNoNodeHoldsVip|VipdVipOnSeveralNodes"}'
        assert prom.query(vip_alerts) == []
    finally:
        prom.stop()


def check_dashboard_and_rules(prom: Prometheus) -> None:
    """Every dashboard query runs on the real Prometheus (the VRRP ones return data), and
    every alert rule loaded and evaluates without error."""
    dash = json.loads(DASHBOARD.read_text())
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$vip", ".*")
            code, doc = prom.api("query", query=expr)
            assert code == 200 and doc["status"] == "success", (panel["title"], expr, doc)
            # Features this cluster does not run, and rates that need two scrapes, may be
            # empty; every other panel shows this cluster's data.
            optional = ("lease", "health", "ipvs", "rate(", "increase(")
            core = not any(word in expr for word in optional)
            if core:
                assert doc["data"]["result"], (panel["title"], expr)
    expected = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}

    def rules_ok() -> bool:
        code, doc = prom.api("rules")
        if code != 200:
            return False
        rules = [r for g in doc["data"]["groups"] for r in g["rules"]]
        healthy = {r["name"] for r in rules if r["health"] == "ok"}
        return healthy == expected

    assert wait_for(rules_ok, 20, step=0.25), prom.api("rules")


# -- promtool on the real exposition ---------------------------------------------------------


def test_promtool_check_metrics_on_live_nodes(cluster: Cluster) -> None:
    if shutil.which("promtool") is None:
        missing("needs promtool (apt-get install prometheus; scripts/setup does it)")
    for name in ("n1", "n2"):  # the leader and a follower, both after takeovers
        code, text = node_get(cluster.lab, name, "/metrics")
        assert code == 200
        assert sample(text, "vipd_vip_bound", f'vip="{VIP4}"') == (1 if name == "n1" else 0)
        out = subprocess.run(
            ["promtool", "check", "metrics"], input=text.encode(), capture_output=True
        )
        assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), (
            name,
            out,
        )


# -- the port is the per-node lock -----------------------------------------------------------


def test_a_second_vipd_on_a_node_exits_3_and_touches_nothing(cluster: Cluster) -> None:
    lab = cluster.lab
    first = cluster.daemons["n1"]
    assert isinstance(first, VipdDaemon)
    before = node_get(lab, "n1", "/metrics")[1]
    out = run_in(lab.node("n1").ns, "run", "--config", str(first.config_path))
    assert out.returncode == httpd.EXIT_LISTEN == 3, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line == (
        f"vipd: cannot listen on 0.0.0.0:{PORT} (metrics.listen): Address already in use "
        "(is another vipd running on this node?)"
    )
    # The first one carries on, untouched: still the one holder, no transition, no resync.
    assert cluster.holders() == ["n1"] and first.running()
    after = node_get(lab, "n1", "/metrics")[1]
    for name, labels in [
        ("vipd_role_transitions_total", 'backend="vrrp",reason="master-down",role="leader"'),
        ("vipd_vip_changes_total", 'op="remove"'),
        ("vipd_vip_repairs_total", ""),
    ]:
        assert sample(after, name, labels) == sample(before, name, labels), name
    status = run_in(lab.node("n1").ns, "status")
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("role ") and "leader (vrrp active" in status.stdout


# -- /readyz ---------------------------------------------------------------------------------


def test_readyz_follows_the_interface(cluster: Cluster) -> None:
    lab = cluster.lab
    node = lab.node("n3")
    lab.set_link(node, False)
    assert wait_for(lambda: node_get(lab, "n3", "/readyz")[0] == 503, 10), cluster.logs()
    assert node_get(lab, "n3", "/readyz") == (503, "interface eth0 is down: not in the election\n")
    assert node_get(lab, "n3", "/healthz") == (200, "ok\n")
    text = node_get(lab, "n3", "/metrics")[1]
    assert sample(text, "vipd_ready") == 0
    assert sample(text, "vipd_interface_up", 'interface="eth0"') == 0
    assert sample(text, "vipd_role", f'backend="vrrp",role="init",vip="{cluster.spec.vip}"') == 1
    lab.set_link(node, True)
    assert wait_for(lambda: cluster.ready("n3"), 10), cluster.logs()
    text = node_get(lab, "n3", "/metrics")[1]
    assert (
        sample(text, "vipd_role", f'backend="vrrp",role="follower",vip="{cluster.spec.vip}"') == 1
    )


def test_readyz_when_adverts_cannot_be_sent(cluster: Cluster) -> None:
    """nftables drops the leader's own adverts on output: the kernel refuses every send
    (EPERM), the followers stop hearing it, n2 takes over, and n1 — which still hears n2 —
    reports both the failing socket and a node claiming the VIP it holds."""
    lab = cluster.lab
    ns = lab.node("n1").ns
    vip = f'vip="{cluster.spec.vip}"'
    table = "vipd_test_out"
    lab.exec(
        ns,
        ["nft", f"add table inet {table}; add chain inet {table} out "
         "{ type filter hook output priority 0; }; "
         f"add rule inet {table} out meta l4proto 112 counter drop"],
    )  # fmt: skip
    try:
        assert wait_for(lambda: node_get(lab, "n1", "/readyz")[0] == 503, 10), cluster.logs()
        code, body = node_get(lab, "n1", "/readyz")
        assert code == 503 and body.startswith("adverts cannot be sent: "), body
        assert "Operation not permitted" in body, body
        assert node_get(lab, "n1", "/healthz") == (200, "ok\n")
        # n2 no longer hears n1, takes over; n1 hears n2 while holding the VIP.
        assert wait_for(
            lambda: (
                sample(node_get(lab, "n1", "/metrics")[1], "vipd_vip_duplicate_claim", vip) == 1
            ),
            cluster.mdi(150) + 10,
        ), cluster.logs()
        text = node_get(lab, "n1", "/metrics")[1]
        assert (sample(text, "vipd_vrrp_advert_send_errors_total") or 0) > 0
        assert (sample(text, "vipd_vip_duplicate_claims_total", 'source="vrrp"') or 0) >= 1
        # /status is republished every heartbeat (0.5 s): it shows the same within a few.
        assert wait_for(lambda: json.loads(node_get(lab, "n1", "/status")[1])["duplicate_claim"], 5)
        doc = json.loads(node_get(lab, "n1", "/status")[1])
        assert doc["ready"] is False and doc["role"] == "leader", doc
    finally:
        lab.exec(ns, ["nft", f"delete table inet {table}"], check=False)
    # Adverts go out again: ready, and one leader (n1 preempts n2 back).
    assert wait_for(lambda: cluster.ready("n1"), 10), cluster.logs()
    cluster.converge("n1", timeout=10)
    assert wait_for(
        lambda: sample(node_get(lab, "n1", "/metrics")[1], "vipd_vip_duplicate_claim", vip) == 0,
        10,
    )


# -- /healthz --------------------------------------------------------------------------------


class StderrPipe:
    """A pipe for a daemon's stderr that the test drains, and can stop draining and fill,
    so the daemon's next log write blocks its event loop."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.lines: list[bytes] = []
        self._draining = threading.Event()
        self._draining.set()
        self._paused = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._done:
            if not self._draining.is_set():
                self._paused.set()
                self._draining.wait()
                self._paused.clear()
                continue
            ready, _, _ = select.select([self.read_fd], [], [], 0.05)
            if ready:
                data = os.read(self.read_fd, 65536)
                if not data:
                    return
                self.lines.extend(data.splitlines())

    def stall(self) -> int:
        """Stop draining and fill the pipe; returns the bytes written to fill it."""
        self._draining.clear()
        assert self._paused.wait(5)
        # A second open file description of the write end, non-blocking for us only.
        fd = os.open(f"/proc/self/fd/{self.write_fd}", os.O_WRONLY | os.O_NONBLOCK)
        filled = 0
        try:
            while True:
                try:
                    filled += os.write(fd, b"#" * 4096)
                except BlockingIOError:
                    with contextlib.suppress(BlockingIOError):
                        while True:  # the last partial page
                            filled += os.write(fd, b"#")
                    return filled
        finally:
            os.close(fd)

    def resume(self) -> None:
        self._draining.set()

    def close(self) -> None:
        self._done = True
        self._draining.set()
        self._thread.join(5)
        os.close(self.read_fd)
        with contextlib.suppress(OSError):
            os.close(self.write_fd)


def test_healthz_when_the_event_loop_blocks_on_a_stalled_log_pipe(cluster: Cluster) -> None:
    lab = cluster.lab
    node = lab.node("n3")
    old = cluster.daemons["n3"]
    assert isinstance(old, VipdDaemon)
    old.stop(signal.SIGTERM, timeout=10.0)
    pipe = StderrPipe()
    proc = lab.spawn(
        node.ns,
        python_argv("vipd", "run", "--config", str(old.config_path)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=pipe.write_fd,
        env=python_env({"NODE_NAME": "n3"}),
    )
    try:
        assert wait_for(lambda: cluster.ready("n3"), 15), b"\n".join(pipe.lines).decode()
        assert node_get(lab, "n3", "/healthz") == (200, "ok\n")
        filled = pipe.stall()
        assert filled > 0
        # The next log line blocks the loop: the link going down is logged at once.
        lab.set_link(node, False)
        bound = httpd.HEALTHZ_MAX_AGE + 10
        assert wait_for(lambda: node_get(lab, "n3", "/healthz")[0] == 503, bound)
        code, body = node_get(lab, "n3", "/healthz")
        assert code == 503 and body.startswith("event loop blocked: last heartbeat "), body
        age = float(body.split("heartbeat ")[1].split(" s ago")[0])
        assert age > httpd.HEALTHZ_MAX_AGE
        code, body = node_get(lab, "n3", "/readyz")
        assert code == 503 and body.startswith("event loop blocked"), body
        text = node_get(lab, "n3", "/metrics")[1]
        assert (sample(text, "vipd_event_loop_heartbeat_age_seconds") or 0) > age
        # The log is read again: the loop runs on, logs, beats.
        pipe.resume()
        assert wait_for(lambda: node_get(lab, "n3", "/healthz") == (200, "ok\n"), 15)
        assert any(b"interface is down" in line for line in pipe.lines)
        lab.set_link(node, True)
        assert wait_for(lambda: cluster.ready("n3"), 15), b"\n".join(pipe.lines[-20:]).decode()
    finally:
        pipe.resume()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        pipe.close()


# -- health metrics and `vipd status` backends -----------------------------------------------


def test_health_metrics_and_status_follow_the_local_api_server(
    make_lab: Callable[..., Lab],
) -> None:
    """Health checks on (the lab's HTTPS stand-in API server on each node): the gauge, the
    check counters and `vipd status` show the local API server healthy, then unhealthy when
    it answers 500 (and the VIP moves, as health gating says), then healthy again."""
    lab = make_lab(2)
    health = HealthSpec(port=6444, interval=0.2, timeout=0.15, rise=2, fall=2)
    spec = VrrpSpec(vip=VIP4, advert_interval=0.1, health=health)
    api = {n.name: Responder(lab, n, 6443, health.port) for n in lab.nodes}
    daemons = {n.name: make_daemon("vipd", lab, n, spec) for n in lab.nodes}
    for r in api.values():
        r.start()
    for d in daemons.values():
        d.start()
    labels = 'local="true",target="127.0.0.1"'

    def gauge(name: str) -> float | None:
        return sample(node_get(lab, name, "/metrics")[1], "vipd_health_backend_healthy", labels)

    try:
        assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 15), lab.holders(VIP4)
        assert wait_for(lambda: gauge("n1") == 1 and gauge("n2") == 1, 10)
        text = node_get(lab, "n1", "/metrics")[1]
        ok = sample(text, "vipd_health_checks_total", 'result="ok",target="127.0.0.1"') or 0
        assert ok >= health.rise
        assert (sample(text, "vipd_health_check_duration_seconds_count", 'target="127.0.0.1"')
                or 0) >= ok  # fmt: skip
        out = run_in(lab.node("n1").ns, "status")
        assert re.search(
            r"^backends +local 127\.0\.0\.1 healthy \(HTTP 200\)$", out.stdout, re.M
        ), out.stdout
        doc = json.loads(node_get(lab, "n1", "/status")[1])
        (backend,) = doc["backends"]
        assert backend["address"] == "127.0.0.1" and backend["healthy"] is True

        api["n1"].set_health("fail")  # HTTP 500 from n1's API server
        assert wait_for(lambda: gauge("n1") == 0, health.detection_bound() + 5)
        text = node_get(lab, "n1", "/metrics")[1]
        assert (sample(text, "vipd_health_checks_total", 'result="fail",target="127.0.0.1"')
                or 0) >= health.fall  # fmt: skip
        assert wait_for(lambda: lab.holders(VIP4) == ["n2"], 10), lab.holders(VIP4)
        assert wait_for(
            lambda: not json.loads(node_get(lab, "n1", "/status")[1])["backends"][0]["healthy"],
            5,
        )
        out = run_in(lab.node("n1").ns, "status")
        assert re.search(
            r"^backends +local 127\.0\.0\.1 UNHEALTHY \(http status 500\)$", out.stdout, re.M
        ), out.stdout

        api["n1"].set_health("ok")
        assert wait_for(lambda: gauge("n1") == 1, health.detection_bound() + 5)
        assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 10), lab.holders(VIP4)
    finally:
        for d in daemons.values():
            d.stop(signal.SIGTERM, timeout=10.0)


# -- structured logs -------------------------------------------------------------------------


def test_json_logs_say_why_with_the_numbers_and_match_the_metrics(
    make_lab: Callable[..., Lab],
) -> None:
    """Two nodes log JSON (VIPD_LOG_FORMAT=json); the leader dies. The takeover's lines carry
    the reason and the numbers behind it, and the transitions they log are the ones counted
    in vipd_role_transitions_total."""
    lab = make_lab(2)
    # 0.3 s adverts: a Master_Down_Interval of ~1 s, so a loaded machine's scheduling stalls
    # do not make n2 take over early and add a transition the test does not expect.
    spec = VrrpSpec(vip=VIP4, advert_interval=0.3)
    daemons = {n.name: make_daemon("vipd", lab, n, spec) for n in lab.nodes}
    for name, d in daemons.items():
        env = python_env({"NODE_NAME": name, "VIPD_LOG_FORMAT": "json"})
        d._env = lambda env=env: env  # type: ignore[method-assign,misc]
        d.start()
    try:
        assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 15), lab.holders(VIP4)
        assert wait_for(lambda: node_get(lab, "n2", "/readyz")[0] == 200, 10)

        def received() -> float:
            text = node_get(lab, "n2", "/metrics")[1]
            return sample(text, "vipd_vrrp_adverts_received_total") or 0

        # n2 follows n1 for a few adverts (not just the one that preempted it at start).
        start = received()
        assert wait_for(lambda: received() >= start + 3, 10)
        before = node_get(lab, "n2", "/metrics")[1]
        faults.kill(lab, faults.NodeRig(lab.node("n1"), daemons["n1"]))
        # As above: n1's copy may stay on its dead link.
        mdi = spec.master_down_interval(150)
        assert wait_for(lambda: lab.wire_holders(VIP4) == ["n2"], mdi + 10), lab.holders(VIP4)
        leading = f'backend="vrrp",role="leader",vip="{VIP4}"'
        assert wait_for(
            lambda: sample(node_get(lab, "n2", "/metrics")[1], "vipd_role", leading) == 1, 5
        )
        after = node_get(lab, "n2", "/metrics")[1]
        log = daemons["n2"].log_text()
        events = []
        for line in log.splitlines():
            if not line.startswith("==="):  # the lab's start header
                try:
                    events.append(json.loads(line))  # every line is one JSON object
                except ValueError:
                    pytest.fail(f"not a JSON log line: {line!r}")
        assert all({"ts", "level", "msg"} <= set(e) for e in events)
        takeovers = [
            e
            for e in events
            if e["msg"] == "became active" and e["reason"].startswith("master-down")
        ]
        last = takeovers[-1]
        n1_addr = lab.node("n1").ipv4
        assert last["reason"].startswith(f"master-down: last advert from {n1_addr} (prio 200"), log
        assert "MDI" in last["reason"] and "skew" in last["reason"]
        assert last["priority"] == 150 and last["master_priority"] == 150
        assert last["master"] == lab.node("n2").ipv4
        assert last["master_adver_interval_s"] == 0.3
        assert last["master_down_interval_s"] == pytest.approx(spec.master_down_interval(150))
        bound = [e for e in events if e["msg"] == "VIP bound and announced"][-1]
        assert bound["decision_to_bound_ms"] >= 0 and bound["decision_to_garp_ms"] >= 0
        # Every logged master-down takeover is counted, and only those.
        key = 'backend="vrrp",reason="master-down",role="leader"'
        counted = sample(after, "vipd_role_transitions_total", key)
        assert counted == len(takeovers), log
        assert counted - (sample(before, "vipd_role_transitions_total", key) or 0) == 1, log
    finally:
        for d in daemons.values():
            d.stop(signal.SIGTERM, timeout=10.0)
