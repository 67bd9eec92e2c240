"""Real-time scheduling reaches every thread of the process (vipd.host.sched.apply).

Needs root (CAP_SYS_NICE): skipped with the reason without it, a failure under CI=true.
"""

from __future__ import annotations

import os
import threading

from vipd.host import sched


def test_every_thread_runs_sched_rr_and_the_threads_they_start_inherit_it(netns_ok: None) -> None:
    """A thread started before the request (the endpoint's, serving a scrape with the GIL
    held) is switched too, and so is one it starts afterwards (a connection's)."""
    policy = sched.realtime_policy(0.01)
    assert policy is not None
    release = threading.Event()
    tids: dict[str, int] = {}
    spawn = threading.Event()

    def later() -> None:
        tids["later"] = threading.get_native_id()
        release.wait(10)

    def early() -> None:
        tids["early"] = threading.get_native_id()
        spawn.wait(10)
        t = threading.Thread(target=later)
        t.start()
        t.join(10)

    before = os.sched_getscheduler(0), os.sched_getparam(0)
    first = threading.Thread(target=early)
    first.start()
    try:
        while "early" not in tids:
            threading.Event().wait(0.01)
        assert os.sched_getscheduler(tids["early"]) == os.SCHED_OTHER
        assert sched.apply(policy) is None
        spawn.set()
        while "later" not in tids:
            threading.Event().wait(0.01)
        for name in ("early", "later"):
            assert os.sched_getscheduler(tids[name]) == os.SCHED_RR, name
            assert os.sched_getparam(tids[name]).sched_priority == policy.priority, name
        assert os.sched_getscheduler(0) == os.SCHED_RR
    finally:
        spawn.set()
        release.set()
        first.join(10)  # both threads end: only this one's policy is left to restore
        os.sched_setscheduler(0, before[0], before[1])
