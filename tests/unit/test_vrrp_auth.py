"""vipd.vrrp.auth against keepalived's own bytes: the draft's appendix vectors and adverts that a
real keepalived 2.4 sent in network namespaces, plus the policy and the sequence rules.

The fixtures (tests/unit/data/keepalived_auth_hmac.json) were recorded as root with

    VIPD_KEEPALIVED_HMAC=/path/to/keepalived \\
        .venv/bin/python -m tests.netns.keepalived_hmac tests/unit/data/keepalived_auth_hmac.json

that is: for each scenario of ``tests.netns.keepalived_hmac.SCENARIOS`` a 2-node lab
(``vipd.lab.topology.Lab``), keepalived on n1 with the scenario's keepalived.conf (kept in the
fixture, key directory written as /KEYDIR), ``tcpdump -Q in`` on n1's bridge port
(``vipd.lab.wire.Capture``) until 3 adverts went out as master, then SIGTERM so the
priority-0 advert is captured too. Each advert is kept whole (``ip_packet``: IP header
included) with src, dst, TTL and the capture time, which is the ``now`` its time-mode check is
run at here. The keepalived was 2.4.3-30-g9cbce3e2 of github.com/acassen/keepalived (its
``-v`` line is the fixture's ``keepalived`` field); the keys are test keys (``KEYS`` there).
"""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import Any

import pytest

from vipd.vrrp import auth, packet
from vipd.vrrp.auth import KeyRing, Mode, Replay, Result, Signer, Verifier

DATA = json.loads((Path(__file__).parent / "data" / "keepalived_auth_hmac.json").read_text())
SCENARIOS: list[dict[str, Any]] = DATA["scenarios"]
DRAFT_KEY = bytes(range(32))
OTHER_KEY = bytes(range(100, 132))
SENDER = IPv4Address("192.0.2.1")

# draft-cassen-vrrp-auth-hmac appendix images (also keepalived's test/auth_hmac_test.c):
# key 00..1f, VRID 51, priority 200, sequence 0x6800000080000000.
DRAFT_VECTORS = [
    (
        "198.51.100.10",
        "3133c80100644402c0000264"
        + "010100006800000080000000"
        + "1b84bc4e8e43892dc6d98448f8ee2265",
    ),
    (
        "fe80::10",
        "3133c8010064a2e9fe800000000000000000000000000100"
        + "010100006800000080000000"
        + "c8c56146ebfd66ee10ec4d8186461b78",
    ),
]


def ring(s: dict[str, Any], active: int | None = None) -> KeyRing:
    keys = {int(k): bytes.fromhex(v) for k, v in s["keys"].items()}
    return KeyRing(keys, active or s["active_key"])


def verifier(s: dict[str, Any], keys: KeyRing | None = None, mode: Mode | None = None) -> Verifier:
    window = s["time_window"] or auth.default_window(s["advert_int"])
    return Verifier(
        keys or ring(s),
        mode=mode or Mode(s["mode"]),
        replay=Replay(s["anti_replay"]),
        window=window,
    )


def parts(s: dict[str, Any], a: dict[str, Any]) -> tuple[bytes, bytes | None]:
    return auth.split(bytes.fromhex(a["payload"]), ipv6=s["family"] == 6)


def signed(kind: str = "all") -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (s, a)
        for s in SCENARIOS
        if s["mode"] != "receive-only" and (kind == "all" or s["anti_replay"] == kind)
        for a in s["adverts"]
    ]


