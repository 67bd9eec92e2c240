"""Read a BGP peer's TCP MD5 password (RFC 2385) from its file: ``announce.bgp.peers[].
password_file``.

What it is: the file must be a regular file owned by root (or the user running vipd), of
mode 0600 or 0400, checked on the open descriptor before a byte is read (the same rules as
`vipd.vrrp.keyfile`); its content less one trailing newline is the password, 1 to 80 bytes
(Linux's TCP_MD5SIG_MAXKEYLEN, include/uapi/linux/tcp.h).

What it must not do: put the password into an error, a log line, a repr or /status.
"""

from __future__ import annotations

import os
import stat

__all__ = ["MAX_PASSWORD", "PasswordFileError", "read_password"]

MAX_PASSWORD = 80


class PasswordFileError(ValueError):
    """A password file that cannot be used; the message names the file and the rule."""


def read_password(path: str, *, owners: frozenset[int] | None = None) -> bytes:
    allowed = owners if owners is not None else frozenset({0, os.geteuid()})
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise PasswordFileError(f"password file {path}: cannot open: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PasswordFileError(f"password file {path}: not a regular file")
        if st.st_uid not in allowed:
            raise PasswordFileError(
                f"password file {path}: owned by uid {st.st_uid}, must be owned by"
                f" uid {' or '.join(str(u) for u in sorted(allowed))}"
            )
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PasswordFileError(
                f"password file {path}: mode {stat.S_IMODE(st.st_mode):04o} gives group or"
                " others access, must be 0600 or 0400"
            )
        data = os.read(fd, MAX_PASSWORD + 3)
    finally:
        os.close(fd)
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if not 1 <= len(data) <= MAX_PASSWORD:
        raise PasswordFileError(
            f"password file {path}: must hold 1 to {MAX_PASSWORD} bytes (a trailing newline"
            " is dropped)"
        )
    return data
