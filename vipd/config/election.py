"""The ``election`` section of the config: ``mode``, ``vrrp`` (`Vrrp`) and ``lease``
(`vipd.config.kubeapi.Lease`), declared with their rules.

What it must not do: run an election (``vipd.vrrp``, ``vipd.lease``) or do any I/O.

Where the rules come from
    - VRID 1..255 (RFC 9568 §5.2.3, RFC 3768 §5.3.3). Priority 1..254: 255 belongs to the
      address owner and 0 means "resigning" (RFC 9568 §5.2.4); vipd is never the owner
      because the VIP must not be a node address.
    - Advertisement interval: VRRPv3 carries centiseconds in 12 bits, so 0.01..40.95 s in
      10 ms steps (RFC 9568 §5.2.7); VRRPv2 carries whole seconds in 8 bits, 1..255 s
      (RFC 3768 §5.3.7), and keepalived drops v2 adverts whose interval differs from its own.
    - VRRPv2 is IPv4 only (RFC 3768). ``auth_pass`` is the v2 "simple text password" that
      keepalived still speaks (auth type 1, 8 bytes NUL padded); v3 has no authentication.
    - ``auth_hmac`` (``vipd.config.auth_hmac``): keepalived >= 2.4's HMAC trailer, any version;
      refused together with ``auth_pass``, as keepalived drops the password then.
    - Several VIPs: the IPv4 ones are one virtual router and the IPv6 ones another (RFC 9568
      §7: a virtual router has addresses of one family), so unicast peers are needed in each
      family, and the checksum option applies to the IPv4 one only (RFC 9568 §5.2.8).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import Any, Literal, cast

from vipd.config.auth_hmac import AuthHmac, window_for
from vipd.config.error import Secret
from vipd.config.kubeapi import Lease
from vipd.config.membership import members_from
from vipd.config.rules import IPAddress, node_addresses
from vipd.config.schema import (
    Check,
    choice,
    flag,
    is_int,
    is_number,
    keys_of,
    read,
    read_key,
    spec,
)

__all__ = ["Election", "Vrrp", "read_election"]

Checksum = Literal["pseudo-header", "message-only"]
IPNetwork = IPv4Network | IPv6Network


def _vrid(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int:
    if value is None:
        c.fail(
            key,
            "is required: the virtual router ID, 1 to 255, unique on the layer-2 network "
            "(or set VIPD_VRID)",
        )
    return c.integer(key, value, 1, 255)


def _priority(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int:
    owner = (
        "; 255 is reserved for the router that owns the address (RFC 9568 §5.2.4), and a VIP "
        "must not be a node address"
    )
    return c.integer(key, value, 1, 254, owner if value == 255 and is_int(value) else "")


def _version(c: Check, key: str, value: object, _: Mapping[str, Any]) -> Literal[2, 3]:
    if not is_int(value) or value not in (2, 3):
        c.fail(key, "must be 2 or 3", value)
    v6 = [v for v in c.vips if isinstance(v, IPv6Address)]
    if value == 2 and v6:
        c.fail(key, f"must be 3 with an IPv6 VIP ({v6[0]}): VRRPv2 has no IPv6 (RFC 3768)", value)
    return 2 if value == 2 else 3


def _advert_interval(c: Check, key: str, value: object, got: Mapping[str, Any]) -> float:
    if got["version"] == 2:
        rule = "must be a whole number of seconds from 1 to 255 with version 2"
        if not is_number(value) or value != int(value) or not 1 <= value <= 255:
            c.fail(key, rule, value)
        return float(value)
    rule = (
        "must be a number of seconds from 0.01 to 40.95 in steps of 0.01 "
        "(VRRPv3 counts centiseconds)"
    )
    if not is_number(value):
        c.fail(key, rule, value)
    cs = float(value) * 100
    if abs(cs - round(cs)) > 1e-6 or not 1 <= round(cs) <= 4095:
        c.fail(key, rule, value)
    return round(cs) / 100  # 0.1 stays 0.1, not 0.1 * 100 / 100 noise


def _preempt_delay(c: Check, key: str, value: object, got: Mapping[str, Any]) -> float:
    delay = c.number(
        key, value, "must be a number of seconds from 0 to 1000", lambda v: 0 <= v <= 1000
    )
    if delay and not got["preempt"]:
        # keepalived ignores it then; a setting that does nothing is a mistake to point out
        c.fail(key, "has no effect with preempt: false; remove it", value)
    return delay


def _unicast_peers(
    c: Check, key: str, value: object, _: Mapping[str, Any]
) -> tuple[IPAddress, ...]:
    peers = node_addresses(
        c,
        key,
        value,
        empty="must be a list of IP addresses (empty for multicast)",
        what="a peer's address",
        not_vip="must not be the VIP itself: list the other nodes' own addresses",
        unicast="must be a unicast address of another node",
        link_local_ok=True,
    )
    # One virtual router per family: a family without peers of its own would advertise
    # by multicast while the other goes unicast, which no peer configured this way hears.
    for version in sorted({v.version for v in c.vips}):
        if peers and not any(ip.version == version for ip in peers):
            v = f"IPv{version}"
            c.fail(
                key,
                f"lists no {v} peer, but the {v} VIPs are a virtual router of their own: "
                f"list the peers' {v} addresses too (or no peers at all for multicast)",
                value,
            )
    return peers


def _allowed_sources(
    c: Check, key: str, value: object, got: Mapping[str, Any]
) -> tuple[IPNetwork, ...]:
    """Multicast only: the unicast peer list already names the only sources heard."""
    if value is None:
        return ()
    rule = "must be a list of IP addresses or CIDR networks (empty: any source)"
    if not isinstance(value, list):
        c.fail(key, rule, value)
    if value and got["unicast_peers"]:
        c.fail(
            key,
            "has no effect with unicast_peers (only the listed peers are heard then); "
            "remove one of them",
            value,
        )
    versions = {v.version for v in c.vips}
    family = " or ".join(f"IPv{n}" for n in sorted(versions))
    out: list[IPNetwork] = []
    for i, item in enumerate(value):
        k = f"{key}[{i}]"
        if not isinstance(item, str):
            c.fail(k, "must be an IP address or CIDR network written as a string", item)
        try:
            net = ip_network(item.strip(), strict=True)
        except ValueError:
            c.fail(
                k,
                "must be an IP address or a CIDR network without host bits (e.g. 10.0.0.0/24)",
                item,
            )
        if net.version not in versions:
            c.fail(k, f"must be an {family} address or network, the family of the VIPs", item)
        if net in out:
            c.fail(k, f"is listed twice (first as {key}[{out.index(net)}])", item)
        out.append(net)
    # One virtual router per family: a family left out would hear any source, silently.
    for version in sorted(versions):
        if out and not any(net.version == version for net in out):
            v = f"IPv{version}"
            c.fail(
                key,
                f"lists no {v} source, but the {v} VIPs are a virtual router of their own: "
                f"list its {v} sources too",
                value,
            )
    return tuple(out)


def _auth_pass(c: Check, key: str, value: object, got: Mapping[str, Any]) -> str | None:
    if value is None:
        return None
    if got["version"] != 2:
        c.fail(
            key,
            "is only used with version: 2 (VRRPv3 has no authentication); "
            "remove it or set version: 2",
        )
    if not isinstance(value, str):
        c.fail(key, "must be a string (quote it in YAML)", Secret(str(value)))
    if not re.fullmatch(r"[\x20-\x7e]{1,8}", value):
        # keepalived truncates longer passwords to 8 bytes; refusing is clearer than that
        c.fail(key, "must be 1 to 8 printable ASCII characters", Secret(value))
    return value


def _vmac(c: Check, key: str, value: object, got: Mapping[str, Any]) -> bool:
    """The virtual MAC option (vipd.host.vmac): IPv4 multicast only in this version."""
    if not isinstance(value, bool):
        c.fail(key, "must be true or false", value)
    if value and any(isinstance(v, IPv6Address) for v in c.vips):
        c.fail(key, "is only supported with an IPv4 VIP in this version", value)
    if value and got["unicast_peers"]:
        c.fail(
            key,
            "is only supported with multicast adverts (no unicast_peers) in this version",
            value,
        )
    return value


def _checksum(c: Check, key: str, value: object, got: Mapping[str, Any]) -> Checksum:
    checksum = c.choice(key, value, ("pseudo-header", "message-only"))
    v4 = any(isinstance(v, IPv4Address) for v in c.vips)
    if checksum == "message-only" and (got["version"] != 3 or not v4):
        c.fail(
            key,
            "only applies to VRRPv3 over IPv4 (VRRPv2 always sums the message alone, IPv6 "
            "always includes its pseudo-header)",
            checksum,
        )
    return cast(Checksum, checksum)


def _auth_hmac(c: Check, key: str, value: object, got: Mapping[str, Any]) -> AuthHmac | None:
    if value is None:
        return None
    if got["auth_pass"] is not None:
        # keepalived drops the password when auth_hmac is set; one of the two is a mistake
        c.fail(key, "cannot be set together with auth_pass: remove one of them")
    return read(c, key, AuthHmac, value)


def _unicast_peers_from(
    c: Check, key: str, value: object, got: Mapping[str, Any]
) -> tuple[str, ...]:
    sources = members_from(c, key, value, got)
    if sources and not got["unicast_peers"]:
        c.fail(
            key,
            "needs election.vrrp.unicast_peers: unicast mode is decided at start, and the "
            "static list is the set a node starts with (the first nodes' addresses)",
            value,
        )
    return sources


@dataclass(frozen=True, slots=True)
class Vrrp:
    vrid: int = field(metadata=spec(_vrid, env=("VIPD_VRID", "int"), stand_in=1))
    priority: int = field(default=100, metadata=spec(_priority, env=("VIPD_PRIORITY", "int")))
    advert_interval: float = field(  # seconds
        default=1.0,
        metadata=spec(_advert_interval, env=("VIPD_ADVERT_INTERVAL", "float"), needs=("version",)),
    )
    version: Literal[2, 3] = field(default=3, metadata=spec(_version))
    preempt: bool = field(default=True, metadata=spec(flag()))
    preempt_delay: float = field(default=0.0, metadata=spec(_preempt_delay))  # seconds
    # empty: multicast to 224.0.0.18 / ff02::12
    unicast_peers: tuple[IPAddress, ...] = field(default=(), metadata=spec(_unicast_peers))
    # multicast: the sources whose adverts are heard (empty: any), vipd.vrrp.driver.adverts
    allowed_sources: tuple[IPNetwork, ...] = field(
        default=(), metadata=spec(_allowed_sources, needs=("unicast_peers",))
    )
    # membership sources merged into unicast_peers while running (vipd.membership)
    unicast_peers_from: tuple[str, ...] = field(
        default=(), metadata=spec(_unicast_peers_from, needs=("unicast_peers",))
    )
    # VRRPv2 simple password (auth type 1)
    auth_pass: str | None = field(default=None, metadata=spec(_auth_pass, needs=("version",)))
    # RFC 5798 virtual MAC on a macvlan (vipd.host.vmac)
    vmac: bool = field(default=False, metadata=spec(_vmac, needs=("unicast_peers",)))
    # VRRPv3 over IPv4: the checksum we send (vipd.vrrp.packet); both forms are accepted.
    checksum: Checksum = field(default="pseudo-header", metadata=spec(_checksum))
    # HMAC-SHA256 advert authentication, keepalived's auth_hmac (vipd.config.auth_hmac)
    auth_hmac: AuthHmac | None = field(
        default=None, metadata=spec(_auth_hmac, section=AuthHmac, needs=("auth_pass",))
    )

    @property
    def auth_window(self) -> int:
        """auth_hmac's window in seconds: the configured one, else keepalived's default."""
        a = self.auth_hmac
        if a is not None and a.window is not None:
            return a.window
        return window_for(self.advert_interval)

    @property
    def advert_interval_cs(self) -> int:
        """The interval in centiseconds, the unit of the VRRPv3 header and vipd's timers."""
        return round(self.advert_interval * 100)


