"""Scripts, the shell: the host side of ``scripts`` (`vipd.script_security` decides), and
running a hook or a tracked script with less than vipd has: as ``scripts.user``, with none of
vipd's capabilities and a minimal environment (keepalived runs its scripts as ``script_user``,
keepalived/core/notify.c ``set_script_env``; vipd also drops the capabilities, which keepalived
leaves to the change of user).

What it is
    `check` runs at start (``vipd run``, ``vipd check``) and on every reload: it resolves
    ``scripts.user`` (`resolve_user`), judges every command and tracked file on what
    `read_node` (lstat(2), readlink(2)) finds, and refuses a user vipd cannot switch to
    (`switch_problem`); the first problem is a `vipd.config.ConfigError`.

    `environment` is all a child gets: ``PATH`` (a fixed list of the system directories, not
    vipd's) and the ``VIPD_*`` variables of its hook; nothing of vipd's own environment (in a
    pod that holds the service-account and config variables). `Drop` is the function the
    child runs between fork and exec (``preexec_fn``), in this order, each step documented in
    capabilities(7) and prctl(2):

    1. ``PR_SET_NO_NEW_PRIVS``: no exec after this one can gain a privilege (set-uid files,
       file capabilities), whatever is below;
    2. ``PR_CAPBSET_DROP`` of every capability up to ``/proc/sys/kernel/cap_last_cap``, while
       vipd still holds ``CAP_SETPCAP`` (without it, as in a pod that never granted it, the
       bounding set stays what the runtime gave, and step 1 keeps it unusable);
    3. ``PR_CAP_AMBIENT_CLEAR_ALL``;
    4. the supplementary groups cleared (kept only by a vipd without ``CAP_SETGID`` running
       them as itself), then the gid and uid set (real, effective, saved) to the scripts'
       user, each only when it differs from vipd's own (so a vipd that is not root, or a pod
       without ``CAP_SETUID``, can still run them as itself);
    5. capset(2) with empty effective, permitted and inheritable sets, which also covers the
       user root (a change of uid to non-root clears them by itself).

    A step that fails raises in the child; subprocess reports it to the parent as the
    command's failure to start (logged and counted, never run with vipd's privileges). The
    libc functions are looked up in the parent once, so the child only calls them: it takes
    no lock, imports nothing and logs nothing, which is what keeps a fork from vipd's threads
    safe (the child is single-threaded and holds the interpreter lock).

What it must not do: decide which scripts are safe (`vipd.script_security`), change a file,
or touch vipd's own process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import grp
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from vipd import script_security
from vipd.config import NOTIFY_STATES, Config, ConfigError, Scripts

# A fixed PATH: the FHS system directories (what systemd gives a service by default), so a
# hook's bare command names never resolve in a directory taken from vipd's environment.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

CAP_SETGID = 6
CAP_SETUID = 7
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def environment(extra: Mapping[str, str]) -> dict[str, str]:
    """A child's whole environment: ``PATH`` and ``extra`` (its ``VIPD_*`` variables)."""
    return {"PATH": PATH, **extra}


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63  # probe every bit: the kernel answers EINVAL past its last


DEFAULT_SCRIPTS = Scripts()  # as vipd's own user, checked


@dataclass(frozen=True, slots=True)
class Identity:
    uid: int
    gid: int


