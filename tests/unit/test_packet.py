"""Tests for vipd.vrrp.packet: golden vectors, scapy cross-checks, every DecodeError reason,
and hypothesis properties (round trip, fuzzing, single-bit corruption).

Golden vectors come from the keepalived research notes (keepalived-vrrp.md §1.3, computed with
keepalived's algorithm) and from ze-software/ze's VRRP packet tests (goldenV2Hex, goldenV3v4Hex,
goldenV3v4CompatHex, goldenV3v6Hex), which a live keepalived capture settled.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from ipaddress import IPv4Address, IPv6Address
from typing import Any, Literal, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, IPOption_Router_Alert
from scapy.layers.inet6 import IPv6
from scapy.layers.vrrp import VRRP, VRRPv3
from scapy.packet import Raw

from vipd.vrrp.packet import (
    GROUP_V4,
    GROUP_V6,
    VRRP_PROTO,
    Advert,
    ChecksumForm,
    DecodeError,
    Expectation,
    IPAddress,
    Reason,
    check,
    decode,
    encode,
    parse_ipv4,
)

SRC = IPv4Address("10.0.0.2")
PEER = IPv4Address("10.0.0.1")
VIP = IPv4Address("10.0.0.100")
SRC6 = IPv6Address("fe80::c8")
PEER6 = IPv6Address("fe80::c9")

V2 = Advert(version=2, vrid=51, priority=100, interval_cs=100, addresses=(VIP,))
V2_PASS = replace(V2, auth_type=1, auth_data=b"secret")
V3 = Advert(version=3, vrid=51, priority=100, interval_cs=100, addresses=(VIP,))

ZE_SRC = IPv4Address("192.0.2.251")
ZE_VIPS = (IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2"))
ZE_V2 = Advert(version=2, vrid=10, priority=200, interval_cs=100, addresses=ZE_VIPS)
ZE_V3 = replace(ZE_V2, version=3)
ZE_V3_V6 = Advert(
    version=3,
    vrid=10,
    priority=100,
    interval_cs=100,
    addresses=(IPv6Address("fe80::1"), IPv6Address("2001:db8::1")),
)

REASONS: frozenset[str] = frozenset(get_args(Reason))


def rfc1071(data: bytes) -> int:
    """Textbook RFC 1071, word by word: the independent oracle for the module's shortcut."""
    if len(data) % 2:
        data += b"\0"
    total = 0
    for (word,) in struct.iter_unpack("!H", data):
        total += word
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def pseudo_header(src: IPAddress, dst: IPAddress, length: int) -> bytes:
    if isinstance(src, IPv4Address):
        return src.packed + dst.packed + bytes([0, VRRP_PROTO]) + length.to_bytes(2, "big")
    return src.packed + dst.packed + length.to_bytes(4, "big") + bytes([0, 0, 0, VRRP_PROTO])


def with_checksum(message: bytes, prefix: bytes = b"") -> bytes:
    """`message` with its checksum field recomputed over prefix + message."""
    zeroed = message[:6] + b"\0\0" + message[8:]
    return zeroed[:6] + rfc1071(prefix + zeroed).to_bytes(2, "big") + zeroed[8:]


def field(packet: Any, name: str) -> Any:
    return packet.getfieldval(name)


# --- golden vectors -------------------------------------------------------------------------

GOLDEN = [
    pytest.param(V2, SRC, GROUP_V4, "2133640100017066 0a000064 0000000000000000", "v2", id="v2"),
    pytest.param(
        V2_PASS, SRC, GROUP_V4, "213364010101331a 0a000064 7365637265740000", "v2", id="v2-pass"
    ),
    pytest.param(V3, SRC, GROUP_V4, "3133640100647572 0a000064", "pseudo-header", id="v3"),
    pytest.param(V3, SRC, PEER, "3133640100644b84 0a000064", "pseudo-header", id="v3-unicast"),
    pytest.param(
        ZE_V2,
        ZE_SRC,
        GROUP_V4,
        "210ac802000192ed c0000201c0000202 0000000000000000",
        "v2",
        id="ze-G1-v2",
    ),
    pytest.param(
        ZE_V3, ZE_SRC, GROUP_V4, "310ac8020064defb c0000201c0000202", "pseudo-header", id="ze-G2c"
    ),
    pytest.param(
        ZE_V3_V6,
        SRC6,
        GROUP_V6,
        "310a640200643f5d fe800000000000000000000000000001 20010db8000000000000000000000001",
        "ipv6",
        id="ze-G3-ipv6",
    ),
]


