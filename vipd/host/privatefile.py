"""Read a small secret from a file only root (or vipd's user) can read: the shared check of
``election.vrrp.auth_hmac`` key files (`vipd.vrrp.keyfile`) and BGP MD5 password files
(`vipd.routed.bgp_password`).

What it is: the file is opened once and checked on its descriptor (a regular file, owned by
one of the allowed uids, no group or other permission bits) before a byte is read, so a swap
between check and read cannot slip another file in; a Secret's ``..data`` symlinks are
followed to the file itself. Errors name the file (as ``what PATH``) and the rule.

What it must not do: put any byte of the file into an error, a log line or a repr.
"""

from __future__ import annotations

import os
import stat

__all__ = ["PrivateFileError", "read_private"]


class PrivateFileError(ValueError):
    """A secret file that cannot be used; the message names the file and the rule broken."""


def read_private(
    path: str | os.PathLike[str],
    *,
    what: str,
    limit: int,
    owners: frozenset[int] | None = None,
    mode_hint: str = "",
) -> bytes:
    """At most ``limit`` bytes of ``path`` once it passed the checks. ``what`` starts each
    message ("key file"), ``owners`` are the uids that may own it (default: root and the user
    running vipd), ``mode_hint`` follows the mode rule's message."""
    allowed = owners if owners is not None else frozenset({0, os.geteuid()})
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise PrivateFileError(f"{what} {path}: cannot open: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PrivateFileError(f"{what} {path}: not a regular file")
        if st.st_uid not in allowed:
            raise PrivateFileError(
                f"{what} {path}: owned by uid {st.st_uid}, must be owned by"
                f" uid {' or '.join(str(u) for u in sorted(allowed))}"
            )
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PrivateFileError(
                f"{what} {path}: mode {stat.S_IMODE(st.st_mode):04o} gives group or others"
                f" access, must be 0600 or 0400{mode_hint}"
            )
        return os.read(fd, limit)
    finally:
        os.close(fd)
