"""Script security (`vipd.script_security`): a hook, a tracked script or a tracked file that
someone other than root (or ``scripts.user``) could change is refused, at start and on reload.

What it tests: the rules on hand-made trees (every component owned by a trusted uid, no
directory writable by others or a non-root group unless sticky, the file a regular file not so
writable, links followed as the kernel does, each link's owner and directory judged, the script
executable by its user), then the same on this machine's filesystem: ``vipd check`` exits 2 with
one line naming the key and the path, a reload through the real loader is refused and the
running config kept, and a root-owned 0755 script in root-owned directories is accepted.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from vipd import config, sandbox, startup
from vipd.config import ConfigError
from vipd.sandbox import read_node
from vipd.script_security import MAX_LINKS, Node, path_problem, problems

DIR, FILE, LINK = stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK
NOBODY = 65534


def d(mode: int = 0o755, uid: int = 0, gid: int = 0) -> Node:
    return Node(DIR | mode, uid, gid)


def f(mode: int = 0o755, uid: int = 0, gid: int = 0) -> Node:
    return Node(FILE | mode, uid, gid)


def ln(target: str, uid: int = 0) -> Node:
    return Node(LINK | 0o777, uid, 0, target)


BASE: dict[str, Node] = {
    "/": d(),
    "/tmp": d(0o1777),
    "/usr": d(),
    "/usr/bin": d(),
    "/usr/bin/true": f(),
    "/bin": ln("usr/bin"),
    "/etc": d(),
    "/etc/vipd": d(),
    "/etc/vipd/hook": f(),
}


def judge(
    path: str, extra: Mapping[str, Node] | None = None, *, uid: int = 0, executable: bool = True
) -> str | None:
    tree = {**BASE, **(extra or {})}
    return path_problem(path, tree.get, uid, uid, executable=executable)


def test_a_root_owned_0755_script_in_root_owned_directories_is_accepted() -> None:
    assert judge("/etc/vipd/hook") is None
    assert judge("/etc/vipd/hook", uid=NOBODY) is None  # runs as nobody: o+x is enough
    assert judge("/bin/true") is None  # merged /usr: the link is followed, not refused
    assert judge("/etc/./vipd/../vipd//hook") is None


@pytest.mark.parametrize(
    ("path", "extra", "names"),
    [
        ("/etc/vipd/hook", {"/etc/vipd/hook": f(0o757)}, "/etc/vipd/hook is writable by others"),
        ("/etc/vipd/hook", {"/etc/vipd/hook": f(0o775, gid=50)}, "/etc/vipd/hook is writable by "),
        ("/etc/vipd/hook", {"/etc/vipd": d(0o777)}, "/etc/vipd is writable by others"),
        ("/etc/vipd/hook", {"/etc": d(0o775, gid=4)}, "/etc is writable by group 4"),
        ("/etc/vipd/hook", {"/": d(0o777)}, "/ is writable by others"),
        ("/etc/vipd/hook", {"/etc/vipd/hook": f(uid=1000)}, "/etc/vipd/hook is owned by uid 1000"),
        ("/etc/vipd/hook", {"/etc/vipd": d(uid=1000)}, "/etc/vipd is owned by uid 1000"),
        # A sticky /tmp is fine above a safe directory, not as the script's own directory
        # when that is someone else's.
        ("/tmp/x/hook", {"/tmp/x": d(uid=1000), "/tmp/x/hook": f()}, "/tmp/x is owned by uid"),
        # A link to a world-writable script in a world-writable directory (the careless admin).
        (
            "/etc/vipd/hook",
            {
                "/etc/vipd/hook": ln("/srv/open/hook"),
                "/srv": d(),
                "/srv/open": d(0o777),
                "/srv/open/hook": f(0o777),
            },
            "/srv/open is writable by others",
        ),
        # ... and the link's own directory, and the link's owner.
        (
            "/srv/open/hook",
            {"/srv": d(), "/srv/open": d(0o777), "/srv/open/hook": ln("/etc/vipd/hook")},
            "/srv/open is writable by others",
        ),
        (
            "/etc/vipd/hook",
            {"/etc/vipd/hook": ln("/usr/bin/true", uid=1000)},
            "symbolic link /etc/vipd/hook is owned by uid 1000",
        ),
        # A relative link, resolved in the link's directory, ".." included.
        (
            "/etc/vipd/hook",
            {"/etc/vipd/hook": ln("../../srv/h"), "/srv": d(0o777), "/srv/h": f()},
            "/srv is writable by others",
        ),
        ("/etc/vipd/loop", {"/etc/vipd/loop": ln("/etc/vipd/loop")}, f"more than {MAX_LINKS}"),
        ("/etc/vipd/none", {}, "/etc/vipd/none does not exist"),
        ("/etc/vipd", {}, "/etc/vipd is a directory, not a file"),
        ("/etc/vipd/hook/x", {}, "/etc/vipd/hook is not a directory"),
        ("/etc/vipd/fifo", {"/etc/vipd/fifo": Node(stat.S_IFIFO | 0o644, 0, 0)}, "regular"),
        ("etc/vipd/hook", {}, "not an absolute path"),
    ],
)
def test_unsafe_paths_are_refused_naming_the_component(
    path: str, extra: dict[str, Node], names: str
) -> None:
    why = judge(path, extra)
    assert why is not None and names in why, why


def test_a_sticky_directory_is_safe_above_and_group_root_may_write() -> None:
    assert judge("/tmp/x/hook", {"/tmp/x": d(), "/tmp/x/hook": f()}) is None
    assert judge("/etc/vipd/hook", {"/etc/vipd": d(0o775), "/etc/vipd/hook": f(0o775)}) is None


def test_the_scripts_user_is_trusted_like_root_and_must_be_able_to_run_it() -> None:
    mine = {"/etc/vipd": d(uid=NOBODY), "/etc/vipd/hook": f(0o700, uid=NOBODY)}
    assert judge("/etc/vipd/hook", mine, uid=NOBODY) is None
    assert "owned by uid 65534" in (judge("/etc/vipd/hook", mine, uid=0) or "")
    why = judge("/etc/vipd/hook", {"/etc/vipd/hook": f(0o700)}, uid=NOBODY)
    assert why == "/etc/vipd/hook is not executable by uid 65534 gid 65534"
    # A tracked file is read, not run: no execute bit needed; it must be safe all the same.
    assert judge("/etc/vipd/hook", {"/etc/vipd/hook": f(0o644)}, executable=False) is None
    assert judge("/etc/vipd/hook", {"/etc/vipd/hook": f(0o666)}, executable=False) is not None


def doc(**top: Any) -> dict[str, Any]:
    return {"node": "n1", "vip": "10.0.0.100", "election": {"vrrp": {"vrid": 1}}, **top}


def test_every_hook_and_tracked_path_is_checked_with_its_key() -> None:
    cfg = config.parse(
        doc(
            notify={"leader": "/etc/vipd/hook up", "all": ["/srv/bad"]},
            track=[{"script": "/usr/bin/true"}, {"name": "b", "file": "/srv/flag"}],
        )
    )
    tree = {**BASE, "/srv": d(0o777), "/srv/bad": f(), "/srv/flag": f(0o644)}
    found = problems(cfg, tree.get, 0, 0)
    assert [(e.key, e.got) for e in found] == [
        ("notify.all", "/srv/bad"),
        ("track[1].file", "/srv/flag"),
    ]
    assert "scripts.security" in str(found[0]) and "/srv is writable by others" in str(found[0])
    off = config.parse({**doc(notify={"all": "/srv/bad"}), "scripts": {"security": False}})
    assert problems(off, tree.get, 0, 0) == []


def test_scripts_keys() -> None:
    assert config.parse(doc()).scripts == config.Scripts(user=None, security=True)
    got = config.parse(doc(scripts={"user": 1000, "security": False})).scripts
    assert got == config.Scripts(user="1000", security=False)
    assert config.parse(doc(scripts={"user": "vipd-hooks:adm"})).scripts.user == "vipd-hooks:adm"
    for bad in ({"user": "a b"}, {"user": ""}, {"user": True}, {"security": "no"}, {"x": 1}):
        with pytest.raises(ConfigError) as e:
            config.parse(doc(scripts=bad))
        assert str(e.value).startswith("scripts"), e.value


# -- this machine's filesystem -------------------------------------------------------------------


def me() -> str:
    return f"{os.getuid()}:{os.getgid()}"  # the test's own files are trusted as its user's


def write_config(path: Path, hook: Path) -> Path:
    import yaml

    cfg = doc(notify={"leader": str(hook)}, scripts={"user": me()})
    path.write_text(yaml.safe_dump(cfg))
    return path


def hook(where: Path, mode: int = 0o755) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "hook"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


def vipd_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vipd", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path: a config error shortens the value it quotes, and the
    test reads the whole path of the hook there (pytest's own tmp_path grows with -n)."""
    base = Path(tempfile.mkdtemp(prefix="vs", dir="/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("case", ["script", "directory", "symlink"])
def test_start_and_reload_refuse_a_script_others_can_change(short_tmp: Path, case: str) -> None:
    tmp_path = short_tmp
    if case == "script":
        unsafe = hook(tmp_path / "safe", 0o777)
        path, names = unsafe, str(unsafe)
    elif case == "directory":
        open_dir = tmp_path / "open"
        path = hook(open_dir / "sub")
        open_dir.chmod(0o777)
        names = str(open_dir)
    else:
        open_dir = tmp_path / "open"
        target = hook(open_dir, 0o777)
        open_dir.chmod(0o777)
        safe = tmp_path / "safe"
        safe.mkdir()
        path = safe / "hook"
        path.symlink_to(target)
        names = str(open_dir)
    cfg_path = write_config(tmp_path / "vipd.yaml", path)

    out = vipd_check(cfg_path)  # what `vipd run` does first, too (startup.load)
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("vipd: config error: notify.leader:"), line
    assert names in line and str(path) in line, line

    with pytest.raises(ConfigError) as e:  # the SIGHUP loader
        loader = startup.reloader(str(cfg_path))
        assert loader is not None
        loader()
    assert e.value.key == "notify.leader" and names in str(e.value)


def test_a_reload_to_an_unsafe_hook_keeps_the_running_config(tmp_path: Path) -> None:
    from tests.unit.test_vrrp_driver import Node as Lab
    from tests.unit.test_vrrp_driver import run

    bad = hook(tmp_path / "open", 0o777)
    loader = startup.reloader(str(write_config(tmp_path / "vipd.yaml", bad)))
    assert loader is not None

    async def scenario(n: Lab) -> None:
        await n.start()
        running = n.agent.cfg
        n.agent.loader = loader
        assert n.agent.reload() == "invalid"
        assert n.agent.cfg is running and n.agent.hooks.cfg.leader == ()
        n.stop.set()
        await n.stopped()

    run(scenario)


def test_a_safe_script_is_accepted(tmp_path: Path) -> None:
    good = hook(tmp_path / "safe")  # the test's own 0755 file in its own 0700 directories
    cfg = config.parse(doc(notify={"leader": str(good)}, scripts={"user": me()}))
    sandbox.check(cfg)
    loader = startup.reloader(str(write_config(tmp_path / "vipd.yaml", good)))
    assert loader is not None and loader().notify.leader == (str(good),)


def test_root_owned_0755_system_script_is_accepted_for_nobody() -> None:
    # /usr/bin/true: root-owned 0755 in root-owned directories on every Debian-like host.
    cfg = config.parse(doc(notify={"leader": "/usr/bin/true"}, scripts={"user": "nobody"}))
    assert problems(cfg, read_node, NOBODY, NOBODY) == []
