"""Membership that follows the control plane: the pure policy.

What it is
    `found_in` reads one API answer (a ``discovery.k8s.io/v1`` EndpointSliceList of the
    ``default/kubernetes`` Service, or a ``v1`` NodeList of the control-plane Nodes, as JSON
    data) into the addresses it names and the count of objects it had to drop (not what
    the type says: a counted, logged defect of the API server or of a writer, never an
    error that stops the others). `merge` makes one peer list: the static list first, in
    its order, then the followed addresses of the list's families, sorted; this node's own
    addresses never. `followed_lists` says which lists of a config follow which sources,
    `effective` is the config with the merged lists in (what the running parts are given,
    like a reload's config), and `Admission` is the VRRP unicast rule below.

    A failed or empty read keeps the last good set of that source (`Known.update`): with
    the API down there is nothing better to know, and an empty answer from a live API
    server lists not even the server that answered, so it is not the truth either.

The unicast admission rule (``election.vrrp.unicast_peers_from``)
    A node drops unicast adverts from a source that is not in its set (RFC 9568 defines
    multicast adverts only; unicast peers are an extension, keepalived's ``unicast_peer``,
    and vipd's source check is in ``vipd.vrrp.packet``). So a new node
    must not win before the others have learnt it, or two nodes would hold the VIP. The
    rule: a node whose own address is in the static list is known to every node from the
    start and is never held. Any other node stays out of the election (no adverts, never
    master) until its own address has been in the set it reads for ``settle`` seconds (one
    ``membership.interval`` plus one read's timeout: the others read the same API at the
    same interval), and leaves it again (a leader resigns) when its address goes out of the
    set. Until its first read is done it is held too. A node that reads nothing at all (no
    API server answers: a first ``kubeadm init``) is not held: the static list rules, and
    the RFC 5227 start probe (``vipd.vrrp.startprobe``) keeps it from binding a VIP that
    another node answers for. That probe also keeps a new node out while the VIP is held
    and the master has not learnt it: unicast adverts go to the master's set only, so none
    reaches the new node, and the probe waits for one. Adverts from a new peer are accepted
    as soon as it is in the set.

What it must not do: talk to the API server, read the clock, or decide an election (it
only says whether a node may take part).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

from vipd.config import MEMBERSHIP_SOURCES, Config

IPAddress = IPv4Address | IPv6Address

ENDPOINTSLICES, NODES = MEMBERSHIP_SOURCES
SERVICE_LABEL = "kubernetes.io/service-name=kubernetes"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# The config keys of the lists that may follow, as the metrics' ``list`` label.
UNICAST_PEERS = "election.vrrp.unicast_peers"
HEALTH_PEERS = "health.peers"
IPVS_BACKENDS = "ipvs.backends"


@dataclass(frozen=True, slots=True)
class Found:
    """One read of one source: the addresses, and the objects dropped as malformed."""

    addresses: frozenset[IPAddress]
    dropped: int = 0


def _address(text: object) -> IPAddress | None:
    if not isinstance(text, str):
        return None
    try:
        return ip_address(text)
    except ValueError:
        return None


def _items(data: object) -> tuple[list[Any], int]:
    if not isinstance(data, Mapping):
        return [], 1
    items = data.get("items")
    if items is None:
        return [], 0
    if not isinstance(items, list):
        return [], 1
    return items, 0


def from_slices(data: object) -> Found:
    """The ready endpoint addresses of an EndpointSliceList (absent ``ready`` is ready, the
    API's rule). Dropped: an item, endpoint or address that is not what the type says."""
    items, dropped = _items(data)
    found: set[IPAddress] = set()
    for item in items:
        if not isinstance(item, Mapping) or item.get("addressType") not in (
            "IPv4",
            "IPv6",
            "FQDN",
        ):
            dropped += 1
            continue
        if item["addressType"] == "FQDN":
            continue  # not an address; the API servers never write these for "kubernetes"
        endpoints = item.get("endpoints") or []
        if not isinstance(endpoints, list):
            dropped += 1
            continue
        for ep in endpoints:
            if not isinstance(ep, Mapping) or not isinstance(ep.get("addresses"), list):
                dropped += 1
                continue
            cond = ep.get("conditions") or {}
            if isinstance(cond, Mapping) and cond.get("ready") is False:
                continue
            for text in ep["addresses"]:
                ip = _address(text)
                if ip is None or ip.is_unspecified or ip.is_multicast or ip.is_loopback:
                    dropped += 1
                else:
                    found.add(ip)
    return Found(frozenset(found), dropped)


def from_nodes(data: object) -> Found:
    """The ``InternalIP`` addresses of a NodeList (selected by the control-plane label by the
    reader). Every control-plane Node counts, ready or not: membership, not health (the
    health checks and the election decide about a node that is down). Dropped: an item
    that is not a Node with a list of addresses, or an InternalIP that is no address."""
    items, dropped = _items(data)
    found: set[IPAddress] = set()
    for item in items:
        status = item.get("status") if isinstance(item, Mapping) else None
        addresses = status.get("addresses") if isinstance(status, Mapping) else None
        if not isinstance(addresses, list):
            dropped += 1
            continue
        for a in addresses:
            if not isinstance(a, Mapping) or a.get("type") != "InternalIP":
                continue
            ip = _address(a.get("address"))
            if ip is None or ip.is_unspecified or ip.is_multicast or ip.is_loopback:
                dropped += 1
            else:
                found.add(ip)
    return Found(frozenset(found), dropped)


def found_in(source: str, data: object) -> Found:
    if source == ENDPOINTSLICES:
        return from_slices(data)
    if source == NODES:
        return from_nodes(data)
    raise ValueError(f"unknown membership source {source!r}")


@dataclass(frozen=True, slots=True)
class Known:
    """The last good set of each source read so far (a source never read well is absent)."""

    sets: Mapping[str, frozenset[IPAddress]] = field(default_factory=dict)

    def update(self, source: str, found: Found | None) -> Known:
        """After a read: a failed (None) or empty one keeps the last good set."""
        if found is None or not found.addresses:
            return self
        return Known({**self.sets, source: found.addresses})

    def union(self, sources: Iterable[str]) -> frozenset[IPAddress] | None:
        """The addresses of ``sources``; None if none of them was ever read well."""
        got = [self.sets[s] for s in sources if s in self.sets]
        return frozenset().union(*got) if got else None


def merge(
    static: Iterable[IPAddress],
    followed: Iterable[IPAddress],
    *,
    own: frozenset[IPAddress],
    families: Iterable[int],
) -> tuple[IPAddress, ...]:
    """Static first (in order), then the followed addresses of ``families``, sorted; never
    one of ``own``. The static list is the file's and was checked there (families)."""
    head = [a for a in dict.fromkeys(static) if a not in own]
    fams = set(families)
    tail = sorted(
        (a for a in set(followed) if a.version in fams and a not in own and a not in head),
        key=lambda a: (a.version, a),
    )
    return (*head, *tail)


@dataclass(frozen=True, slots=True)
class Followed:
    """One peer list that follows: its key, its static list and its sources."""

    key: str
    static: tuple[IPAddress, ...]
    sources: tuple[str, ...]


def followed_lists(cfg: Config) -> tuple[Followed, ...]:
    """The lists of ``cfg`` with a non-empty ``*_from``."""
    out: list[Followed] = []
    if cfg.election.mode == "vrrp" and cfg.election.vrrp.unicast_peers_from:
        v = cfg.election.vrrp
        out.append(Followed(UNICAST_PEERS, v.unicast_peers, v.unicast_peers_from))
    if cfg.health is not None and cfg.health.peers_from:
        out.append(Followed(HEALTH_PEERS, cfg.health.peers, cfg.health.peers_from))
    if cfg.ipvs.enabled and cfg.ipvs.backends_from:
        out.append(Followed(IPVS_BACKENDS, cfg.ipvs.backends, cfg.ipvs.backends_from))
    return tuple(out)


def sources_of(lists: Iterable[Followed]) -> tuple[str, ...]:
    """Every source some list follows, each once, in `MEMBERSHIP_SOURCES` order."""
    wanted = {s for f in lists for s in f.sources}
    return tuple(s for s in MEMBERSHIP_SOURCES if s in wanted)


def merged(
    cfg: Config, known: Known, own: frozenset[IPAddress]
) -> dict[str, tuple[IPAddress, ...]]:
    """Each followed list of ``cfg``, merged with what is known."""
    return {
        f.key: merge(f.static, known.union(f.sources) or (), own=own, families=cfg.families)
        for f in followed_lists(cfg)
    }


def effective(cfg: Config, lists: Mapping[str, tuple[IPAddress, ...]]) -> Config:
    """``cfg`` with the merged lists in place of the static ones (the health and IPVS parts
    read them from the config they are given, like a reload's). The unicast peers go to
    the VRRP driver directly (``set_membership``): its config keeps the file's list."""
    out = cfg
    if HEALTH_PEERS in lists and cfg.health is not None:
        out = dataclasses.replace(
            out, health=dataclasses.replace(cfg.health, peers=lists[HEALTH_PEERS])
        )
    if IPVS_BACKENDS in lists:
        out = dataclasses.replace(
            out, ipvs=dataclasses.replace(cfg.ipvs, backends=lists[IPVS_BACKENDS])
        )
    return out


@dataclass(frozen=True, slots=True)
class Verdict:
    """May this node take part in the VRRP election now, and why (for the log)."""

    held: bool
    why: str


class Admission:
    """The unicast admission rule (module docstring) for one node; pure: ``now`` comes in."""

    def __init__(self, own: frozenset[IPAddress], static: Iterable[IPAddress], settle: float):
        self.own = own
        self.in_static = bool(own & set(static))
        self.settle = settle
        self.seen_since: float | None = None

    def verdict(self, now: float, attempted: bool, known: frozenset[IPAddress] | None) -> Verdict:
        if self.in_static:
            return Verdict(False, "this node is in the static list: every node knows it")
        if not attempted:
            return Verdict(True, "waiting for the first membership read")
        if known is None:
            return Verdict(
                False,
                "no membership read yet (no API server answered): the static list rules "
                "and the start probe guards the VIP",
            )
        if not self.own & known:
            self.seen_since = None
            return Verdict(True, "this node is not in the membership set: its peers would drop "
                           "its adverts")  # fmt: skip
        if self.seen_since is None:
            self.seen_since = now
        left = self.seen_since + self.settle - now
        if left > 0:
            return Verdict(
                True,
                f"in the membership set: waiting {self.settle:g} s in all for the others to "
                "read it",
            )
        return Verdict(False, "in the membership set")
