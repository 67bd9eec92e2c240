"""vipd.preflight: the checks on hand-made host snapshots, and the reader on this host."""

from __future__ import annotations

import ast
from ipaddress import IPv4Address, IPv6Address, ip_interface
from pathlib import Path
from typing import Any

import pytest

from vipd import preflight
from vipd.config import Config, ConfigError, parse
from vipd.preflight import (
    IFA_F_DADFAILED,
    IFA_F_DEPRECATED,
    IFA_F_TENTATIVE,
    HostAddress,
    HostLink,
    HostView,
    check_host,
    read_host,
    resolve_interface,
)

PERMANENT = 0x80  # what the kernel sets on addresses added by hand / by vipd


def addr(text: str, flags: int = PERMANENT) -> HostAddress:
    return HostAddress(address=ip_interface(text), flags=flags)


def stale(text: str) -> HostAddress:
    """The VIP as vipd leaves it after a crash: /32 (/128), preferred_lft 0 → deprecated."""
    return addr(text, PERMANENT | IFA_F_DEPRECATED)


_index = iter(range(2, 10_000))


def link(name: str, *addresses: HostAddress, up: bool = True, mac: str = "") -> HostLink:
    index = next(_index)
    return HostLink(
        name=name,
        index=index,
        up=up,
        loopback=False,
        mac=mac or f"02:00:00:00:00:{index % 256:02x}",
        addresses=addresses,
    )


LO = HostLink(
    name="lo",
    index=1,
    up=True,
    loopback=True,
    mac="00:00:00:00:00:00",
    addresses=(addr("127.0.0.1/8"), addr("::1/128")),
)


def host(*links: HostLink) -> HostView:
    return HostView(links=(LO, *links))


def cfg(vip: str = "10.0.0.100", interface: str | None = None, **vrrp: Any) -> Config:
    data: dict[str, Any] = {"node": "cp-1", "vip": vip, "election": {"vrrp": {"vrid": 51, **vrrp}}}
    if interface is not None:
        data["interface"] = interface
    return parse(data)


def fails(c: Config, h: HostView) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        check_host(c, h)
    assert "\n" not in str(info.value)
    return info.value


# -- resolve_interface: explicit -------------------------------------------------------------


def test_explicit_interface() -> None:
    eth1 = link("eth1", addr("192.0.2.5/24"))
    got, why = resolve_interface(cfg(interface="eth1"), host(link("eth0"), eth1))
    assert got == eth1 and why == "interface eth1 set in the config"


def test_explicit_interface_must_exist_and_lists_the_existing_ones() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_interface(cfg(interface="eth7"), host(link("eth0"), link("eth1")))
    e = info.value
    assert e.key == "interface"
    assert (
        str(e)
        == 'interface: no such interface on this node (existing: lo, eth0, eth1) (got "eth7")'
    )


def test_explicit_interface_must_not_be_loopback() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_interface(cfg(interface="lo"), host(link("eth0")))
    assert info.value.key == "interface" and "loopback" in str(info.value)


def test_explicit_interface_down_is_a_finding_not_an_error() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"), up=False)
    pre = check_host(cfg(interface="eth0"), host(eth0))
    assert pre.link == eth0
    assert any("is down" in f for f in pre.findings)


# -- resolve_interface: auto-detection -------------------------------------------------------


def test_auto_detect_by_subnet() -> None:
    eth0 = link("eth0", addr("192.168.5.1/24"))
    eth1 = link("eth1", addr("10.0.0.1/24"))
    got, why = resolve_interface(cfg(), host(eth0, eth1))
    assert got == eth1
    assert why == "interface eth1 auto-detected: it holds 10.0.0.1/24, the subnet of the VIP"


def test_auto_detect_ignores_down_and_loopback_links() -> None:
    down = link("eth0", addr("10.0.0.2/24"), up=False)
    eth1 = link("eth1", addr("10.0.0.1/24"))
    lo = HostLink("lo", 1, True, True, "", (addr("10.0.0.1/8"),))  # a silly but possible lo
    got, _ = resolve_interface(cfg(), HostView(links=(lo, down, eth1)))
    assert got == eth1


