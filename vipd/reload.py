"""What a reload (SIGHUP) may change in a running vipd: the old config and the new one in,
the keys that changed, split into those applied live and those that need a restart, out.

What it is
    `plan(old, new)` compares two validated `vipd.config.Config` values key by key (the
    dotted names of ``docs/reference/config.md``) and returns a `Plan`. The agent applies a
    plan only when ``refused`` is empty: a reload is all or nothing, so the running config is
    always one the operator wrote, never a mix of two files.

    Live (``LIVE``): the VRRP priority, preemption and its delay, auth_hmac's keys, signing
    key and mode (a key rotation, one node at a time), the health checks (every key
    but ``health.local``), the gratuitous ARP policy, the log level, the IPVS scheduler and
    backends, the notify hooks, the tracked checks and ``scripts`` (a reload is checked by
    `vipd.script_security` like a start). None of these moves the VIP by itself: a new priority goes
    through the state machine like a health change does (RFC 9568 §6.4.2/§6.4.3: a backup
    that now outranks the leader preempts it on its next down timer, if preemption is on),
    and nothing re-announces the VIP.

    Restart (everything else): what names the election or the VIP on the wire or on the host
    (``vip`` or ``vips``: the VIP set, ``interface``, ``election.mode``, ``election.vrrp.vrid``,
    the version, interval, peers, password and virtual MAC, the Lease object and its
    credentials), the endpoint's address (the per-node lock), the log format, and switching
    the health section or IPVS on or off.

What it must not do: look at the host, read files, or apply anything (the agent does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from vipd.config import Config

# Keys applied to a running vipd. A prefix ending in "." covers every key below it.
LIVE: tuple[str, ...] = (
    "election.vrrp.priority",
    "election.vrrp.preempt",
    "election.vrrp.preempt_delay",
    # a key rotation or a rollout step without a restart (vipd.vrrp.driver.signing.rekey);
    # switching auth_hmac on or off, its anti_replay and window need one
    "election.vrrp.auth_hmac.keys",
    "election.vrrp.auth_hmac.send_key",
    "election.vrrp.auth_hmac.mode",
    "health.path",
    "health.port",
    "health.interval",
    "health.timeout",
    "health.rise",
    "health.fall",
    "health.ca_file",
    "health.weight",
    "health.peers",
    "garp.",
    "log.level",
    "ipvs.scheduler",
    "ipvs.backends",
    "notify.",
    "track",
    "scripts.",
)


@dataclass(frozen=True, slots=True)
class Plan:
    """``live``: changed keys a running vipd applies. ``refused``: changed keys that need a
    restart, in the order of the file's reference. Both empty: nothing changed."""

    live: tuple[str, ...]
    refused: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.live or self.refused)


def _is_live(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in LIVE)


def _diff(prefix: str, old: object, new: object) -> Iterator[str]:
    """Dotted keys whose values differ; a section present on one side only is one key."""
    if dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new) and type(old) is type(new):
        for f in dataclasses.fields(old):
            name = "vrrp" if f.name == "vrrp_section" else f.name
            yield from _diff(
                f"{prefix}.{name}" if prefix else name, getattr(old, f.name), getattr(new, f.name)
            )
    elif old != new:
        yield prefix


def plan(old: Config, new: Config) -> Plan:
    keys = list(_diff("", old, new))
    if len(old.vips) == 1 and len(new.vips) == 1:
        # Both files wrote the one-address key: name it as written.
        keys = ["vip" if k == "vips" else k for k in keys]
    return Plan(
        live=tuple(k for k in keys if _is_live(k)),
        refused=tuple(k for k in keys if not _is_live(k)),
    )
