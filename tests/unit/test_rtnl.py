"""vipd.host.rtnl against pyroute2: the same bytes for the address requests, the same reading
of a real dump of this host's links and addresses (no root needed: dumps are unprivileged)."""

from __future__ import annotations

import socket
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

import pytest

from vipd.host import rtnl
from vipd.host.address import IFA_F_NODAD, INFINITY_LIFE_TIME, AddressActuator


def pyroute2_encode(
    msg_type: int, flags: int, seq: int, fields: dict[str, int], attrs: list[Any]
) -> bytes:
    from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg

    msg = ifaddrmsg()
    for key, value in fields.items():
        msg[key] = value
    msg["attrs"] = attrs
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = flags
    msg["header"]["seq"] = seq
    msg.encode()
    return bytes(msg.data)


def unsequenced(message: bytes) -> bytes:
    """The message with its sequence number zeroed: pyroute2's encoder writes 0 whatever it
    is given, vipd numbers its requests so a reply can be matched to one."""
    return message[:8] + b"\x00" * 4 + message[12:]


@pytest.mark.parametrize("vip", [IPv4Address("10.0.0.100"), IPv6Address("fd00::100")])
def test_the_address_requests_are_the_bytes_pyroute2_would_send(
    vip: IPv4Address | IPv6Address,
) -> None:
    v6 = isinstance(vip, IPv6Address)
    family = socket.AF_INET6 if v6 else socket.AF_INET
    base = {"family": family, "prefixlen": 128 if v6 else 32, "index": 7}
    ident = (
        [("IFA_ADDRESS", str(vip))] if v6 else [("IFA_LOCAL", str(vip)), ("IFA_ADDRESS", str(vip))]
    )
    act = AddressActuator(7, vip)
    try:
        add = pyroute2_encode(
            rtnl.RTM_NEWADDR,
            rtnl.NLM_F_REQUEST | rtnl.NLM_F_ACK | rtnl.NLM_F_CREATE | rtnl.NLM_F_REPLACE,
            1,
            base,
            [
                *ident,
                (
                    "IFA_CACHEINFO",
                    {"ifa_preferred": 0, "ifa_valid": INFINITY_LIFE_TIME, "cstamp": 0, "tstamp": 0},
                ),
                ("IFA_FLAGS", IFA_F_NODAD if v6 else 0),
            ],
        )
        assert unsequenced(act._add_msg) == add
        delete = pyroute2_encode(
            rtnl.RTM_DELADDR, rtnl.NLM_F_REQUEST | rtnl.NLM_F_ACK, 2, base, ident
        )
        assert unsequenced(act._del_msg) == delete
        dump = pyroute2_encode(
            rtnl.RTM_GETADDR, rtnl.NLM_F_REQUEST | rtnl.NLM_F_DUMP, 3, {"family": family}, []
        )
        assert unsequenced(act._dump_msg) == dump
    finally:
        act.close()


def test_a_dump_of_this_host_reads_as_pyroute2_reads_it() -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        want_links = {
            (int(m["index"]), int(m["flags"]), m.get_attr("IFLA_IFNAME"),
             (m.get_attr("IFLA_ADDRESS") or "").lower())
            for m in ipr.get_links()
        }  # fmt: skip
        want_addrs = set()
        for m in ipr.get_addr():
            text = m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS")
            flags = m.get_attr("IFA_FLAGS")
            want_addrs.add(
                (int(m["index"]), int(m["prefixlen"]), ip_address(text),
                 int(m["flags"] if flags is None else flags))
            )  # fmt: skip
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        links = [rtnl.parse_link(raw) for raw in rtnl.dump(sock, rtnl.link_dump_request(1))]
        addr_req = rtnl.address_request(
            rtnl.RTM_GETADDR, rtnl.NLM_F_REQUEST | rtnl.NLM_F_DUMP, 2, family=socket.AF_UNSPEC
        )
        addrs = [rtnl.parse_address(raw) for raw in rtnl.dump(sock, addr_req)]
    got_links = {(r.index, r.flags, r.name, r.mac) for r in links if r is not None}
    got_addrs = {
        (r.index, r.prefixlen, ip_address(r.address), r.flags)
        for r in addrs
        if r is not None and r.address is not None
    }
    assert got_links == want_links and any(name == "lo" for _, _, name, _ in got_links)
    assert got_addrs == want_addrs and got_addrs


def test_attributes_stop_at_a_truncated_one() -> None:
    body = rtnl.attr(rtnl.IFA_LOCAL, b"\x0a\x00\x00\x01") + rtnl.attr(rtnl.IFA_FLAGS, b"\x01")
    assert rtnl.attributes(body, 0) == {
        rtnl.IFA_LOCAL: b"\x0a\x00\x00\x01",
        rtnl.IFA_FLAGS: b"\x01",
    }
    assert rtnl.attributes(body[:-6], 0) == {rtnl.IFA_LOCAL: b"\x0a\x00\x00\x01"}
    assert rtnl.parse_address(b"\x00" * 10) is None
    assert rtnl.parse_link(b"\x00" * 10) is None
