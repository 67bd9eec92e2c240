"""Routing-table mode against a real FRR 8.4 fabric: the route actuator on the nodes, judged
by what the router's RIB and FIB hold and what a client behind the router can reach.

The bed (`vipd.lab.routed.RoutedBed`: one router, three nodes, one client, FRR everywhere) is
built once for the module; every test starts from every node withdrawn (`converge({})`) and
the router without the VIP. Listeners run in the nodes' namespaces (sockets made there through
pyroute2), bound to the wildcard address, so they answer on the VIP exactly when the node's
AnyIP binding is in place; each answers with its node's name, so the client sees which node
took each connection. Times are printed (run with ``-s``): they are measurements, not bounds.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from ipaddress import ip_address

import pytest

from tests.prereq import missing
from vipd.health.tracker import BackendHealth
from vipd.lab.routed import RoutedBed, RoutedNode, frr_problem
from vipd.lab.topology import python_env
from vipd.routed.actuator import RouteActuator
from vipd.routed.core import Inputs, State, advance
from vipd.routed.plan import DelBinding, DelRoute, Phase, host_network

PORT = 6443
FLAPPED = (
    "a BFD or BGP session of the fabric went down during the test (a node's daemons starved "
    "on a loaded machine?): what the router forwarded then says nothing about vipd; re-run"
)
VIP = ip_address("10.79.0.100")


def _socket_in(ns: str, kind: int = socket.SOCK_STREAM) -> socket.socket:
    from pyroute2 import netns as pr_netns

    sock: socket.socket = pr_netns.create_socket(ns, socket.AF_INET, kind)
    return sock


class Listener:
    """A TCP server in a node's namespace that answers every connection with the node's name."""

    def __init__(self, node: RoutedNode) -> None:
        self.sock = _socket_in(node.ns)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", PORT))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.name = node.name.encode()
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with contextlib.suppress(OSError), conn:
                conn.sendall(self.name)

    def close(self) -> None:
        self.stopping = True
        self.thread.join(timeout=2)
        self.sock.close()


def connect(bed: RoutedBed, timeout: float = 1.0) -> str:
    """One connection from the client to VIP:PORT; the answering node's name, or the error."""
    sock = _socket_in(bed.client)
    sock.settimeout(timeout)
    try:
        sock.connect((str(VIP), PORT))
        return sock.recv(16).decode() or "empty"
    except OSError as exc:
        return f"error:{type(exc).__name__}:{exc.errno}"
    finally:
        sock.close()


_CLIENT_LOOP = """
import json, socket, sys, time
vip, port, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
out = []
end = time.monotonic() + duration
while time.monotonic() < end:
    t = time.monotonic()
    s = socket.socket()
    s.settimeout(1.0)
    try:
        s.connect((vip, port))
        out.append((t, s.recv(16).decode() or "empty"))
    except OSError as exc:
        out.append((t, "error:%s:%s" % (type(exc).__name__, exc.errno)))
    finally:
        s.close()
print(json.dumps(out))
"""


class ClientLoop:
    """A process in the client's namespace that connects to the VIP without pause for
    ``duration`` seconds; `results` is every answer with its CLOCK_MONOTONIC time (the clock
    is the machine's, so it compares with this process's ``time.monotonic()``)."""

    def __init__(self, bed: RoutedBed, duration: float) -> None:
        argv = [sys.executable, "-c", _CLIENT_LOOP, str(VIP), str(PORT), str(duration)]
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", bed.client, *argv], stdout=subprocess.PIPE, text=True
        )

    def results(self) -> list[tuple[float, str]]:
        out, _ = self.proc.communicate(timeout=30)
        return [(float(t), str(r)) for t, r in json.loads(out)]


