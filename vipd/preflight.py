"""Preflight: check a validated `Config` against a snapshot of this node's links and addresses,
before anything on the host is touched.

What it does
    `check_host` picks the interface (`resolve_interface`), finds the node's own source
    address for VRRP adverts on it, and refuses a VIP that is already an address of this node,
    returning a `Preflight` with human-readable findings for ``vipd check`` and the start-up
    log. Problems are `vipd.config.ConfigError`: one line naming the key, exit code 2, nothing
    on the host changed.

What it must not do
    The checks are pure: they take a `HostView` (plain data, ``vipd.host.snapshot``) and never
    read the host themselves, so every rule is tested on hand-made snapshots. The reader,
    `read_host`, is ``vipd.host.snapshot``'s (re-exported here); it never changes an address,
    even the stale VIP reported here.

Rules and where they come from
    - The VIP must not be a node address (endpoint contract: "The VIP must not equal any slot
      address"): a node that owns the address would be the VRRP address owner (priority 255,
      RFC 9568 §5.2.4), and deleting the VIP on failover would delete the node's own address.
      The one copy that is not an error is vipd's own leftover from a crash: vipd binds the VIP
      as /32 (/128) with preferred_lft 0, so the kernel marks it IFA_F_DEPRECATED; such a copy
      on the chosen interface is reported as ``stale_vip`` and removed at start.
    - Interface auto-detection matches the VIP's subnet first (the contract's "same Layer-2
      network as the control-plane interface"), and refuses to guess between several
      candidates: on multi-NIC nodes the interface must be set explicitly (contract: "a wrong
      choice cannot be patched afterwards").
    - Adverts need a source address: IPv4 uses the interface's primary address (RFC 9568
      §5.1.1.1, keepalived's default); IPv6 uses the interface's link-local address (RFC 9568
      §5.1.2.1: the source MUST be the link-local address of the interface).
    - Unicast peers are the other nodes; listing this node's own address would make it send
      adverts to itself.
    - Several VIPs (``vips``): each is checked as above; the interface goes by the first one,
      and every family among them needs its own advert source (RFC 9568 §7: one virtual
      router per family, each advertising from an address of its family).
    - Findings say only what runs: the VRRP source lines when a VRRP election runs (not with
      a Lease, nor in the routed modes' ECMP pool, where nothing is elected); in the routed
      modes (docs/design/routed.md) a line saying what announces the VIP (the kernel table,
      or vipd's BGP speaker and its routers) in place of the layer-2 findings (the VIP's
      subnet on the interface, a link-layer address for gratuitous ARP), which do not apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from vipd.config import Config, ConfigError
from vipd.host import vmac

# The snapshot types live with the host (``vipd.host.snapshot``); they are re-exported here
# because every caller of preflight also speaks of them.
from vipd.host.snapshot import (
    IFA_F_DADFAILED,
    IFA_F_DEPRECATED,
    IFA_F_SECONDARY,
    IFA_F_TENTATIVE,
    HostAddress,
    HostLink,
    HostView,
    read_host,
)

IPAddress = IPv4Address | IPv6Address

__all__ = [
    "IFA_F_DADFAILED",
    "IFA_F_DEPRECATED",
    "IFA_F_SECONDARY",
    "IFA_F_TENTATIVE",
    "HostAddress",
    "HostLink",
    "HostView",
    "Preflight",
    "advert_source",
    "check_host",
    "read_host",
    "resolve_interface",
]


@dataclass(frozen=True, slots=True)
class Preflight:
    link: HostLink  # where the VIP goes and adverts are sent
    source: IPAddress  # the node's primary address on that link: adverts are sent from it
    findings: tuple[str, ...]  # human-readable, in the order they were found
    stale_vip: bool  # a copy left by an earlier vipd run is on `link` and must be removed
    unicast_peers: tuple[IPAddress, ...] = ()  # the configured peers less this node's own
    # The advert source per IP version of the VIPs; `source` is the first VIP's. Empty: only
    # `source` (a Preflight built by hand for one family).
    sources: tuple[IPAddress, ...] = ()

    def source_for(self, version: int) -> IPAddress:
        """The advert source of the virtual router of IP ``version`` (4 or 6)."""
        return next((s for s in self.sources if s.version == version), self.source)

    def peers_for(self, version: int) -> tuple[IPAddress, ...]:
        """The unicast peers of the virtual router of IP ``version``."""
        return tuple(p for p in self.unicast_peers if p.version == version)


# -- the pure checks -------------------------------------------------------------------------


def resolve_interface(cfg: Config, host: HostView) -> tuple[HostLink, str]:
    """Pick the interface for the VIP and say why, or raise `ConfigError` on ``interface``."""
    vip = cfg.vip
    family = _family(vip)
    names = ", ".join(link.name for link in host.links) or "none"

    if cfg.interface is not None:
        link = host.link(cfg.interface)
        if link is None:
            raise ConfigError(
                "interface", f"no such interface on this node (existing: {names})", cfg.interface
            )
        if link.loopback:
            # a VIP on lo answers only this node, and GARP/VRRP can't go out on it
            raise ConfigError(
                "interface",
                "must not be a loopback interface: the VIP is announced on the LAN",
                cfg.interface,
            )
        return link, f"interface {link.name} set in the config"

    usable = [link for link in host.links if link.up and not link.loopback]

    # 1. the interface holding the VIP's subnet: the VIP is reachable there without routing
    in_subnet: list[tuple[HostLink, HostAddress]] = []
    for link in usable:
        hit = next(
            (a for a in _own(link.addresses, vip) if _scoped(a.ip) and vip in a.address.network),
            None,
        )
        if hit is not None:
            in_subnet.append((link, hit))
    if len(in_subnet) == 1:
        link, addr = in_subnet[0]
        return link, (
            f"interface {link.name} auto-detected: it holds {addr.address}, the subnet of the VIP"
        )
    if in_subnet:
        raise ConfigError(
            "interface",
            f"several candidate interfaces ({', '.join(link.name for link, _ in in_subnet)}) "
            "hold the VIP's subnet: set interface explicitly",
        )

    # 2. no subnet match: the one interface with a global address of the family, if just one
    with_global: list[tuple[HostLink, HostAddress]] = []
    for link in usable:
        hit = next((a for a in _own(link.addresses, vip) if _scoped(a.ip)), None)
        if hit is not None:
            with_global.append((link, hit))
    if len(with_global) == 1:
        link, addr = with_global[0]
        return link, (
            f"interface {link.name} auto-detected: no interface holds the VIP's subnet, and it "
            f"is the only up interface with a global {family} address ({addr.address})"
        )
    if with_global:
        raise ConfigError(
            "interface",
            f"several candidate interfaces ({', '.join(link.name for link, _ in with_global)}) "
            f"and none holds the VIP's subnet: set interface explicitly",
        )
    raise ConfigError(
        "interface",
        f"cannot auto-detect: no up, non-loopback interface has a global {family} address "
        f"(existing: {names}); set interface explicitly",
    )


def _vip_key(cfg: Config, i: int) -> str:
    """The key an error about the ``i``-th VIP names: ``vip``, or ``vips[i]``."""
    return "vip" if len(cfg.vips) == 1 else f"vips[{i}]"


def check_host(cfg: Config, host: HostView) -> Preflight:
    """Check ``cfg`` against ``host``; raise `ConfigError` or return what was decided."""
    vip = cfg.vip

    # No VIP may be a node address, on any interface. A deprecated /32 (/128) copy looks
    # like vipd's own leftover; whether it may stay depends on the interface chosen below.
    leftovers: list[tuple[str, HostLink, HostAddress]] = []
    for i, each in enumerate(cfg.vips):
        leftovers.extend((_vip_key(cfg, i), link, a) for link, a in _copies(cfg, host, each, i))

    link, reason = resolve_interface(cfg, host)
    findings = [reason]
    if not link.up:
        findings.append(
            f"interface {link.name} is down (not IFF_UP): the VIP can't be reached there until "
            "it is up"
        )

    stale_vip = False
    # With election.vrrp.vmac the VIP lives on the macvlan vrrp.<vrid>: a leftover there is ours
    # too (the macvlan is reused or replaced at start, which drops it).
    vmac_link = (
        vmac.link_name(cfg.election.vrrp.vrid)
        if cfg.election.mode == "vrrp" and cfg.election.vrrp.vmac
        else None
    )
    for key, other, a in leftovers:
        if other.index != link.index and other.name != vmac_link:
            raise ConfigError(
                key,
                f"is already an address of this node ({other.name} {a.address}, deprecated: "
                f"probably left by an earlier vipd run on {other.name}; remove it with "
                f"`ip addr del {a.address} dev {other.name}`): a VIP must not be a node address",
            )
        stale_vip = True
        findings.append(
            f"a stale VIP from an earlier run ({a.address} on {other.name}) "
            "will be removed at start"
        )

    for i, each in enumerate(cfg.vips):
        _check_subnet_edges(_vip_key(cfg, i), each, link)

    # One config is shared by every node of a DaemonSet, so it lists every node, this one
    # included: our own addresses are dropped (and said), not treated as an error.
    own = {a.ip: (other, a) for other in host.links for a in other.addresses}
    configured = cfg.election.vrrp.unicast_peers if cfg.election.mode == "vrrp" else ()
    peers = tuple(p for p in configured if p not in own)
    for peer in configured:
        if peer in own:
            other, a = own[peer]
            findings.append(
                f"unicast peer {peer} is this node's own address ({other.name} {a.address}): "
                "skipped"
            )
    if configured and not peers:
        raise ConfigError(
            "election.vrrp.unicast_peers",
            "lists only this node's own addresses: add the other nodes",
            ", ".join(str(p) for p in configured),
        )
    for version in cfg.families:
        if configured and not any(p.version == version for p in peers):
            raise ConfigError(
                "election.vrrp.unicast_peers",
                f"lists only this node's own IPv{version} addresses: add the other nodes'",
                ", ".join(str(p) for p in configured if p.version == version),
            )
    if peers:
        findings.append(f"unicast mode: adverts go to {', '.join(str(p) for p in peers)}")

    sources: list[IPAddress] = []
    for version in cfg.families:
        rep_vip = cfg.family(version)[0]
        fam_peers = tuple(p for p in peers if p.version == version)
        source = _source(link, rep_vip, fam_peers)
        sources.append(source.ip)
        if cfg.election.mode != "vrrp":
            continue  # a Lease or the ECMP pool: no advert is ever sent
        findings.append(f"VRRP adverts will be sent from {source.ip} on {link.name}")
        if source.flags & IFA_F_TENTATIVE:
            findings.append(
                f"{source.ip} is still tentative (duplicate address detection running): "
                "adverts can be sent once it completes"
            )
    primary_ip = next(s for s in sources if s.version == vip.version)

    if cfg.announce.routed:
        findings.append(_routed_finding(cfg))
    else:
        findings += _layer2_findings(cfg, link)
    return Preflight(
        link=link,
        source=primary_ip,
        findings=tuple(findings),
        stale_vip=stale_vip,
        unicast_peers=peers,
        sources=tuple(sources),
    )


def _layer2_findings(cfg: Config, link: HostLink) -> list[str]:
    """What would keep the VIP from reaching clients on the segment (ARP and VRRP modes)."""
    findings = []
    for each in cfg.vips:
        if not any(each in a.address.network for a in _own(link.addresses, each) if _scoped(a.ip)):
            findings.append(
                f"the VIP {each} is in none of {link.name}'s subnets: clients on that layer-2 "
                "network need a route to it"
            )
    if not link.mac or link.mac == "00:00:00:00:00:00":
        findings.append(
            f"{link.name} has no link-layer address: gratuitous ARP / unsolicited NA cannot "
            "move the VIP there"
        )
    return findings


def _routed_finding(cfg: Config) -> str:
    """What reaches the network in the routed modes, in place of the L2 findings (no VIP
    subnet on the interface is needed, and no gratuitous ARP is sent)."""
    a = cfg.announce
    who = "this node while its API server is healthy (ECMP pool)"
    if not a.ecmp:
        who = f"this node while it holds the {cfg.election.mode} election"
    vips = ", ".join(map(str, cfg.vips))
    if a.speaker:
        routers = ", ".join(f"{p.address} AS{p.asn}" for p in a.bgp.peers)
        how = f"vipd's BGP speaker announces {vips} to {routers}"
    else:
        how = f"{vips} is written into table {a.table} for this node's routing daemon to export"
    return (
        f"{how}, from {who}; the VIP is bound as an AnyIP route on lo (protocol "
        f"{a.protocol}), not as an address, and no gratuitous ARP is sent"
    )


def _copies(
    cfg: Config, host: HostView, vip: IPAddress, i: int
) -> Iterable[tuple[HostLink, HostAddress]]:
    """The copies of ``vip`` on this node that may be vipd's own leftovers; raise for one that
    is a real node address."""
    for link in host.links:
        for a in link.addresses:
            if a.ip != vip:
                continue
            if link.loopback and cfg.ipvs.enabled and cfg.ipvs.forwarding == "dr":
                # IPVS direct routing: every backend accepts the VIP on lo (docs/design/ipvs.md)
                continue
            if a.host_prefix and a.deprecated:
                yield link, a
            else:
                raise ConfigError(
                    _vip_key(cfg, i),
                    f"is already an address of this node ({link.name} {a.address}): "
                    "a VIP must not be a node address",
                )


def _check_subnet_edges(key: str, vip: IPAddress, link: HostLink) -> None:
    """An IPv4 VIP must not be the network or broadcast address of one of ``link``'s subnets."""
    if isinstance(vip, IPv4Address):
        for a in link.addresses:
            net = a.address.network
            if a.ip.version == 4 and net.prefixlen <= 30 and vip in net:
                if vip == net.broadcast_address:
                    raise ConfigError(
                        key, f"is the broadcast address of {link.name}'s subnet {net}", str(vip)
                    )
                if vip == net.network_address:
                    raise ConfigError(
                        key, f"is the network address of {link.name}'s subnet {net}", str(vip)
                    )


