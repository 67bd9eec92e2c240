"""The small parts of ``vipd import keepalived``: one statement's value (a number, an
address, a command), an instance as read, and the keys an IPv4 and an IPv6 router share.

What it is: helpers of `vipd.importers.keepalived`, which maps keepalived's statements onto
vipd's config; keepalived's meaning of each keyword is its man page's, ``keepalived.conf(5)``.

What it must not do: read files, or guess: a value that is not keepalived's is an error
naming the file and line.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vipd.importers import Dropped
from vipd.importers.kaconf import Stmt


class _Refuse(Exception):
    """An error that ends the import (the message names file and line)."""


@dataclass
class _Instance:
    name: str
    stmt: Stmt
    vips: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = field(default_factory=list)
    # election.vrrp key -> (value, where): the keys both families must agree on
    shared: dict[str, tuple[object, str]] = field(default_factory=dict)

    @property
    def family(self) -> int:
        return self.vips[0].version


def _one(s: Stmt, kind: Callable[[str], object] = str) -> object:
    if len(s.args) != 1:
        raise _Refuse(f"{s.where}: {s.keyword} takes one value (got {' '.join(s.args)!r})")
    try:
        return kind(s.args[0])
    except ValueError:
        raise _Refuse(f"{s.where}: {s.keyword}: not a valid value: {s.args[0]!r}") from None


def _int(text: str, s: Stmt) -> int:
    try:
        return int(text)
    except ValueError:
        raise _Refuse(f"{s.where}: {s.keyword}: not an integer: {text!r}") from None


def _number(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


def _address(text: str, where: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(text.split("/")[0])
    except ValueError:
        raise _Refuse(f"{where}: not an IP address: {text!r}") from None


def _command(words: Sequence[str], what: str, where: str, dropped: list[Dropped]) -> str | None:
    """keepalived runs a script as its words (one quoted word may hold several); vipd takes
    an absolute path and arguments, split like a shell's words."""
    argv = [w for word in words for w in shlex.split(word)] if words else []
    if not argv or not argv[0].startswith("/"):
        program = argv[0] if argv else "nothing"
        why = (
            f"vipd runs a program by its absolute path, not {program!r} (keepalived searches PATH)"
        )
        dropped.append(Dropped(what, where, why))
        return None
    return shlex.join(argv)


def _note(key: str, where: str) -> str:
    kw = {
        "vrid": "virtual_router_id",
        "advert_interval": "advert_int",
        "preempt": "nopreempt/preempt",
        "unicast_peers": "unicast_src_ip + unicast_peer",
        "vmac": "use_vmac",
    }.get(key, key)
    return f"{kw} ({where})" if ":" in where else f"{kw}: {where}"


def _name(s: Stmt) -> str:
    if len(s.args) != 1 or s.block is None:
        raise _Refuse(f"{s.where}: {s.keyword} needs one name and a block")
    return s.args[0]


def _track_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)[:63]


def _peers(inst: _Instance) -> list[str]:
    value = inst.shared.get("unicast_peers", ([], ""))[0]
    assert isinstance(value, list)
    return [str(p) for p in value]


def _agree(routers: Sequence[_Instance]) -> dict[str, tuple[object, str]]:
    """The shared keys of one or two routers; an IPv4 and an IPv6 router must agree."""
    if len(routers) == 1:
        return dict(routers[0].shared)
    a, b = routers
    out = dict(a.shared)
    for key in sorted(set(a.shared) | set(b.shared)):
        if key in ("version", "unicast_peers", "auth_pass"):
            continue  # per family: v2 only exists for IPv4, peers are per family
        va, vb = a.shared.get(key), b.shared.get(key)
        if (va and va[0]) != (vb and vb[0]):
            raise _Refuse(
                f"vrrp_instances {a.name} ({a.stmt.where}) and {b.name} ({b.stmt.where}) differ "
                f"in {key}: vipd runs both families with one election.vrrp"
            )
    if a.shared["version"][0] != 3:
        raise _Refuse(
            f"vrrp_instance {a.name} ({a.stmt.where}) is VRRPv2: vipd runs an IPv4 and an IPv6 "
            "router with one version, and IPv6 needs 3: set version 3 on both"
        )
    peers = _peers(a) + _peers(b)
    if peers:
        out["unicast_peers"] = (peers, "unicast_peer of both instances")
    return out