def test_auto_detect_several_subnet_candidates_is_an_error() -> None:
    h = host(link("eth0", addr("10.0.0.1/24")), link("eth1", addr("10.0.0.2/16")))
    with pytest.raises(ConfigError) as info:
        resolve_interface(cfg(), h)
    e = info.value
    assert e.key == "interface"
    assert "several candidate interfaces (eth0, eth1)" in str(e)
    assert "set interface explicitly" in str(e)


def test_auto_detect_falls_back_to_the_only_global_address() -> None:
    eth0 = link("eth0", addr("192.168.5.1/24"), addr("fd00::1/64"))
    got, why = resolve_interface(cfg(), host(eth0, link("eth1", addr("fd00:1::1/64"))))
    assert got == eth0
    assert "no interface holds the VIP's subnet" in why and "192.168.5.1/24" in why


def test_auto_detect_fallback_with_several_is_an_error() -> None:
    h = host(link("eth0", addr("192.168.5.1/24")), link("eth1", addr("172.16.0.1/24")))
    with pytest.raises(ConfigError) as info:
        resolve_interface(cfg(), h)
    assert "several candidate interfaces (eth0, eth1)" in str(info.value)


def test_auto_detect_nothing_is_an_error() -> None:
    h = host(link("eth0", addr("fe80::1/64")), link("eth1", addr("169.254.1.1/16")))
    with pytest.raises(ConfigError) as info:
        resolve_interface(cfg(), h)
    e = info.value
    assert e.key == "interface" and "cannot auto-detect" in str(e)
    assert "lo, eth0, eth1" in str(e)


def test_auto_detect_ipv6_ignores_link_local() -> None:
    # every IPv6 link has fe80::/64; only the global/ULA prefix says where the VIP lives
    eth0 = link("eth0", addr("fe80::1/64"))
    eth1 = link("eth1", addr("fe80::2/64"), addr("2001:db8:1::1/64"))
    got, why = resolve_interface(cfg("2001:db8:1::100"), host(eth0, eth1))
    assert got == eth1 and "2001:db8:1::1/64" in why


def test_auto_detect_ignores_the_vip_itself() -> None:
    # a /32 copy of the VIP "contains" the VIP: it must not make its link a candidate
    eth0 = link("eth0", stale("10.0.0.100/32"), addr("192.168.0.1/24"))
    eth1 = link("eth1", addr("10.0.0.1/24"))
    got, _ = resolve_interface(cfg(), host(eth0, eth1))
    assert got == eth1


# -- check_host: the VIP is not a node address -----------------------------------------------


def test_clean_host() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"), addr("fe80::1/64"))
    pre = check_host(cfg(), host(eth0))
    assert pre.link == eth0 and pre.source == IPv4Address("10.0.0.1")
    assert pre.stale_vip is False
    assert pre.findings[0].startswith("interface eth0 auto-detected")
    assert "VRRP adverts will be sent from 10.0.0.1 on eth0" in pre.findings


def test_vip_as_node_address_is_an_error() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"), addr("10.0.0.100/24"))
    e = fails(cfg(), host(eth0))
    assert str(e) == (
        "vip: is already an address of this node (eth0 10.0.0.100/24): "
        "a VIP must not be a node address"
    )


def test_vip_on_another_interface_is_an_error() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"))
    eth1 = link("eth1", addr("10.0.0.100/32"))  # /32 but not deprecated: someone's address
    e = fails(cfg(interface="eth0"), host(eth0, eth1))
    assert e.key == "vip" and "(eth1 10.0.0.100/32)" in str(e)


def test_vip_on_loopback_is_an_error() -> None:
    lo = HostLink("lo", 1, True, True, "", (addr("127.0.0.1/8"), addr("10.0.0.100/32")))
    e = fails(cfg(), HostView(links=(lo, link("eth0", addr("10.0.0.1/24")))))
    assert e.key == "vip" and "(lo 10.0.0.100/32)" in str(e)