class Drop:
    """The ``preexec_fn`` that leaves the child with ``who``'s ids and no capabilities."""

    def __init__(self, who: Identity) -> None:
        self.who = who
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._prctl = libc.prctl
        self._prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
        self._prctl.restype = ctypes.c_int
        self._capset = libc.capset
        self._capset.restype = ctypes.c_int
        self._last_cap = _last_cap()
        self._header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
        self._empty = (_CapData * 2)()

    @classmethod
    def for_scripts(cls, cfg: Scripts) -> Drop:
        """As ``scripts.user`` (raises `vipd.config.ConfigError` for a user that is gone)."""
        return cls(Identity(*resolve_user(cfg.user)))

    def _call(self, what: str, ret: int) -> None:
        if ret != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    def __call__(self) -> None:
        self._call("PR_SET_NO_NEW_PRIVS", self._prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        for cap in range(self._last_cap + 1):
            if self._prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                e = ctypes.get_errno()
                if e in (errno.EINVAL, errno.EPERM):  # past the last one; no CAP_SETPCAP
                    break
                raise OSError(e, f"PR_CAPBSET_DROP {cap}: {os.strerror(e)}")
        cleared = self._prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        if cleared != 0 and ctypes.get_errno() != errno.EINVAL:  # EINVAL: no ambient sets
            self._call("PR_CAP_AMBIENT_CLEAR_ALL", cleared)
        uid, gid = self.who.uid, self.who.gid
        if os.getgroups():
            try:
                os.setgroups([])
            except PermissionError:
                # No CAP_SETGID (a pod): only allowed when the ids stay vipd's own
                # (`switch_problem` refused the rest at start), which keep their groups.
                if (uid, gid) != (os.geteuid(), os.getegid()):
                    raise
        if os.getresgid() != (gid, gid, gid):
            os.setresgid(gid, gid, gid)
        if os.getresuid() != (uid, uid, uid):
            os.setresuid(uid, uid, uid)
        self._call("capset", self._capset(ctypes.byref(self._header), ctypes.byref(self._empty)))


def _effective() -> int:
    """This process's effective capabilities (``CapEff`` of /proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def switch_problem(who: Identity, effective: int | None = None) -> str | None:
    """Why this vipd cannot become ``who`` in a child (capabilities(7): changing ids needs
    ``CAP_SETUID``/``CAP_SETGID``, which a pod must grant), or None."""
    caps = _effective() if effective is None else effective
    missing = []
    if os.getresgid() != (who.gid,) * 3 and not caps >> CAP_SETGID & 1:
        missing.append("CAP_SETGID")
    if os.getresuid() != (who.uid,) * 3 and not caps >> CAP_SETUID & 1:
        missing.append("CAP_SETUID")
    if not missing:
        return None
    return (
        f"must be a user vipd can switch to: running scripts as uid {who.uid} gid {who.gid} "
        f"needs {' and '.join(missing)}, which vipd does not have (grant them, or name "
        "vipd's own user)"
    )


def read_node(path: str) -> script_security.Node | None:
    """lstat(2) (and readlink(2) for a link) of ``path``; None when it cannot be looked at."""
    try:
        st = os.lstat(path)
        target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    except OSError:
        return None
    return script_security.Node(st.st_mode, st.st_uid, st.st_gid, target)


def resolve_user(spec: str | None) -> tuple[int, int]:
    """``scripts.user`` as (uid, gid): None, vipd's own; a name or uid from the user
    database, a number without an entry as itself (its gid the same number); ``:group`` a
    group name or gid."""
    if spec is None:
        return os.geteuid(), os.getegid()
    name, _, group = spec.partition(":")
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if not name.isdigit():
            raise ConfigError(
                "scripts.user", "must name a user of this host (or be a uid)", spec
            ) from None
        uid = gid = int(name)
    if group:
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise ConfigError(
                "scripts.user", "must name a group of this host after ':' (or a gid)", spec
            ) from None
    return uid, gid


def check(cfg: Config) -> None:
    """At start and on every reload: every command and tracked file is safe (the first
    problem raised) and, when anything runs, vipd can become the scripts' user."""
    uid, gid = resolve_user(cfg.scripts.user)
    found = script_security.problems(cfg, read_node, uid, gid)
    if found:
        raise found[0]
    runs = any(cfg.notify.command(n) for n in (*NOTIFY_STATES, "all"))
    if runs or any(t.script for t in cfg.track):
        why = switch_problem(Identity(uid, gid))
        if why is not None:
            raise ConfigError("scripts.user", why, cfg.scripts.user)
