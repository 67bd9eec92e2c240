"""IPVS in a real kernel (run inside the qemu guest by tests/vm/test_vm.py, one pytest process
per boot): vipd's reconciler + the real HTTPS health checker + pyroute2 against Debian's
ip_vs, with real TCP from a client namespace through the VIP (network: ipvs_net.py).

Proves: a client reaches >= 2 backends through VIP:6443 (NAT with vipd's source NAT); a
backend whose health fails leaves the table and comes back on recovery; the last one is never
removed; the bootstrap backend is added before it is healthy; step-down removes the service
and the NAT table and leaves an unrelated IPVS service alone; a leftover from a crashed run is
removed by the next run's first pass as follower; direct routing programs "Route" servers.
Timing bounds are the protocol's (fall x interval + timeout + one pass) plus a margin for
software emulation on a shared machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.vm.guest.ipvs_net import BACKENDS, PORT, VIP, Director, Net, ipvs_table, sh, wait_for
from vipd.config import Health

# A TLS check under emulation takes 0.3 s on an idle 2-core host and several seconds on a
# loaded one: the timeout must not make healthy backends flap.
INTERVAL, TIMEOUT, RISE, FALL, RESYNC = 3.0, 2.8, 2, 2, 0.5
MARGIN = 30.0  # TCG on two shared cores: seconds of slack, not part of the protocol
LEAVE_BOUND = FALL * INTERVAL + TIMEOUT + INTERVAL + RESYNC + MARGIN
JOIN_BOUND = RISE * INTERVAL + TIMEOUT + INTERVAL + RESYNC + MARGIN
OURS = f"TCP {VIP}:{PORT}"
UNRELATED = "TCP 10.96.0.1:443"
PARAMS = Health(interval=INTERVAL, timeout=TIMEOUT, rise=RISE, fall=FALL)


def servers() -> set[str]:
    return {line.split()[0].split(":")[0] for line in ipvs_table().get(OURS, [])}


def nat_table() -> bool:
    return "vipd_ipvs" in sh("nft", "list", "tables")


@pytest.fixture
def director(net: Net) -> Iterator[Director]:
    for b in net.backends.values():
        b.failing = False
    d = Director(PARAMS)
    yield d
    d.stop()
    assert OURS not in ipvs_table()


def test_bootstrap_adds_the_first_backend_before_it_is_healthy(net: Net) -> None:
    for b in net.backends.values():
        b.failing = True
    d = Director(PARAMS)
    try:
        d.set_leader(True)
        assert wait_for(lambda: servers() == {"10.88.0.11"}, 5 + MARGIN) is not None
        net.backends["b3"].failing = False
        # b3 healthy: it joins, and the bootstrap member (unhealthy) leaves
        assert wait_for(lambda: servers() == {"10.88.0.13"}, JOIN_BOUND) is not None
    finally:
        d.stop()


def test_client_reaches_several_backends_through_the_vip(net: Net, director: Director) -> None:
    assert servers() == set()  # follower: nothing programmed
    director.set_leader(True)
    assert wait_for(lambda: len(servers()) == 3, JOIN_BOUND) is not None
    assert nat_table()
    names = [net.get_name() for _ in range(9)]
    assert len(set(names)) >= 2, names
    assert set(names) <= set(BACKENDS)


def test_failed_backend_leaves_and_rejoins(net: Net, director: Director) -> None:
    director.set_leader(True)
    assert wait_for(lambda: len(servers()) == 3, JOIN_BOUND) is not None
    net.backends["b2"].failing = True
    assert wait_for(lambda: "10.88.0.12" not in servers(), LEAVE_BOUND) is not None
    assert servers() == {"10.88.0.11", "10.88.0.13"}
    assert "b2" not in {net.get_name() for _ in range(6)}
    net.backends["b2"].failing = False
    assert wait_for(lambda: "10.88.0.12" in servers(), JOIN_BOUND) is not None


def test_last_backend_is_never_removed(net: Net, director: Director) -> None:
    director.set_leader(True)
    assert wait_for(lambda: len(servers()) == 3, JOIN_BOUND) is not None
    for b in net.backends.values():
        b.failing = True
    assert wait_for(lambda: len(servers()) == 1, LEAVE_BOUND) is not None
    # and it stays: several fall windows later there is still exactly one real server
    assert wait_for(lambda: len(servers()) != 1, FALL * INTERVAL + 2) is None
    assert net.get_name() in BACKENDS  # the client is still served
    for b in net.backends.values():
        b.failing = False
    assert wait_for(lambda: len(servers()) == 3, JOIN_BOUND) is not None


def test_step_down_removes_service_and_nat_but_not_the_unrelated_service(
    net: Net, director: Director
) -> None:
    director.set_leader(True)
    assert wait_for(lambda: len(servers()) == 3, JOIN_BOUND) is not None
    director.set_leader(False)
    assert wait_for(lambda: OURS not in ipvs_table() and not nat_table(), 5 + MARGIN) is not None
    assert ipvs_table()[UNRELATED] == ["10.88.0.11:6443 Masq"]


def test_leftover_of_a_crashed_run_is_removed_by_the_next_run(net: Net) -> None:
    first = Director(PARAMS)
    first.set_leader(True)
    assert wait_for(lambda: len(servers()) == 3, JOIN_BOUND) is not None
    first.stop(release=False)  # a crash without cleanup (SIGKILL)
    assert len(servers()) == 3 and nat_table()
    second = Director(PARAMS)  # the next run starts as follower
    try:
        assert (
            wait_for(lambda: OURS not in ipvs_table() and not nat_table(), 5 + MARGIN) is not None
        )
    finally:
        second.stop()
    assert UNRELATED in ipvs_table()


def test_direct_routing_programs_route_servers(net: Net) -> None:
    d = Director(PARAMS, forwarding="dr")
    try:
        d.set_leader(True)
        assert wait_for(lambda: len(servers()) == 3, JOIN_BOUND) is not None
        assert {line.split()[1] for line in ipvs_table()[OURS]} == {"Route"}
        assert not nat_table()  # DR needs no source NAT
    finally:
        d.stop()
    assert OURS not in ipvs_table()