def test_stale_vip_on_the_chosen_interface_is_reported() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"), stale("10.0.0.100/32"))
    pre = check_host(cfg(), host(eth0))
    assert pre.stale_vip is True and pre.source == IPv4Address("10.0.0.1")
    assert any(
        "a stale VIP from an earlier run (10.0.0.100/32 on eth0) will be removed at start" in f
        for f in pre.findings
    )


def test_stale_ipv6_vip() -> None:
    eth0 = link("eth0", addr("fe80::1/64"), addr("fd00::1/64"), stale("fd00::100/128"))
    pre = check_host(cfg("fd00::100"), host(eth0))
    assert pre.stale_vip is True and pre.source == IPv6Address("fe80::1")


def test_deprecated_copy_with_a_subnet_prefix_is_not_ours() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"), stale("10.0.0.100/24"))
    assert fails(cfg(), host(eth0)).key == "vip"


def test_stale_copy_on_another_interface_says_how_to_remove_it() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"))
    eth1 = link("eth1", addr("192.168.0.1/24"), stale("10.0.0.100/32"))
    e = fails(cfg(), host(eth0, eth1))
    assert e.key == "vip"
    assert "earlier vipd run on eth1" in str(e)
    assert "`ip addr del 10.0.0.100/32 dev eth1`" in str(e)


@pytest.mark.parametrize(("vip", "what"), [("10.0.0.255", "broadcast"), ("10.0.0.0", "network")])
def test_vip_is_not_the_subnets_broadcast_or_network_address(vip: str, what: str) -> None:
    e = fails(cfg(vip), host(link("eth0", addr("10.0.0.1/24"))))
    assert e.key == "vip" and f"is the {what} address of eth0's subnet 10.0.0.0/24" in str(e)


def test_point_to_point_subnets_have_no_broadcast() -> None:
    pre = check_host(cfg("10.0.0.1"), host(link("eth0", addr("10.0.0.0/31"))))
    assert pre.source == IPv4Address("10.0.0.0")


# -- check_host: the source address ----------------------------------------------------------


def test_ipv4_source_skips_deprecated_link_local_and_the_vip() -> None:
    eth0 = link(
        "eth0",
        addr("169.254.3.3/16"),
        addr("10.0.0.7/24", PERMANENT | IFA_F_DEPRECATED),
        stale("10.0.0.100/32"),
        addr("10.0.0.2/24"),
        addr("10.0.0.3/24", PERMANENT | 0x01),  # secondary
    )
    pre = check_host(cfg(interface="eth0"), host(eth0))
    assert pre.source == IPv4Address("10.0.0.2")


def test_ipv4_without_a_usable_address_is_an_error() -> None:
    eth0 = link("eth0", addr("169.254.3.3/16"), addr("fd00::1/64"))
    e = fails(cfg(interface="eth0"), host(eth0))
    assert e.key == "interface"
    assert "eth0 has no usable source address for VRRP adverts" in str(e)
    assert "IPv4" in str(e)


def test_ipv6_source_is_the_link_local_address() -> None:
    eth0 = link("eth0", addr("2001:db8::1/64"), addr("fe80::abcd/64"))
    pre = check_host(cfg("2001:db8::100"), host(eth0))
    assert pre.source == IPv6Address("fe80::abcd")


def test_ipv6_without_link_local_is_an_error() -> None:
    eth0 = link("eth0", addr("2001:db8::1/64"))
    e = fails(cfg("2001:db8::100"), host(eth0))
    assert e.key == "interface" and "link-local" in str(e)


def test_ipv6_dad_failed_link_local_is_not_usable() -> None:
    eth0 = link("eth0", addr("2001:db8::1/64"), addr("fe80::1/64", PERMANENT | IFA_F_DADFAILED))
    assert fails(cfg("2001:db8::100"), host(eth0)).key == "interface"


def test_ipv6_tentative_link_local_is_a_finding() -> None:
    eth0 = link("eth0", addr("2001:db8::1/64"), addr("fe80::1/64", IFA_F_TENTATIVE))
    pre = check_host(cfg("2001:db8::100"), host(eth0))
    assert pre.source == IPv6Address("fe80::1")
    assert any("tentative" in f for f in pre.findings)


