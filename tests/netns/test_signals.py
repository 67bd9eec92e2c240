"""Signals on real kernels: every catchable terminating signal releases the VIP, SIGHUP
reloads without moving it, SIGUSR1/SIGUSR2 log the status and change nothing.

What it tests: ``python -m vipd run`` in a network namespace, as systemd or the kubelet
runs it. For each signal whose default action ends a process (signal(7) "Term" and "Core",
less SIGPIPE which Python ignores and SIGKILL/SIGSTOP which nobody can catch), a lone
leader takes the ordered stop: the VIP is gone from the interface when it exits, and the
exit code is 0 (SIGTERM/SIGINT) or 128 + the signal. A reload with a good change applies it
without the VIP being removed, re-bound or re-announced; an invalid file and a VRID change
change nothing and say so in one line.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.netns.waiting import wait_for
from vipd.agent import FAULT_SIGNALS, signal_name
from vipd.lab.daemons import VipdDaemon, VrrpSpec, make_daemon
from vipd.lab.topology import VIP4, Lab

# Every terminating signal vipd handles; real-time ones sampled at both ends and inside.
TERMINATING = [
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGABRT,
    signal.SIGALRM,
    signal.SIGVTALRM,
    signal.SIGPROF,
    signal.SIGIO,
    signal.SIGPWR,
    signal.SIGSTKFLT,
    signal.SIGXCPU,
    signal.SIGXFSZ,
    signal.SIGRTMIN,
    signal.SIGRTMIN + 7,
    signal.SIGRTMAX,
    *sorted(FAULT_SIGNALS),
]
SPEC = VrrpSpec(vip=VIP4, advert_interval=0.1)


def leader(lab: Lab, name: str = "n1") -> VipdDaemon:
    d = make_daemon("vipd", lab, lab.node(name), SPEC)
    assert isinstance(d, VipdDaemon)
    return d


def up(lab: Lab, d: VipdDaemon, timeout: float = 15.0) -> None:
    d.start()
    took = wait_for(lambda: lab.holders(SPEC.vip) == [d.node.name], timeout)
    assert took is not None, d.log_tail()


def test_every_terminating_signal_releases_the_vip(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(1)
    d = leader(lab)
    failures = []
    for sig in TERMINATING:
        up(lab, d)
        code = d.stop(sig, timeout=10.0)
        want = 0 if sig in (signal.SIGTERM, signal.SIGINT) else 128 + sig
        held = lab.holders(SPEC.vip)
        if code != want or held:
            failures.append(
                f"{signal_name(sig)}: exit {code} (want {want}), VIP on {held}\n{d.log_tail()}"
            )
        elif "VIP removed" not in d.log_text():
            failures.append(f"{signal_name(sig)}: no ordered release in the log\n{d.log_tail()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2])
def test_status_signals_keep_running_and_keep_the_vip(
    make_lab: Callable[..., Lab], sig: signal.Signals
) -> None:
    lab = make_lab(1)
    d = leader(lab)
    up(lab, d)
    d.stop(sig, timeout=None)
    took = wait_for(lambda: f"signal={sig.name}" in d.log_text(), 5.0)
    assert took is not None, d.log_tail()
    line = next(ln for ln in d.log_text().splitlines() if f"signal={sig.name}" in ln)
    m = re.search(r' status=(".*")$', line)
    assert m is not None, line
    doc = json.loads(json.loads(m.group(1)))  # logfmt quotes the JSON document
    assert doc["vip_bound"] is True and doc["role"] == "leader", doc
    time.sleep(0.5)
    assert d.running() and lab.holders(SPEC.vip) == ["n1"]
    assert d.stop(signal.SIGTERM) == 0


def rewrite(path: Path, garp: dict[str, Any] | None = None, **vrrp: Any) -> None:
    """Change keys of election.vrrp (and garp) in a daemon's config file."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    doc["election"]["vrrp"].update(vrrp)
    doc["garp"].update(garp or {})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_sighup_applies_a_good_change_without_moving_the_vip(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab(2)
    n1, n2 = leader(lab, "n1"), leader(lab, "n2")
    up(lab, n1)
    n2.start()
    assert wait_for(lambda: n2.state() == "BACKUP", 15.0) is not None, n2.log_tail()

    def watch(seconds: float) -> set[tuple[str, ...]]:
        seen = set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            seen.add(tuple(lab.holders(SPEC.vip)))
            time.sleep(0.02)
        return seen

    # A good change: a lower priority that still outranks n2, and a new GARP burst.
    rewrite(n1.config_path, garp={"repeat": 2}, priority=180)
    n1.stop(signal.SIGHUP, timeout=None)
    assert wait_for(lambda: "msg=reloaded" in n1.log_text(), 5.0) is not None, n1.log_tail()
    assert watch(1.0) == {("n1",)}
    text = n1.log_text()
    assert "keys=election.vrrp.priority,garp.repeat" in text, n1.log_tail()
    assert text.count("VIP bound and announced") == 1 and "VIP removed" not in text
    assert n1.running()

    # An invalid file: nothing changes, one line says why.
    rewrite(n1.config_path, priority=300)
    n1.stop(signal.SIGHUP, timeout=None)
    assert wait_for(lambda: "reload failed" in n1.log_text(), 5.0) is not None, n1.log_tail()
    assert "election.vrrp.priority" in n1.log_tail(3)

    # A VRID change needs a restart: refused, nothing changes (n2 does not take over).
    rewrite(n1.config_path, priority=180, vrid=52)
    n1.stop(signal.SIGHUP, timeout=None)
    assert wait_for(lambda: "reload refused" in n1.log_text(), 5.0) is not None, n1.log_tail()
    assert "keys=election.vrrp.vrid" in n1.log_tail(3)
    assert watch(1.0) == {("n1",)}
    assert n2.state() == "BACKUP" and n1.running()

    # The reloaded priority is the one in use: n2 at 190 now outranks n1 at 180 and preempts.
    n2.stop(signal.SIGTERM)
    rewrite(n1.config_path, vrid=51)
    n2.start(priority=190)
    took = wait_for(lambda: lab.holders(SPEC.vip) == ["n2"], 10.0)
    assert took is not None, n1.log_tail() + "\n" + n2.log_tail()
    for d in (n1, n2):
        assert d.stop(signal.SIGTERM) == 0