def _source(link: HostLink, vip: IPAddress, peers: tuple[IPAddress, ...]) -> HostAddress:
    """The advert source of the virtual router of ``vip``'s family, or a `ConfigError`."""
    family = _family(vip)
    global_v6 = _global_v6(vip, peers)
    primary = _primary(link, vip, global_v6)
    if primary is None:
        why = (
            "a global IPv4 address that is not the VIP"
            if family == "IPv4"
            else "a global IPv6 address (the unicast peers are global)"
            if global_v6
            else "an IPv6 link-local address (fe80::/10)"
        )
        raise ConfigError(
            "interface",
            f"{link.name} has no usable source address for VRRP adverts: it needs {why}",
        )
    return primary


def advert_source(
    vip: IPAddress, link: HostLink, unicast_peers: Iterable[IPAddress] = ()
) -> IPAddress | None:
    """The node's source address on ``link`` by the rule `check_host` applies at start (the
    first usable primary IPv4 address; IPv6: the link-local one, or a global one towards
    global unicast peers); None when the link has none. The agent asks again whenever the
    interface's addresses change, so the adverts follow a new primary address."""
    primary = _primary(link, vip, _global_v6(vip, tuple(unicast_peers)))
    return None if primary is None else primary.ip


def _global_v6(vip: IPAddress, peers: tuple[IPAddress, ...]) -> bool:
    return isinstance(vip, IPv6Address) and any(not p.is_link_local for p in peers)


