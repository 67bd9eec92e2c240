"""The VRRP driver with ``election.vrrp.auth_hmac``: keepalived 2.4.3's recorded adverts
(tests/unit/data/keepalived_auth_hmac.json) through the agent's receive path on a fake wire,
and vipd's own signed adverts checked with ``vipd.vrrp.auth``'s Verifier.

What it tests: a fixture advert signed with the configured key is heard (the sender becomes
the master), one with another key, a replayed copy, a stale one and (in enforce mode) an
unsigned one are dropped and counted by reason in ``vipd_vrrp_auth_failures_total``; the
permissive mode hears unsigned adverts; a takeover's adverts carry one trailer per logical
advert, the same on every unicast copy, that verifies from the node's source address; the
quiet following is off with auth (a replayed copy must not pass unverified).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from ipaddress import IPv4Address, ip_address
from pathlib import Path
from typing import Any

import pytest

from tests.unit.hostfakes import Events, FakeClock, FakeTimers, FakeWire, Host, advert, run_out
from vipd import config, metrics, reload
from vipd.agent import Agent
from vipd.preflight import HostLink, Preflight
from vipd.vrrp import auth, packet, state
from vipd.vrrp.driver import VrrpElection
from vipd.vrrp.transport import Datagram

DATA = Path(__file__).parent / "data" / "keepalived_auth_hmac.json"
SCENARIOS = {s["name"]: s for s in json.loads(DATA.read_text())["scenarios"]}
MCAST = SCENARIOS["v3-ipv4-multicast-time-key1"]
VIP = "10.77.0.100"
KEEPALIVED = IPv4Address("10.77.0.11")  # the recorded sender
SELF = IPv4Address("10.77.0.12")
OTHER = IPv4Address("10.77.0.13")
WRONG_KEY = "ff" * 32


def dgram(rec: dict[str, Any]) -> Datagram:
    """A recorded advert as the transport hands it over: the IP payload, trailer included."""
    return Datagram(
        src=ip_address(rec["src"]),
        dst=ip_address(rec["dst"]),
        ttl=rec["ttl"],
        message=bytes.fromhex(rec["payload"]),
    )


def key_file(tmp: Path, name: str, hex_key: str) -> str:
    path = tmp / name
    path.write_text(f"hex:{hex_key}\n")
    os.chmod(path, 0o600)
    return str(path)


def failures(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value("vipd_vrrp_auth_failures_total", {"reason": reason})
    return value or 0.0


class Node:
    def __init__(
        self,
        tmp: Path,
        *,
        key: str = MCAST["keys"]["1"],
        mode: str = "enforce",
        peers: tuple[IPv4Address, ...] = (),
        priority: int = 100,
    ) -> None:
        vrrp: dict[str, Any] = {
            "vrid": 51,
            "priority": priority,
            "auth_hmac": {"keys": {1: key_file(tmp, "key1", key)}, "mode": mode},
        }
        if peers:
            vrrp["unicast_peers"] = [str(p) for p in peers]
        self.cfg = config.parse(
            {"node": "n1", "vip": VIP, "interface": "eth0", "election": {"vrrp": vrrp}}
        )
        self.peers = peers
        self.pre = Preflight(
            link=HostLink("eth0", 2, True, False, "02:00:00:00:00:12"),
            source=SELF,
            findings=(),
            stale_vip=False,
            unicast_peers=peers,
        )
        self.clock = FakeClock()
        self.timers = FakeTimers(self.clock)
        self.host = Host(ip_address(VIP), mac="02:00:00:00:00:12", addresses=(f"{SELF}/24",))
        self.events: Events = self.host.events
        self.wire: FakeWire | None = None
        self.election = VrrpElection(
            self.cfg,
            self.pre,
            clock=self.clock,
            open_wire=self._open_wire,
            call_later=self.timers.call_later,
            claimwatch=False,
            probe=lambda mac: True,
        )
        self.auth = self.election.adverts.auth
        assert self.auth is not None
        self.wall = MCAST["adverts"][0]["captured_at"]
        self.auth.wall = lambda: self.wall
        self.agent = Agent(
            self.cfg,
            self.pre,
            self.election,
            None,
            actuators=self.host.actuators,
            watch_link=self.host.watch_link,
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[int] | None = None

    def _open_wire(self, ifname: str, ifindex: int, source: Any, peers: Any, rx: bool) -> FakeWire:
        dests = tuple(self.peers) or (packet.GROUP_V4,)
        self.wire = FakeWire(self.events, self.clock, dests)
        return self.wire

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.agent.run(self.stop))
        await until(lambda: self.election.machine.state is state.State.BACKUP)

    async def hear(self, d: Datagram) -> None:
        """Deliver ``d`` and wait until the loop has read it."""
        assert self.wire is not None
        s = self.election.stats
        seen = s.adverts_received + sum(s.auth_failures.values()) + sum(s.invalid.values())
        self.wire.inject(d)
        await until(
            lambda: (
                s.adverts_received + sum(s.auth_failures.values()) + sum(s.invalid.values()) > seen
            )
        )

    async def stopped(self) -> int:
        assert self.task is not None
        self.stop.set()
        return await run_out(self.task, self.timers, lambda: self.election.handover is not None)


async def until(cond: Callable[[], bool], timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


def run(scenario: Callable[[Node], Awaitable[None]], tmp: Path, **node: Any) -> None:
    async def main() -> None:
        await scenario(Node(tmp, **node))

    asyncio.run(main())


def test_keepalived_adverts_signed_with_the_key_are_heard(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        for rec in MCAST["adverts"][:3]:
            n.wall = rec["captured_at"]
            await n.hear(dgram(rec))
        assert n.election.machine.master_ip == KEEPALIVED
        assert n.election.stats.adverts_received == 3
        assert not n.election.stats.auth_failures
        await n.stopped()

    run(scenario, tmp_path)


def test_another_key_is_dropped_and_counted_as_bad_hmac(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        before = failures("bad-hmac")
        await n.hear(dgram(MCAST["adverts"][0]))
        assert n.election.stats.auth_failures == {"bad-hmac": 1}
        assert failures("bad-hmac") == before + 1
        assert n.election.machine.master_ip is None
        assert n.election.stats.adverts_received == 0  # dropped adverts are not received
        await n.stopped()

    run(scenario, tmp_path, key=WRONG_KEY)


def test_a_replayed_advert_is_dropped_and_counted(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        first, second = MCAST["adverts"][:2]
        n.wall = second["captured_at"]
        await n.hear(dgram(second))
        before = failures("replay")
        await n.hear(dgram(first))  # older sequence, still inside the window
        await n.hear(dgram(second))  # the same one again
        assert n.election.stats.auth_failures == {"replay": 2}
        assert failures("replay") == before + 2
        await n.stopped()

    run(scenario, tmp_path)


def test_a_stale_advert_is_dropped_before_any_hmac(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        n.wall = MCAST["adverts"][0]["captured_at"] + 3600  # a capture replayed an hour on
        await n.hear(dgram(MCAST["adverts"][0]))
        assert n.election.stats.auth_failures == {"stale": 1}
        assert n.election.machine.master_ip is None
        await n.stopped()

    run(scenario, tmp_path)


def test_a_skewed_clock_is_accepted_and_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        n.wall = MCAST["adverts"][0]["captured_at"] + 3  # window 5: more than half of it
        with caplog.at_level(logging.WARNING):
            await n.hear(dgram(MCAST["adverts"][0]))
        assert n.election.machine.master_ip == KEEPALIVED
        assert "clock skew approaching" in caplog.text
        caplog.clear()
        n.wall = MCAST["adverts"][1]["captured_at"] + 1  # within half the window: quiet
        with caplog.at_level(logging.WARNING):
            await n.hear(dgram(MCAST["adverts"][1]))
        assert "clock skew" not in caplog.text
        await n.stopped()

    run(scenario, tmp_path)


def test_enforce_drops_an_unsigned_higher_priority_advert(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        before = failures("missing")
        await n.hear(advert(str(OTHER), 250, vip=VIP))
        assert n.election.stats.auth_failures == {"missing": 1}
        assert failures("missing") == before + 1
        assert n.election.machine.master_ip is None
        await n.stopped()

    run(scenario, tmp_path)


def test_permissive_hears_an_unsigned_advert(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        await n.hear(advert(str(OTHER), 250, vip=VIP))
        assert n.election.machine.master_ip == OTHER
        assert not n.election.stats.auth_failures
        await n.stopped()

    run(scenario, tmp_path, mode="permissive")


def test_following_is_off_with_auth(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        for rec in MCAST["adverts"][:3]:
            n.wall = rec["captured_at"]
            await n.hear(dgram(rec))
        assert n.wire is not None and n.wire.followed is None
        await n.stopped()

    run(scenario, tmp_path)


def verifier(key: str, senders: int = auth.MCAST_SENDERS) -> auth.Verifier:
    keys = auth.KeyRing({1: bytes.fromhex(key)}, 1)
    return auth.Verifier(keys, replay=auth.Replay.TIME, window=5, senders=senders)


@pytest.mark.parametrize("peers", [(), (OTHER, IPv4Address("10.77.0.14"))])
def test_our_adverts_are_signed_once_and_verify(tmp_path: Path, peers: Any) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        mdi = state.master_down_interval(3, n.election.machine.priority, 100)
        n.timers.fire_next()
        assert n.election.machine.state is state.State.ACTIVE, mdi
        n.wall += 1.0
        n.timers.fire_next()  # the next advert tick
        assert n.wire is not None
        sent = list(n.wire.sent)
        dests = peers or (packet.GROUP_V4,)
        assert len(sent) == 2 * len(dests)
        v = verifier(MCAST["keys"]["1"])
        trailers = []
        for payload, dst in sent:
            message, trailer = auth.split(payload, ipv6=False)
            assert trailer is not None and len(payload) == len(message) + auth.TRAILER_LEN
            # the IPv4 checksum is the message's, per copy (its destination)
            adv, _ = packet.decode(message, SELF, dst)
            assert adv.priority == 100
            trailers.append(trailer)
        # one trailer per logical advert, on every copy; each verifies once from our source
        assert len(set(trailers)) == 2
        for payload, _ in sent[:: len(dests)]:
            message, trailer = auth.split(payload, ipv6=False)
            assert v.verify(message, trailer, src=SELF, now=n.wall).result is auth.Result.OK
        # from another source address the HMAC does not verify
        message, trailer = auth.split(sent[-1][0], ipv6=False)
        got = verifier(MCAST["keys"]["1"]).verify(message, trailer, src=OTHER, now=n.wall)
        assert got.result is auth.Result.BAD_HMAC
        await n.stopped()

    run(scenario, tmp_path, peers=peers)


def test_receive_only_sends_unsigned(tmp_path: Path) -> None:
    async def scenario(n: Node) -> None:
        await n.start()
        n.timers.fire_next()
        assert n.wire is not None and n.wire.sent
        for payload, _ in n.wire.sent:
            assert auth.split(payload, ipv6=False)[1] is None
        await n.stopped()

    run(scenario, tmp_path, mode="receive-only")


def test_a_reload_rotates_the_keys_in_place_and_keeps_the_replay_marks(tmp_path: Path) -> None:
    """{1} -> {1, 2 sending 1} -> {1, 2 sending 2} -> {2}: each step verifies what the step
    before sends, the replay mark survives (an old capture stays refused), and after the last
    one key 1 is an unknown key."""

    def reloaded(n: Node, keys: dict[int, str], send_key: int) -> None:
        vrrp = {"vrid": 51, "priority": 100, "auth_hmac": {"keys": keys, "send_key": send_key}}
        cfg = config.parse(
            {"node": "n1", "vip": VIP, "interface": "eth0", "election": {"vrrp": vrrp}}
        )
        assert reload.plan(n.cfg, cfg).refused == ()
        n.election.reconfigure(cfg)
        n.cfg = cfg

    async def scenario(n: Node) -> None:
        await n.start()
        a = auth.KeyRing({1: bytes.fromhex(MCAST["keys"]["1"])}, 1)
        b = auth.KeyRing({2: bytes(range(100, 132))}, 2)
        k1 = key_file(tmp_path, "key1", MCAST["keys"]["1"])
        k2 = key_file(tmp_path, "key2", b.keys[2].hex())
        first, second = MCAST["adverts"][:2]
        n.wall = second["captured_at"]
        await n.hear(dgram(second))
        assert n.election.machine.master_ip == KEEPALIVED
        assert n.auth is not None
        sender = n.auth

        def signed(keys: auth.KeyRing, seq: int) -> Datagram:
            message = packet.encode(
                packet.Advert(3, 51, 90, 100, (ip_address(VIP),)), OTHER, packet.GROUP_V4
            )
            trailer = auth.sign(message, src=OTHER, keys=keys, sequence=seq)
            return Datagram(src=OTHER, dst=packet.GROUP_V4, ttl=255, message=message + trailer)

        seq = auth.clock_sequence(n.wall)
        reloaded(n, {1: k1, 2: k2}, 1)
        assert n.auth is sender  # the same Signer/Verifier, re-keyed
        await n.hear(signed(a, seq + 1))
        await n.hear(signed(b, seq + 2))
        assert sum(n.election.stats.auth_failures.values()) == 0
        ours = n.auth.trailer(b"\x31\x33" + bytes(10), SELF)
        assert auth.Trailer.decode(ours).key_id == 1
        reloaded(n, {1: k1, 2: k2}, 2)
        ours = n.auth.trailer(b"\x31\x33" + bytes(10), SELF)
        assert auth.Trailer.decode(ours).key_id == 2
        await n.hear(dgram(first))  # the mark survived the reloads: still a replay
        assert n.election.stats.auth_failures == {"replay": 1}
        reloaded(n, {2: k2}, 2)
        await n.hear(signed(a, seq + 3))
        await n.hear(signed(b, seq + 4))
        assert n.election.stats.auth_failures == {"replay": 1, "unknown-key": 1}
        await n.stopped()

    run(scenario, tmp_path)