def black_holed(results: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """Connections that got no answer: a timeout, or an ICMP error (unreachable, or a TTL
    that ran out in a loop between router and node). A reset is not one of them: it is the
    answer of a node that never saw the connection, which ECMP gives a connection whose
    handshake straddles the moment its path leaves (the router rehashes it onto another
    node), whatever the order on the node."""
    return [r for r in results if r[1].startswith("error:") and "ConnectionResetError" not in r[1]]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 10.0) -> float:
    """Poll ``check`` until true; the time it took (fails the test after ``timeout``)."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.005)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def bed(netns_ok: None) -> Iterator[RoutedBed]:
    problem = frr_problem()
    if problem is not None:
        missing(problem)
    start = time.monotonic()
    with RoutedBed(nodes=3) as built:
        print(f"\nrouted bed up in {time.monotonic() - start:.1f} s")
        yield built


@pytest.fixture
def acts(bed: RoutedBed) -> Iterator[dict[str, RouteActuator]]:
    """One actuator per node, everything withdrawn before and after the test."""
    made = {n.name: RouteActuator(netns=n.ns) for n in bed.nodes}
    for act in made.values():
        act.converge({})
    wait_for("the router forgets the VIP", lambda: not bed.kernel_nexthops())
    flaps = bed.flaps()
    try:
        yield made
    finally:
        for act in made.values():
            act.converge({})
            act.close()
    assert bed.flaps() == flaps, FLAPPED


@pytest.fixture
def listeners(bed: RoutedBed) -> Iterator[dict[str, Listener]]:
    made = {n.name: Listener(n) for n in bed.nodes}
    try:
        yield made
    finally:
        for lst in made.values():
            lst.close()


def local_routes(bed: RoutedBed, node: RoutedNode) -> str:
    return bed.exec(node.ns, ["ip", "route", "show", "table", "local", str(VIP)]).stdout


def lo_addresses(bed: RoutedBed, node: RoutedNode) -> str:
    return bed.exec(node.ns, ["ip", "-4", "addr", "show", "dev", "lo"]).stdout


def test_an_address_on_lo_is_not_announced_but_the_anyip_binding_is(
    bed: RoutedBed, acts: dict[str, RouteActuator]
) -> None:
    """Why the actuator binds with an AnyIP route: with the VIP as an address on lo, zebra
    selects the connected route over table 198's and FRR 8.4 announces nothing."""
    n1 = bed.node("n1")
    bed.exec(n1.ns, ["ip", "addr", "add", f"{VIP}/32", "dev", "lo"])
    try:
        # The announcement by hand: the actuator's AnyIP binding would replace the kernel's own
        # local route of the address.
        route = ["ip", "route", "replace", f"{VIP}/32", "dev", "lo", "table", "198", "proto", "248"]
        bed.exec(n1.ns, route)
        show = ["-c", f"show ip route {VIP}/32"]
        wait_for("zebra imports table 198", lambda: "table[198]" in bed.vtysh(n1.ns, *show))
        assert "connected" in bed.vtysh(n1.ns, *show)
        time.sleep(1.0)  # the AnyIP case below reaches the router in well under this
        assert bed.router_nexthops() == set(), bed.vtysh(n1.ns, "-c", f"show ip route {VIP}/32")
    finally:
        bed.exec(n1.ns, ["ip", "addr", "del", f"{VIP}/32", "dev", "lo"])
    acts["n1"].converge({VIP: Phase.ANNOUNCED})
    took = wait_for("the router learns the VIP", lambda: bed.router_nexthops() == {n1.addr})
    print(f"\nAnyIP binding: announced to the router in {took:.3f} s")


def test_one_node_announces_and_the_client_reaches_its_listener(
    bed: RoutedBed, acts: dict[str, RouteActuator], listeners: dict[str, Listener]
) -> None:
    n2 = bed.node("n2")
    assert connect(bed).startswith("error:")  # nothing announced: nothing answers
    start = time.monotonic()
    assert acts["n2"].converge({VIP: Phase.ANNOUNCED})
    took = wait_for(
        "the router's RIB has the VIP via n2", lambda: bed.router_nexthops() == {n2.addr}
    )
    print(f"\nannounce: in the router's RIB {took:.3f} s after the table route")
    wait_for("the router's FIB has it", lambda: bed.kernel_nexthops() == {n2.addr})
    bgp = bed.show(bed.router, f"show bgp ipv4 unicast {VIP}/32 json")
    assert [p["peer"]["peerId"] for p in bgp["paths"]] == [n2.addr], bgp
    print(f"announce: in the router's FIB {time.monotonic() - start:.3f} s after it")
    answers = {connect(bed) for _ in range(10)}
    assert answers == {"n2"}
    assert acts["n2"].converge({VIP: Phase.ANNOUNCED}) == []  # idempotent