def ids(cases: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    return [f"{s['name']}-{n}" for n, (s, _) in enumerate(cases)]


def test_fixtures_cover_the_modes() -> None:
    assert DATA["keepalived"].startswith("Keepalived v2.4"), DATA["keepalived"]
    seen = {(s["version"], s["family"], s["unicast"], s["anti_replay"]) for s in SCENARIOS}
    assert {(3, 4), (3, 6), (2, 4)} <= {(v, f) for v, f, _, _ in seen}
    assert {True, False} == {u for _, _, u, _ in seen}
    assert {"time", "monotonic"} == {r for _, _, _, r in seen}
    assert {"enforce", "permissive", "receive-only"} == {s["mode"] for s in SCENARIOS}
    assert len({s["active_key"] for s in SCENARIOS}) >= 3
    assert all(len(s["adverts"]) >= 4 for s in SCENARIOS)


@pytest.mark.parametrize(("src", "hexed"), DRAFT_VECTORS)
def test_draft_vectors_verify_and_sign_byte_for_byte(src: str, hexed: str) -> None:
    address = ip_address(src)
    message, trailer = auth.split(bytes.fromhex(hexed), ipv6=address.version == 6)
    assert trailer is not None
    keys = KeyRing({1: DRAFT_KEY}, 1)
    v = Verifier(keys, replay=Replay.MONOTONIC, window=5)
    assert v.verify(message, trailer, src=address, now=0.0).result is Result.OK
    assert auth.sign(message, src=address, keys=keys, sequence=0x6800000080000000) == trailer


@pytest.mark.parametrize("s", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_every_keepalived_advert_decodes_and_verifies_in_order(s: dict[str, Any]) -> None:
    v = verifier(s)
    priorities = []
    for a in s["adverts"]:
        src, dst = ip_address(a["src"]), ip_address(a["dst"])
        payload = bytes.fromhex(a["payload"])
        message, trailer = auth.split(payload, ipv6=s["family"] == 6)
        if s["mode"] == "receive-only":
            # receive-only sends what a keepalived without auth_hmac sends.
            assert trailer is None and message == payload
        else:
            assert trailer is not None and len(payload) == len(message) + auth.TRAILER_LEN
            # The trailer counts in the IP length: IPv4 total length, IPv6 payload length.
            ip = bytes.fromhex(a["ip_packet"])
            header = 20 if s["family"] == 4 else 40
            assert len(ip) == header + len(payload)
        ipv6 = s["family"] == 6
        if ipv6:
            # The kernel checksums the whole payload, trailer included (IPV6_CHECKSUM).
            assert _ipv6_sum_ok(src, dst, payload)
        advert, _ = packet.decode(message, src, dst, verify_checksum=not ipv6)
        assert advert.version == s["version"] and advert.vrid == s["vrid"]
        assert [str(x) for x in advert.addresses] == s["vips"]
        assert a["ttl"] == 255 or (s["unicast"] and ipv6)
        priorities.append(advert.priority)
        verdict = v.verify(message, trailer, src=src, now=a["captured_at"])
        want = "unsigned" if s["mode"] == "receive-only" else "ok"
        assert (verdict.accept, verdict.reason) == (True, want), a
        if trailer is not None:
            assert verdict.key_id == s["active_key"]
            # keepalived's sequence is its clock in both replay modes (the counter only breaks
            # ties within one 1/65536 s), which is what auth.next_sequence sends.
            tr = auth.Trailer.decode(trailer)
            assert abs(tr.seconds + tr.subsec / 65536 - a["captured_at"]) < 1.0
            assert tr.counter == 0
    assert priorities[0] == 200 and priorities[-1] == 0  # SIGTERM: the priority-0 advert


def _ipv6_sum_ok(src: Any, dst: Any, payload: bytes) -> bool:
    total = int.from_bytes(payload, "big") + int(src) + int(dst) + 112 + len(payload)
    return total % 0xFFFF == 0


@pytest.mark.parametrize(("s", "a"), signed(), ids=ids(signed()))
def test_vipd_signs_keepalivd_message_to_the_same_bytes(
    s: dict[str, Any], a: dict[str, Any]
) -> None:
    message, trailer = parts(s, a)
    assert trailer is not None
    sequence = auth.Trailer.decode(trailer).sequence
    src = ip_address(a["src"])
    assert auth.sign(message, src=src, keys=ring(s), sequence=sequence) == trailer


@pytest.mark.parametrize(("s", "a"), signed(), ids=ids(signed()))
def test_wrong_key_fails(s: dict[str, Any], a: dict[str, Any]) -> None:
    message, trailer = parts(s, a)
    wrong = KeyRing({s["active_key"]: OTHER_KEY}, s["active_key"])
    verdict = verifier(s, keys=wrong).verify(
        message, trailer, src=ip_address(a["src"]), now=a["captured_at"]
    )
    assert (verdict.accept, verdict.reason) == (False, "bad-hmac")


@pytest.mark.parametrize(("s", "a"), signed(), ids=ids(signed()))
def test_every_flipped_byte_fails_but_the_checksum(s: dict[str, Any], a: dict[str, Any]) -> None:
    message, trailer = parts(s, a)
    assert trailer is not None
    src, now = ip_address(a["src"]), a["captured_at"]
    whole = message + trailer
    for i in range(len(whole)):
        bad = bytearray(whole)
        bad[i] ^= 0x01
        m, t = bytes(bad[: len(message)]), bytes(bad[len(message) :])
        verdict = verifier(s).verify(m, t, src=src, now=now)
        at = i - len(message)
        if i in (6, 7):  # the VRRP checksum is outside the HMAC
            want = "ok"
        elif at in (0, 2, 3):  # type, reserved
            want = "malformed"
        elif at == 1:
            want = "unknown-key"
        elif 4 <= at < 7 and s["anti_replay"] == "time":
            # A flip in the seconds' upper bytes moves the stamp 256 s or more: out of window.
            want = "stale"
        else:
            want = "bad-hmac"
        if want == "ok":
            assert verdict.accept, (i, verdict)
        else:
            assert (verdict.accept, verdict.reason) == (False, want), (i, verdict)


@pytest.mark.parametrize(("s", "a"), signed(), ids=ids(signed()))
def test_replayed_advert_is_dropped(s: dict[str, Any], a: dict[str, Any]) -> None:
    message, trailer = parts(s, a)
    v = verifier(s)
    src, now = ip_address(a["src"]), a["captured_at"]
    assert v.verify(message, trailer, src=src, now=now).accept
    again = v.verify(message, trailer, src=src, now=now + 0.5)
    assert (again.accept, again.reason) == (False, "replay")


@pytest.mark.parametrize(
    "s", [s for s in SCENARIOS if s["mode"] != "receive-only"], ids=lambda s: s["name"]
)
def test_an_older_advert_after_a_newer_one_is_a_replay(s: dict[str, Any]) -> None:
    v = verifier(s)
    first, second = s["adverts"][0], s["adverts"][1]
    now = second["captured_at"]
    assert v.verify(*parts(s, second), src=ip_address(second["src"]), now=now).accept
    old = v.verify(*parts(s, first), src=ip_address(first["src"]), now=now)
    assert old.reason == "replay"


@pytest.mark.parametrize(("s", "a"), signed("time"), ids=ids(signed("time")))
def test_time_outside_the_window_is_stale(s: dict[str, Any], a: dict[str, Any]) -> None:
    message, trailer = parts(s, a)
    src, now = ip_address(a["src"]), a["captured_at"]
    window = verifier(s).window
    for delta in (window + 1.0, -(window + 1.0), 3600.0):
        verdict = verifier(s).verify(message, trailer, src=src, now=now + delta)
        assert (verdict.accept, verdict.reason) == (False, "stale"), delta
    edge = verifier(s).verify(message, trailer, src=src, now=now + window)
    assert edge.accept  # keepalived: stale only beyond the window


@pytest.mark.parametrize(("s", "a"), signed("monotonic"), ids=ids(signed("monotonic")))
def test_monotonic_mode_ignores_the_clock(s: dict[str, Any], a: dict[str, Any]) -> None:
    message, trailer = parts(s, a)
    verdict = verifier(s).verify(
        message, trailer, src=ip_address(a["src"]), now=a["captured_at"] + 86400
    )
    assert verdict.accept


@pytest.mark.parametrize(("s", "a"), signed(), ids=ids(signed()))
def test_unknown_key_id_and_other_source_fail(s: dict[str, Any], a: dict[str, Any]) -> None:
    message, trailer = parts(s, a)
    src, now = ip_address(a["src"]), a["captured_at"]
    other_id = 200 if s["active_key"] != 200 else 201
    unknown = verifier(s, keys=KeyRing({other_id: DRAFT_KEY}, other_id))
    assert unknown.verify(message, trailer, src=src, now=now).reason == "unknown-key"
    assert verifier(s).verify(message, trailer, src=src + 1, now=now).reason == "bad-hmac"


def test_rotation_accepts_both_ids_and_signs_with_the_active_one() -> None:
    """keepalived's v3/IPv4 unicast scenario signs with key 2 of {1, 2}: a vipd holding
    {1, 2} with active 1 accepts it, and keepalived-style verifiers holding either set accept
    what vipd signs with its active key."""
    s = next(s for s in SCENARIOS if s["keys"].keys() == {"1", "2"} and s["active_key"] == 2)
    a = s["adverts"][0]
    v = verifier(s, keys=ring(s, active=1))
    assert v.verify(*parts(s, a), src=ip_address(a["src"]), now=a["captured_at"]).accept
    src = IPv4Address("192.0.2.1")
    message = packet.encode(_advert(4), src, packet.GROUP_V4)
    for active in (1, 2):
        t = Signer(ring(s, active), replay=Replay.TIME, window=5).trailer(message, src=src, now=1e9)
        assert auth.Trailer.decode(t).key_id == active
        got = verifier(s, keys=ring(s, 1)).verify(message, t, src=src, now=1e9)
        assert got.accept


def _advert(family: int, priority: int = 150) -> packet.Advert:
    vip = IPv4Address("192.0.2.100") if family == 4 else IPv6Address("2001:db8::100")
    return packet.Advert(version=3, vrid=9, priority=priority, interval_cs=100, addresses=(vip,))


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("replay", list(Replay))
def test_vipd_signed_adverts_round_trip(family: int, replay: Replay) -> None:
    src = IPv4Address("192.0.2.1") if family == 4 else IPv6Address("fe80::1")
    dst = packet.GROUP_V4 if family == 4 else packet.GROUP_V6
    keys = KeyRing({5: OTHER_KEY, 6: DRAFT_KEY}, 6)
    signer = Signer(keys, replay=replay, window=5)
    v = Verifier(KeyRing({5: OTHER_KEY, 6: DRAFT_KEY}, 5), replay=replay, window=5)
    now = 1_800_000_000.25
    for n in range(5):
        message = packet.encode(_advert(family, 100 + n), src, dst)
        wire = message + signer.trailer(message, src=src, now=now)  # same instant: counter +1
        m, t = auth.split(wire, ipv6=family == 6)
        assert m == message and t is not None
        verdict = v.verify(m, t, src=src, now=now)
        assert (verdict.accept, verdict.reason, verdict.key_id) == (True, "ok", 6)
        assert packet.decode(m, src, dst)[0].priority == 100 + n
    assert signer.last & 0xFFFF == 4


def test_receive_only_signs_nothing() -> None:
    signer = Signer(
        KeyRing({1: DRAFT_KEY}, 1), mode=Mode.RECEIVE_ONLY, replay=Replay.TIME, window=5
    )
    src = IPv4Address("192.0.2.1")
    assert signer.trailer(packet.encode(_advert(4), src, packet.GROUP_V4), src=src, now=1.0) == b""
    assert signer.overhead == 0 and signer.last == 0


@pytest.mark.parametrize(
    ("mode", "result", "accept", "reason"),
    [
        (Mode.ENFORCE, Result.OK, True, "ok"),
        (Mode.PERMISSIVE, Result.OK, True, "ok"),
        (Mode.RECEIVE_ONLY, Result.OK, True, "ok"),
        (Mode.ENFORCE, Result.MISSING, False, "missing"),
        (Mode.PERMISSIVE, Result.MISSING, True, "unsigned"),
        (Mode.RECEIVE_ONLY, Result.MISSING, True, "unsigned"),
        *[
            (m, r, False, r.value)
            for m in Mode
            for r in Result
            if r not in (Result.OK, Result.MISSING)
        ],
    ],
)
def test_decide(mode: Mode, result: Result, accept: bool, reason: str) -> None:
    assert auth.decide(mode, result) == auth.Verdict(accept, reason, result)


def test_next_sequence() -> None:
    t = 1_800_000_000.5
    clock = auth.clock_sequence(t)
    assert clock == (1_800_000_000 << 32) | (0x8000 << 16)
    assert auth.next_sequence(0, t, replay=Replay.TIME, window=5) == clock
    assert auth.next_sequence(clock, t, replay=Replay.TIME, window=5) == clock + 1
    assert auth.next_sequence(
        clock + 1, t + 1, replay=Replay.TIME, window=5
    ) == auth.clock_sequence(t + 1)
    # Clock stepped back 5 s: within the window, the sequence keeps growing.
    ahead = auth.clock_sequence(t + 5)
    assert auth.next_sequence(ahead, t, replay=Replay.TIME, window=5) == ahead + 1
    # Beyond the window: time mode restarts from the clock, monotonic keeps growing.
    far = auth.clock_sequence(t + 3600)
    assert auth.next_sequence(far, t, replay=Replay.TIME, window=5) == clock
    assert auth.next_sequence(far, t, replay=Replay.MONOTONIC, window=5) == far + 1
    assert auth.next_sequence((1 << 64) - 1, 0.0, replay=Replay.MONOTONIC, window=5) == 0


def _signed_at(seconds: int, counter: int = 0, src: IPv4Address = SENDER) -> tuple[bytes, bytes]:
    message = packet.encode(_advert(4), src, packet.GROUP_V4)
    keys = KeyRing({1: DRAFT_KEY}, 1)
    return message, auth.sign(message, src=src, keys=keys, sequence=(seconds << 32) | counter)


def test_time_mode_expires_a_mark_outside_the_window() -> None:
    """A sender that restarts after its clock was stepped back is let in again once its old
    mark lies outside the window (keepalived's replay_ok), never while it is inside."""
    v = Verifier(KeyRing({1: DRAFT_KEY}, 1), replay=Replay.TIME, window=5)
    src = IPv4Address("192.0.2.1")
    t0 = 1_800_000_000
    assert v.verify(*_signed_at(t0 + 4), src=src, now=t0).accept
    assert v.verify(*_signed_at(t0 + 1), src=src, now=t0).reason == "replay"
    assert v.verify(*_signed_at(t0 + 3), src=src, now=t0 - 2).accept  # mark t0+4 now 6 s ahead
    mono = Verifier(KeyRing({1: DRAFT_KEY}, 1), replay=Replay.MONOTONIC, window=5)
    assert mono.verify(*_signed_at(t0 + 4), src=src, now=0).accept
    assert mono.verify(*_signed_at(t0 + 3), src=src, now=1e12).reason == "replay"


def test_marks_are_per_sender_and_bounded() -> None:
    v = Verifier(KeyRing({1: DRAFT_KEY}, 1), replay=Replay.MONOTONIC, window=5, senders=2)
    a, b, c = (IPv4Address(f"192.0.2.{n}") for n in (1, 2, 3))
    t0 = 1_800_000_000
    for src in (a, b):
        assert v.verify(*_signed_at(t0, src=src), src=src, now=0).accept
    assert v.verify(*_signed_at(t0, src=a), src=a, now=0).reason == "replay"  # a: recently used
    assert v.verify(*_signed_at(t0, src=c), src=c, now=0).accept  # evicts b, not a
    assert list(v.marks) == [a, c]
    assert v.verify(*_signed_at(t0, src=a), src=a, now=0).reason == "replay"
    assert v.verify(*_signed_at(t0, src=b), src=b, now=0).accept  # b forgotten
    # A forged advert (bad HMAC) never moves a mark.
    assert list(v.marks) == [a, b]  # c, least recently used, went
    m, t = _signed_at(t0 + 9, src=a)
    assert v.verify(m, t[:-1] + bytes([t[-1] ^ 1]), src=a, now=0).reason == "bad-hmac"
    assert v.marks[a] == t0 << 32


def test_missing_trailer_per_mode() -> None:
    src = IPv4Address("192.0.2.1")
    message = packet.encode(_advert(4), src, packet.GROUP_V4)
    for mode, accept in ((Mode.ENFORCE, False), (Mode.PERMISSIVE, True), (Mode.RECEIVE_ONLY, True)):
        v = Verifier(KeyRing({1: DRAFT_KEY}, 1), mode=mode, replay=Replay.TIME, window=5)
        assert v.verify(*auth.split(message, ipv6=False), src=src, now=0).accept is accept


def test_split_only_takes_exactly_one_trailer() -> None:
    src = IPv4Address("192.0.2.1")
    message = packet.encode(_advert(4), src, packet.GROUP_V4)
    assert auth.split(message, ipv6=False) == (message, None)
    assert auth.split(message + bytes(27), ipv6=False) == (message + bytes(27), None)
    assert auth.split(message + bytes(29), ipv6=False) == (message + bytes(29), None)
    assert auth.split(message + bytes(28), ipv6=False) == (message, bytes(28))
    assert auth.split(b"\x31\x01", ipv6=False) == (b"\x31\x01", None)
    v2 = bytes([0x21, 9, 100, 1, 0, 1, 0, 0]) + bytes(4) + bytes(8)
    assert auth.split(v2 + bytes(28), ipv6=False) == (v2, bytes(28))
    # A malformed trailer is judged malformed, not a crash.
    v = Verifier(KeyRing({1: DRAFT_KEY}, 1), replay=Replay.TIME, window=5)
    assert v.verify(message, bytes(28), src=src, now=0).reason == "malformed"


def test_keyring_validation_and_repr() -> None:
    keys = KeyRing({1: DRAFT_KEY}, 1)
    assert DRAFT_KEY.hex() not in repr(keys) and "0001020304" not in repr(keys)
    assert repr(keys) == "KeyRing(ids=[1], active=1)"
    for bad, why in [
        (({}, 1), "no keys"),
        (({0: DRAFT_KEY}, 0), "1..255"),
        (({256: DRAFT_KEY}, 256), "1..255"),
        (({1: bytes(31)}, 1), "31 bytes"),
        (({1: bytes(65)}, 1), "65 bytes"),
        (({1: DRAFT_KEY}, 2), "active key 2"),
    ]:
        with pytest.raises(ValueError, match=why):
            KeyRing(*bad)


def test_parse_key_reads_keepalived_key_files() -> None:
    assert auth.parse_key(b"hex:" + DRAFT_KEY.hex().encode() + b"\n") == DRAFT_KEY
    assert auth.parse_key(b"hex:" + DRAFT_KEY.hex().upper().encode() + b"\r\n") == DRAFT_KEY
    ascii_key = b"vipd-test-passphrase-thirty-two-bytes"
    assert auth.parse_key(ascii_key + b"\n") == ascii_key
    for bad in (b"hex:zz" + b"00" * 31, b"hex:" + b"00" * 31, b"short\n", b"x" * 65):
        with pytest.raises(ValueError) as e:
            auth.parse_key(bad)
        assert "zz" not in str(e.value) and "short" not in str(e.value)


def test_default_window_is_keepalived_s() -> None:
    assert [auth.default_window(x) for x in (0.01, 1, 2, 3, 50, 200)] == [5, 5, 6, 9, 150, 300]