@pytest.mark.parametrize(("advert", "src", "dst", "wire", "form"), GOLDEN)
def test_golden_encode_and_decode(
    advert: Advert, src: IPAddress, dst: IPAddress, wire: str, form: ChecksumForm
) -> None:
    expected = bytes.fromhex(wire)
    assert encode(advert, src, dst) == expected
    assert decode(expected, src, dst) == (advert, form)
    # The oracle agrees that what we send verifies (v2 has no pseudo-header).
    prefix = b"" if advert.version == 2 else pseudo_header(src, dst, len(expected))
    assert rfc1071(prefix + expected) == 0


@pytest.mark.parametrize(
    ("advert", "src", "wire"),
    [
        pytest.param(V3, SRC, "3133640100646003 0a000064", id="reference"),
        pytest.param(ZE_V3, ZE_SRC, "310ac8020064828a c0000201c0000202", id="ze-G2"),
    ],
)
def test_rfc9568_message_only_form_is_accepted(advert: Advert, src: IPAddress, wire: str) -> None:
    message = bytes.fromhex(wire)
    assert rfc1071(message) == 0
    assert decode(message, src, GROUP_V4) == (advert, "message-only")


@pytest.mark.parametrize(
    ("advert", "src", "wire"),
    [
        pytest.param(V3, SRC, "3133640100646003 0a000064", id="reference"),
        pytest.param(ZE_V3, ZE_SRC, "310ac8020064828a c0000201c0000202", id="ze-G2"),
    ],
)
def test_message_only_option_sends_that_form(advert: Advert, src: IPAddress, wire: str) -> None:
    """election.vrrp.checksum: message-only gives the same bytes as the vectors above."""
    sent = encode(advert, src, GROUP_V4, message_only=True)
    assert sent == bytes.fromhex(wire)
    assert sent != encode(advert, src, GROUP_V4)  # the default form differs
    assert decode(sent, src, GROUP_V4) == (advert, "message-only")


def test_message_only_changes_nothing_for_v2_or_ipv6() -> None:
    v6 = IPv6Address("fe80::1")
    a6 = Advert(3, 51, 100, 100, (IPv6Address("fd00::100"),))
    assert encode(a6, v6, GROUP_V6, message_only=True) == encode(a6, v6, GROUP_V6)
    a2 = Advert(2, 51, 100, 100, (IPv4Address("10.0.0.100"),))
    assert encode(a2, SRC, GROUP_V4, message_only=True) == encode(a2, SRC, GROUP_V4)


def test_v3_pseudo_header_binds_the_destination() -> None:
    # Checksummed for the unicast peer; keepalived <= 1.3.6 used the group here instead.
    unicast = bytes.fromhex("3133640100644b84 0a000064")
    with pytest.raises(DecodeError) as caught:
        decode(unicast, SRC, GROUP_V4)
    assert caught.value.reason == "checksum"


def test_v2_password_longer_than_8_bytes_is_truncated() -> None:
    message = encode(replace(V2_PASS, auth_data=b"secret-password"), SRC, GROUP_V4)
    assert message[-8:] == b"secret-p"


# --- scapy cross-checks ---------------------------------------------------------------------


def scapy_v2(advert: Advert) -> bytes:
    auth = advert.auth_data[:8].ljust(8, b"\0")
    layer = VRRP(
        vrid=advert.vrid,
        priority=advert.priority,
        adv=advert.interval_cs // 100,
        authtype=advert.auth_type,
        addrlist=[str(address) for address in advert.addresses],
        auth1=int.from_bytes(auth[:4], "big"),
        auth2=int.from_bytes(auth[4:], "big"),
    )
    return bytes(layer)


