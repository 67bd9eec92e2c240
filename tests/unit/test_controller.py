"""The controller converges the VIP on the role it is given, with fake actuators."""

from __future__ import annotations

import asyncio
import logging
from ipaddress import IPv4Address
from typing import Any

from tests.unit import vclock
from vipd.controller import Controller, GarpPolicy, VipActuators, retry_delay
from vipd.host.address import Op, plan


class FakeAddress:
    def __init__(self, present: bool = False) -> None:
        self.present = present
        self.vip = IPv4Address("10.0.0.100")
        self.calls: list[str] = []

    def observe(self) -> bool:
        self.calls.append("observe")
        return self.present

    def add(self) -> None:
        self.calls.append("add")
        self.present = True

    def remove(self) -> bool:
        self.calls.append("remove")
        was = self.present
        self.present = False
        return was


class FakeAnnouncer:
    def __init__(self) -> None:
        self.bursts = 0
        self.singles = 0
        self.cancels = 0

    def burst(self, loop: asyncio.AbstractEventLoop, repeat: int, interval: float) -> bool:
        self.bursts += 1
        return True

    def send_one(self) -> bool:
        self.singles += 1
        return True

    def cancel(self) -> None:
        self.cancels += 1


def make(present: bool = False, **garp: Any) -> tuple[Controller, FakeAddress, FakeAnnouncer]:
    addr, ann = FakeAddress(present), FakeAnnouncer()
    ctl = Controller(
        vips=[VipActuators(addr, ann)],
        garp=GarpPolicy(**garp),
        log=logging.getLogger("test"),
        resync_interval=0.05,
    )
    return ctl, addr, ann


def test_plan_is_empty_when_converged() -> None:
    assert plan(True, True) is None
    assert plan(False, False) is None
    assert plan(False, True) is Op.ADD
    assert plan(True, False) is Op.REMOVE


def test_takeover_binds_then_announces_and_records_latency() -> None:
    async def scenario() -> None:
        ctl, addr, ann = make(delay=0)
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        ctl.set_leader(True, loop.time())
        assert addr.present and ann.bursts == 1
        assert addr.calls[-1] == "add"
        assert ctl.stats.takeovers == 1
        takeover = ctl.stats.last_takeover
        assert takeover is not None
        assert takeover.bound is not None and takeover.announced is not None
        assert takeover.decided <= takeover.bound <= takeover.announced
        ctl.set_leader(False, loop.time())
        assert not addr.present and ann.cancels >= 1
        task.cancel()

    asyncio.run(scenario())


def test_stale_vip_is_removed_at_start() -> None:
    async def scenario() -> None:
        ctl, addr, _ = make(present=True)
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(0.02)
        assert not addr.present
        assert addr.calls[:2] == ["observe", "remove"]
        task.cancel()

    asyncio.run(scenario())


def test_vip_deleted_by_hand_is_re_added_at_resync() -> None:
    async def scenario() -> None:
        ctl, addr, ann = make(delay=0)
        task = asyncio.create_task(ctl.run())
        ctl.set_leader(True, asyncio.get_running_loop().time())
        addr.present = False  # someone ran `ip addr del`
        await asyncio.sleep(0.2)
        assert addr.present
        assert ctl.stats.resync_repairs >= 1
        assert ann.bursts == 2  # re-announced after the repair
        task.cancel()

    asyncio.run(scenario())


def test_lower_priority_claim_triggers_a_new_burst_only_while_leader() -> None:
    async def scenario() -> None:
        ctl, _, ann = make(delay=0)
        task = asyncio.create_task(ctl.run())
        ctl.announce()
        await asyncio.sleep(0.01)
        assert ann.bursts == 0
        ctl.set_leader(True, asyncio.get_running_loop().time())
        ctl.announce()
        assert ann.bursts == 2
        task.cancel()

    asyncio.run(scenario())


