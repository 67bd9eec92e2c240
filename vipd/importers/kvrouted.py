"""kube-vip's BGP and routing-table modes → vipd's ``announce`` section (``vipd import kube-vip``).

What it is
    The control-plane VIP announced by routing instead of ARP. kube-vip's BGP mode
    (``bgp_enable``: its embedded GoBGP speaker) maps onto ``announce.mode: bgp`` (vipd's
    embedded speaker): ``bgp_as`` → ``local_asn``, ``bgp_routerid`` → ``router_id``,
    ``bgp_hold_time`` → ``hold_time``, the peers of ``bgp_peers`` (``address:asn:password:
    multihop``, comma-separated; an IPv6 address in brackets) or of ``bgp_peeraddress``/
    ``bgp_peeras`` → ``peers``. Its routing-table mode (``vip_routingtable``: the route written
    into a kernel table for the node's routing daemon) maps onto ``announce.mode:
    routing-table`` with ``vip_routingtableid``/``vip_routingprotocol``. Names and formats are
    kube-vip's (``pkg/kubevip/config_envvar.go``, ``pkg/bgp`` in
    https://github.com/kube-vip/kube-vip; ``kube-vip manifest pod --bgp --bgppeers`` writes
    them).

    Both add an empty ``health`` section: vipd announces only while the local API server
    answers /readyz, which kube-vip does not check by default; ``health.peers_from:
    [endpointslices]`` gives the pool rule the live API servers, so a node withdraws for its
    own ill health only while another can take the traffic.

    Refused: a peer with multihop (vipd's speaker peers on the link), a malformed peer or
    number, and kube-vip announcing from the Lease holder only (``vip_leaderelection`` with
    BGP or a table): vipd's routed modes announce from every healthy node (ECMP), a different
    failure behaviour the user must choose. A BGP password is never copied: vipd reads it
    from a file, and the import names the file to write it into.

What it must not do: read files or the environment, or print a password.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from vipd.importers import Dropped
from vipd.importers.render import Doc

__all__ = ["ROUTED_KEYS", "routed"]

# kube-vip's names this module reads; the caller drops the other bgp_* names it finds
ROUTED_KEYS = frozenset(
    (
        "bgp_enable", "bgp_as", "bgp_routerid", "bgp_hold_time", "bgp_peers",
        "bgp_peeraddress", "bgp_peeras", "bgp_peerpass", "bgp_multihop", "vip_routingtable",
        "vip_routingtableid", "vip_routingprotocol",
    )
)  # fmt: skip


class RoutedRefused(ValueError):
    """kube-vip's routed settings that vipd cannot take as they are; the message says why."""