def scapy_v3(advert: Advert, src: IPAddress, dst: IPAddress) -> bytes:
    """The VRRPv3 message scapy builds for `advert` from `src` to `dst`.

    For IPv4, VRRPv3.post_build calls in4_chksum(112, IP, payload): the RFC 5798 pseudo-header
    form that keepalived requires, not RFC 9568's message-only form. For IPv6 it calls
    in6_chksum, the RFC 8200 pseudo-header. The VRRP layer must sit on an IP layer for either.
    """
    ip_layer: Any = (
        IP(src=str(src), dst=str(dst)) if src.version == 4 else IPv6(src=str(src), dst=str(dst))
    )
    layer = VRRPv3(
        vrid=advert.vrid,
        priority=advert.priority,
        adv=advert.interval_cs,
        addrlist=[str(address) for address in advert.addresses],
    )
    return bytes(ip_layer / layer)[len(ip_layer) :]


@pytest.mark.parametrize(
    "advert",
    [
        V2,
        V2_PASS,
        ZE_V2,
        replace(V2, priority=0, interval_cs=25500),
        replace(V2_PASS, priority=255, auth_data=b"12345678"),
    ],
)
def test_v2_matches_scapy(advert: Advert) -> None:
    assert encode(advert, SRC, GROUP_V4) == scapy_v2(advert)


@pytest.mark.parametrize(
    ("advert", "src", "dst"),
    [
        (V3, SRC, GROUP_V4),
        (V3, SRC, PEER),
        (ZE_V3, ZE_SRC, GROUP_V4),
        (replace(V3, interval_cs=4095, priority=0), SRC, GROUP_V4),
        (ZE_V3_V6, SRC6, GROUP_V6),
        (ZE_V3_V6, SRC6, IPv6Address("2001:db8::2")),
    ],
)
def test_v3_matches_scapy(advert: Advert, src: IPAddress, dst: IPAddress) -> None:
    ours = encode(advert, src, dst)
    assert ours == scapy_v3(advert, src, dst)
    expected_form = "pseudo-header" if src.version == 4 else "ipv6"
    assert decode(ours, src, dst)[1] == expected_form


def test_scapy_dissects_our_v3_packet() -> None:
    message = encode(ZE_V3, ZE_SRC, GROUP_V4)
    frame = IP(bytes(IP(src=str(ZE_SRC), dst=str(GROUP_V4), proto=VRRP_PROTO) / Raw(message)))
    vrrp = frame[VRRPv3]
    assert (field(vrrp, "vrid"), field(vrrp, "priority"), field(vrrp, "adv")) == (10, 200, 100)
    assert field(vrrp, "chksum") == 0xDEFB
    assert field(vrrp, "addrlist") == ["192.0.2.1", "192.0.2.2"]


# --- parse_ipv4 -----------------------------------------------------------------------------


def test_parse_ipv4_trims_ethernet_padding() -> None:
    datagram = bytes(IP(src=str(SRC), dst=str(GROUP_V4), ttl=255) / Raw(encode(V2, SRC, GROUP_V4)))
    padded = datagram.ljust(46, b"\0")  # the minimum Ethernet payload
    assert len(padded) > len(datagram)
    assert parse_ipv4(padded) == (SRC, GROUP_V4, 255, encode(V2, SRC, GROUP_V4))


def test_parse_ipv4_skips_options() -> None:
    message = encode(V3, SRC, PEER)
    ip_layer = IP(src=str(SRC), dst=str(PEER), ttl=7, options=[IPOption_Router_Alert()])
    datagram = bytes(ip_layer / Raw(message))
    assert datagram[0] & 0x0F == 6
    src, dst, ttl, payload = parse_ipv4(bytearray(datagram))
    assert (src, dst, ttl) == (SRC, PEER, 7)
    assert decode(memoryview(payload), src, dst) == (V3, "pseudo-header")


# --- every DecodeError reason ---------------------------------------------------------------

