"""The virtual MAC option (``election.vrrp.vmac``): names, addresses and sysctls, as data.

What it is: the pure part of the RFC 5798 / RFC 9568 §7.3 virtual MAC: the router's MAC is
``00:00:5e:00:01:VRID`` (IPv4; ``00:00:5e:00:02:VRID`` for IPv6), carried by a macvlan
``vrrp.<vrid>`` on the configured interface. The leader binds the VIP on the macvlan, sends its
adverts and gratuitous ARP from it, so the VIP's MAC never changes: on failover clients keep
their ARP entry and only the switches' MAC tables move (the new leader's first frame from the
virtual MAC does that). ``sysctls`` lists the per-interface settings that make it correct:

- parent ``arp_ignore=1``: answer ARP only for addresses of the interface it came in on, so
  the parent never answers for the VIP (bound on the macvlan) with the node's own MAC;
- parent ``arp_announce=2``: ARP requests the node sends on the parent (e.g. to reach a
  client that connected to the VIP) carry a parent address as sender, never the VIP, which
  would re-point the client's entry for the VIP at the node's own MAC;
- macvlan ``arp_ignore=1``: the macvlan answers only for the VIP, never for the node's own
  address with the virtual MAC;
- macvlan ``rp_filter=2``: packets to the VIP come in on the macvlan while the route back
  to the client leaves by the parent; loose mode accepts them whatever ``all.rp_filter`` is
  (the kernel uses the larger of ``all`` and the interface's value);
- macvlan ``disable_ipv6=1``: without it every node's macvlan would make an IPv6 link-local
  address and send DAD / MLD / RS frames from the virtual MAC, which moves switches' MAC
  tables to a backup. Hence IPv4 only in this version.

Mode ``bridge``, not keepalived's ``private``: every node holds the same virtual MAC on its
macvlan, and in ``private`` (and ``vepa``) mode the kernel takes a multicast frame whose source
MAC is a local macvlan's for that macvlan's own frame reflected by a hairpin switch and hands
it to that macvlan only (macvlan_handle_frame), so the parent, where vipd receives, would never
see the leader's adverts: every backup would become leader (seen in the lab). keepalived gets
around it by receiving on the macvlan; in ``bridge`` mode the frame is passed to the parent as
any other, so reception needs no change. What bridge mode adds, local delivery between
macvlans of one parent, does not matter with the one macvlan per VRID vipd makes.

What it must not do: touch the host (``vipd.host.vmaclink`` does), or import sockets/netlink.
"""

from __future__ import annotations

MACVLAN_MODE = "bridge"

# The parent's values are restored at stop; the macvlan's go away with it.
PARENT_SYSCTLS: tuple[tuple[str, str], ...] = (("arp_ignore", "1"), ("arp_announce", "2"))
LINK_SYSCTLS: tuple[tuple[str, str, str], ...] = (
    ("ipv6", "disable_ipv6", "1"),
    ("ipv4", "arp_ignore", "1"),
    ("ipv4", "rp_filter", "2"),
)


def virtual_mac(vrid: int, ipv6: bool = False) -> str:
    """RFC 9568 §7.3: 00-00-5E-00-01-{VRID} (IPv4) or 00-00-5E-00-02-{VRID} (IPv6)."""
    if not 1 <= vrid <= 255:
        raise ValueError(f"VRID must be 1 to 255 (got {vrid})")
    return f"00:00:5e:00:{2 if ipv6 else 1:02x}:{vrid:02x}"


def link_name(vrid: int) -> str:
    """The macvlan's name: ``vrrp.<vrid>`` (at most 8 characters, under IFNAMSIZ)."""
    return f"vrrp.{vrid}"


def reusable(
    kind: str | None,
    parent: int | None,
    mac: str | None,
    mode: str | None,
    want_parent: int,
    want_mac: str,
) -> bool:
    """May an existing link of our name (a crash leftover) be kept, or must it be replaced?"""
    return (
        kind == "macvlan"
        and parent == want_parent
        and (mac or "").lower() == want_mac
        and mode == MACVLAN_MODE  # pyroute2 decodes IFLA_MACVLAN_MODE to its name
    )
