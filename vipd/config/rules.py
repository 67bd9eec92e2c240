"""Value rules shared by several config sections: IP literals and node address lists, hook
commands, file paths.

What it is: functions of the shape `vipd.config.schema.Rule` (or called by one) that return
the checked value or fail with a one-line `ConfigError` naming the key.

What it must not do: look at the host (whether a file exists, whether an address is a node's
is `vipd.kube`'s and `vipd.preflight`'s job), or do any I/O.

Where the rules come from
    - A VIP must be a unicast address clients on other hosts can reach: IPv4 not 0/8 (RFC
      1122 §3.2.1.3 "this host"), loopback, link-local (RFC 3927), multicast or 240/4
      (reserved, and the limited broadcast); IPv6 global unicast (2000::/3, RFC 4291 §2.5.4)
      or unique local (fc00::/7, RFC 4193).
    - A Kubernetes object name is a DNS-1123 subdomain, a namespace a DNS-1123 label
      (kubernetes/apimachinery ``pkg/util/validation``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Any

from vipd.config.schema import Check, Rule

IPAddress = IPv4Address | IPv6Address
# A hook: the program (an absolute path) and its first arguments; vipd appends its own.
Command = tuple[str, ...]

HOSTNAME_LIKE = re.compile(
    r"(?=.*[A-Za-z_])[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?"
    r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?"
)
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
V4_THIS_NETWORK = IPv4Network("0.0.0.0/8")
V4_RESERVED = IPv4Network("240.0.0.0/4")  # includes 255.255.255.255, the limited broadcast
V6_GLOBAL_UNICAST = IPv6Network("2000::/3")
V6_UNIQUE_LOCAL = IPv6Network("fc00::/7")


# -- addresses -----------------------------------------------------------------------------


def ip_literal(c: Check, key: str, value: object, what: str) -> IPAddress:
    if not isinstance(value, str):
        c.fail(key, "must be an IP address literal written as a string", value)
    text = value.strip()
    if "/" in text:
        c.fail(key, "must be a single address, without a prefix length", value)
    if "%" in text:
        c.fail(key, "must not carry an IPv6 zone (%interface)", value)
    try:
        ip = ip_address(text)
    except ValueError:
        if (key == "vip" or key.startswith("vips[")) and HOSTNAME_LIKE.fullmatch(text):
            c.fail(
                key,
                "must be an IP address literal, not a DNS name: the control-plane endpoint "
                "is baked into the API server's certificates",
                value,
            )
        c.fail(key, f"must be an IP address literal ({what})", value)
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        c.fail(key, "must be written in IPv4 form, not as an IPv4-mapped IPv6 address", value)
    return ip


def vip_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` can't be a VIP that clients on other hosts reach, or None."""
    if isinstance(ip, IPv4Address):
        if ip in V4_THIS_NETWORK:
            return 'must not be in 0.0.0.0/8, which means "this host" and is never a destination'
        if ip.is_loopback:
            return "must not be a loopback address: clients on other hosts must reach it"
        if ip.is_link_local:
            return "must not be a link-local address (169.254.0.0/16): it is never routed"
        if ip.is_multicast:
            return "must not be a multicast address: a VIP is a unicast address of one node"
        if ip in V4_RESERVED:
            return "must not be in 240.0.0.0/4 (reserved, and the broadcast address)"
        return None
    if ip in V6_GLOBAL_UNICAST or ip in V6_UNIQUE_LOCAL:
        return None
    if ip.is_link_local:
        why = "a link-local address is not reachable from other links and needs a zone"
    elif ip.is_multicast:
        why = "a VIP is a unicast address of one node"
    elif ip.is_loopback or ip.is_unspecified:
        why = "clients on other hosts must reach it"
    else:
        why = "other IPv6 ranges are not unicast addresses a client can reach"
    return f"must be a global unicast (2000::/3) or unique local (fc00::/7) IPv6 address: {why}"


def node_addresses(
    c: Check,
    key: str,
    value: object,
    *,
    empty: str,
    what: str,
    not_vip: str,
    unicast: str,
    link_local_ok: bool,
) -> tuple[IPAddress, ...]:
    """A list of other nodes' addresses: IP literals of a VIP's family, unicast, not a VIP,
    no duplicates; null is empty. The rules' wording is the caller's."""
    if value is None:
        return ()
    if not isinstance(value, list):
        c.fail(key, empty, value)
    vips = c.vips
    versions = {v.version for v in vips}
    family = " or ".join(f"IPv{n}" for n in sorted(versions))
    out: list[IPAddress] = []
    for i, item in enumerate(value):
        k = f"{key}[{i}]"
        ip = ip_literal(c, k, item, what=what)
        if ip.version not in versions:
            whose = "the VIP" if len(vips) == 1 else "the VIPs"
            c.fail(k, f"must be an {family} address, the family of {whose}", item)
        if ip in vips:
            c.fail(k, not_vip, item)
        if (
            ip.is_unspecified
            or ip.is_loopback
            or ip.is_multicast
            or (ip.is_link_local and not link_local_ok)
            or ip in V4_RESERVED
        ):
            c.fail(k, unicast, item)
        if ip in out:
            c.fail(k, f"is listed twice (first as {key}[{out.index(ip)}])", item)
        out.append(ip)
    return tuple(out)


def backends(c: Check, key: str, value: object, _: Mapping[str, Any]) -> tuple[IPAddress, ...]:
    """The control-plane nodes' addresses (``ipvs.backends``, ``health.peers``)."""
    return node_addresses(
        c,
        key,
        value,
        empty="must be a list of the control-plane nodes' IP addresses",
        what="a control-plane node's address",
        not_vip="must not be the VIP itself: list the nodes' own addresses",
        unicast="must be a unicast address of a control-plane node",
        link_local_ok=False,
    )


# -- hooks ---------------------------------------------------------------------------------


def command(c: Check, key: str, value: object, _: Mapping[str, Any]) -> Command:
    """A hook: null (none), a string split like a shell's words (no shell runs it), or a
    list of strings; the first word an absolute path (no $PATH lookup under systemd)."""
    rule = (
        "must be a command: an absolute path and its arguments, as a string or a list of "
        'strings (e.g. "/usr/local/bin/vip-changed --page"), or null'
    )
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError:
            c.fail(key, rule, value)
    elif isinstance(value, list) and all(isinstance(w, str) for w in value):
        words = list(value)
    else:
        c.fail(key, rule, value)
    if not words or not words[0].startswith("/") or any("\0" in w for w in words):
        c.fail(key, rule, value)
    return tuple(words)


def file_or_null(rule: str) -> Rule:
    """A path (non-blank, no NUL), or null; whether it exists is checked at start."""

    def check(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
        if value is not None and (not isinstance(value, str) or not value.strip() or "\0" in value):
            c.fail(key, rule, value)
        return value

    return check
