"""vipd.endpoint.status: the text `vipd status` prints, and reading a real endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from vipd.endpoint import server as httpd
from vipd.endpoint import status

LEADER: dict[str, Any] = {
    "node": "cp-1",
    "version": "0.1.0",
    "vip": "10.0.0.100",
    "interface": "eth0",
    "source": "10.0.0.11",
    "backend": "vrrp",
    "role": "leader",
    "role_since_s": 12.5,
    "last_reason": "master-down: no advert in 3.4 s",
    "vip_bound": True,
    "duplicate_claim": False,
    "vrrp": {
        "vrid": 51,
        "version": 3,
        "state": "active",
        "priority": 200,
        "advert_interval_s": 1.0,
        "mode": "multicast",
    },
    "master": {"address": "10.0.0.11", "priority": 200, "self": True, "advert_age_s": None},
    "peers": [{"address": "10.0.0.12", "priority": 150, "last_seen_s": 40.0}],
    "backends": [],
    "counters": {"transitions": 2, "invalid_adverts": {"vrid": 3}},
    "ready": True,
    "ready_reason": "ready",
    "healthy": True,
    "health_reason": "ok",
}


def lines(doc: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    last = ""
    for line in status.render(doc).splitlines():
        key, _, value = line.partition("  ")
        key = key.strip() or last
        out[key] = (out[key] + " | " if key in out else "") + value.strip()
        last = key
    return out


def test_leader() -> None:
    got = lines(LEADER)
    assert got["role"] == "leader (vrrp active, for 12.500 s)"
    assert got["VIP"] == "10.0.0.100 on eth0, bound here"
    assert got["master"] == "10.0.0.11 priority 200 (this node)"
    assert got["peers"] == "10.0.0.12 priority 150, last advert 40.000 s ago"
    assert got["backends"] == "none (health checking is not configured)"
    assert (got["ready"], got["healthy"]) == ("yes", "yes")
    assert got["counters"] == "transitions 2, invalid adverts (vrid 3)"


def test_follower_not_ready_split_brain_and_backends() -> None:
    doc = {
        **LEADER,
        "role": "follower",
        "vip_bound": True,
        "duplicate_claim": True,
        "master": {"address": "10.0.0.12", "priority": 250, "self": False, "advert_age_s": 0.4},
        "backends": [
            {"name": "cp-1", "address": "10.0.0.11", "healthy": True},
            {"name": "cp-2", "address": "10.0.0.12", "healthy": False, "detail": "HTTP 500"},
        ],
        "ready": False,
        "ready_reason": "interface eth0 is down: not in the election",
    }
    got = lines(doc)
    assert "ANOTHER NODE CLAIMS IT TOO" in got["VIP"]
    assert got["master"] == "10.0.0.12 priority 250, last advert 0.400 s ago"
    assert got["backends"] == "cp-1 10.0.0.11 healthy | cp-2 10.0.0.12 UNHEALTHY (HTTP 500)"
    assert got["ready"] == "NO: interface eth0 is down: not in the election"


def test_lease_backend() -> None:
    doc = {
        **LEADER,
        "backend": "lease",
        "vrrp": None,
        "lease": {
            "name": "kube-system/vipd",
            "holder": "cp-1",
            "last_renewal_age_s": 1.25,
            "duration_s": 15,
            "renew_deadline_s": 10.0,
            "retry_period_s": 2.0,
            "credentials": "admin.conf",
        },
        "master": {"address": "cp-1", "priority": None, "self": True, "advert_age_s": None},
        "counters": {"transitions": 1, "renewals": 40, "lease_errors": {}},
    }
    got = lines(doc)
    assert got["role"] == "leader (lease, for 12.500 s)"
    assert got["lease"] == (
        "kube-system/vipd held by cp-1, last renewal 1.250 s ago, duration 15 s / renew "
        "deadline 10 s / retry 2 s, credentials admin.conf"
    )
    assert got["master"] == "cp-1 (this node)"
    assert got["counters"] == "transitions 1, renewals 40, lease errors (none)"
    assert "vrrp" not in got


def test_a_sparse_document_still_renders() -> None:
    """An older or newer daemon: missing keys print as '-', unknown ones are ignored."""
    got = lines({"role": "init", "something_new": 1})
    assert got["role"] == "init (-)"
    assert got["master"] == "none known"
    assert got["ready"] == "NO: -"


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("0.0.0.0:2112", "http://127.0.0.1:2112"),
        ("10.0.0.5:9000", "http://10.0.0.5:9000"),
        ("[::]:2112", "http://[::1]:2112"),
        ("[fd00::5]:2112", "http://[fd00::5]:2112"),
    ],
)
def test_url_for_listen(listen: str, url: str) -> None:
    assert status.url_for_listen(listen) == url


def test_vipd_status_reads_a_live_endpoint() -> None:
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    ep.start()
    try:
        ep.publish(LEADER, True, "")
        url = f"http://127.0.0.1:{ep.port}"
        assert status.fetch(url)["role"] == "leader"
        out = subprocess.run(
            [sys.executable, "-m", "vipd", "status", "--url", url],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("role ") and "10.0.0.100 on eth0, bound here" in out.stdout
        raw = subprocess.run(
            [sys.executable, "-m", "vipd", "status", "--url", url, "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert json.loads(raw.stdout)["vrrp"]["vrid"] == 51
    finally:
        ep.close()


def test_vipd_status_without_a_daemon_is_one_line_and_exit_1() -> None:
    ep = httpd.Endpoint.bind("127.0.0.1:0")
    port = ep.port
    ep.close()  # nothing listens there now
    out = subprocess.run(
        [sys.executable, "-m", "vipd", "status", "--url", f"http://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("vipd status: cannot read http://127.0.0.1:") and "running" in line


def test_tracks_are_shown_with_their_state() -> None:
    doc = {
        **LEADER,
        "tracks": [
            {"name": "haproxy", "up": False, "value": 0, "weight": 50, "error": "exit 1"},
            {"name": "bias", "up": True, "value": -30, "weight": 0, "error": None},
        ],
    }
    got = lines(doc)
    assert got["tracks"] == "haproxy DOWN (exit 1), weight 50 | bias up, weight 0, value -30"
    assert "tracks" not in lines(LEADER)


def test_several_vips_are_listed_each_with_its_role() -> None:
    doc = {
        **LEADER,
        "vips": [
            {"vip": "10.0.0.100", "bound": True, "role": "leader", "vrid": 51},
            {"vip": "fd00::100", "bound": False, "role": "follower", "vrid": 51},
        ],
    }
    got = lines(doc)
    assert got["VIP"] == "10.0.0.100, fd00::100 on eth0"
    assert got["VIPs"] == (
        "10.0.0.100: leader, bound here (VRID 51) | fd00::100: follower, not bound here (VRID 51)"
    )
    one = {**LEADER, "vips": [{"vip": "10.0.0.100", "bound": True, "role": "leader"}]}
    assert lines(one)["VIP"] == "10.0.0.100 on eth0, bound here" and "VIPs" not in lines(one)


def test_routing_table_mode_says_what_it_announces_and_no_vrrp_lines() -> None:
    doc = {
        **LEADER,
        "backend": "routed",
        "vrrp": None,
        "master": None,
        "peers": [],
        "last_reason": "healthy",
        "routed": {
            "announcing": True,
            "phases": {"10.0.0.100": "announced"},
            "table": 198,
            "protocol": 248,
            "drain_s": 2.0,
        },
    }
    got = lines(doc)
    assert got["role"] == "leader (routed, for 12.500 s)"
    assert got["VIP"] == "10.0.0.100 on eth0, announced here"
    assert got["routed"] == (
        "announcing (healthy): table 198 protocol 248, drain 2 s; 10.0.0.100 announced"
    )
    assert "master" not in got and "peers" not in got
    out = lines({**doc, "vip_bound": False, "routed": {**doc["routed"], "announcing": False}})
    assert out["VIP"].endswith("not announced here") and out["routed"].startswith("not ann")


def test_followed_membership_is_shown_with_its_sources_and_hold() -> None:
    doc: dict[str, Any] = {
        "role": "follower",
        "membership": {
            "lists": [
                {
                    "list": "election.vrrp.unicast_peers",
                    "from": ["endpointslices", "nodes"],
                    "static": ["10.0.0.1"],
                    "members": ["10.0.0.1", "10.0.0.5"],
                }
            ],
            "read": True,
            "read_through": {"nodes": "https://10.0.0.100:6443"},
            "failed_rounds": 3,
            "held": True,
            "held_why": "10.0.0.5 not yet in the set read",
        },
    }
    text = status.render(doc)
    assert (
        "membership  election.vrrp.unicast_peers from endpointslices+nodes: 10.0.0.1, "
        "10.0.0.5 (static: 10.0.0.1)"
    ) in text
    assert "nodes read through https://10.0.0.100:6443" in text
    assert "3 failed reads in a row: the last good set holds" in text
    assert "HELD OUT OF THE ELECTION: 10.0.0.5 not yet in the set read" in text
    assert "membership" not in status.render({"role": "leader"})