def test_three_nodes_make_three_paths_and_a_withdraw_removes_one(
    bed: RoutedBed, acts: dict[str, RouteActuator], listeners: dict[str, Listener]
) -> None:
    everyone = {n.addr for n in bed.nodes}
    for act in acts.values():
        act.converge({VIP: Phase.ANNOUNCED})
    wait_for("three next hops in the RIB", lambda: bed.router_nexthops() == everyone)
    wait_for("three next hops in the FIB", lambda: bed.kernel_nexthops() == everyone)
    seen = {connect(bed) for _ in range(60)}
    assert seen == {"n1", "n2", "n3"}  # L4 hashing spreads the client's connections

    n3 = bed.node("n3")
    rest = everyone - {n3.addr}
    start = time.monotonic()
    acts["n3"].converge({VIP: Phase.DRAINING})  # the table route goes, the binding stays
    left = wait_for("n3 leaves the router's FIB", lambda: bed.kernel_nexthops() == rest)
    print(f"\nwithdraw: n3 out of the router's FIB {left:.3f} s after its table route went")
    assert bed.router_nexthops() == rest
    assert str(VIP) in local_routes(bed, n3)  # still answering during the drain
    assert {connect(bed) for _ in range(40)} == {"n1", "n2"}
    assert time.monotonic() - start < 30  # sanity: the loop above ended


def test_the_stop_order_black_holes_no_connection(
    bed: RoutedBed, acts: dict[str, RouteActuator], listeners: dict[str, Listener]
) -> None:
    """withdraw_all on n1 while a client connects without pause: the route leaves the router
    before n1's binding goes, and no connection is black-holed (each is answered by n1 or
    n2, except at most one reset: the connection whose handshake the path change split)."""
    n1, n2 = bed.node("n1"), bed.node("n2")
    for name in ("n1", "n2"):
        acts[name].converge({VIP: Phase.ANNOUNCED})
    wait_for("two paths", lambda: bed.kernel_nexthops() == {n1.addr, n2.addr})
    flaps = bed.flaps()

    left: list[float] = []

    def watch_router() -> None:
        wait_for("n1 leaves the router", lambda: bed.kernel_nexthops() == {n2.addr}, 15.0)
        left.append(time.monotonic())

    client = ClientLoop(bed, duration=2.5)
    time.sleep(0.5)
    watcher = threading.Thread(target=watch_router)
    watcher.start()
    withdrawing = time.monotonic()
    acts["n1"].withdraw_all([VIP], drain=1.0)
    unbound = time.monotonic()
    watcher.join()
    results = client.results()
    failed = [r for r in results if r[1] not in ("n1", "n2")]
    lost = black_holed(results)
    assert bed.flaps() == flaps, FLAPPED
    assert left and left[0] < unbound
    # n1 answered while the withdraw travelled: the window the order protects was exercised.
    n1_draining = [r for r in results if withdrawing <= r[0] <= left[0] and r[1] == "n1"]
    print(
        f"\nstop: {len(results)} connections, {len(lost)} black-holed, {len(failed)} failed "
        f"({sorted({r[1] for r in failed})}), {len(n1_draining)} answered "
        f"by n1 after its withdraw began; the route left the router "
        f"{left[0] - withdrawing:.3f} s after the withdraw and {unbound - left[0]:.3f} s "
        "before the binding went"
    )
    assert n1_draining
    assert lost == []
    assert len(failed) <= 1  # the client is serial: one connection at most straddles the change
    assert str(VIP) not in local_routes(bed, n1)
    assert acts["n1"].observe().bound == frozenset()


