"""vipd.bfd.metrics on a registry of its own (vipd's registry does not hold them yet)."""

from __future__ import annotations

import asyncio
import subprocess

from prometheus_client import generate_latest

from tests.prereq import promtool
from vipd.bfd.driver import DROP_REASONS, BfdSessions
from vipd.bfd.metrics import BfdMetrics
from vipd.bfd.packet import State
from vipd.bfd.session import StateChange
from vipd.metrics_registry import Registry

PEER = "192.0.2.1"


def test_changes_and_up() -> None:
    reg = Registry()
    m = BfdMetrics(reg)
    m.add_peer(PEER)
    get = reg.get_sample_value
    assert get("vipd_bfd_session_up", {"peer": PEER}) == 0
    assert get("vipd_bfd_state_changes_total", {"peer": PEER, "state": "up"}) == 0
    m.on_change(PEER, StateChange(State.DOWN, State.INIT, 0, State.DOWN, 0))
    m.on_change(PEER, StateChange(State.INIT, State.UP, 0, State.UP, 0))
    assert get("vipd_bfd_session_up", {"peer": PEER}) == 1
    m.on_change(PEER, StateChange(State.UP, State.DOWN, 1, State.UP, 0))
    assert get("vipd_bfd_session_up", {"peer": PEER}) == 0
    for state, n in (("init", 1), ("up", 1), ("down", 1), ("admin_down", 0)):
        assert get("vipd_bfd_state_changes_total", {"peer": PEER, "state": state}) == n
    m.remove_peer(PEER)
    assert get("vipd_bfd_session_up", {"peer": PEER}) is None


def test_drops_are_read_from_the_driver_at_scrape_time() -> None:
    reg = Registry()
    m = BfdMetrics(reg)
    assert reg.get_sample_value("vipd_bfd_packets_dropped_total", {"reason": "ttl"}) == 0

    async def main() -> None:
        sessions = BfdSessions(lambda *_: None, port=0)
        m.watch(sessions)
        sessions.dropped["ttl"] += 2
        sessions.send_errors += 1
        sessions.close()

    asyncio.run(main())
    assert reg.get_sample_value("vipd_bfd_packets_dropped_total", {"reason": "ttl"}) == 2
    assert reg.get_sample_value("vipd_bfd_send_errors_total") == 1
    reasons = {
        s.labels["reason"]
        for fam in reg.collect()
        if fam.name == "vipd_bfd_packets_dropped"
        for s in fam.samples
    }
    assert reasons == set(DROP_REASONS)


def test_promtool_check_metrics_is_clean() -> None:
    tool = promtool()
    reg = Registry()
    m = BfdMetrics(reg)
    m.add_peer(PEER)
    m.on_change(PEER, StateChange(State.INIT, State.UP, 0, State.UP, 0))
    out = subprocess.run(
        [tool, "check", "metrics"], input=generate_latest(reg), capture_output=True, check=False
    )
    assert out.returncode == 0, (out.stdout + out.stderr).decode()
    assert out.stdout.strip() == b"" and out.stderr.strip() == b"", out
