"""vipd.health's pure parts: rise/fall, the gated priority (and what it does to an election on
the in-memory LAN), the HTTP codec, the ``health`` config section and the TLS context."""

from __future__ import annotations

import ssl
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import Any

import pytest

from tests.unit.lan import Lan
from vipd import track
from vipd.config import ConfigError, Health, parse
from vipd.health import http
from vipd.health.checker import make_ssl_context
from vipd.health.tracker import BackendHealth, Outcome, Tracker
from vipd.vrrp.state import Params, master_down_interval

OK = Outcome(ok=True, status=200, duration=0.01)
SLOW = Outcome(ok=False, error="timeout after 0.8 s", duration=0.8)
E500 = Outcome(ok=False, status=500, error="http status 500", duration=0.01)


def feed(tracker: Tracker, outcomes: list[Outcome], start: float = 0.0) -> list[bool]:
    """One check per second; the health after each."""
    states = []
    for i, o in enumerate(outcomes):
        tracker.record(start + i + 1.0, o)
        states.append(tracker.healthy)
    return states


# -- tracker ---------------------------------------------------------------------------------


def test_a_target_starts_unhealthy_and_rises_after_rise_successes() -> None:
    t = Tracker(rise=2, fall=3, now=5.0)
    assert t.state == BackendHealth(healthy=False, since=5.0)
    assert not t.record(6.0, OK)
    assert not t.healthy
    assert t.record(7.0, OK)  # the second success flips it
    assert t.healthy and t.state.since == 7.0 and t.state.successes == 2


def test_fall_consecutive_failures_make_it_unhealthy() -> None:
    t = Tracker(rise=1, fall=3, now=0.0)
    feed(t, [OK])
    assert feed(t, [E500, E500, E500], start=1.0) == [True, True, False]
    s = t.state
    assert (s.status, s.error, s.failures, s.since) == (500, "http status 500", 3, 4.0)


def test_a_single_slow_answer_does_not_flap() -> None:
    t = Tracker(rise=2, fall=3, now=0.0)
    changes = []
    for i, o in enumerate([OK, OK, SLOW, OK, OK, SLOW, SLOW, OK, OK]):
        if t.record(float(i), o):
            changes.append(i)
    assert changes == [1]  # up once, never down: no run of 3 failures
    assert t.healthy and t.state.checks == 9


def test_a_single_good_answer_among_bad_ones_does_not_rise() -> None:
    t = Tracker(rise=2, fall=2, now=0.0)
    assert feed(t, [OK, E500, OK, SLOW, OK]) == [False] * 5


def test_rise_and_fall_of_one_follow_every_check() -> None:
    t = Tracker(rise=1, fall=1, now=0.0)
    assert feed(t, [OK, E500, OK, SLOW]) == [True, False, True, False]


def test_last_check_details_are_kept_and_since_moves_only_on_change() -> None:
    t = Tracker(rise=1, fall=2, now=0.0)
    t.record(1.0, OK)
    t.record(2.0, SLOW)
    s = t.state
    assert s.healthy and s.since == 1.0
    assert (s.status, s.error, s.duration, s.checked_at) == (None, SLOW.error, 0.8, 2.0)
    t.record(3.0, Outcome(ok=False, duration=0.1))
    assert t.state.error == "failed" and not t.healthy and t.state.since == 3.0


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_thresholds_must_be_positive_integers(bad: Any) -> None:
    with pytest.raises(ValueError):
        Tracker(rise=bad, fall=1, now=0.0)
    with pytest.raises(ValueError):
        Tracker(rise=1, fall=bad, now=0.0)


# -- the gated priority ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priority", "weight", "healthy", "effective"),
    [
        (200, 253, True, 200),
        (200, 253, False, 1),  # the default: any unhealthy node advertises 1
        (200, 50, False, 150),
        (200, 199, False, 1),
        (200, 200, False, 1),  # floored at 1: 0 would mean "resigning" on the wire
        (30, 50, False, 1),
        (254, 1, False, 253),
        (1, 253, False, 1),
        (150, 0, False, 150),  # weight 0: checked, not gated
    ],
)
def test_effective_priority(priority: int, weight: int, healthy: bool, effective: int) -> None:
    assert track.effective_priority(priority, weight, healthy) == effective


@pytest.mark.parametrize(
    ("priority", "weight"), [(0, 10), (255, 10), (100, -1), (100, 254), (True, 1)]
)
def test_effective_priority_refuses_out_of_range(priority: Any, weight: int) -> None:
    with pytest.raises((ValueError, TypeError)):
        track.effective_priority(priority, weight, False)


