"""vipd.health.checker's driver logic without a network: the check itself is replaced by a
script of outcomes, so this tests the schedule, rise/fall per target, ``on_change``,
``set_targets`` and the lifecycle. The real HTTPS checks are in tests/netns/test_health.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from ipaddress import IPv4Address, ip_address

import pytest

from vipd.config import Health
from vipd.health.checker import Address, BackendHealth, HealthChecker
from vipd.health.tracker import Outcome

LOCAL = IPv4Address("127.0.0.1")
A = IPv4Address("10.0.0.1")
B = IPv4Address("10.0.0.2")
C = IPv4Address("10.0.0.3")
PARAMS = Health(interval=0.02, timeout=0.01, rise=2, fall=2)


class Scripted(HealthChecker):
    """Each target answers from its script (True = HTTP 200), then keeps the last answer."""

    def __init__(self, script: dict[Address, list[bool]], **kw: object) -> None:
        self.script = script
        self.calls: dict[Address, int] = {}
        super().__init__([a for a in script if a != PARAMS.local], PARAMS, **kw)  # type: ignore[arg-type]

    async def check(self, addr: Address, request: bytes | None = None) -> Outcome:
        await asyncio.sleep(0)
        n = self.calls.get(addr, 0)
        self.calls[addr] = n + 1
        answers = self.script.get(addr, [True])
        ok = answers[min(n, len(answers) - 1)]
        return Outcome(ok=ok, status=200 if ok else 500, error=None if ok else "http status 500")


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


def test_every_target_rises_and_falls_on_its_own() -> None:
    changes: list[tuple[Address, bool]] = []

    async def main() -> None:
        hc = Scripted(
            {LOCAL: [True], A: [True, True, False, False], B: [False]},
            on_change=lambda addr, s: changes.append((addr, s.healthy)),
        )
        assert hc.targets() == [LOCAL, A, B]
        assert not hc.local_healthy() and not hc.healthy(A)  # everything starts unhealthy
        hc.start()
        await until(lambda: (A, False) in changes and hc.calls.get(B, 0) >= 4)
        assert hc.local_healthy() and not hc.healthy(A) and not hc.healthy(B)
        assert not hc.healthy(C)  # not a target
        snap = hc.snapshot()
        assert set(snap) == {LOCAL, A, B} and isinstance(snap[A], BackendHealth)
        assert snap[B].failures >= 4 and snap[B].error == "http status 500"
        hc.stop()
        await hc.closed()

    asyncio.run(main())
    # One call per transition: A up then down, the local one up, B never.
    assert changes.count((A, True)) == 1 and changes.count((A, False)) == 1
    assert changes.count((LOCAL, True)) == 1
    assert not [c for c in changes if c[0] == B]


def test_set_targets_adds_unhealthy_removes_and_keeps_local() -> None:
    async def main() -> None:
        hc = Scripted({LOCAL: [True], A: [True], B: [True], C: [True]})
        hc.set_targets([A, B])
        hc.start()
        await until(lambda: hc.healthy(A) and hc.healthy(B))
        hc.set_targets([B, C])
        assert set(hc.snapshot()) == {LOCAL, B, C}
        assert hc.healthy(B) and not hc.healthy(C)  # kept / new one starts unhealthy
        await until(lambda: hc.healthy(C))
        checked = hc.calls[A]
        await asyncio.sleep(5 * PARAMS.interval)
        assert hc.calls[A] == checked  # no longer checked
        hc.stop()
        await hc.closed()

    asyncio.run(main())


def test_a_failing_callback_does_not_stop_the_checks() -> None:
    def boom(addr: Address, s: BackendHealth) -> None:
        raise RuntimeError("consumer bug")

    async def main() -> None:
        hc = Scripted({LOCAL: [True, True, False, False, True, True]}, on_change=boom)
        hc.start()
        await until(lambda: hc.calls.get(LOCAL, 0) >= 8)
        assert hc.local_healthy()  # up, down, up again: every transition despite the errors
        hc.stop()
        await hc.closed()

    asyncio.run(main())


def test_targets_must_be_addresses() -> None:
    with pytest.raises(TypeError):
        HealthChecker(["10.0.0.1"], PARAMS)  # type: ignore[list-item]
    assert HealthChecker([ip_address("::1")], PARAMS).url(ip_address("::1")) == (
        "https://[::1]:6443/readyz"
    )


def test_a_bug_in_a_check_counts_as_a_failure_and_the_loop_goes_on() -> None:
    class Buggy(Scripted):
        async def check(self, addr: Address, request: bytes | None = None) -> Outcome:
            n = self.calls.get(addr, 0)
            if n >= 2:
                self.calls[addr] = n + 1
                raise ValueError("a bug")
            return await super().check(addr, request)

    async def main() -> None:
        hc = Buggy({LOCAL: [True]})
        hc.start()
        await until(lambda: hc.calls.get(LOCAL, 0) >= 5)
        s = hc.snapshot()[LOCAL]
        assert not s.healthy and s.error == "internal error: ValueError('a bug')"
        hc.stop()
        await hc.closed()

    asyncio.run(main())