GOOD_V2 = encode(V2, SRC, GROUP_V4)
GOOD_V3 = encode(V3, SRC, GROUP_V4)
GOOD_IP = bytes(IP(src=str(SRC), dst=str(GROUP_V4), ttl=255) / Raw(GOOD_V3))
V3_PSEUDO = pseudo_header(SRC, GROUP_V4, 12)
BAD_CHECKSUM_V3 = GOOD_V3[:6] + b"\xde\xad" + GOOD_V3[8:]

DECODE_CASES = [
    pytest.param("truncated", GOOD_V3[:7], SRC, GROUP_V4, id="truncated"),
    pytest.param("length", GOOD_V2[:-8], SRC, GROUP_V4, id="length-v2-no-trailer"),
    pytest.param("length", GOOD_V3 + b"\0\0\0\0", SRC, GROUP_V4, id="length-extra-address"),
    pytest.param("length", GOOD_V3, SRC6, GROUP_V6, id="length-v4-sized-over-ipv6"),
    pytest.param("version", b"\x11" + GOOD_V3[1:], SRC, GROUP_V4, id="version"),
    pytest.param("type", b"\x32" + GOOD_V3[1:], SRC, GROUP_V4, id="type"),
    pytest.param("checksum", BAD_CHECKSUM_V3, SRC, GROUP_V4, id="checksum"),
    pytest.param("family", GOOD_V2, SRC6, GROUP_V6, id="family-v2-over-ipv6"),
    pytest.param("family", GOOD_V3, SRC, GROUP_V6, id="family-mixed"),
    pytest.param(
        "address-list",
        with_checksum(b"\x31\x33\x64\x00\x00\x64\x00\x00", pseudo_header(SRC, GROUP_V4, 8)),
        SRC,
        GROUP_V4,
        id="address-list-count-zero",
    ),
    pytest.param(
        "interval",
        with_checksum(GOOD_V3[:4] + b"\xf0\x00" + GOOD_V3[6:], V3_PSEUDO),
        SRC,
        GROUP_V4,
        id="interval-zero",
    ),
]


@pytest.mark.parametrize(("reason", "message", "src", "dst"), DECODE_CASES)
def test_decode_reason(reason: str, message: bytes, src: IPAddress, dst: IPAddress) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(message, src, dst)
    assert caught.value.reason == reason


PARSE_CASES = [
    pytest.param("truncated", GOOD_IP[:19], id="truncated-header"),
    pytest.param("truncated", GOOD_IP[:-1], id="truncated-total-length"),
    pytest.param("version", b"\x65" + GOOD_IP[1:], id="version"),
    pytest.param("length", b"\x44" + GOOD_IP[1:], id="length-ihl"),
    pytest.param("length", GOOD_IP[:2] + b"\x00\x13" + GOOD_IP[4:], id="length-total"),
]


