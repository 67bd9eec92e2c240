"""Read VRRP auth_hmac keys from files: the thin shell around `vipd.vrrp.auth.parse_key`.

What it is: keys come from files only (a root-owned file of mode 0600/0400; in a pod a
mounted Secret with ``defaultMode: 0400`` and no ``fsGroup``), never from config text, the
environment, a log line or /status. A file holds one key in keepalived's key-file form
(``hex:`` and 64..128 hex digits, or 32..64 raw bytes; a trailing newline is dropped), so the
same file serves ``key ID file:PATH`` in keepalived.conf and vipd. The file is opened once and
checked on its descriptor (owner, mode, regular file) before a byte is read, so a swap between
the check and the read cannot slip a different file in; a Secret's ``..data`` symlinks are
followed to the file itself.

What it must not do: put a key's bytes into an error, a log line or a repr (errors name the
file, the key id and the rule, never the content), or accept a file that others can read:
keepalived only warns about group/world access, vipd refuses it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from vipd.host.privatefile import PrivateFileError, read_private
from vipd.vrrp.auth import KEY_MAX, KeyRing, parse_key

__all__ = ["KeyFileError", "read_key", "read_keyring"]

# hex: + two digits a byte + a CRLF; anything longer is not a key file.
_MAX_FILE = 4 + 2 * KEY_MAX + 2


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names the file and the rule broken."""


def read_key(path: str | os.PathLike[str], *, owners: frozenset[int] | None = None) -> bytes:
    """The key in ``path``. ``owners``: the uids that may own it (default: root and the
    user running vipd, which is root in production). Raises KeyFileError."""
    try:
        data = read_private(
            path,
            what="key file",
            limit=_MAX_FILE + 1,
            owners=owners,
            mode_hint=" (a Secret volume: defaultMode 0400, no fsGroup)",
        )
    except PrivateFileError as e:
        raise KeyFileError(str(e)) from None
    if len(data) > _MAX_FILE:
        raise KeyFileError(f"key file {path}: more than {_MAX_FILE} bytes, not one key")
    try:
        return parse_key(data)
    except ValueError as e:
        raise KeyFileError(f"key file {path}: {e}") from None


def read_keyring(
    paths: Mapping[int, str | os.PathLike[str]],
    active: int,
    *,
    owners: frozenset[int] | None = None,
) -> KeyRing:
    """A KeyRing of the key files ``paths`` by key id, signing with ``active``."""
    keys = {key_id: read_key(Path(p), owners=owners) for key_id, p in paths.items()}
    try:
        return KeyRing(keys, active)
    except ValueError as e:
        raise KeyFileError(f"auth keys: {e}") from None