def _int(value: str, key: str, at: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise RoutedRefused(f"{at}: {key}={value}: not an integer") from None


def _peer(text: str, at: str) -> tuple[str, int, str, bool]:
    """One ``bgp_peers`` item → (address, asn, password, multihop)."""
    if text.startswith("["):
        addr, sep, rest = text[1:].partition("]:")
        if not sep:
            raise RoutedRefused(f"{at}: bgp_peers item {text!r}: no ']:' after an IPv6 address")
    else:
        addr, _, rest = text.partition(":")
    asn, _, rest = rest.partition(":")
    password, _, multihop = rest.partition(":")
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        raise RoutedRefused(f"{at}: bgp_peers item: {addr!r} is not an IP address") from None
    return addr, _int(asn, "bgp_peers asn", at), password, multihop.lower() == "true"


def routed(
    env: dict[str, str],
    where: dict[str, str],
    out: Doc,
    dropped: list[Dropped],
    used: Callable[[str], tuple[str, str]],
) -> None:
    """Set ``announce`` (and ``health``) from kube-vip's ``env``; pops what it uses."""
    if env.get("vip_leaderelection", "").lower() == "true":
        raise RoutedRefused(
            f"{where['vip_leaderelection']}: vip_leaderelection with "
            f"{'bgp_enable' if 'bgp_enable' in env else 'vip_routingtable'}: kube-vip announces "
            "from the Lease holder only; vipd's routed modes announce from every node whose "
            "API server is healthy (ECMP): remove vip_leaderelection to import that, knowingly"
        )
    if "cp_namespace" in env:
        used("cp_namespace")  # the namespace of kube-vip's Lease: no Lease in these modes
    if out.tree.get("interface") == "lo":
        # kube-vip's BGP mode puts the VIP on lo; vipd binds it itself, and its interface
        # is the uplink (auto-detected)
        del out.tree["interface"]
        out.notes.pop(("interface",), None)
        dropped.append(
            Dropped(
                "env vip_interface=lo",
                where["vip_interface"],
                "vipd binds the VIP itself in routed modes; `interface` is the uplink "
                "(auto-detected when absent)",
            )
        )
    if env.get("bgp_enable", "").lower() == "true":
        _, at = used("bgp_enable")
        out.set("announce.mode", "bgp", f"env bgp_enable ({at})")
        _bgp(env, where, out, dropped, used)
    else:
        _, at = used("vip_routingtable")
        out.set("announce.mode", "routing-table", f"env vip_routingtable ({at})")
        for env_key, key in (("vip_routingtableid", "table"), ("vip_routingprotocol", "protocol")):
            if env_key in env:
                value, at = used(env_key)
                out.set(f"announce.{key}", _int(value, env_key, at), f"env {env_key} ({at})")
    out.set(
        "health.peers_from",
        ["endpointslices"],
        "vipd announces while the local API server is ready (kube-vip does not check); the "
        "pool rule's peers are the live API servers",
    )


def _bgp(
    env: dict[str, str],
    where: dict[str, str],
    out: Doc,
    dropped: list[Dropped],
    used: Callable[[str], tuple[str, str]],
) -> None:
    if "bgp_as" in env:
        value, at = used("bgp_as")
        out.set("announce.bgp.local_asn", _int(value, "bgp_as", at), f"env bgp_as ({at})")
    if "bgp_routerid" in env:
        value, at = used("bgp_routerid")
        out.set("announce.bgp.router_id", value, f"env bgp_routerid ({at})")
    if "bgp_hold_time" in env:
        value, at = used("bgp_hold_time")
        out.set(
            "announce.bgp.hold_time", _int(value, "bgp_hold_time", at), f"env bgp_hold_time ({at})"
        )
    peers: list[tuple[str, int, str, bool, str]] = []
    if "bgp_peers" in env:
        value, at = used("bgp_peers")
        peers += [(*_peer(item.strip(), at), at) for item in value.split(",") if item.strip()]
    if "bgp_peeraddress" in env:
        addr, at = used("bgp_peeraddress")
        if "bgp_peeras" not in env:
            raise RoutedRefused(f"{at}: bgp_peeraddress {addr} without bgp_peeras")
        asn = _int(used("bgp_peeras")[0], "bgp_peeras", at)
        password = used("bgp_peerpass")[0] if "bgp_peerpass" in env else ""
        multihop = "bgp_multihop" in env and used("bgp_multihop")[0].lower() == "true"
        peers.append((*_peer(f"{addr}:{asn}:", at)[:2], password, multihop, at))
    else:
        for k in ("bgp_peeras", "bgp_peerpass", "bgp_multihop"):
            if k in env:
                used(k)  # kube-vip's defaults beside bgp_peers: they apply to no peer
    if not peers:
        raise RoutedRefused("bgp_enable without a peer (bgp_peers or bgp_peeraddress)")
    for addr, asn, password, multihop, at in peers:
        if multihop:
            raise RoutedRefused(
                f"{at}: BGP peer {addr}: multihop; vipd's speaker peers with routers on the link"
            )
        item: dict[str, object] = {"address": addr, "asn": asn}
        if password:
            item["password_file"] = f"/etc/vipd/bgp-password-{addr.replace(':', '-')}"
            dropped.append(
                Dropped(
                    f"BGP password of peer {addr} (its value)",
                    at,
                    "vipd reads it only from a file: write it into "
                    f"{item['password_file']}, owned by root, mode 0600",
                )
            )
        out.append("announce.bgp.peers", item, f"{addr} ({at})")
