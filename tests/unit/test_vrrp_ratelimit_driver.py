"""The VRRP driver applies vipd.vrrp.ratelimit and election.vrrp.allowed_sources, on the fake
wire and clock of test_vrrp_driver: a flood of lower-priority adverts at the master gets a
bounded number of immediate answers and re-announcements while the periodic adverts go on,
each refusal counted by kind; a split brain's single advert is still answered at once; an
advert from outside the allow-list never reaches the machine and is counted."""

from __future__ import annotations

import functools
import logging

import pytest

from tests.unit.hostfakes import advert
from tests.unit.test_vrrp_driver import PEER, Node, received_more_than, run, until
from vipd import metrics
from vipd.vrrp import ratelimit, state

INTERVAL = 1.0  # the Node's default advert_interval


def limited(kind: str) -> float:
    value = metrics.REGISTRY.get_sample_value("vipd_vrrp_rate_limited_total", {"kind": kind})
    return value or 0.0


def invalid(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value("vipd_vrrp_adverts_invalid_total", {"reason": reason})
    return value or 0.0


async def flood(n: Node, src: str, count: int, gap: float, priority: int = 100) -> None:
    """``count`` adverts from ``src``, ``gap`` apart on the fake clock, the timers due in
    between fired (the master's periodic adverts)."""
    assert n.wire is not None
    for _ in range(count):
        end = n.clock.now + gap
        while (due := n.timers.next_due()) is not None and due <= end:
            n.timers.fire_next()
        n.clock.now = end
        seen = n.election.stats.adverts_received
        n.wire.inject(advert(src, priority))
        await until(functools.partial(received_more_than, n, seen))


def test_a_flood_of_lower_priority_adverts_gets_bounded_answers_and_announcements(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        answers, defences, lines = limited("answer"), limited("defence"), limited("log")
        mark = len(n.events)
        start = n.clock.now
        with caplog.at_level(logging.INFO):
            await flood(n, PEER, 300, 0.01)
        duration = n.clock.now - start
        got = n.events.since(mark)
        sent = got.count("advert:200")
        periodic = duration / INTERVAL + 1
        answer_bound = ratelimit.ANSWER_BURST + duration / (ratelimit.ANSWER_EVERY * INTERVAL)
        assert sent <= periodic + answer_bound, got
        assert sent >= periodic - 1  # the periodic adverts went on throughout
        defence_bound = ratelimit.DEFENCE_BURST + duration / (ratelimit.DEFENCE_EVERY * INTERVAL)
        assert got.count("garp") <= defence_bound, got
        assert limited("answer") - answers >= 300 - answer_bound
        assert limited("defence") > defences
        assert limited("log") > lines
        counters = n.election.status(n.clock.now)["counters"]["rate_limited"]
        assert counters["answer"] >= 300 - answer_bound and counters["log"] > 0, counters
        kinds = ("re-announcing", "another node claims the VIP while we hold it")
        about_peer = [r for r in caplog.records if r.getMessage() in kinds]
        # One line per kind ("re-announcing", "another node claims") inside one window.
        assert 1 <= len(about_peer) <= 2, [r.getMessage() for r in about_peer]
        assert n.election.machine.state is state.State.ACTIVE
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_a_split_brain_peers_advert_is_still_answered_at_once() -> None:
    """Within budget nothing changes: one lower-priority advert, a re-announcement and an
    immediate advert (RFC 9568 §6.4.3), then one more a second later."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        answers = limited("answer")
        for _ in range(2):
            mark = len(n.events)
            await flood(n, PEER, 1, INTERVAL)
            n.timers.fire_next()  # preempt_lead later: the answer
            assert n.events.since(mark)[-2:] == ["garp", "advert:200"], n.events.since(mark)
        assert limited("answer") == answers
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_forged_sources_share_one_budget() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        mark = len(n.events)
        start = n.clock.now
        assert n.wire is not None
        for i in range(200):  # 200 sources in 0.2 s
            await flood(n, f"10.0.1.{i + 1}", 1, 0.001)
        n.clock.now = start + 0.2
        while (due := n.timers.next_due()) is not None and due <= n.clock.now:
            n.timers.fire_next()
        shared = ratelimit.answers(INTERVAL).shared()
        got = n.events.since(mark)
        assert got.count("advert:200") <= shared.burst + 0.2 / shared.every + 1, got
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)


def test_an_advert_from_outside_the_allow_list_never_reaches_the_machine() -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        before = invalid("not-allowed")
        assert n.wire is not None
        n.wire.inject(advert("10.0.9.9", 250))  # would preempt us if heard
        await until(lambda: n.election.stats.invalid["not-allowed"] == 1)
        assert invalid("not-allowed") == before + 1
        assert n.election.stats.adverts_received == 0
        assert n.election.machine.master_ip is None
        await flood(n, PEER, 1, 0.1, priority=250)  # inside 10.0.0.0/24: heard
        assert n.election.machine.master_ip is not None
        assert str(n.election.machine.master_ip) == PEER
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200, allowed_sources=["10.0.0.0/24"])


def test_a_split_brain_peer_that_never_steps_down_gets_bounded_re_announcements() -> None:
    """A lower-priority peer advertising and announcing the VIP every interval (it does not
    hear us): each of its adverts and each of its claims used to be re-announced; now its
    address and its MAC are each held to the defence budget."""

    async def scenario(n: Node) -> None:
        await n.start()
        await n.take_over()
        defences = limited("defence")
        mark = len(n.events)
        start = n.clock.now
        rounds = 12
        for _ in range(rounds):
            await flood(n, PEER, 1, INTERVAL)
            n.clock.now += 0.001
            n.election.defence.on_claim("02:00:00:00:00:12")  # its gratuitous ARP
        duration = n.clock.now - start
        per_key = ratelimit.DEFENCE_BURST + duration / (ratelimit.DEFENCE_EVERY * INTERVAL)
        got = n.events.since(mark)
        assert got.count("garp") <= 2 * per_key, got  # its address and its MAC
        assert limited("defence") - defences >= 2 * rounds - 2 * per_key
        assert n.election.machine.state is state.State.ACTIVE
        n.stop.set()
        await n.stopped()

    run(scenario, priority=200)
