"""The config document as a whole: `Config`, its top-level keys (``node``, ``vip``/``vips``,
``interface`` and one key per section) and `read_config`, which reads the sections in the
order their rules depend on each other.

What it must not do: read the file or the environment (`vipd.config.source` does, and passes
``env`` and ``hostname`` in), or look at the host (``vipd.preflight``).

Where the rules come from: ``vip``/``vips`` are IP literals, never DNS names, because the
control-plane endpoint is baked into the API server's certificates and kubeconfigs by
``kubeadm init`` (its ``controlPlaneEndpoint``); an interface name follows the kernel's
``dev_valid_name()`` (``net/core/dev.c``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vipd.config.announce import Announce
from vipd.config.election import Election, read_election
from vipd.config.membership import Membership
from vipd.config.rules import IPAddress, ip_literal, vip_problem
from vipd.config.schema import Check, fields_of, keys_of, read_key, spec
from vipd.config.sections import (
    Garp,
    Health,
    Ipvs,
    Log,
    Metrics,
    Notify,
    Scripts,
    Track,
    read_tracks,
)

__all__ = ["Config", "read_config"]


def _vip(c: Check, key: str, value: object) -> IPAddress:
    if value is None:
        c.fail(
            key,
            "is required: the control-plane endpoint address (or set VIPD_VIP; vips: "
            "[...] for several)",
        )
    ip = ip_literal(c, key, value, what="the VIP")
    problem = vip_problem(ip)
    if problem:
        c.fail(key, problem, value)
    return ip


def _vips(
    c: Check, key: str, top: Mapping[str, Any], _: Mapping[str, Any]
) -> tuple[IPAddress, ...]:
    """``vip`` (one address) or ``vips`` (a list), never both: two places for one fact
    would leave a reader guessing which one counts. Reads the whole top-level mapping
    (`read_config` calls it so: its value is two keys)."""
    one, many = top.get("vip"), top.get("vips")
    if one is not None and many is not None:
        src = c.sources.get("vip")
        via = f" (vip comes from {src})" if src else ""
        c.fail(
            "vips",
            f"and vip are both set{via}: use vip for one address or vips for several",
            many,
        )
    if many is None:
        return (_vip(c, "vip", one),)
    if not isinstance(many, list) or not many:
        c.fail("vips", "must be a non-empty list of IP address literals", many)
    out: list[IPAddress] = []
    for i, item in enumerate(many):
        k = f"vips[{i}]"
        ip = _vip(c, k, item)
        if ip in out:
            c.fail(k, f"is listed twice (first as vips[{out.index(ip)}])", item)
        out.append(ip)
    return tuple(out)


def _node(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str:
    """The name, once `read_config` has resolved where it comes from."""
    if value is None:
        c.fail(key, "is not set: set node in the file, or VIPD_NODE or NODE_NAME")
    # Names go into logs, metrics labels and the Lease holder identity; Kubernetes node
    # names are DNS-1123 subdomains, which this allows and a little more (hostnames).
    if not isinstance(value, str) or not re.fullmatch(r"[^\s/]{1,253}", value):
        c.fail(key, "must be a name of 1 to 253 characters without spaces or '/'", value)
    return value


def _interface(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
    if value is None:
        return None
    # the kernel's dev_valid_name(): < IFNAMSIZ (16) bytes, no '/', ':' or whitespace
    if (
        not isinstance(value, str)
        or not re.fullmatch(r"[^\s/:]{1,15}", value)
        or value in {".", ".."}
        or len(value.encode()) > 15
    ):
        c.fail(
            key,
            "must be a Linux interface name (1 to 15 characters, no '/', ':' or spaces), "
            "or null to auto-detect",
            value,
        )
    return value


@dataclass(frozen=True, slots=True)
class Config:
    node: str = field(metadata=spec(_node, env=("VIPD_NODE", "str"), stand_in="node"))
    # ``vip`` or ``vips`` in the file, in the order written; never empty, no duplicates.
    vips: tuple[IPAddress, ...] = field(
        metadata=spec(_vips, aliases=("vip",), env=("VIPD_VIP", "str"), stand_in="192.0.2.1")
    )
    # None: vipd.preflight picks the interface holding the VIP's subnet
    interface: str | None = field(metadata=spec(_interface, env=("VIPD_INTERFACE", "str")))
    election: Election = field(metadata=spec(read_election, section=Election))
    announce: Announce = field(default=Announce(), metadata=spec(section=Announce))
    garp: Garp = field(default=Garp(), metadata=spec(section=Garp))
    log: Log = field(default=Log(), metadata=spec(section=Log))
    # None: no health checks, no gating (an empty ``health:`` turns them on)
    health: Health | None = field(default=None, metadata=spec(section=Health))
    ipvs: Ipvs = field(default=Ipvs(), metadata=spec(section=Ipvs))
    membership: Membership = field(default=Membership(), metadata=spec(section=Membership))
    metrics: Metrics = field(default=Metrics(), metadata=spec(section=Metrics))
    notify: Notify = field(default=Notify(), metadata=spec(section=Notify))
    track: tuple[Track, ...] = field(
        default=(), metadata=spec(read_tracks, section=Track, many=True)
    )
    scripts: Scripts = field(default=Scripts(), metadata=spec(section=Scripts))

    @property
    def vip(self) -> IPAddress:
        """The first VIP: the one of a single-VIP config, and what a per-node label (the
        interface choice, ``vipd_node_info``) goes by when there are several."""
        return self.vips[0]

    def family(self, version: int) -> tuple[IPAddress, ...]:
        """The VIPs of one IP version (4 or 6): one VRRP virtual router's address list."""
        return tuple(v for v in self.vips if v.version == version)

    @property
    def families(self) -> tuple[int, ...]:
        """The IP versions among the VIPs, IPv4 first: one VRRP instance each."""
        return tuple(f for f in (4, 6) if any(v.version == f for v in self.vips))