@dataclass(frozen=True, slots=True, init=False)
class Election:
    """``mode`` and the section of that mode: ``vrrp`` (mode vrrp) or ``lease`` (mode lease).

    ``vrrp`` is a property that raises in Lease mode, so that VRRP code stays free of
    None checks and a mix-up fails loudly; ``vrrp_section`` is the plain optional value.
    The other mode's section may stay in the file (switching modes is one line); it is
    still validated, so a typo in it is not silently carried along (`read_election`).
    """

    # "none" is never written: it is what announce.mode: routing-table makes (no election)
    mode: Literal["vrrp", "lease", "none"] = field(
        default="vrrp", metadata=spec(choice("vrrp", "lease"))
    )
    vrrp_section: Vrrp | None = field(default=None, metadata=spec(section=Vrrp, yaml="vrrp"))
    lease: Lease | None = field(default=None, metadata=spec(section=Lease))

    def __init__(
        self,
        mode: Literal["vrrp", "lease", "none"],
        vrrp: Vrrp | None = None,
        lease: Lease | None = None,
    ) -> None:
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "vrrp_section", vrrp)
        object.__setattr__(self, "lease", lease)

    @property
    def vrrp(self) -> Vrrp:
        if self.vrrp_section is None:
            raise AttributeError(f"election.vrrp: not set (election.mode is {self.mode})")
        return self.vrrp_section


