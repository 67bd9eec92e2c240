"""vipd.host.vmac: the RFC 9568 §7.3 virtual MAC, the link name and the leftover rule."""

from __future__ import annotations

import pytest

from vipd.host import vmac


@pytest.mark.parametrize(
    ("vrid", "v6", "mac"),
    [
        (1, False, "00:00:5e:00:01:01"),
        (51, False, "00:00:5e:00:01:33"),
        (255, False, "00:00:5e:00:01:ff"),
        (7, True, "00:00:5e:00:02:07"),
    ],
)
def test_virtual_mac_is_the_rfc_9568_one(vrid: int, v6: bool, mac: str) -> None:
    assert vmac.virtual_mac(vrid, v6) == mac


@pytest.mark.parametrize("vrid", [0, 256, -1])
def test_virtual_mac_refuses_an_impossible_vrid(vrid: int) -> None:
    with pytest.raises(ValueError, match="VRID"):
        vmac.virtual_mac(vrid)


def test_link_name_fits_ifnamsiz() -> None:
    assert vmac.link_name(51) == "vrrp.51"
    assert all(len(vmac.link_name(v)) < 16 for v in (1, 99, 255))


def test_only_a_matching_macvlan_is_reused() -> None:
    mac = vmac.virtual_mac(51)
    bridge = vmac.MACVLAN_MODE
    assert vmac.reusable("macvlan", 3, mac.upper(), bridge, 3, mac)
    assert not vmac.reusable("macvlan", 4, mac, bridge, 3, mac)  # another parent
    assert not vmac.reusable("macvlan", 3, "00:00:5e:00:01:34", bridge, 3, mac)  # another VRID
    assert not vmac.reusable("macvlan", 3, mac, "private", 3, mac)  # private mode (see the module)
    assert not vmac.reusable("veth", 3, mac, None, 3, mac)  # someone else's link of that name
    assert not vmac.reusable(None, None, None, None, 3, mac)


def test_the_sysctls_that_keep_the_parent_from_answering_for_the_vip() -> None:
    assert ("arp_ignore", "1") in vmac.PARENT_SYSCTLS
    assert ("arp_announce", "2") in vmac.PARENT_SYSCTLS
    # disable_ipv6 first: the link must never send an IPv6 frame from the virtual MAC
    assert vmac.LINK_SYSCTLS[0] == ("ipv6", "disable_ipv6", "1")
    assert vmac.MACVLAN_MODE == "bridge"