def read_config(
    c: Check, data: Mapping[str, Any], env: Mapping[str, str], hostname: str | None
) -> Config:
    """The document, top-level keys first: the VIPs decide the families the address rules
    accept, the election what the health section may say, health whether IPVS may run."""
    top = c.section("", data, keys_of(Config))
    got: dict[str, Any] = {"vips": _vips(c, "vips", top, {})}
    c.vips = got["vips"]
    read_key(c, "", Config, "interface", top, got)
    node = top.get("node")
    if node is None and env.get("NODE_NAME"):
        node, c.sources["node"] = env["NODE_NAME"], "NODE_NAME"
    if node is None and hostname:
        node, c.sources["node"] = hostname, "hostname"
    read_key(c, "", Config, "node", {"node": node}, got)
    announce = read_key(c, "", Config, "announce", top, got)
    if announce.ecmp:
        _routed_election(c, top, got, announce.mode)
    c.election = read_key(c, "", Config, "election", top, got)
    read_key(c, "", Config, "garp", top, got)
    read_key(c, "", Config, "log", top, got)
    c.health = got["health"] = (
        read_key(c, "", Config, "health", top, got) if "health" in top else None
    )
    read_key(c, "", Config, "metrics", top, got)  # before ipvs: `errors` lists it so
    for f, _ in fields_of(Config):  # the other sections, in declaration order
        read_key(c, "", Config, f.name, top, got)
    if announce.routed:
        _routed_sections(c, got, announce.mode, announce.ecmp)
    return Config(**got)


def _routed_election(c: Check, top: Mapping[str, Any], got: dict[str, Any], mode: str) -> None:
    """``announce.mode: routing-table`` with the ECMP pool: every node decides for itself
    whether it announces, so there is no election, and an ``election`` section would be a
    setting that does nothing (a reader would believe VRRP or a Lease still runs)."""
    if "election" in top:
        c.fail(
            "election",
            f"must be absent with announce.mode: {mode} (every node announces by the "
            "ECMP pool rule; nothing is elected)",
        )
    got["election"] = Election(mode="none")


def _routed_sections(c: Check, got: Mapping[str, Any], mode: str, ecmp: bool) -> None:
    """What routing-table and bgp modes need from the other sections. With ``pool: leader``
    the election decides (health gates it as in ARP mode, if present)."""
    if ecmp and got["health"] is None:
        # The pool rule is "announce while the local API server is healthy": without the
        # checks every node would announce a path whether its API server answers or not.
        c.fail(
            "health",
            f"is required with announce.mode: {mode} (a node announces while its own "
            "API server is healthy; an empty health: section is enough)",
        )
    if got["ipvs"].enabled:
        # Every announcing node is a path of the router's ECMP route: the router balances;
        # an IPVS service on one "leader" has no place when there is no leader.
        c.fail(
            "ipvs.enabled",
            f"must be false with announce.mode: {mode} (the router's ECMP balances "
            "over the announcing nodes; with pool: leader, IPVS on the holder is not built)",
            True,
        )
