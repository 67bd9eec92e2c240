"""Hooks on real kernels: ``python -m vipd run`` refuses a hook that others can change, at
start and on reload, and runs an accepted one without its own privileges.

What it tests: a notify hook in a world-writable directory makes vipd exit 2 at start with
one line naming ``notify.leader`` and the directory; a running leader whose file is rewritten
to point at it refuses the SIGHUP (the running config kept, the old hook still the one that
runs). A safe hook (root-owned 0755 in root-owned directories) run as ``scripts.user``
nobody copies its own /proc status and initial environment out: uid
65534, empty capability sets (the bounding set included), no_new_privs, and only ``PATH`` and
the ``VIPD_*`` variables, while vipd itself runs as root with every capability.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.netns.waiting import wait_for
from vipd import sandbox
from vipd.lab.daemons import VipdDaemon, VrrpSpec
from vipd.lab.topology import VIP4, Lab

SPEC = VrrpSpec(vip=VIP4, advert_interval=0.1)
PROBE = """#!/bin/sh
cat /proc/$$/status > {out}/status.$2
tr '\\0' '\\n' < /proc/$$/environ > {out}/environ.$2
"""


class HookedVipd(VipdDaemon):
    def __init__(self, lab: Lab, leader: str) -> None:
        super().__init__(lab, lab.node("n1"), SPEC, lab.nodes)
        self.leader = leader

    def config(self) -> dict[str, Any]:
        out = super().config()
        out["notify"] = {"leader": self.leader}
        out["scripts"] = {"user": "nobody"}  # vipd runs as root here: it may switch
        return out


def fields(path: Path) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in path.read_text().splitlines())}


def probe(lab: Lab) -> tuple[str, Path]:
    lab.workdir.chmod(0o711)  # nobody reaches the hook and its output directory
    out = lab.workdir / "out"
    out.mkdir()
    out.chmod(0o777)
    hook = lab.workdir / "probe"
    hook.write_text(PROBE.format(out=out))
    hook.chmod(0o755)
    return str(hook), out


def test_an_unsafe_hook_is_refused_at_start_and_on_reload(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(1)
    good, out = probe(lab)
    open_dir = lab.workdir / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    bad = open_dir / "hook"
    bad.write_text("#!/bin/sh\ntouch /tmp/owned\n")
    bad.chmod(0o755)

    d = HookedVipd(lab, str(bad))
    d.start()
    assert d.wait(15.0) == 2, d.log_tail()
    errors = [ln for ln in d.log_text().splitlines() if "config error" in ln]
    assert len(errors) == 1 and "notify.leader:" in errors[0], d.log_tail()
    assert f"{open_dir} is writable by others" in errors[0], errors

    d.leader = good
    d.start()
    assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 15.0) is not None, d.log_tail()
    assert wait_for(lambda: (out / "status.leader").exists(), 5.0) is not None, d.log_tail()
    doc = yaml.safe_load(d.config_path.read_text())
    doc["notify"]["leader"] = str(bad)
    d.config_path.write_text(yaml.safe_dump(doc))
    d.stop(signal.SIGHUP, timeout=None)
    assert wait_for(lambda: "reload failed" in d.log_text(), 5.0) is not None, d.log_tail()
    assert str(open_dir) in d.log_tail(3) and d.running()
    assert d.stop(signal.SIGTERM) == 0


def test_a_hook_runs_as_nobody_without_capabilities(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(1)
    hook, out = probe(lab)
    d = HookedVipd(lab, hook)
    d.start()
    assert wait_for(lambda: lab.holders(VIP4) == ["n1"], 15.0) is not None, d.log_tail()
    assert wait_for(lambda: (out / "environ.leader").exists(), 5.0) is not None, d.log_tail()
    assert d.pid is not None
    mine = fields(Path(f"/proc/{d.pid}/status"))  # vipd itself: root, every capability
    assert mine["Uid"].split()[0] == "0" and int(mine["CapEff"], 16) != 0, mine
    assert d.stop(signal.SIGTERM) == 0

    st = fields(out / "status.leader")
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[cap], 16) == 0, (cap, st)
    assert st["NoNewPrivs"] == "1" and st["Uid"].split() == ["65534"] * 4, st
    env = dict(ln.split("=", 1) for ln in (out / "environ.leader").read_text().splitlines())
    assert env["PATH"] == sandbox.PATH
    assert set(env) == {
        "PATH",
        "VIPD_VIP",
        "VIPD_STATE",
        "VIPD_REASON",
        "VIPD_DETAIL",
        "VIPD_PREVIOUS_STATE",
        "VIPD_NODE",
    }, env
    assert (env["VIPD_STATE"], env["VIPD_NODE"]) == ("leader", "n1")
