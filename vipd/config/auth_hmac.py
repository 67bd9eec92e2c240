"""The ``election.vrrp.auth_hmac`` section: VRRP advert authentication that keepalived >= 2.4
speaks as ``auth_hmac`` (draft-cassen-vrrp-auth-hmac; ``vipd.vrrp.auth`` is the codec).

What it is: the section's keys and their rules: ``keys`` (key id 1..255 -> the path of a key
file; the key itself is never config text), ``send_key``, ``mode``, ``anti_replay`` and
``window``. The names and values are keepalived's (``auth_hmac { key ID file:PATH; active_key;
mode; anti_replay; time_window }`` in keepalived.conf), so one key file serves both.

What it must not do: read the key files (``vipd.vrrp.keyfile``, from ``vipd.startup`` and the
driver) or import ``vipd.vrrp.auth`` (hashlib): a config without the section pays nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from vipd.config.schema import Check, is_int, spec

__all__ = ["AuthHmac", "window_for"]

Mode = Literal["enforce", "permissive", "receive-only"]
AntiReplay = Literal["time", "monotonic"]

# vipd.vrrp.auth's WINDOW_MIN/WINDOW_MAX/WINDOW_FLOOR, repeated so the config needs no hashlib
# (tests/unit/test_config_auth_hmac.py checks that they agree).
WINDOW_MIN = 1
WINDOW_MAX = 300
_WINDOW_FLOOR = 5


def window_for(advert_interval: float) -> int:
    """keepalived's window when none is set: 3 whole advert intervals, clamped to 5..300 s
    (``vipd.vrrp.auth.default_window``)."""
    return min(max(3 * int(advert_interval), _WINDOW_FLOOR), WINDOW_MAX)


def _keys(c: Check, key: str, value: object, _: Mapping[str, Any]) -> tuple[tuple[int, str], ...]:
    rule = "must be a mapping of key ids (1 to 255) to key file paths, at least one"
    if not isinstance(value, Mapping) or not value:
        c.fail(key, rule, value)
    out: list[tuple[int, str]] = []
    for key_id, path in value.items():
        if not is_int(key_id) or not 1 <= key_id <= 255:
            c.fail(f"{key}.{key_id}", "key ids must be integers from 1 to 255", key_id)
        if not isinstance(path, str) or not path.startswith("/"):
            c.fail(
                f"{key}.{key_id}",
                "must be the absolute path of a key file (the key itself never goes in the config)",
                path if isinstance(path, str) and path.startswith("/") else None,
            )
        out.append((key_id, path))
    return tuple(sorted(out))


def _send_key(c: Check, key: str, value: object, got: Mapping[str, Any]) -> int:
    ids: list[int] = [k for k, _ in got["keys"]]
    if value is None:
        if len(ids) == 1:
            return ids[0]
        c.fail(key, f"is required with several keys: one of {', '.join(map(str, ids))}")
    if not is_int(value) or value not in ids:
        c.fail(key, f"must be one of the key ids in keys ({', '.join(map(str, ids))})", value)
    return value


def _mode(c: Check, key: str, value: object, _: Mapping[str, Any]) -> Mode:
    return cast(Mode, c.choice(key, value, ("enforce", "permissive", "receive-only")))


def _anti_replay(c: Check, key: str, value: object, _: Mapping[str, Any]) -> AntiReplay:
    return cast(AntiReplay, c.choice(key, value, ("time", "monotonic")))


def _window(c: Check, key: str, value: object, got: Mapping[str, Any]) -> int | None:
    if value is None:
        return None
    if got["anti_replay"] != "time":
        c.fail(key, "only applies with anti_replay: time; remove it", value)
    return c.integer(key, value, WINDOW_MIN, WINDOW_MAX, " (seconds)")


@dataclass(frozen=True, slots=True)
class AuthHmac:
    # (key id, key file path), by id; the files are read at start (vipd check, vipd run)
    keys: tuple[tuple[int, str], ...] = field(metadata=spec(_keys))
    # the key id that signs; null: the only key
    send_key: int | None = field(default=None, metadata=spec(_send_key, needs=("keys",)))
    mode: Mode = field(default="enforce", metadata=spec(_mode))
    anti_replay: AntiReplay = field(default="time", metadata=spec(_anti_replay))
    # seconds a sender's clock may differ from ours (anti_replay: time); null: `window_for`
    window: int | None = field(default=None, metadata=spec(_window, needs=("anti_replay",)))

    @property
    def key_paths(self) -> dict[int, str]:
        return dict(self.keys)

    @property
    def signing_key(self) -> int:
        return self.send_key if self.send_key is not None else self.keys[0][0]