# -- check_host: other findings and peers ----------------------------------------------------


def test_vip_outside_the_links_subnets_is_a_finding() -> None:
    eth0 = link("eth0", addr("192.168.5.1/24"))
    pre = check_host(cfg(), host(eth0))
    assert any("is in none of eth0's subnets" in f for f in pre.findings)


def test_link_without_mac_is_a_finding() -> None:
    tun = HostLink("tun0", 5, True, False, "", (addr("10.0.0.1/24"),))
    pre = check_host(cfg(), host(tun))
    assert any("no link-layer address" in f for f in pre.findings)


def test_own_address_in_unicast_peers_is_skipped_not_an_error() -> None:
    # A DaemonSet shares one config listing every node, this one included.
    eth0 = link("eth0", addr("10.0.0.1/24"))
    eth1 = link("eth1", addr("192.168.0.9/24"))
    c = cfg(interface="eth0", unicast_peers=["10.0.0.2", "192.168.0.9"])
    pre = check_host(c, host(eth0, eth1))
    assert pre.unicast_peers == (IPv4Address("10.0.0.2"),)
    assert any("192.168.0.9 is this node's own address (eth1" in f for f in pre.findings)


def test_unicast_peers_of_only_this_node_are_an_error() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"))
    e = fails(cfg(interface="eth0", unicast_peers=["10.0.0.1"]), host(eth0))
    assert e.key == "election.vrrp.unicast_peers"
    assert "only this node's own addresses" in str(e)


def test_unicast_peers_are_listed_in_the_findings() -> None:
    c = cfg(unicast_peers=["10.0.0.2", "10.0.0.3"])
    pre = check_host(c, host(link("eth0", addr("10.0.0.1/24"))))
    assert "unicast mode: adverts go to 10.0.0.2, 10.0.0.3" in pre.findings


def test_findings_are_plain_one_line_strings() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"), stale("10.0.0.100/32"), up=False)
    pre = check_host(cfg(interface="eth0", unicast_peers=["10.0.0.2"]), host(eth0))
    assert len(pre.findings) >= 4
    assert all(isinstance(f, str) and f and "\n" not in f for f in pre.findings)


# -- the reader ------------------------------------------------------------------------------


def test_read_host_finds_loopback() -> None:
    view = read_host()
    lo = [link for link in view.links if link.loopback]
    assert len(lo) == 1 and lo[0].name == "lo"
    assert len({link.index for link in view.links}) == len(view.links)
    if lo[0].up:
        assert IPv4Address("127.0.0.1") in {a.ip for a in lo[0].addresses}


def test_read_host_missing_netns_is_not_created() -> None:
    name = "vipd-test-does-not-exist"
    with pytest.raises(FileNotFoundError):
        read_host(name)
    assert not Path("/run/netns", name).exists()


def test_checks_do_not_import_pyroute2_at_module_level() -> None:
    # The pure checks must be usable (and testable) without the netlink library loaded.
    tree = ast.parse(Path(preflight.__file__).read_text())
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module.split(".")[0])
    assert not top & {"asyncio", "socket", "pyroute2", "time", "select", "subprocess"}


def test_ipv6_unicast_to_global_peers_sends_from_the_global_address() -> None:
    eth0 = link("eth0", addr("fd00:77::11/64"), addr("fe80::11/64"))
    multicast = check_host(cfg("fd00:77::100", interface="eth0"), host(eth0))
    assert str(multicast.source) == "fe80::11"
    c = cfg("fd00:77::100", interface="eth0", unicast_peers=["fd00:77::12", "fd00:77::13"])
    assert str(check_host(c, host(eth0)).source) == "fd00:77::11"
    c = cfg("fd00:77::100", interface="eth0", unicast_peers=["fe80::12"])
    assert str(check_host(c, host(eth0)).source) == "fe80::11"