def _family(ip: IPAddress) -> str:
    return "IPv4" if ip.version == 4 else "IPv6"


def _own(addresses: Iterable[HostAddress], vip: IPAddress) -> Iterable[HostAddress]:
    """The node's own addresses of the VIP's family (any copy of the VIP is not one)."""
    return (a for a in addresses if a.ip.version == vip.version and a.ip != vip)


def _scoped(ip: IPAddress) -> bool:
    """Global scope in the kernel's sense (ULA included): not loopback or link-local. An IPv6
    link-local subnet (fe80::/64) exists on every link, so it says nothing about the VIP."""
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def _primary(link: HostLink, vip: IPAddress, global_v6: bool = False) -> HostAddress | None:
    """The advert source. ``global_v6``: IPv6 unicast to global peers, which need a global
    source (a link-local one would not match the address they list for us)."""
    for a in _own(link.addresses, vip):
        if isinstance(vip, IPv4Address) or global_v6:
            # The first non-deprecated global address, as the kernel lists them (primaries
            # before their secondaries) - what keepalived and `ip route get` would use.
            if _scoped(a.ip) and not a.deprecated and not a.flags & IFA_F_DADFAILED:
                return a
        elif a.ip.is_link_local and not a.flags & IFA_F_DADFAILED:
            return a
    return None
