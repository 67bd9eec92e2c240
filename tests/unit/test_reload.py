"""Reload (SIGHUP): the pure plan (`vipd.reload`) and the agent applying it on a fake host.

What it tests: which changed keys a running vipd applies and which it refuses (all or
nothing), and, with the VRRP backend on a fake wire, that a good reload changes the priority
without moving or re-announcing the VIP, that an invalid file or a VRID change leaves every
part as it was, and that SIGUSR1's status line is the /status document.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tests.unit.test_vrrp_driver import VIP, Node, run
from vipd import config, metrics, reload
from vipd.config import ConfigError


def cfg(**over: Any) -> config.Config:
    vrrp = {"vrid": 51, "priority": 100, **over.pop("vrrp", {})}
    doc: dict[str, Any] = {
        "node": "n1",
        "vip": str(VIP),
        "interface": "eth0",
        "election": {"mode": "vrrp", "vrrp": vrrp},
        **over,
    }
    return config.parse(doc)


def test_the_same_config_is_no_change() -> None:
    p = reload.plan(cfg(), cfg())
    assert not p.changed and p.live == () and p.refused == ()


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"vrrp": {"priority": 150}}, "election.vrrp.priority"),
        ({"vrrp": {"preempt_delay": 5}}, "election.vrrp.preempt_delay"),
        ({"garp": {"repeat": 3}}, "garp.repeat"),
        ({"garp": {"refresh": 60}}, "garp.refresh"),
        ({"log": {"level": "debug"}}, "log.level"),
    ],
)
def test_live_keys(over: dict[str, Any], key: str) -> None:
    p = reload.plan(cfg(), cfg(**over))
    assert p.live == (key,) and p.refused == ()


def test_auth_hmac_keys_send_key_and_mode_are_live_but_the_rest_is_not() -> None:
    def hmac(**section: Any) -> config.Config:
        return cfg(vrrp={"auth_hmac": {"keys": {1: "/etc/vipd/k1"}, **section}})

    a = hmac()
    rotated = hmac(keys={1: "/etc/vipd/k1", 2: "/etc/vipd/k2"}, send_key=2, mode="permissive")
    p = reload.plan(a, rotated)
    assert set(p.live) == {
        "election.vrrp.auth_hmac.keys",
        "election.vrrp.auth_hmac.send_key",
        "election.vrrp.auth_hmac.mode",
    }
    assert p.refused == ()
    assert reload.plan(cfg(), a).refused == ("election.vrrp.auth_hmac",)
    assert reload.plan(a, cfg()).refused == ("election.vrrp.auth_hmac",)
    assert reload.plan(a, hmac(anti_replay="monotonic")).refused == (
        "election.vrrp.auth_hmac.anti_replay",
    )
    assert reload.plan(a, hmac(window=9)).refused == ("election.vrrp.auth_hmac.window",)


def test_health_keys_are_live_but_the_section_itself_is_not() -> None:
    with_health = cfg(health={"rise": 2})
    p = reload.plan(with_health, cfg(health={"rise": 5, "interval": 2}))
    assert set(p.live) == {"health.rise", "health.interval", "health.timeout"}
    assert p.refused == ()
    assert reload.plan(cfg(), with_health).refused == ("health",)
    assert reload.plan(with_health, cfg()).refused == ("health",)
    assert reload.plan(with_health, cfg(health={"local": "127.0.0.2"})).refused == ("health.local",)


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"vip": "10.0.0.101"}, "vip"),
        ({"interface": "eth1"}, "interface"),
        ({"node": "n2"}, "node"),
        ({"vrrp": {"vrid": 52}}, "election.vrrp.vrid"),
        ({"vrrp": {"advert_interval": 2}}, "election.vrrp.advert_interval"),
        ({"vrrp": {"version": 2}}, "election.vrrp.version"),
        ({"log": {"format": "json"}}, "log.format"),
        ({"metrics": {"listen": "127.0.0.1:2113"}}, "metrics.listen"),
    ],
)
def test_restart_keys_are_refused(over: dict[str, Any], key: str) -> None:
    new = over.pop("vip", None)
    doc = cfg(**over)
    if new is not None:
        doc = config.parse(
            {"node": "n1", "vip": new, "interface": "eth0", "election": {"vrrp": {"vrid": 51}}}
        )
    p = reload.plan(cfg(), doc)
    assert key in p.refused


def test_mode_change_is_refused() -> None:
    lease = config.parse(
        {"node": "n1", "vip": str(VIP), "interface": "eth0", "election": {"mode": "lease"}}
    )
    p = reload.plan(cfg(), lease)
    assert "election.mode" in p.refused


def test_a_mix_is_refused_and_lists_only_the_restart_keys() -> None:
    p = reload.plan(cfg(), cfg(vrrp={"vrid": 52, "priority": 150}))
    assert p.refused == ("election.vrrp.vrid",)
    assert p.live == ("election.vrrp.priority",)


def bound(n: Node) -> bool:
    return n.host.address is not None and n.host.address.present


def reloads(result: str) -> float:
    return metrics.REGISTRY.get_sample_value("vipd_reloads_total", {"result": result}) or 0.0


def test_a_good_reload_changes_the_priority_and_not_the_vip() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        assert bound(n)
        mark = len(n.events)
        n.agent.loader = lambda: cfg(vrrp={"priority": 150}, garp={"repeat": 2})
        before = reloads("applied")
        assert n.agent.reload() == "applied"
        assert reloads("applied") == before + 1
        assert n.election.machine.priority == 150
        assert n.agent.controller is not None and n.agent.controller.garp.repeat == 2
        # One advert with the new priority (RFC 9568 §6.4.3), no unbind, no GARP.
        assert n.events.since(mark) == ["advert:150"]
        assert bound(n)
        assert n.agent.cfg.election.vrrp.priority == 150
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_bad_file_and_a_vrid_change_change_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        mark = len(n.events)
        running = n.agent.cfg

        def bad() -> config.Config:
            raise ConfigError("election.vrrp.priority", "must be an integer from 1 to 254", 300)

        n.agent.loader = bad
        assert n.agent.reload() == "invalid"
        n.agent.loader = lambda: cfg(vrrp={"vrid": 52, "priority": 150})
        assert n.agent.reload() == "refused"
        assert n.agent.cfg is running and n.election.machine.priority == 100
        assert n.election.vrrp.vrid == 51
        assert n.events.since(mark) == [] and bound(n)
        lines = {r.getMessage(): getattr(r, "fields", {}) for r in caplog.records}
        assert "election.vrrp.priority" in str(
            lines["reload failed: keeping the running config"]["error"]
        )
        refused = lines["reload refused: keeping the running config (these keys need a restart)"]
        assert refused["keys"] == "election.vrrp.vrid"
        n.agent.loader = lambda: running
        assert n.agent.reload() == "unchanged"
        n.agent.loader = None  # the config came from stdin
        assert n.agent.reload() == "refused"
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_lower_priority_on_a_backup_moves_its_down_timer_only() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        due = n.timers.next_due()
        assert due is not None
        n.agent.loader = lambda: cfg(vrrp={"priority": 50})
        assert n.agent.reload() == "applied"
        later = n.timers.next_due()
        assert later is not None and later > due  # Skew_Time grows as the priority falls
        assert n.events == []
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_status_signal_logs_the_status_document(caplog: pytest.LogCaptureFixture) -> None:
    import signal

    # The status line is INFO: captured whatever level an earlier test left the root at.
    caplog.set_level(logging.INFO)

    async def scenario(n: Node) -> None:
        await n.start()
        n.agent.log_status(signal.SIGUSR1)
        rec = [r for r in caplog.records if r.getMessage() == "status"][-1]
        fields = getattr(rec, "fields", {})
        assert fields["signal"] == "SIGUSR1"
        doc = json.loads(fields["status"])
        assert doc["vip"] == str(VIP) and doc["role"] in ("follower", "init")
        n.stop.set()
        await n.stopped()

    run(scenario)
