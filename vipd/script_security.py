"""Script security: refuse a hook, a tracked script or a tracked file that someone other than
root (or ``scripts.user``) could change, before vipd runs or reads it (keepalived's
``enable_script_security``, keepalived.conf(5)).

What it is
    `path_problem` walks one absolute path the way the kernel resolves it (path_resolution(7)):
    from ``/``, one component at a time, following every symbolic link where it is met (an
    absolute target restarts at ``/``, a relative one continues in the link's own directory),
    ``..`` going back up, at most `MAX_LINKS` links. Every directory looked in, every link
    followed and the file reached is judged by `node_problem`, on plain `Node` records (what
    lstat(2) and readlink(2) return), so every rule is tested on hand-made trees. `problems`
    applies it to every command and tracked file of a `Config`, one `ConfigError` naming the
    key per problem (`vipd.sandbox.check` reads the host for it and raises the first: exit 2
    at start, a refused reload).

Rules, from keepalived's ``check_security`` and ``check_script_secure``
(https://github.com/acassen/keepalived/blob/master/keepalived/core/notify.c):
    - every component (directory, link, file) is owned by root or by the scripts' user;
    - a directory is not writable by its group (unless the group is root) nor by others,
      unless it has the sticky bit (then only an entry's owner may rename or remove it, so
      ``/tmp`` above a safe directory is safe, as keepalived allows);
    - the file is a regular file, not writable by its group (unless root's) nor by others;
    - a link's own mode means nothing (it is always 0777); its owner counts, and so does the
      directory holding it, which is walked like any other;
    - a script must be executable by the user it runs as (keepalived's ``is_executable``).
    Where vipd differs: keepalived checks only scripts that run as root (or are set-uid
    root), since a non-root script gains nothing; vipd checks every script, since a hook's
    user may have more than its attacker, and every tracked file, since whoever writes one
    steers the election. keepalived takes the written path with lstat(2) on each prefix
    (refusing a link above the file) and then the resolved one; vipd follows the links as
    the kernel does, so a merged-/usr host's ``/bin -> usr/bin`` is judged, not refused.

What it must not do: run or open a script, change anything, or read the host (the thin
reader, lstat(2) and readlink(2) into `Node`, is `vipd.sandbox.read_node`).
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from vipd.config import NOTIFY_STATES, Config, ConfigError

MAX_LINKS = 40  # the kernel's limit of links followed in one lookup (ELOOP), path_resolution(7)
RULE = (
    "must be a file that only root or scripts.user can change, in directories only they can "
    "change (scripts.security)"
)


@dataclass(frozen=True, slots=True)
class Node:
    """One path component as lstat(2) sees it; ``target``: a link's readlink(2)."""

    mode: int
    uid: int
    gid: int
    target: str | None = None


Lookup = Callable[[str], "Node | None"]  # None: it does not exist or cannot be looked at


def node_problem(path: str, node: Node, trusted: frozenset[int], *, last: bool) -> str | None:
    """Why ``node`` at ``path`` lets an untrusted user change what runs, or None."""
    mode = node.mode
    if node.uid not in trusted:
        return f"{path} is owned by uid {node.uid}"
    if stat.S_ISLNK(mode):
        return None
    if stat.S_ISDIR(mode):
        if last:
            return f"{path} is a directory, not a file"
        if mode & stat.S_ISVTX:
            return None
    elif not last:
        return f"{path} is not a directory"
    elif not stat.S_ISREG(mode):
        return f"{path} is not a regular file"
    if mode & stat.S_IWOTH:
        return f"{path} is writable by others (mode {stat.S_IMODE(mode):04o})"
    if mode & stat.S_IWGRP and node.gid != 0:
        return f"{path} is writable by group {node.gid} (mode {stat.S_IMODE(mode):04o})"
    return None


def executable_by(node: Node, uid: int, gid: int) -> bool:
    """Whether ``uid``:``gid`` may execute the file (root: any x bit), as execve(2) decides."""
    if uid == 0:
        return bool(node.mode & 0o111)
    if uid == node.uid:
        return bool(node.mode & stat.S_IXUSR)
    if gid == node.gid:
        return bool(node.mode & stat.S_IXGRP)
    return bool(node.mode & stat.S_IXOTH)


def walk(path: str, lookup: Lookup, trusted: frozenset[int]) -> tuple[str | None, Node | None]:
    """(problem, the file reached): ``path`` resolved component by component."""
    if not path.startswith("/"):
        return f"{path} is not an absolute path", None
    root = lookup("/")
    if root is None:
        return "/ cannot be looked at", None
    why = node_problem("/", root, trusted, last=False)
    if why:
        return why, None
    done: list[str] = []  # the directories resolved so far, below /
    todo = [c for c in path.split("/") if c and c != "."]
    links = 0
    node = root
    while todo:
        name = todo.pop(0)
        if name == "..":
            if done:
                done.pop()
            continue
        here = "/" + "/".join([*done, name])
        got = lookup(here)
        if got is None:
            return f"{here} does not exist or cannot be looked at", None
        node = got
        last = not todo
        if stat.S_ISLNK(node.mode):
            links += 1
            if links > MAX_LINKS:
                return f"{path} goes through more than {MAX_LINKS} symbolic links", None
            why = node_problem(here, node, trusted, last=False)
            if why:
                return f"symbolic link {why}", None
            target = node.target or ""
            if target.startswith("/"):
                done = []
            todo[:0] = [c for c in target.split("/") if c and c != "."]
            if not todo:  # a link to "/" or "."
                return f"{here} does not lead to a file", None
            continue
        why = node_problem(here, node, trusted, last=last)
        if why:
            return why, None
        done.append(name)
    if not stat.S_ISREG(node.mode):
        return f"{path} is not a regular file", None
    return None, node


def path_problem(path: str, lookup: Lookup, uid: int, gid: int, *, executable: bool) -> str | None:
    """Why running (``executable``) or reading ``path`` as ``uid``:``gid`` is unsafe, or None."""
    why, node = walk(path, lookup, frozenset({0, uid}))
    if why is None and node is not None and executable and not executable_by(node, uid, gid):
        why = f"{path} is not executable by uid {uid} gid {gid}"
    return why


def checked_paths(cfg: Config) -> Iterator[tuple[str, str, bool]]:
    """(key, path, executable) of every command and tracked file ``cfg`` runs or reads."""
    for name in (*NOTIFY_STATES, "all"):
        command = cfg.notify.command(name)
        if command:
            yield f"notify.{name}", command[0], True
    for i, t in enumerate(cfg.track):
        if t.script:
            yield f"track[{i}].script", t.script[0], True
        elif t.file is not None:
            yield f"track[{i}].file", t.file, False


def problems(cfg: Config, lookup: Lookup, uid: int, gid: int) -> list[ConfigError]:
    """Every unsafe command or tracked file of ``cfg``; none with ``scripts.security: false``."""
    if not cfg.scripts.security:
        return []
    out = []
    for key, path, executable in checked_paths(cfg):
        why = path_problem(path, lookup, uid, gid, executable=executable)
        if why is not None:
            out.append(ConfigError(key, f"{RULE}: {why}", path))
    return out
