"""keepalived's keywords as the importer knows them: which vipd key each maps onto, and for
those with no vipd equivalent, why (the meaning is ``keepalived.conf(5)``'s, from
https://github.com/acassen/keepalived, ``doc/man/man5/keepalived.conf.5``).

What it must not do: hold logic; ``keepalived.py`` does the mapping. A keyword in neither a
map nor a table here is unknown, and the importer refuses it.
"""

from __future__ import annotations

__all__ = ["GARP", "GLOBAL_GARP", "INSTANCE_DROPS", "NOTIFY", "SCHEDULERS", "TOP_DROPS"]

# Keywords of keepalived with no vipd equivalent, and why (keepalived.conf(5)).
INSTANCE_DROPS: dict[str, str] = {
    "state": "vipd has no initial state: every node starts as Backup and the highest "
    "priority wins after one Master_Down_Interval",
    "mcast_src_ip": "vipd sends from the interface's primary address (RFC 9568 §5.1.1.1)",
    "dont_track_primary": "vipd always watches its interface",
    "track_interface": "vipd watches only its own interface",
    "smtp_alert": "vipd sends no mail; use notify hooks",
    "lvs_sync_daemon_interface": "IPVS connection sync is not in vipd",
    "virtual_ipaddress_excluded": "vipd advertises every VIP it moves; add them to vips by "
    "hand if they must follow the VIP",
    "virtual_routes": "vipd installs no routes",
    "virtual_rules": "vipd installs no policy rules",
    "native_ipv6": "vipd runs IPv6 as its own router already",
    "accept": "vipd never accepts packets for the VIP other than by binding it",
    "no_accept": "vipd's behaviour already (RFC 9568 Accept_Mode false)",
    "strict_mode": "vipd follows the RFC on the wire; no switch",
    "debug": "use log.level",
    "vmac_xmit_base": "vipd sends from the macvlan when vmac is on",
    "garp_lower_prio_delay": "vipd sends no ARP at lower-priority adverts",
    "garp_lower_prio_repeat": "vipd sends no ARP at lower-priority adverts",
    "garp_master_refresh_repeat": "vipd's refresh sends one burst of garp.repeat",
    "skip_check_adv_addr": "vipd does not compare the advert's address list",
    "check_unicast_src": "vipd accepts adverts from any source on the link",
    "unicast_ttl": "vipd sends with TTL 255 (RFC 9568 §5.1.1.3)",
    "notify_master_rx_lower_pri": "no vipd equivalent",
    "notify_deleted": "no vipd equivalent",
    "track_process": "vipd tracks scripts and files only",
    "track_bfd": "BFD is not in vipd",
    "sync_group_tracking_weight": "sync groups are not in vipd",
    "kernel_rx_buf_size": "no vipd equivalent",
    "lower_prio_no_advert": "vipd always advertises as a Master",
    "higher_prio_send_advert": "no vipd equivalent",
    "use_vmac_addr": "no vipd equivalent",
    "unicast_fault_no_peer": "no vipd equivalent",
    "old_unicast_checksum": "keepalived <= 1.3.6's checksum is not in vipd",
    "version": "",  # handled
}
TOP_DROPS: dict[str, str] = {
    "vrrp_sync_group": "sync groups are not in vipd: one config is one election",
    "virtual_server_group": "vipd's IPVS takes one virtual service, VIP:6443",
    "static_ipaddress": "vipd does not manage static addresses",
    "static_routes": "vipd installs no routes",
    "static_rules": "vipd installs no policy rules",
    "vrrp_track_process": "vipd tracks scripts and files only",
    "bfd_instance": "BFD is not in vipd",
    "garp_group": "no vipd equivalent",
    "linkbeat_use_polling": "vipd follows links with netlink",
    "net_namespace": "run vipd in the namespace instead",
    "local_address_group": "IPVS local address groups are not in vipd",
}
GLOBAL_GARP = {
    "vrrp_garp_master_delay": "garp.delay",
    "vrrp_garp_master_repeat": "garp.repeat",
    "vrrp_garp_master_refresh": "garp.refresh",
    "vrrp_garp_interval": "garp.interval",
}
GARP = {
    "garp_master_delay": "garp.delay",
    "garp_master_repeat": "garp.repeat",
    "garp_master_refresh": "garp.refresh",
    "garp_interval": "garp.interval",
}
NOTIFY = {
    "notify_master": "notify.leader",
    "notify_backup": "notify.backup",
    "notify_fault": "notify.fault",
    "notify_stop": "notify.stop",
    "notify": "notify.all",
}
SCHEDULERS: set[str] = {
    "rr",
    "wrr",
    "lc",
    "wlc",
    "lblc",
    "lblcr",
    "dh",
    "sh",
    "sed",
    "nq",
    "fo",
    "ovf",
}
SCHEDULERS |= {"mh", "twos"}