def test_the_wrong_order_would_black_hole_connections(
    bed: RoutedBed, acts: dict[str, RouteActuator], listeners: dict[str, Listener]
) -> None:
    """The control for the test above: unbinding before withdrawing loses connections, so a
    clean run there is the order's doing and not the client's blindness."""
    n1, n2 = bed.node("n1"), bed.node("n2")
    for name in ("n1", "n2"):
        acts[name].converge({VIP: Phase.ANNOUNCED})
    wait_for("two paths", lambda: bed.kernel_nexthops() == {n1.addr, n2.addr})
    client = ClientLoop(bed, duration=2.0)
    time.sleep(0.5)
    dst = host_network(VIP)
    acts["n1"].apply([DelBinding(dst)])
    time.sleep(0.5)  # a slow fabric: the route is still on the router
    acts["n1"].apply([DelRoute(dst)])
    wait_for("n1 leaves the router", lambda: bed.kernel_nexthops() == {n2.addr})
    results = client.results()
    lost = black_holed(results)
    print(f"\nwrong order: {len(results)} connections, {len(lost)} black-holed: {lost}")
    assert lost


def test_a_fresh_start_cleans_what_a_killed_process_left(
    bed: RoutedBed, acts: dict[str, RouteActuator]
) -> None:
    n1 = bed.node("n1")
    stale = "10.79.0.7"
    foreign = ["ip", "route", "replace", "10.79.9.0/24", "dev", "lo", "table", "198", "proto", "99"]
    bed.exec(n1.ns, foreign)  # someone else's route in the same table: never touched
    script = (
        "import sys, time\n"
        "from ipaddress import ip_address\n"
        "from vipd.routed.actuator import RouteActuator\n"
        "from vipd.routed.plan import Phase\n"
        "act = RouteActuator()\n"
        f"vips = [ip_address('{VIP}'), ip_address('{stale}')]\n"
        "act.converge(dict.fromkeys(vips, Phase.ANNOUNCED))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        ["ip", "netns", "exec", n1.ns, sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.kill()
        proc.wait()
    wait_for(
        "the dead process's route reaches the router", lambda: bed.router_nexthops() == {n1.addr}
    )
    assert len(acts["n1"].observe().announced) == 2

    fresh = RouteActuator(netns=n1.ns)
    try:
        start = time.monotonic()
        ops = fresh.converge({})
        assert len(ops) == 4, ops
        gone = wait_for("the router forgets the VIP", lambda: bed.kernel_nexthops() == set())
        print(f"\nrestart cleanup: the router dropped the stale route {gone:.3f} s after it")
        assert time.monotonic() - start < 30
        assert fresh.converge({}) == []
        table = bed.exec(n1.ns, ["ip", "route", "show", "table", "198"]).stdout
        assert "proto 248" not in table and "10.79.9.0/24" in table, table
        assert "proto 248" not in bed.exec(n1.ns, ["ip", "route", "show", "table", "local"]).stdout
    finally:
        fresh.close()
        bed.exec(n1.ns, ["ip", "route", "del", "10.79.9.0/24", "table", "198", "proto", "99"])


def test_a_clean_stop_leaves_nothing_on_lo(
    bed: RoutedBed, acts: dict[str, RouteActuator], listeners: dict[str, Listener]
) -> None:
    n3 = bed.node("n3")
    acts["n3"].converge({VIP: Phase.ANNOUNCED})
    wait_for("announced", lambda: bed.kernel_nexthops() == {n3.addr})
    assert connect(bed) == "n3"
    acts["n3"].withdraw_all([VIP], drain=0.2)
    assert acts["n3"].observe() == acts["n3"].observe().__class__()
    assert str(VIP) not in local_routes(bed, n3)
    assert str(VIP) not in lo_addresses(bed, n3)
    wait_for("the router forgets the VIP", lambda: bed.kernel_nexthops() == set())
    assert connect(bed).startswith("error:")


def test_the_pool_rule_on_the_fabric(
    bed: RoutedBed, acts: dict[str, RouteActuator], listeners: dict[str, Listener]
) -> None:
    """`vipd.routed.core` driving the actuators of n1 and n2 (health fed in by hand: the
    checker is not part of this test): a node whose API server fails leaves the router while
    its peer serves, and when the peer fails too the peer stays, so the endpoint remains."""
    n1, n2 = bed.node("n1"), bed.node("n2")
    addr = {"n1": ip_address(n1.addr), "n2": ip_address(n2.addr)}
    states = {"n1": State(), "n2": State()}
    ok = {"n1": True, "n2": True}

    def health(name: str, now: float) -> BackendHealth:
        return BackendHealth(healthy=ok[name], since=0.0, checked_at=now)

    def drive() -> None:
        now = time.monotonic()
        for name in ("n1", "n2"):
            other = "n2" if name == "n1" else "n1"
            inputs = Inputs(
                vips=(VIP,),
                local=health(name, now),
                peers={addr[other]: health(other, now)},
                drain=0.5,
            )
            out = advance(now, states[name], inputs)
            states[name] = out.state
            acts[name].converge(out.desired)

    drive()
    wait_for("both announce", lambda: bed.kernel_nexthops() == {n1.addr, n2.addr})
    ok["n1"] = False
    drive()
    assert states["n1"].decision is not None and states["n1"].decision.reason == "unhealthy"
    wait_for("n1 leaves the router", lambda: bed.kernel_nexthops() == {n2.addr})
    time.sleep(0.5)
    drive()  # the drain is over: n1 unbinds
    assert acts["n1"].observe().bound == frozenset()
    ok["n2"] = False
    drive()
    assert states["n2"].decision is not None and states["n2"].decision.reason == "last-resort"
    time.sleep(1.0)  # a withdraw would have left the router by now (0.13 s measured)
    assert bed.kernel_nexthops() == {n2.addr}
    assert {connect(bed) for _ in range(5)} == {"n2"}
    ok["n1"] = True
    drive()  # n1 joins; n2, still unhealthy, sees n1 serving and withdraws
    assert states["n1"].decision is not None and states["n1"].decision.reason == "healthy"
    assert states["n2"].decision is not None and states["n2"].decision.reason == "unhealthy"
    wait_for("n1 takes over from n2", lambda: bed.kernel_nexthops() == {n1.addr})
    assert {connect(bed) for _ in range(5)} == {"n1"}


def test_the_actuator_handles_ipv6_and_touches_only_its_own_routes(netns_ok: None) -> None:
    """No FRR needed: the kernel's tables after converge, in a namespace of its own."""
    ns = "vr" + secrets.token_hex(2) + "-a"
    v6 = ip_address("fd00:79::100")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        other = [
            "ip",
            "-n",
            ns,
            "-6",
            "route",
            "add",
            "fd00:79::7/128",
            "dev",
            "lo",
            "table",
            "198",
        ]
        subprocess.run([*other, "proto", "77"], check=True)
        with RouteActuator(netns=ns) as act:
            assert len(act.converge({VIP: Phase.ANNOUNCED, v6: Phase.ANNOUNCED})) == 4
            assert act.converge({VIP: Phase.ANNOUNCED, v6: Phase.ANNOUNCED}) == []

            def show(*args: str) -> str:
                argv = ["ip", "-n", ns, *args, "route", "show", "table", "all"]
                return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

            v6_routes = show("-6")
            assert "fd00:79::100 dev lo table 198 proto 248" in v6_routes
            assert "local fd00:79::100 dev lo table local proto 248" in v6_routes
            act.withdraw_all([VIP, v6], drain=0.0)
            assert act.observe().announced == frozenset() == act.observe().bound
            assert "fd00:79::100" not in show("-6") and str(VIP) not in show("-4")
            assert "fd00:79::7 dev lo table 198 proto 77" in show("-6")
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
