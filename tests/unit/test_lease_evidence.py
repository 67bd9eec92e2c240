"""The Lease backend's evidence for the unreachable-store rule, as the driver gathers it.

What it tests: the failed checks read from a failing kube-apiserver health answer; which
check outcome is which `PeerState` (only a named etcd failure is "not ready": anything else
proves nothing); this node's own addresses never being peers; a peer result that turns
stale; and what the core is told (nothing without a ``health`` section).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface

from vipd import config
from vipd.health.checker import failed_checks
from vipd.health.tracker import Outcome
from vipd.lease.driver import LeaseElection
from vipd.lease.evidence import peer_state
from vipd.lease.feed import self_addresses
from vipd.lease.model import PeerState
from vipd.preflight import HostAddress, HostLink, Preflight

# What kube-apiserver's /readyz answers (status 500) with its store gone: the handler lists
# every check, failed ones as "[-]<name> failed: reason withheld".
READYZ_ETCD_DOWN = (
    b"[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]etcd-readiness ok\n"
    b"[+]informer-sync ok\n[+]poststarthook/start-apiextensions-informers ok\n"
    b"readyz check failed\n"
)
READYZ_SHUTTING_DOWN = b"[+]ping ok\n[+]etcd ok\n[-]shutdown failed: reason withheld\n"


def test_failed_checks_are_read_from_a_failing_answer() -> None:
    assert failed_checks(READYZ_ETCD_DOWN) == ("etcd",)
    assert failed_checks(READYZ_SHUTTING_DOWN) == ("shutdown",)
    assert failed_checks(b"ok") == ()
    assert failed_checks(b"[-]etcd-readiness failed: reason withheld\n") == ("etcd-readiness",)


def test_only_a_named_etcd_failure_is_not_ready() -> None:
    assert peer_state(Outcome(ok=True, status=200)) is PeerState.READY
    etcd = Outcome(ok=False, status=500, error="http status 500", failed_checks=("etcd",))
    assert peer_state(etcd) is PeerState.NOT_READY
    # A 500 for another reason (shutting down, a post-start hook): its store may work.
    other = Outcome(ok=False, status=500, error="http status 500", failed_checks=("shutdown",))
    assert peer_state(other) is PeerState.UNREACHABLE
    assert peer_state(Outcome(ok=False, status=500, error="http status 500")) is (
        PeerState.UNREACHABLE
    )
    assert peer_state(Outcome(ok=False, status=403, error="http status 403")) is (
        PeerState.UNREACHABLE
    )
    assert peer_state(Outcome(ok=False, error="timeout after 0.4 s")) is PeerState.UNREACHABLE


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def election(health: dict[str, object] | None, clock: Clock) -> LeaseElection:
    doc: dict[str, object] = {
        "node": "cp-1",
        "vip": "10.0.0.100",
        "interface": "eth0",
        "election": {"mode": "lease", "lease": {"duration": 5, "renew_deadline": 3,
                                                "retry_period": 1}},
    }  # fmt: skip
    if health is not None:
        doc["health"] = health
    cfg = config.parse(doc)
    addrs = (
        HostAddress(IPv4Interface("10.0.0.11/24")),
        HostAddress(IPv4Interface("10.0.1.11/24")),  # a second address on the interface
    )
    pre = Preflight(
        link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11", addrs),
        source=IPv4Address("10.0.0.11"),
        findings=(),
        stale_vip=False,
    )
    return LeaseElection(cfg, pre, clock=clock, claimwatch=False)


def test_this_nodes_own_addresses_are_never_peers() -> None:
    peers = ["10.0.0.11", "10.0.1.11", "10.0.0.12", "10.0.0.13"]
    e = election({"peers": peers, "interval": 0.5, "timeout": 0.4}, Clock())
    assert [str(a) for a in e.health_peers] == ["10.0.0.12", "10.0.0.13"]
    mine = self_addresses(e.cfg, e.pre)
    assert {"10.0.0.11", "10.0.1.11", "127.0.0.1", "::1", "10.0.0.100"} <= mine
    assert e.elector.params.self_addresses == mine


def test_peer_view_never_checked_and_stale_results_prove_nothing() -> None:
    clock = Clock()
    e = election({"peers": ["10.0.0.12", "10.0.0.13"], "interval": 0.5, "timeout": 0.4}, clock)
    assert e.peer_view(clock()) == {
        "10.0.0.12": PeerState.UNREACHABLE,
        "10.0.0.13": PeerState.UNREACHABLE,
    }
    down = Outcome(ok=False, status=500, failed_checks=("etcd",))
    e.on_check(IPv4Address("10.0.0.12"), down)
    e.on_check(IPv4Address("10.0.0.13"), Outcome(ok=True, status=200))
    e.on_check(IPv4Address("127.0.0.1"), down)  # the local API server: not a peer
    assert e.peer_view(clock()) == {
        "10.0.0.12": PeerState.NOT_READY,
        "10.0.0.13": PeerState.READY,
    }
    clock.now += 1.0
    # No answer (a timeout): the last answer stands until it is stale; never checked: none.
    e.on_check(IPv4Address("10.0.0.12"), Outcome(ok=False, error="timeout after 0.4 s"))
    assert e.peer_view(clock())["10.0.0.12"] is PeerState.NOT_READY
    clock.now += 0.41  # two intervals and a timeout since the last answer
    assert set(e.peer_view(clock()).values()) == {PeerState.UNREACHABLE}
    # An answer that says nothing about etcd replaces it at once.
    e.on_check(IPv4Address("10.0.0.12"), down)
    e.on_check(IPv4Address("10.0.0.12"), Outcome(ok=False, status=403, error="http status 403"))
    assert e.peer_view(clock())["10.0.0.12"] is PeerState.UNREACHABLE


def test_without_a_health_section_nothing_is_observed() -> None:
    e = election(None, Clock())
    assert e.health_peers == []
    e._observe_peers(always=True)  # what run() does at start
    assert e.elector.peers is None  # client-go's rule: no evidence at all