@pytest.mark.parametrize(("reason", "datagram"), PARSE_CASES)
def test_parse_ipv4_reason(reason: str, datagram: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        parse_ipv4(datagram)
    assert caught.value.reason == reason


MCAST = Expectation(version=2, vrid=51, addresses=frozenset({VIP}), interval_cs=100)
UNICAST = replace(MCAST, unicast_peers=frozenset({PEER}))
PASS = replace(MCAST, auth_type=1, auth_data=b"secret")
V3_MCAST = Expectation(version=3, vrid=51, addresses=frozenset({VIP}))
OTHER = IPv4Address("10.0.0.9")

CHECK_CASES: list[Any] = [
    pytest.param("vrid", replace(V2, vrid=52), SRC, GROUP_V4, 255, MCAST, id="vrid"),
    pytest.param("vrid", replace(V2, vrid=52), SRC, GROUP_V4, 1, MCAST, id="vrid-before-ttl"),
    pytest.param("ttl", V2, SRC, GROUP_V4, 254, MCAST, id="ttl"),
    pytest.param("ttl", V2, PEER, SRC, 7, UNICAST, id="ttl-unicast"),
    pytest.param("ttl", replace(V2, priority=255), PEER, SRC, 64, UNICAST, id="ttl-before-owner"),
    pytest.param("version", V3, SRC, GROUP_V4, 255, MCAST, id="version"),
    pytest.param("auth", V2_PASS, SRC, GROUP_V4, 255, MCAST, id="auth-type"),
    pytest.param(
        "auth", replace(V2_PASS, auth_data=b"secreT"), SRC, GROUP_V4, 255, PASS, id="auth-data"
    ),
    pytest.param(
        "interval", replace(V2, interval_cs=200), SRC, GROUP_V4, 255, MCAST, id="interval"
    ),
    pytest.param(
        "address-list",
        replace(V2, addresses=(VIP, OTHER)),
        SRC,
        GROUP_V4,
        255,
        MCAST,
        id="address-list-extra",
    ),
    pytest.param(
        "address-list",
        replace(V2, addresses=(OTHER,)),
        SRC,
        GROUP_V4,
        255,
        MCAST,
        id="address-list-different",
    ),
    pytest.param(
        "address-list",
        replace(V2, addresses=(VIP, VIP)),
        SRC,
        GROUP_V4,
        255,
        MCAST,
        id="address-list-duplicate-count",
    ),
    pytest.param("source", V2, SRC, PEER, 255, MCAST, id="source-multicast-needs-group"),
    pytest.param("source", V2, PEER, GROUP_V4, 255, UNICAST, id="source-unicast-to-group"),
    pytest.param("source", V2, OTHER, SRC, 255, UNICAST, id="source-unicast-not-a-peer"),
    pytest.param("owner", replace(V2, priority=255), SRC, GROUP_V4, 255, MCAST, id="owner-v2"),
    pytest.param("owner", replace(V3, priority=255), SRC, GROUP_V4, 255, V3_MCAST, id="owner-v3"),
    pytest.param(
        "owner", replace(V2, priority=255), PEER, SRC, 255, UNICAST, id="owner-v2-unicast"
    ),
]


@pytest.mark.parametrize(("reason", "advert", "src", "dst", "ttl", "expect"), CHECK_CASES)
def test_check_reason(
    reason: str, advert: Advert, src: IPAddress, dst: IPAddress, ttl: int, expect: Expectation
) -> None:
    with pytest.raises(DecodeError) as caught:
        check(advert, src=src, dst=dst, ttl=ttl, expect=expect)
    assert caught.value.reason == reason


def test_every_reason_is_tested() -> None:
    tested = {case.values[0] for case in DECODE_CASES + PARSE_CASES + CHECK_CASES}
    assert tested == REASONS


def test_decode_error_is_a_value_error_with_a_label() -> None:
    error = DecodeError("length", "20 bytes, expected 12")
    assert isinstance(error, ValueError)
    assert error.reason == "length"
    assert str(error) == "length: 20 bytes, expected 12"


@pytest.mark.parametrize(
    ("advert", "src", "dst", "ttl", "expect"),
    [
        pytest.param(V2, SRC, GROUP_V4, 255, MCAST, id="multicast"),
        pytest.param(V2, PEER, SRC, 255, UNICAST, id="unicast"),
        pytest.param(
            ZE_V3_V6,
            SRC6,
            PEER6,
            64,
            Expectation(
                version=3,
                vrid=10,
                addresses=frozenset(ZE_V3_V6.addresses),
                unicast_peers=frozenset({SRC6}),
            ),
            id="ipv6-unicast-hop-limit-64-keepalived",
        ),
        pytest.param(V2_PASS, SRC, GROUP_V4, 255, PASS, id="pass"),
        pytest.param(replace(V3, priority=254), SRC, GROUP_V4, 255, V3_MCAST, id="priority-254"),
        pytest.param(
            replace(V2_PASS, auth_data=b"longpass"),
            SRC,
            GROUP_V4,
            255,
            replace(PASS, auth_data=b"longpassword"),
            id="pass-compared-as-sent-8-bytes",
        ),
        pytest.param(
            replace(V2, auth_data=b"junk"), SRC, GROUP_V4, 255, MCAST, id="auth-none-ignores-data"
        ),
        pytest.param(
            replace(V2, addresses=(VIP, OTHER)),
            SRC,
            GROUP_V4,
            255,
            replace(MCAST, addresses=frozenset({OTHER, VIP})),
            id="address-order-irrelevant",
        ),
        pytest.param(
            replace(V3, interval_cs=7),
            SRC,
            GROUP_V4,
            255,
            replace(V3_MCAST, interval_cs=100),
            id="v3-interval-not-compared",
        ),
        pytest.param(
            ZE_V3_V6,
            SRC6,
            GROUP_V6,
            255,
            Expectation(version=3, vrid=10, addresses=frozenset(ZE_V3_V6.addresses)),
            id="ipv6",
        ),
    ],
)
def test_check_accepts(
    advert: Advert, src: IPAddress, dst: IPAddress, ttl: int, expect: Expectation
) -> None:
    check(advert, src=src, dst=dst, ttl=ttl, expect=expect)


def test_verify_checksum_false_skips_the_check() -> None:
    message = encode(ZE_V3_V6, SRC6, GROUP_V6)
    broken = message[:6] + b"\0\0" + message[8:]
    assert decode(broken, SRC6, GROUP_V6, verify_checksum=False) == (ZE_V3_V6, "ipv6")
    # For v3 IPv4 nothing was observed, so the label is the form we send.
    assert decode(BAD_CHECKSUM_V3, SRC, GROUP_V4, verify_checksum=False) == (V3, "pseudo-header")


def test_v3_reserved_bits_are_ignored() -> None:
    message = with_checksum(GOOD_V3[:4] + b"\xf0\x64" + GOOD_V3[6:], V3_PSEUDO)
    assert decode(message, SRC, GROUP_V4) == (V3, "pseudo-header")


# --- encode refuses what it cannot send -----------------------------------------------------

SIX = IPv6Address("2001:db8::1")


@pytest.mark.parametrize(
    ("advert", "src", "dst", "message"),
    [
        pytest.param(replace(V3, version=4), SRC, GROUP_V4, "version", id="version"),
        pytest.param(replace(V3, vrid=0), SRC, GROUP_V4, "vrid", id="vrid-0"),
        pytest.param(replace(V3, vrid=256), SRC, GROUP_V4, "vrid", id="vrid-256"),
        pytest.param(replace(V3, priority=-1), SRC, GROUP_V4, "priority", id="priority-low"),
        pytest.param(replace(V3, priority=256), SRC, GROUP_V4, "priority", id="priority-high"),
        pytest.param(replace(V3, addresses=()), SRC, GROUP_V4, "addresses", id="no-addresses"),
        pytest.param(
            replace(V3, addresses=tuple(IPv4Address(i) for i in range(256))),
            SRC,
            GROUP_V4,
            "addresses",
            id="256-addresses",
        ),
        pytest.param(replace(V3, addresses=(VIP, VIP)), SRC, GROUP_V4, "duplicate", id="dup"),
        pytest.param(replace(V3, addresses=(VIP, SIX)), SRC, GROUP_V4, "IPv4", id="mixed"),
        pytest.param(V3, SRC6, GROUP_V6, "IPv6", id="addresses-not-src-family"),
        pytest.param(V3, SRC, GROUP_V6, "families", id="src-dst-families"),
        pytest.param(replace(ZE_V3_V6, version=2), SRC6, GROUP_V6, "IPv4 only", id="v2-over-ipv6"),
        pytest.param(replace(V2, interval_cs=150), SRC, GROUP_V4, "multiple", id="v2-150cs"),
        pytest.param(replace(V2, interval_cs=0), SRC, GROUP_V4, "multiple", id="v2-0"),
        pytest.param(replace(V2, interval_cs=25600), SRC, GROUP_V4, "multiple", id="v2-256s"),
        pytest.param(replace(V3, interval_cs=0), SRC, GROUP_V4, "interval", id="v3-0"),
        pytest.param(replace(V3, interval_cs=4096), SRC, GROUP_V4, "interval", id="v3-4096"),
        pytest.param(replace(V3, auth_type=1), SRC, GROUP_V4, "authentication", id="v3-auth"),
        pytest.param(replace(V2, auth_type=2), SRC, GROUP_V4, "auth_type", id="v2-ah"),
        pytest.param(replace(V2, auth_data=b"x"), SRC, GROUP_V4, "auth_type 1", id="v2-data"),
    ],
)
def test_encode_rejects(advert: Advert, src: IPAddress, dst: IPAddress, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode(advert, src, dst)


def test_encode_accepts_the_limits() -> None:
    many = tuple(IPv4Address(i) for i in range(1, 256))
    for advert in (
        replace(V3, vrid=1, priority=0, interval_cs=1, addresses=many),
        replace(V3, vrid=255, priority=255, interval_cs=4095),
        replace(V2, vrid=255, priority=255, interval_cs=25500, addresses=many),
    ):
        assert decode(encode(advert, SRC, GROUP_V4), SRC, GROUP_V4)[0] == advert


# --- properties -----------------------------------------------------------------------------

Kind = Literal["v2", "v3-ipv4", "v3-ipv6"]
FORM: dict[Kind, ChecksumForm] = {"v2": "v2", "v3-ipv4": "pseudo-header", "v3-ipv6": "ipv6"}
ipv4s = st.integers(0, 2**32 - 1).map(IPv4Address)
ipv6s = st.integers(0, 2**128 - 1).map(IPv6Address)
any_address: st.SearchStrategy[IPAddress] = st.one_of(ipv4s, ipv6s)


@st.composite
def framed_adverts(
    draw: st.DrawFn, max_addresses: int = 20
) -> tuple[Kind, Advert, IPAddress, IPAddress]:
    """A valid advert with the src and dst it travels between."""
    kind: Kind = draw(st.sampled_from(["v2", "v3-ipv4", "v3-ipv6"]))
    addresses: st.SearchStrategy[IPAddress] = ipv6s if kind == "v3-ipv6" else ipv4s
    group = GROUP_V6 if kind == "v3-ipv6" else GROUP_V4
    auth_type, auth_data = 0, b""
    if kind == "v2":
        interval_cs = draw(st.integers(1, 255)) * 100
        if draw(st.booleans()):
            # Decoding strips the NUL padding, so canonical passwords have no trailing NUL.
            auth_type, auth_data = 1, draw(st.binary(max_size=8)).rstrip(b"\0")
    else:
        interval_cs = draw(st.integers(1, 4095))
    advert = Advert(
        version=2 if kind == "v2" else 3,
        vrid=draw(st.integers(1, 255)),
        priority=draw(st.integers(0, 255)),
        interval_cs=interval_cs,
        addresses=tuple(draw(st.lists(addresses, min_size=1, max_size=max_addresses, unique=True))),
        auth_type=auth_type,
        auth_data=auth_data,
    )
    return kind, advert, draw(addresses), draw(st.one_of(st.just(group), addresses))


@given(framed_adverts())
def test_round_trip(framed: tuple[Kind, Advert, IPAddress, IPAddress]) -> None:
    kind, advert, src, dst = framed
    message = encode(advert, src, dst)
    assert decode(message, src, dst) == (advert, FORM[kind])
    # The modulo-0xFFFF shortcut agrees with the word-by-word oracle.
    prefix = b"" if kind == "v2" else pseudo_header(src, dst, len(message))
    assert rfc1071(prefix + message) == 0


@settings(max_examples=30)
@given(framed_adverts(max_addresses=4))
def test_encode_matches_scapy(framed: tuple[Kind, Advert, IPAddress, IPAddress]) -> None:
    kind, advert, src, dst = framed
    expected = scapy_v2(advert) if kind == "v2" else scapy_v3(advert, src, dst)
    assert encode(advert, src, dst) == expected


@settings(max_examples=300)
@given(st.binary(max_size=80), any_address, any_address, st.booleans())
def test_decode_raises_only_decode_error(
    message: bytes, src: IPAddress, dst: IPAddress, verify: bool
) -> None:
    try:
        advert, _ = decode(message, src, dst, verify_checksum=verify)
    except DecodeError as error:
        assert error.reason in REASONS
    else:
        assert advert.version in (2, 3)
        assert 1 <= len(advert.addresses) <= 255
        assert advert.interval_cs > 0


@settings(max_examples=300)
@given(
    st.sampled_from([0x21, 0x31, 0x20, 0x41]),
    st.integers(0, 255),
    st.binary(min_size=6, max_size=6),
    st.binary(max_size=64),
    any_address,
    any_address,
)
def test_decode_structured_fuzz(
    byte0: int, count: int, rest: bytes, tail: bytes, src: IPAddress, dst: IPAddress
) -> None:
    """Headers that reach the address parser: the random tail is sized to fit `count`."""
    width = 16 if src.version == 6 else 4
    body = (tail * (width * count + 8))[: width * count + (8 if byte0 == 0x21 else 0)]
    message = bytes([byte0, rest[0], rest[1], count]) + rest[2:] + body
    try:
        advert, _ = decode(message, src, dst, verify_checksum=False)
    except DecodeError as error:
        assert error.reason in REASONS
    else:
        assert len(advert.addresses) == count
        assert all(address.version == src.version for address in advert.addresses)


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_parse_ipv4_raises_only_decode_error(datagram: bytes) -> None:
    try:
        _, _, ttl, payload = parse_ipv4(datagram)
    except DecodeError as error:
        assert error.reason in REASONS
    else:
        assert 0 <= ttl <= 255
        assert len(payload) <= len(datagram) - 20


@settings(max_examples=50)
@given(framed_adverts(max_addresses=6))
def test_single_bit_flips(framed: tuple[Kind, Advert, IPAddress, IPAddress]) -> None:
    """What single-bit corruption can do, by exhaustive flipping.

    A flip changes one 16-bit word by ±2**k, so the one's-complement sum changes by a non-zero
    amount mod 0xFFFF: every checksum form that held before fails after. Flips in the
    version/type nibble, the count or (v3 IPv6 -> v2) the version are caught before the
    checksum. So v2 and IPv6 always raise. v3 IPv4 accepts a second form: a flip changing the
    sum by exactly the pseudo-header's sum passes as "message-only" (possible when that sum is
    ±2**k mod 0xFFFF). That, and an "interval" error it might then expose, is all a flip can
    get through; it can never come back as a pseudo-header message.
    """
    kind, advert, src, dst = framed
    message = encode(advert, src, dst)
    for bit in range(len(message) * 8):
        flipped = bytearray(message)
        flipped[bit // 8] ^= 0x80 >> (bit % 8)
        try:
            _, form = decode(bytes(flipped), src, dst)
        except DecodeError as error:
            if error.reason == "interval":
                assert kind == "v3-ipv4"
            else:
                assert error.reason in {"checksum", "length", "version", "type", "family"}
        else:
            assert kind == "v3-ipv4"
            assert form == "message-only"


def test_dual_form_lets_a_priority_flip_through() -> None:
    """The concrete case the property above allows: accepting both v3 IPv4 forms costs the
    checksum its single-bit guarantee for src/dst pairs whose pseudo-header sums to ±2**k.

    From 10.0.22.113 to the group the pseudo-header sums to 0x100 (mod 0xFFFF), exactly what
    flipping the priority's low bit adds, so that corruption is accepted as a message-only
    advert with priority 101. keepalived, accepting only one form, would drop it.
    """
    src = IPv4Address("10.0.22.113")
    assert (int(src) + int(GROUP_V4) + VRRP_PROTO + 12) % 0xFFFF == 0x100
    flipped = bytearray(encode(V3, src, GROUP_V4))
    flipped[2] ^= 0x01
    assert decode(bytes(flipped), src, GROUP_V4) == (replace(V3, priority=101), "message-only")


def test_a_message_valid_in_both_forms_reports_the_pseudo_header() -> None:
    src = IPv4Address("10.0.21.113")  # the pseudo-header sums to 0 (mod 0xFFFF) from here
    message = encode(V3, src, GROUP_V4)
    assert rfc1071(message) == 0
    assert decode(message, src, GROUP_V4) == (V3, "pseudo-header")