def test_outranks() -> None:
    assert track.outranks(2, 254, 253)  # default weight: every healthy node >= 2 wins
    assert not track.outranks(1, 254, 253)  # a tie at 1 goes to the address tie-break
    assert not track.outranks(150, 200, 50)  # 200 - 50 = 150: equal, not above
    assert track.outranks(150, 200, 51)


def _params(ip: str, priority: int, interval_cs: int = 10) -> Params:
    return Params(
        version=3, priority=priority, advert_interval_cs=interval_cs, primary_ip=ip_address(ip)
    )


def test_lan_an_unhealthy_leader_gives_way_within_the_down_interval() -> None:
    lan = Lan()
    lan.add("n1", _params("10.0.0.11", 200), start=True)
    lan.add("n2", _params("10.0.0.12", 150), start=True)
    lan.run_for(2.0)
    assert lan.active_nodes() == {"n1"}
    t0 = lan.now
    lan.set_priority("n1", track.effective_priority(200, 253, False))
    lan.run_for(1.0)
    assert lan.active_nodes() == {"n2"}
    took = next(e.time for e in lan.events("became-active", "n2")) - t0
    # n2's down timer runs from n1's last priority-200 advert (at most one interval ago).
    assert took <= master_down_interval(3, 150, 10) + 1e-9
    # Recovery: back at 200, n1 preempts n2 (preempt: true) after its own down interval.
    t1 = lan.now
    lan.set_priority("n1", 200)
    lan.run_for(1.0)
    assert lan.active_nodes() == {"n1"}
    back = next(e.time for e in lan.events("became-active", "n1") if e.time > t1) - t1
    assert back <= master_down_interval(3, 200, 10) + 0.1 + 1e-9


def test_lan_a_lone_unhealthy_node_still_takes_the_vip() -> None:
    lan = Lan()
    lan.add("n1", _params("10.0.0.11", track.effective_priority(200, 253, False)), start=True)
    lan.run_for(master_down_interval(3, 1, 10) + 0.001)
    assert lan.active_nodes() == {"n1"}
    # Its API server comes up: priority restored, still active, no move.
    lan.set_priority("n1", 200)
    lan.run_for(2.0)
    assert lan.active_nodes() == {"n1"} and lan.role_changes() == 1


def test_lan_an_unhealthy_joiner_with_a_higher_priority_does_not_preempt() -> None:
    lan = Lan()
    lan.add("n2", _params("10.0.0.12", 150), start=True)
    lan.run_for(2.0)
    assert lan.active_nodes() == {"n2"}
    lan.add("n1", _params("10.0.0.11", track.effective_priority(200, 253, False)), start=True)
    lan.run_for(10.0)
    assert lan.active_nodes() == {"n2"}
    assert not lan.events("became-active", "n1")
    # Once healthy it preempts, as its configured priority says.
    lan.set_priority("n1", 200)
    lan.run_for(1.0)
    assert lan.active_nodes() == {"n1"}


def test_lan_a_small_weight_that_does_not_reach_below_the_peer_does_not_gate() -> None:
    # 200 - 40 = 160 > 150: the rule in docs/design/health.md (weight > the spread of
    # priorities) is needed.
    lan = Lan()
    lan.add("n1", _params("10.0.0.11", 200), start=True)
    lan.add("n2", _params("10.0.0.12", 150), start=True)
    lan.run_for(2.0)
    lan.set_priority("n1", track.effective_priority(200, 40, False))
    lan.run_for(3.0)
    assert lan.active_nodes() == {"n1"}


# -- HTTP ------------------------------------------------------------------------------------


def test_request_bytes() -> None:
    req = http.request(IPv4Address("10.0.0.1"), 6443, "/readyz", "vipd/x")
    assert req == (
        b"GET /readyz HTTP/1.1\r\nHost: 10.0.0.1:6443\r\nUser-Agent: vipd/x\r\n"
        b"Accept: */*\r\nConnection: close\r\n\r\n"
    )
    v6 = http.request(IPv6Address("fd00::1"), 443, "/livez", "a")
    assert b"GET /livez HTTP/1.1\r\nHost: [fd00::1]:443\r\n" in v6
    assert http.url(IPv6Address("::1"), 6443, "/healthz") == "https://[::1]:6443/healthz"
    with pytest.raises(ValueError):
        http.request(IPv4Address("10.0.0.1"), 6443, "/metrics", "a")


@pytest.mark.parametrize(
    ("line", "status"),
    [
        (b"HTTP/1.1 200 OK\r\n", 200),
        (b"HTTP/1.0 500 Internal Server Error\r\n", 500),
        (b"HTTP/1.1 401\r\n", 401),
        (b"HTTP/1.1 503 Service Unavailable\n", 503),
    ],
)
def test_status_line(line: bytes, status: int) -> None:
    assert http.parse_status_line(line) == status


