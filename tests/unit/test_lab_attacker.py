"""The lab attacker's builders (``vipd.lab.attacker``) and bench/attacks.py's table (no lab).

What it tests: a forged advert and a VRRPv2 one with the password decode as the adverts they
claim to be; an advert the attacker signs verifies with the key it used and no other, and is
refused once its sequence is not new; a pcap of two frames reads back as the IP payloads that
were written; the bench's table cell shows the worst round, an end without a holder and the
flood's answers.
"""

from __future__ import annotations

import struct
from ipaddress import IPv4Address
from pathlib import Path

from tests.unit.benches import load
from vipd.lab import attacker
from vipd.vrrp import auth, packet

VIP = "10.77.0.100"
SRC = "10.77.0.2"
GROUP = str(packet.GROUP_V4)
KEY = bytes(range(32))


def test_forged_and_password_adverts_decode_as_claimed() -> None:
    msg = bytes.fromhex(attacker.forged(255, 4095, SRC, GROUP, VIP))
    advert, _ = packet.decode(msg, IPv4Address(SRC), IPv4Address(GROUP))
    assert (advert.version, advert.priority, advert.interval_cs) == (3, 255, 4095)
    assert advert.addresses == (IPv4Address(VIP),)
    msg = bytes.fromhex(attacker.password_advert(254, 100, SRC, GROUP, VIP, "pw"))
    advert, _ = packet.decode(msg, IPv4Address(SRC), IPv4Address(GROUP))
    assert (advert.version, advert.priority, advert.interval_cs) == (2, 254, 100)
    assert (advert.auth_type, advert.auth_data) == (1, b"pw")


def test_a_signed_advert_verifies_with_its_key_only_and_only_once() -> None:
    now = 1_800_000_000.25
    wire = bytes.fromhex(
        attacker.signed(attacker.forged(1, 10, SRC, GROUP, VIP), SRC, KEY, now=now)
    )
    message, trailer = auth.split(wire, ipv6=False)
    assert trailer is not None and auth.Trailer.decode(trailer).key_id == 1

    def verifier(key: bytes) -> auth.Verifier:
        return auth.Verifier(auth.KeyRing({1: key}, 1), replay=auth.Replay.TIME, window=5)

    good = verifier(KEY)
    assert good.verify(message, trailer, src=IPv4Address(SRC), now=now).reason == "ok"
    assert good.verify(message, trailer, src=IPv4Address(SRC), now=now).reason == "replay"
    other = verifier(bytes(range(1, 33)))
    assert other.verify(message, trailer, src=IPv4Address(SRC), now=now).reason == "bad-hmac"
    # The source is signed: the same bytes from another address do not verify.
    moved = verifier(KEY).verify(message, trailer, src=IPv4Address("10.77.0.3"), now=now)
    assert moved.reason == "bad-hmac"


def _frame(src: str, payload: bytes) -> bytes:
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0xC0,
        20 + len(payload),
        0,
        0,
        255,
        112,
        0,
        IPv4Address(src).packed,
        IPv4Address(GROUP).packed,
    )
    eth = bytes(6) + bytes(6) + b"\x08\x00"
    # Ethernet pads short frames: the reader must go by the IP total length.
    return eth + ip + payload + bytes(8)


def test_captured_reads_the_ip_payloads_back(tmp_path: Path) -> None:
    payloads = [bytes.fromhex(attacker.forged(p, 10, SRC, GROUP, VIP)) for p in (100, 0)]
    records = b""
    for i, p in enumerate(payloads):
        frame = _frame(SRC, p)
        records += struct.pack("<IIII", 1000 + i, 500000, len(frame), len(frame)) + frame
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 256, 1)
    path = tmp_path / "x.pcap"
    path.write_bytes(head + records)
    got = attacker.captured(path)
    assert [(c.src, c.dst, c.payload, c.priority) for c in got] == [
        (SRC, GROUP, payloads[0], 100),
        (SRC, GROUP, payloads[1], 0),
    ]
    assert got[0].ts == 1000.5


def test_the_bench_table_shows_the_worst_round_and_the_flood_answers() -> None:
    bench = load("attacks")
    rows = [
        {"variant": "vipd", "attack": "flood", "unheld_s": 0.0, "two_holders_s": 0.0,
         "holders_end": ["n1"], "answers": 3},
        {"variant": "vipd", "attack": "flood", "unheld_s": 0.1, "two_holders_s": 0.0,
         "holders_end": ["n1"], "answers": 5},
        {"variant": "ka", "attack": "flood", "unheld_s": 9.5, "two_holders_s": 0.25,
         "holders_end": [], "answers": 270},
    ]  # fmt: skip
    text = bench.table(rows, ["vipd", "ka", "none"], ["flood"])
    assert text.splitlines()[2] == (
        "| flood | 0.10 / 0.00, 5 answers | 9.50 / 0.25 (unheld at end), 270 answers | — |"
    )