def test_second_burst_after_delay_and_refresh() -> None:
    async def scenario() -> None:
        ctl, _, ann = make(delay=0.05, refresh=0.03)
        task = asyncio.create_task(ctl.run())
        ctl.set_leader(True, asyncio.get_running_loop().time())
        await asyncio.sleep(0.2)
        assert ann.bursts == 2
        assert ann.singles >= 3
        ctl.set_leader(False, asyncio.get_running_loop().time())
        await asyncio.sleep(0.01)
        singles = ann.singles
        await asyncio.sleep(0.1)
        assert ann.singles == singles  # refresh stops with leadership
        task.cancel()

    asyncio.run(scenario())


def test_garp_policy_from_config_keeps_every_field() -> None:
    from vipd.config import Garp

    g = Garp(repeat=3, interval=0.02, refresh=7.0, delay=1.5)
    assert GarpPolicy.from_config(g) == GarpPolicy(repeat=3, interval=0.02, delay=1.5, refresh=7.0)


def test_a_kick_resyncs_at_once_and_an_unlinked_controller_waits_for_its_new_link() -> None:
    async def scenario() -> None:
        addr, ann = FakeAddress(), FakeAnnouncer()
        ctl = Controller(
            vips=[VipActuators(addr, ann)],
            garp=GarpPolicy(delay=0),
            log=logging.getLogger("test"),
            resync_interval=60.0,  # only the kick can make it look in time
        )
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(0.01)
        ctl.set_leader(True, asyncio.get_running_loop().time())
        addr.present = False  # `ip addr del`, and its RTM_DELADDR
        ctl.kick()
        await asyncio.sleep(0.01)
        assert addr.present and ctl.stats.resync_repairs == 1 and ann.bursts == 2
        # The link is deleted (the VIP with it): nothing to do on an index that is gone.
        ctl.unlink()
        addr.present = False
        calls = len(addr.calls)
        ctl.kick()
        await asyncio.sleep(0.01)
        assert addr.calls[calls:] == [] and not ctl.bound
        # The new link's actuators: the leader binds and announces there at once.
        new_addr, new_ann = FakeAddress(), FakeAnnouncer()
        ctl.relink([VipActuators(new_addr, new_ann)])
        assert new_addr.present and ctl.bound and new_ann.bursts == 1
        assert not addr.present
        task.cancel()

    asyncio.run(scenario())


def test_retry_delay_doubles_from_a_tenth_of_a_second_up_to_five() -> None:
    assert [retry_delay(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.8]
    assert retry_delay(7) == 5.0 and retry_delay(10_000) == 5.0
    assert retry_delay(3, resync_interval=0.3) == 0.3  # never later than the resync


class RefusingAddress(FakeAddress):
    """The kernel refuses the add (EPERM) until ``refuse`` is cleared."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = True

    def add(self) -> None:
        self.calls.append("add")
        if self.refuse:
            raise PermissionError(1, "Operation not permitted")
        self.present = True


def test_a_refused_vip_is_retried_with_backoff_and_bound_once_allowed() -> None:
    async def scenario() -> None:
        addr, ann = RefusingAddress(), FakeAnnouncer()
        ctl = Controller(
            vips=[VipActuators(addr, ann)],
            garp=GarpPolicy(delay=0),
            log=logging.getLogger("test"),
            resync_interval=60.0,
        )
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(0)
        ctl.set_leader(True, asyncio.get_running_loop().time())
        # Passes at about 0, 0.1, 0.3, 0.7 s: four adds in 1 s, not ten.
        await asyncio.sleep(1.0)
        adds = addr.calls.count("add")
        assert 3 <= adds <= 5, addr.calls
        assert ctl.stats.reconcile_errors == adds and not ctl.bound
        addr.refuse = False
        ctl.kick()
        await asyncio.sleep(0.85)  # at most the pending 0.8 s pause
        assert addr.present and ctl.bound
        # One success resets the pause: the next refusal is retried after 0.1 s again.
        addr.refuse = True
        addr.present = False
        ctl.kick()
        await asyncio.sleep(0.05)
        errors = ctl.stats.reconcile_errors
        await asyncio.sleep(0.12)
        assert ctl.stats.reconcile_errors == errors + 1
        task.cancel()

    vclock.run(scenario())  # the loop's clock, virtual: 1.9 s of backoff in milliseconds
