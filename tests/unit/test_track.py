"""Tracking: the pure rules (`vipd.track`), the checker (`vipd.tracking`) on real scripts and
files, and what the VRRP and Lease backends do with it.

What it tests: track files read as keepalived's track_file with words; down weights and up
file values summed with the health gate and clamped to 1..254 (never 0: a lone node keeps
the VIP); the checker's rise/fall, its timeout kill and a reload that keeps a check's state;
a "fault" track takes a VRRP leader out of the election (priority 0, VIP released) and back;
in Lease mode a down track is an unhealthy local API server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_vrrp_driver import Node, run
from vipd import config, track
from vipd.log import get
from vipd.tracking import TrackChecker
from vipd.vrrp import state


def tracks(*items: dict[str, Any]) -> tuple[config.Track, ...]:
    return config.parse(
        {"node": "n", "vip": "10.0.0.100", "election": {"vrrp": {"vrid": 1}}, "track": list(items)}
    ).track


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("up\n", (True, 0)),
        (" UP ", (True, 0)),
        ("down", (False, 0)),
        ("0", (True, 0)),
        ("-50\n", (True, -50)),
        ("+20", (True, 20)),
        ("", (False, 0)),
        ("maybe", (False, 0)),
        ("12345", (False, 0)),
        (None, (False, 0)),
    ],
)
def test_file_value(text: str | None, want: tuple[bool, int]) -> None:
    assert track.file_value(text) == want


def test_adjust_and_the_priority_floor() -> None:
    a, b, f = tracks(
        {"name": "a", "script": "/bin/true", "weight": 30},
        {"name": "b", "file": "/run/b", "weight": 20},
        {"name": "f", "file": "/run/f", "weight": "fault"},
    )
    adj = track.adjust([(a, False, 0), (b, True, -15), (f, True, 0)])
    assert adj == track.Adjustment(penalty=30, offset=-15, fault=False, down=("a",))
    assert track.effective_priority(100, 0, True, adj) == 55
    assert track.effective_priority(100, 60, False, adj) == 1  # floored: never 0
    assert track.effective_priority(250, 0, True, track.Adjustment(offset=20)) == 254
    assert track.adjust([(f, False, 0)]).fault
    assert not adj.ok and track.NONE.ok


def test_config_rules() -> None:
    with pytest.raises(config.ConfigError, match="exactly one of script and file"):
        tracks({"script": "/bin/true", "file": "/x"})
    with pytest.raises(config.ConfigError, match=r"track\[1\].name: is used twice"):
        tracks({"name": "a", "file": "/x"}, {"name": "a", "file": "/y"})
    with pytest.raises(config.ConfigError, match=r"track\[0\].weight"):
        tracks({"file": "/x", "weight": "off"})
    with pytest.raises(config.ConfigError, match=r'did you mean "interval"'):
        tracks({"file": "/x", "intervall": 1})


def test_the_checker_follows_a_file_and_kills_a_slow_script(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    flag.write_text("up")
    seen: list[track.Adjustment] = []

    async def main() -> None:
        cfg = tracks(
            {"name": "f", "file": str(flag), "interval": 0.1, "weight": 40},
            {
                "name": "slow",
                "script": "/bin/sleep 5",
                "interval": 0.5,
                "timeout": 0.1,
                "weight": 7,
            },
        )
        checker = TrackChecker(cfg, seen.append, log=get())
        assert checker.adjustment().down == ("f", "slow")  # every check starts down
        checker.start()
        await asyncio.sleep(0.35)
        assert checker.adjustment() == track.Adjustment(penalty=7, down=("slow",))
        flag.write_text("-25\n")
        await asyncio.sleep(0.3)
        assert checker.adjustment().offset == -25
        flag.unlink()
        await asyncio.sleep(0.3)
        assert checker.adjustment().down == ("f", "slow")
        flag.write_text("up")
        await asyncio.sleep(0.3)
        # A reload that keeps "f" keeps it up; a new check starts down.
        checker.reconfigure(
            tracks(
                {"name": "f", "file": str(flag), "interval": 0.2, "weight": 40},
                {"name": "new", "file": str(tmp_path / "none"), "weight": 3},
            )
        )
        assert checker.adjustment() == track.Adjustment(penalty=3, down=("new",))
        checker.stop()

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 3  # the 5 s script never held anything up
    assert any(a.offset == -25 for a in seen)


def now(n: Node) -> state.State:
    """The machine's state, read afresh (mypy would keep the first comparison's narrowing)."""
    return n.election.machine.state


def test_a_fault_track_takes_a_vrrp_leader_out_and_back() -> None:
    (f,) = tracks({"name": "drain", "file": "/run/drain", "weight": "fault"})

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        mark = len(n.events)
        n.election.on_track(track.adjust([(f, False, 0)]))
        assert now(n) is state.State.INITIALIZE
        assert n.events.since(mark) == ["advert:0", "unbind"]
        assert n.timers.next_due() is None
        n.election.on_link(False)
        n.election.on_link(True)  # the link coming back does not end a fault
        assert now(n) is state.State.INITIALIZE
        n.election.on_track(track.adjust([(f, True, 0)]))
        assert now(n) is state.State.BACKUP
        n.timers.fire_next()
        assert now(n) is state.State.ACTIVE  # alone: leader again
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_weight_lowers_a_leaders_priority_and_a_lone_node_keeps_the_vip() -> None:
    (s,) = tracks({"name": "s", "script": "/bin/false", "weight": 253})

    async def scenario(n: Node) -> None:
        await n.start()
        n.election.on_track(track.adjust([(s, False, 0)]))
        assert n.election.machine.priority == 1
        # The lower priority moved the down timer later: the armed timer fires first and
        # arms the rest (one timer, not one per change), then nobody else: it takes the VIP.
        n.timers.fire_next()
        assert now(n) is state.State.BACKUP
        n.timers.fire_next()
        assert now(n) is state.State.ACTIVE and "bind" in n.events
        mark = len(n.events)
        n.election.on_track(track.adjust([(s, True, 0)]))
        assert n.election.machine.priority == 100
        assert n.events.since(mark) == ["advert:100"]
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_lease_counts_a_down_track_as_unhealthy() -> None:
    from vipd.lease.driver import LeaseElection
    from vipd.preflight import HostLink, Preflight

    cfg = config.parse(
        {"node": "n1", "vip": "10.0.0.100", "interface": "eth0", "election": {"mode": "lease"}}
    )
    pre = Preflight(
        link=HostLink("eth0", 2, True, False, "02:00:00:00:00:11"),
        source=config.parse(
            {"node": "n", "vip": "10.0.0.11", "election": {"vrrp": {"vrid": 1}}}
        ).vip,
        findings=(),
        stale_vip=False,
    )
    e = LeaseElection(cfg, pre, open_api=lambda *_: None)  # type: ignore[arg-type]
    assert e.healthy()
    (s,) = tracks({"name": "s", "script": "/bin/false"})
    e.on_track(track.adjust([(s, False, 0)]))
    assert not e.healthy()
    e.on_track(track.adjust([(s, True, 0)]))
    assert e.healthy()