def read_election(c: Check, key: str, value: object, _: Mapping[str, Any]) -> Election:
    """``election``: the mode's section is required (null: its defaults), the other one is
    read when it is there; a Lease is never renewed through the VIP it decides about."""
    sec = c.section(key, value, keys_of(Election))
    got: dict[str, Any] = {}
    mode = read_key(c, key, Election, "mode", sec, got)
    if mode == "vrrp":
        vrrp = read_key(c, key, Election, "vrrp_section", sec, got)
        lease = (
            read_key(c, key, Election, "lease", sec, got) if sec.get("lease") is not None else None
        )
        return Election(mode="vrrp", vrrp=vrrp, lease=lease)
    vrrp_opt = (
        read_key(c, key, Election, "vrrp_section", sec, got)
        if sec.get("vrrp") is not None
        else None
    )
    lease = read_key(c, key, Election, "lease", sec, got)
    if lease.api_server is not None:
        host = re.sub(r"^https://\[?([^\]/]*?)\]?(:[0-9]+)?/?$", r"\1", lease.api_server)
        try:
            same = ip_address(host) in c.vips
        except ValueError:
            same = False
        if same:
            c.fail(
                f"{key}.lease.api_server",
                "must not be the VIP: the Lease that decides who holds the VIP cannot be "
                "renewed through the VIP (use this node's own API server, e.g. "
                "https://127.0.0.1:6443)",
                lease.api_server,
            )
    return Election(mode="lease", vrrp=vrrp_opt, lease=lease)
