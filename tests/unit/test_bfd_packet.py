"""The BFD Control packet codec (RFC 5880 §4.1) and the packet-only rules of §6.8.6."""

from __future__ import annotations

import struct

import pytest

from vipd.bfd.packet import BadPacket, ControlPacket, Diag, State, decode, diag_label, encode


def pkt(**kw: object) -> ControlPacket:
    base: dict[str, object] = {
        "state": State.UP,
        "diag": Diag.NONE,
        "detect_mult": 3,
        "my_discr": 0x11223344,
        "your_discr": 0x55667788,
        "desired_min_tx_us": 100_000,
        "required_min_rx_us": 100_000,
    }
    base.update(kw)
    return ControlPacket(**base)  # type: ignore[arg-type]


def raw(
    *,
    vers: int = 1,
    diag: int = 0,
    state: int = 3,
    flags: int = 0,
    mult: int = 3,
    length: int = 24,
    my: int = 1,
    your: int = 2,
    tail: bytes = b"",
) -> bytes:
    return (
        struct.pack(
            "!BBBBIIIII",
            (vers << 5) | diag,
            (state << 6) | flags,
            mult,
            length,
            my,
            your,
            100_000,
            200_000,
            0,
        )
        + tail
    )


def test_the_wire_layout_is_rfc5880_4_1() -> None:
    data = encode(pkt(diag=Diag.CONTROL_DETECTION_TIME_EXPIRED, poll=True))
    assert data.hex() == (
        "21"  # version 1, diag 1
        "e0"  # state Up (3 << 6), P (0x20)
        "03"  # Detect Mult
        "18"  # Length 24
        "11223344"
        "55667788"
        "000186a0"
        "000186a0"
        "00000000"
    )


def test_round_trip_keeps_every_field() -> None:
    for p in (
        pkt(),
        pkt(state=State.DOWN, your_discr=0, diag=Diag.NEIGHBOR_SIGNALED_SESSION_DOWN),
        pkt(state=State.ADMIN_DOWN, your_discr=0, diag=Diag.ADMINISTRATIVELY_DOWN),
        pkt(state=State.INIT, final=True, cpi=True, demand=True, detect_mult=255),
        pkt(desired_min_tx_us=0xFFFFFFFF, required_min_rx_us=0, required_min_echo_rx_us=7),
    ):
        assert decode(encode(p)) == p


def test_bytes_past_the_length_field_are_ignored() -> None:
    assert decode(raw(tail=b"\0" * 8)).my_discr == 1


def test_a_reserved_diag_is_kept_not_refused() -> None:
    got = decode(raw(diag=17))
    assert got.diag == 17 and diag_label(got.diag) == "reserved_17"
    assert diag_label(7) == "administratively_down"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (raw()[:23], "short"),
        (raw(vers=2), "version"),
        (raw(vers=0), "version"),
        (raw(length=23), "length"),
        (raw(length=25), "length"),  # more than the 24 bytes given
        (raw(mult=0), "detect_mult"),
        (raw(flags=0x01), "multipoint"),
        (raw(my=0), "my_discr"),
        (raw(your=0, state=3), "your_discr"),
        (raw(your=0, state=2), "your_discr"),
        (raw(flags=0x04, length=24), "length"),  # A set: at least 26 bytes
        (raw(flags=0x04, length=26, tail=b"\x01\x02"), "auth_unsupported"),
        (raw(flags=0x30), "poll_final"),
    ],
)
def test_section_6_8_6_discards(data: bytes, reason: str) -> None:
    with pytest.raises(BadPacket) as err:
        decode(data)
    assert err.value.reason == reason


@pytest.mark.parametrize("state", [0, 1])
def test_a_zero_your_discriminator_is_fine_in_down_and_admin_down(state: int) -> None:
    assert decode(raw(your=0, state=state)).your_discr == 0


def test_flags_decode_to_their_own_fields() -> None:
    got = decode(raw(flags=0x20 | 0x08 | 0x02))
    assert (got.poll, got.final, got.cpi, got.demand, got.auth) == (True, False, True, True, False)
    got = decode(raw(flags=0x10))
    assert (got.poll, got.final) == (False, True)


def test_encode_refuses_what_vipd_never_sends() -> None:
    with pytest.raises(ValueError, match="authentication"):
        encode(pkt(auth=True))
    with pytest.raises(ValueError, match="Poll and Final"):
        pkt(poll=True, final=True)
    with pytest.raises(ValueError, match="diag"):
        pkt(diag=32)
    with pytest.raises(ValueError, match="my_discr"):
        pkt(my_discr=1 << 32)
