"""Parsing rtnetlink link notifications into up/down states."""

from __future__ import annotations

import struct

from vipd.host.linkwatch import (
    IFF_LOWER_UP,
    IFF_RUNNING,
    IFF_UP,
    RTM_DELLINK,
    RTM_NEWLINK,
    is_up,
    parse_link_events,
)


def message(msg_type: int, index: int, flags: int, attrs: bytes = b"") -> bytes:
    body = struct.pack("=BBHiII", 0, 0, 1, index, flags, 0xFFFFFFFF) + attrs
    length = 16 + len(body)
    padded = body + b"\x00" * ((-length) % 4)
    return struct.pack("=IHHII", length, msg_type, 0, 0, 0) + padded


def test_up_needs_admin_up_and_carrier() -> None:
    assert is_up(IFF_UP | IFF_RUNNING | IFF_LOWER_UP)
    assert is_up(IFF_UP | IFF_LOWER_UP)
    assert not is_up(IFF_UP)  # no carrier: the peer end of a veth is down
    assert not is_up(IFF_RUNNING | IFF_LOWER_UP)  # `ip link set down`


def test_events_for_other_interfaces_are_ignored_and_order_is_kept() -> None:
    data = (
        message(RTM_NEWLINK, 3, IFF_UP | IFF_RUNNING)
        + message(RTM_NEWLINK, 2, IFF_UP, attrs=b"\x08\x00\x03\x00eth\x00x")
        + message(RTM_NEWLINK, 2, IFF_UP | IFF_RUNNING | IFF_LOWER_UP)
        + message(RTM_DELLINK, 2, IFF_UP | IFF_RUNNING)
    )
    assert parse_link_events(data, 2) == [False, True, False]
    assert parse_link_events(data, 3) == [True]
    assert parse_link_events(data, 9) == []


def test_truncated_reads_do_not_raise() -> None:
    data = message(RTM_NEWLINK, 2, IFF_UP | IFF_RUNNING)
    for cut in range(len(data)):
        parse_link_events(data[:cut], 2)
    assert parse_link_events(struct.pack("=IHHII", 0, RTM_NEWLINK, 0, 0, 0) + data, 2) == []
