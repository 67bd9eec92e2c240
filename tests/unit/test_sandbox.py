"""What a hook and a tracked script get from vipd (`vipd.sandbox`): its user's ids, none of
vipd's capabilities, no_new_privs, and an environment of ``PATH`` and its ``VIPD_*``
variables only.

What it tests: the real runners (`vipd.hooks.HookRunner`, `vipd.tracking.TrackChecker`) run a
script that copies its own /proc status and its initial environment (``/proc/$$/environ``,
what execve(2) gave it, before the shell adds anything) to a file; the test reads them. Run
as root, with vipd's full capability set (the test asserts it has them, so the check can
fail), for ``scripts.user`` nobody and root: both end with empty effective,
permitted, inheritable, ambient and bounding sets and no_new_privs; the default (null) keeps
vipd's own ids (root here) and drops the same. Needs root (skipped with the reason printed,
failed under CI=true).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import prereq
from vipd import config, sandbox
from vipd.election import LEADER, Transition
from vipd.hooks import HookRunner
from vipd.log import get
from vipd.tracking import TrackChecker

PROBE = """#!/bin/sh
cat /proc/$$/status > {out}/status
tr '\\0' '\\n' < /proc/$$/environ > {out}/environ
"""
CAPS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def status(path: Path) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in path.read_text().splitlines())}


def environ(path: Path) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in path.read_text().splitlines() if ln)


@pytest.fixture
def probe() -> Iterator[tuple[Path, Path]]:
    if os.geteuid() != 0:
        prereq.missing("needs root: the hook's capabilities are vipd's (root's) less the drop")
    mine = status(Path("/proc/self/status"))
    assert int(mine["CapEff"], 16) != 0 and int(mine["CapBnd"], 16) != 0, mine  # can fail
    # Not under pytest's tmp_path (its parent is 0700): nobody must reach the script.
    top = Path(tempfile.mkdtemp(prefix="vipd-sandbox-"))
    top.chmod(0o711)
    try:
        yield from _probe(top)
    finally:
        shutil.rmtree(top)


def _probe(top: Path) -> Iterator[tuple[Path, Path]]:
    out = top / "out"
    out.mkdir()
    out.chmod(0o777)
    script = top / "probe"
    script.write_text(PROBE.format(out=out))
    script.chmod(0o755)
    yield script, out


def assert_dropped(st: dict[str, str], uid: int) -> None:
    for cap in CAPS:
        assert int(st[cap], 16) == 0, (cap, st[cap])
    assert st["NoNewPrivs"] == "1"
    assert st["Uid"].split() == [str(uid)] * 4 and st["Gid"].split() == [str(uid)] * 4
    assert st["Groups"] == ""


@pytest.mark.parametrize(("user", "uid"), [("nobody", 65534), ("root", 0), (None, 0)])
def test_a_hook_runs_without_vipds_capabilities_and_environment(
    probe: tuple[Path, Path], user: str | None, uid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, out = probe
    monkeypatch.setenv("VIPD_SECRET_TOKEN", "leaked")  # vipd's own environment
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    cfg = config.parse(
        {
            "node": "n1",
            "vip": "10.0.0.100",
            "election": {"vrrp": {"vrid": 1}},
            "notify": {"leader": str(script)},
            "scripts": {"user": user},
        }
    )
    sandbox.check(cfg)  # the start-up check accepts it (and vipd can switch users)

    async def main() -> dict[str, int]:
        runner = HookRunner(cfg.notify, node="n1", vip="10.0.0.100", log=get(), scripts=cfg.scripts)
        runner.start()
        runner.on_transition(Transition(LEADER, "master-down", "the master went quiet", 1.0))
        await runner.close()
        return runner.results

    assert asyncio.run(main()) == {"ok": 1}
    assert_dropped(status(out / "status"), uid)
    assert environ(out / "environ") == {
        "PATH": sandbox.PATH,
        "VIPD_VIP": "10.0.0.100",
        "VIPD_STATE": "leader",
        "VIPD_REASON": "master-down",
        "VIPD_DETAIL": "the master went quiet",
        "VIPD_PREVIOUS_STATE": "",
        "VIPD_NODE": "n1",
    }


def test_a_tracked_script_runs_the_same_way(probe: tuple[Path, Path]) -> None:
    script, out = probe
    cfg = config.parse(
        {
            "node": "n1",
            "vip": "10.0.0.100",
            "election": {"vrrp": {"vrid": 1}},
            "track": [{"name": "probe", "script": str(script), "interval": 5}],
            "scripts": {"user": "nobody"},
        }
    )

    async def main() -> None:
        checker = TrackChecker(cfg.track, lambda _: None, log=get(), scripts=cfg.scripts)
        checker.start()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if checker.adjustment().down == ():
                break
        checker.stop()

    asyncio.run(main())
    assert_dropped(status(out / "status"), 65534)
    assert environ(out / "environ") == {"PATH": sandbox.PATH, "VIPD_TRACK": "probe"}


def test_switching_users_needs_setuid_and_setgid() -> None:
    who = sandbox.Identity(os.getuid() + 4242, os.getgid() + 4242)
    why = sandbox.switch_problem(who, effective=0)
    assert why is not None and "CAP_SETGID and CAP_SETUID" in why
    assert sandbox.switch_problem(who, effective=(1 << 6) | (1 << 7)) is None
    me = sandbox.Identity(os.getuid(), os.getgid())
    assert sandbox.switch_problem(me, effective=0) is None or os.geteuid() == 0
