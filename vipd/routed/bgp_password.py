"""Read a BGP peer's TCP MD5 password (RFC 2385) from its file: ``announce.bgp.peers[].
password_file``.

What it is: the file must be a regular file owned by root (or the user running vipd), of
mode 0600 or 0400, checked on the open descriptor before a byte is read
(`vipd.host.privatefile`, as for `vipd.vrrp.keyfile`); its content less one trailing
newline is the password, 1 to 80 bytes (Linux's TCP_MD5SIG_MAXKEYLEN,
include/uapi/linux/tcp.h).

What it must not do: put the password into an error, a log line, a repr or /status.
"""

from __future__ import annotations

from vipd.host.privatefile import PrivateFileError, read_private

__all__ = ["MAX_PASSWORD", "PasswordFileError", "read_password"]

MAX_PASSWORD = 80


class PasswordFileError(ValueError):
    """A password file that cannot be used; the message names the file and the rule."""


def read_password(path: str, *, owners: frozenset[int] | None = None) -> bytes:
    try:
        data = read_private(path, what="password file", limit=MAX_PASSWORD + 3, owners=owners)
    except PrivateFileError as e:
        raise PasswordFileError(str(e)) from None
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