def test_lease_mode_has_no_vrrp_section_to_read() -> None:
    """Lease mode: preflight must not touch ``election.vrrp`` (it is unset and raises)."""
    data: dict[str, Any] = {"node": "cp-1", "vip": "10.0.0.100", "election": {"mode": "lease"}}
    c = parse(data)
    eth0 = link("eth0", addr("10.0.0.1/24"), stale("10.0.0.100/32"))
    pre = check_host(c, host(eth0))
    assert pre.link == eth0 and pre.stale_vip is True
    assert pre.unicast_peers == ()


def test_read_host_without_pyroute2_reads_what_pyroute2_reads() -> None:
    """Our own namespace is read with vipd.host.rtnl; another one through pyroute2. Both
    readings of this host must agree, link by link and address by address."""
    from pyroute2 import IPRoute

    import vipd.preflight as pf

    light = read_host()
    with IPRoute() as ipr:
        names = {int(m["index"]): m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}
    assert {link.index: link.name for link in light.links} == names
    # The pyroute2 path, pointed at our own namespace through /proc/self/ns/net.
    heavy = pf.read_host("/proc/self/ns/net")
    assert sorted(light.links, key=lambda link: link.index) == sorted(
        heavy.links, key=lambda link: link.index
    )


# -- check_host: what the findings say in each mode ---------------------------------------------

ROUTED_BGP = {"local_asn": 65100, "peers": [{"address": "10.78.1.0", "asn": 65000}]}


def routed(mode: str, pool: str = "ecmp", **extra: Any) -> Config:
    announce: dict[str, Any] = {"mode": mode, "pool": pool}
    if mode == "bgp":
        announce["bgp"] = ROUTED_BGP
    data: dict[str, Any] = {"node": "cp-1", "vip": "10.79.0.100", "announce": announce, **extra}
    if pool == "ecmp":
        data["health"] = None
    return parse(data)


def test_a_lease_sends_no_vrrp_advert_so_preflight_names_none() -> None:
    eth0 = link("eth0", addr("10.0.0.1/24"), addr("fe80::1/64"))
    pre = check_host(parse({"node": "cp-1", "vip": "10.0.0.100", "election": {"mode": "lease"}}),
                     host(eth0))  # fmt: skip
    assert not any("VRRP" in f for f in pre.findings), pre.findings
    assert pre.source == IPv4Address("10.0.0.1")  # still the node's address on the link


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("routing-table", "10.79.0.100 is written into table 198 for this node's routing daemon"),
        ("bgp", "vipd's BGP speaker announces 10.79.0.100 to 10.78.1.0 AS65000"),
    ],
)
def test_the_ecmp_pool_names_its_routes_and_no_vrrp_nor_layer_2(mode: str, says: str) -> None:
    # A routed uplink: a /31 to the router, no MAC worth the name, the VIP in none of its
    # subnets; none of that is a finding when routes announce the VIP.
    uplink = link("eth0", addr("10.78.1.1/31"), mac="00:00:00:00:00:00")
    pre = check_host(routed(mode), host(uplink))
    text = "\n".join(pre.findings)
    assert "VRRP" not in text and "subnets" not in text and "link-layer" not in text, text
    (line,) = [f for f in pre.findings if "AnyIP" in f]
    assert says in line and "while its API server is healthy (ECMP pool)" in line
    assert "protocol 248" in line and "no gratuitous ARP" in line


def test_the_leader_pool_with_vrrp_names_the_adverts_and_the_holders_routes() -> None:
    lan0 = link("lan0", addr("10.78.100.1/24"))
    c = routed("bgp", "leader", interface="lan0", election={"vrrp": {"vrid": 51}})
    pre = check_host(c, host(lan0))
    assert "VRRP adverts will be sent from 10.78.100.1 on lan0" in pre.findings
    (line,) = [f for f in pre.findings if "AnyIP" in f]
    assert "while it holds the vrrp election" in line and "BGP speaker" in line
    lease = routed("routing-table", "leader", interface="lan0", election={"mode": "lease"})
    pre = check_host(lease, host(lan0))
    assert not any("VRRP" in f for f in pre.findings), pre.findings
    assert any("while it holds the lease election" in f for f in pre.findings)