@pytest.mark.parametrize(
    "line", [b"", b"ok\n", b"HTTP/2 200\r\n", b"HTTP/1.1 20 OK\r\n", b"SSH-2.0-OpenSSH\r\n"]
)
def test_not_a_status_line(line: bytes) -> None:
    with pytest.raises(http.ProtocolError):
        http.parse_status_line(line)


# -- config ----------------------------------------------------------------------------------


def doc(health: object = None, **vrrp: Any) -> dict[str, Any]:
    return {
        "node": "cp-1",
        "vip": "10.0.0.100",
        "election": {"vrrp": {"vrid": 51, **vrrp}},
        "health": health,
    }


def error(data: object) -> str:
    with pytest.raises(ConfigError) as info:
        parse(data)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_no_section_no_health() -> None:
    data = doc()
    del data["health"]
    assert parse(data).health is None


def test_an_empty_section_is_on_with_every_default() -> None:
    h = parse(doc(None)).health
    assert h == Health()
    assert (h.path, h.port, h.local, h.interval, h.timeout) == (
        "/readyz",
        6443,
        IPv4Address("127.0.0.1"),
        1.0,
        0.8,
    )
    assert (h.rise, h.fall, h.ca_file, h.weight) == (2, 3, None, 253)


def test_every_key() -> None:
    h = parse(
        doc(
            {
                "path": "/livez",
                "port": 443,
                "local": "::1",
                "interval": 2,
                "timeout": 1.5,
                "rise": 1,
                "fall": 5,
                "ca_file": "/etc/kubernetes/pki/ca.crt",
                "weight": 60,
            }
        )
    ).health
    assert h == Health(
        path="/livez",
        port=443,
        local=IPv6Address("::1"),
        interval=2.0,
        timeout=1.5,
        rise=1,
        fall=5,
        ca_file="/etc/kubernetes/pki/ca.crt",
        weight=60,
    )


def test_timeout_defaults_to_most_of_the_interval() -> None:
    h = parse(doc({"interval": 0.2})).health
    assert h is not None and h.timeout == pytest.approx(0.16)


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        ("yes", "health: must be a mapping with the keys"),
        ({"url": "x"}, "health.url: unknown key; allowed here: ca_file, fall, interval,"),
        ({"path": "/metrics"}, 'health.path: must be "/readyz", "/healthz" or "/livez"'),
        ({"path": "readyz"}, "health.path: must be"),
        ({"port": 0}, "health.port: must be an integer from 1 to 65535 (got 0)"),
        ({"port": "6443"}, 'health.port: must be an integer from 1 to 65535 (got "6443")'),
        ({"local": "localhost"}, "health.local: must be an IP address literal"),
        ({"local": "0.0.0.0"}, "health.local: must be a unicast address"),
        ({"local": "127.0.0.1/8"}, "health.local: must be a single address"),
        ({"interval": 0}, "health.interval: must be a number of seconds from 0.05 to 300"),
        ({"interval": True}, "health.interval: must be a number"),
        (
            {"interval": 1, "timeout": 1},
            "health.timeout: must be a number of seconds from 0.01 to less than "
            "health.interval (1) (got 1)",
        ),
        ({"timeout": 0.001}, "health.timeout: must be a number of seconds from 0.01"),
        ({"rise": 0}, "health.rise: must be an integer from 1 to 100 (got 0)"),
        ({"fall": 101}, "health.fall: must be an integer from 1 to 100 (got 101)"),
        ({"ca_file": ""}, "health.ca_file: must be the path of a PEM file"),
        ({"ca_file": 5}, "health.ca_file: must be the path of a PEM file"),
        ({"weight": 254}, "health.weight: must be an integer from 0 to 253"),
        ({"weight": -2}, "health.weight: must be an integer from 0 to 253"),
    ],
)
def test_errors(health: object, expected: str) -> None:
    assert expected in error(doc(health))


def test_gating_needs_preempt() -> None:
    text = error(doc({}, preempt=False))
    assert text.startswith("health.weight: must be 0 with election.vrrp.preempt: false")
    assert parse(doc({"weight": 0}, preempt=False)).health == Health(weight=0)


# -- TLS context -----------------------------------------------------------------------------


def test_no_ca_file_means_no_verification() -> None:
    ctx = make_ssl_context(None)
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def test_a_bad_ca_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot load CA certificates from .*/missing.pem"):
        make_ssl_context(str(tmp_path / "missing.pem"))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="cannot load CA certificates from"):
        make_ssl_context(str(junk))
