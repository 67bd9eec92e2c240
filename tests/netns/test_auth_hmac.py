"""vipd's auth_hmac codec against a running keepalived >= 2.4, both directions, in network
namespaces.

What it tests:

- vipd → keepalived: keepalived (enforce, keys 1 and 2, signing with 1) is MASTER at priority
  100 on n1; n2 sends priority-200 adverts from a raw socket, built by ``vipd.vrrp.packet`` and
  signed by ``vipd.vrrp.auth``. Unsigned, signed with a wrong key, or with an unknown key id,
  keepalived names the fault in its log and stays MASTER; signed with key 2 (a rotation: not
  its active key) it goes BACKUP; the same signed bytes again are logged as replayed. v2
  IPv4 multicast and unicast, v3 IPv4 and IPv6, multicast and unicast. In permissive and
  receive-only mode a wrong key is still refused and an unsigned advert makes it BACKUP.
- keepalived → vipd: the adverts keepalived sends verify with ``auth.Verifier`` at the time
  they were captured, with the key read from the same file keepalived read it from.
- vipd itself (``vipd run`` with ``election.vrrp.auth_hmac``) against keepalived, VRRPv3 IPv4
  and IPv6, multicast and unicast, and VRRPv2 IPv4 multicast and unicast: the higher priority
  holds the VIP whichever of the two it is, and the other takes over when it is killed; in
  enforce mode a vipd without auth_hmac is no peer (both hold the VIP), the same vipd with the
  key is one (one holder).
- the rollout modes, vipd and keepalived each in its own: all nine pairs of enforce,
  permissive and receive-only on v3 IPv4 multicast, and permissive and receive-only on both
  sides on the five other transports. Each direction is judged alone (keepalived at 100 and
  vipd at 200, then vipd at 50): a node takes the other's adverts unless it enforces and the
  other is receive-only (unsigned); then keepalived logs the missing trailer and both hold
  the VIP, or vipd counts ``missing``. Nodes that take each other's adverts log and count no
  failure at all.

Why: the unit tests hold the codec to recorded bytes; this holds it to keepalived's live
receive path (length detection, its own checksum rules, the replay table) too.

keepalived 2.4 is not Debian's (2.2.7), and CI cannot fetch its source, so these tests run only
where ``VIPD_KEEPALIVED_HMAC`` names a built binary (tests/netns/keepalived_hmac.py says how);
without it they skip with that reason, also under CI=true: an absent binary is expected there,
not a broken machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from ipaddress import ip_address
from pathlib import Path

import pytest

from tests.netns import keepalived_hmac as kh
from vipd.lab.attacker import metric_counts
from vipd.lab.daemons import Daemon, VrrpSpec, descendants, make_daemon
from vipd.lab.topology import Lab
from vipd.vrrp import auth, packet
from vipd.vrrp.auth import KeyRing, Mode, Replay, Signer, Verifier
from vipd.vrrp.keyfile import read_keyring

pytestmark = pytest.mark.netns

WRONG_KEY = bytes(range(200, 232))


@pytest.fixture
def keepalived_hmac() -> str:
    path = kh.binary()
    if path is None:
        reason = (
            f"needs keepalived >= 2.4 named by {kh.ENV} (built from its public repository; "
            "CI cannot fetch source, so this skips there too)"
        )
        print(f"\nskipping: {reason}")
        pytest.skip(reason)
    return path


def _scenario(name: str) -> kh.Scenario:
    return next(s for s in kh.SCENARIOS if s.name == name)


INBOUND = [
    kh.Scenario("v3-ipv4-multicast", 3, 4, False, (1, 2), 1, window=5),
    kh.Scenario("v3-ipv6-multicast", 3, 6, False, (1, 2), 1, "monotonic"),
    kh.Scenario("v2-ipv4-unicast", 2, 4, True, (1, 2), 1, window=5),
    kh.Scenario("v3-ipv4-unicast", 3, 4, True, (1, 2), 1, "monotonic"),
    kh.Scenario("v3-ipv6-unicast", 3, 6, True, (1, 2), 1, window=5),
    kh.Scenario("v2-ipv4-multicast", 2, 4, False, (1, 2), 1, "monotonic"),
]


class Peer:
    """n2 sending priority-200 adverts for ``scenario`` to keepalived on n1."""

    def __init__(self, lab: Lab, scenario: kh.Scenario) -> None:
        self.scenario = scenario
        n1, n2 = lab.node("n1"), lab.node("n2")
        self.sender = kh.Sender(lab, n2, scenario.family, unicast=scenario.unicast)
        group = packet.GROUP_V4 if scenario.family == 4 else packet.GROUP_V6
        self.dst = ip_address(n1.addr(scenario.family)) if scenario.unicast else group
        advert = packet.Advert(
            version=scenario.version,
            vrid=scenario.vrid,
            priority=200,
            interval_cs=int(scenario.advert_int * 100),
            addresses=tuple(ip_address(v) for v in kh.vips_of(scenario)),
        )
        self.message = packet.encode(advert, self.sender.src, self.dst)
        self.last = b""

    def send(self, keys: KeyRing | None) -> bytes:
        wire = self.message
        if keys is not None:
            signer = Signer(keys, replay=Replay.TIME, window=5)
            wire += signer.trailer(wire, src=self.sender.src, now=time.time() + self._bump())
        self.sender.send(wire, str(self.dst))
        self.last = wire
        return wire

    _n = 0

    def _bump(self) -> float:
        # Fresh Signers each send: a tiny step keeps our sequence growing within one tick.
        self._n += 1
        return self._n / 65536

    def send_until(
        self, ka: kh.Keepalived, needle: str, keys: KeyRing | None, timeout: float = 6.0
    ) -> bool:
        since = ka.mastered
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.send(keys)
            if ka.wait_log(needle, 0.2, since):
                return True
        return False


def _start(lab: Lab, path: str, scenario: kh.Scenario, mode: str = "enforce") -> kh.Keepalived:
    n1, n2 = lab.node("n1"), lab.node("n2")
    key_dir = lab.workdir / "keys"
    key_dir.mkdir(mode=0o700, exist_ok=True)
    text = kh.config(scenario, n1, n2, priority=100, key_dir=key_dir, mode=mode, prefix=lab.prefix)
    ka = kh.Keepalived(lab, n1, path, text, f"{scenario.name}-{mode}")
    ka.start()
    assert ka.wait_log("Entering MASTER STATE", 10), ka.log()
    # keepalived logs "Entering BACKUP STATE (init)" before MASTER even with state MASTER:
    # every later check reads the log from here on.
    ka.mastered = ka.log().index("Entering MASTER STATE")
    return ka


@pytest.mark.parametrize("scenario", INBOUND, ids=[s.name for s in INBOUND])
def test_keepalived_accepts_vipd_signed_adverts_and_only_those(
    keepalived_hmac: str, netns_ok: None, make_lab: Callable[..., Lab], scenario: kh.Scenario
) -> None:
    lab = make_lab(2)
    ka = _start(lab, keepalived_hmac, scenario)
    peer = Peer(lab, scenario)
    try:
        good = KeyRing({1: kh.KEYS[1], 2: kh.KEYS[2]}, 2)
        cases = [
            (None, "missing authentication trailer from"),
            (KeyRing({1: WRONG_KEY}, 1), "invalid authentication HMAC from"),
            (KeyRing({9: kh.KEYS[1]}, 9), "unknown authentication key id 9 from"),
        ]
        for keys, needle in cases:
            assert peer.send_until(ka, needle, keys), f"no {needle!r}:\n{ka.log()}"
            assert "Entering BACKUP STATE" not in ka.log()[ka.mastered :], ka.log()
        assert peer.send_until(ka, "Entering BACKUP STATE", good), ka.log()
        signed = peer.last
        assert len(signed) == len(peer.message) + auth.TRAILER_LEN
        for _ in range(3):
            peer.sender.send(signed, str(peer.dst))
        assert ka.wait_log("replayed authentication trailer from", 3, ka.mastered), ka.log()
        problems = [ln for ln in ka.log().splitlines() if "too long" in ln or "checksum" in ln]
        assert not problems, problems
    finally:
        peer.sender.close()
        ka.stop()


@pytest.mark.parametrize("mode", ["permissive", "receive-only"])
def test_migrating_keepalived_takes_unsigned_adverts_but_not_bad_ones(
    keepalived_hmac: str, netns_ok: None, make_lab: Callable[..., Lab], mode: str
) -> None:
    """keepalived's migration modes: a trailer that is present is still verified (a wrong key
    is refused and it stays MASTER), a missing one is accepted (it goes BACKUP)."""
    lab = make_lab(2)
    scenario = INBOUND[0]
    ka = _start(lab, keepalived_hmac, scenario, mode=mode)
    peer = Peer(lab, scenario)
    try:
        bad = KeyRing({1: WRONG_KEY}, 1)
        assert peer.send_until(ka, "invalid authentication HMAC from", bad), ka.log()
        assert "Entering BACKUP STATE" not in ka.log()[ka.mastered :], ka.log()
        assert peer.send_until(ka, "Entering BACKUP STATE", None), ka.log()
        assert "missing authentication trailer" not in ka.log()
    finally:
        peer.sender.close()
        ka.stop()


@pytest.mark.parametrize(
    "name", ["v3-ipv4-multicast-time-key1", "v3-ipv6-unicast-time-key255-file"]
)
def test_vipd_verifies_live_keepalived_adverts(
    keepalived_hmac: str, netns_ok: None, tmp_path: Path, name: str
) -> None:
    scenario = _scenario(name)
    record = kh.record_one(keepalived_hmac, scenario)
    key_file = tmp_path / "key"
    key_file.write_text(kh.key_value(scenario.active) + "\n")
    key_file.chmod(0o600)
    keys = read_keyring({scenario.active: key_file}, scenario.active)
    window = scenario.window or auth.default_window(scenario.advert_int)
    v = Verifier(keys, mode=Mode.ENFORCE, replay=Replay(scenario.anti_replay), window=window)
    for a in record["adverts"]:
        message, trailer = auth.split(bytes.fromhex(a["payload"]), ipv6=scenario.family == 6)
        verdict = v.verify(message, trailer, src=ip_address(a["src"]), now=a["captured_at"])
        assert (verdict.accept, verdict.reason) == (True, "ok"), a
    # And a stranger's key does not verify them.
    stranger = Verifier(
        KeyRing({scenario.active: WRONG_KEY}, scenario.active),
        replay=Replay(scenario.anti_replay),
        window=window,
    )
    a = record["adverts"][0]
    message, trailer = auth.split(bytes.fromhex(a["payload"]), ipv6=scenario.family == 6)
    verdict = stranger.verify(message, trailer, src=ip_address(a["src"]), now=a["captured_at"])
    assert verdict.reason == "bad-hmac"


# -- vipd itself against keepalived ------------------------------------------------------------

# v3: IPv4 multicast (time), IPv4 unicast (monotonic), IPv6 multicast (monotonic: signed from
# the link-local address), IPv6 unicast (time); v2: IPv4 multicast (monotonic), unicast (time)
LIVE = [INBOUND[0], INBOUND[3], INBOUND[1], INBOUND[4], INBOUND[5], INBOUND[2]]


def _vipd(lab: Lab, scenario: kh.Scenario, *, signed: bool, mode: str = "enforce") -> Daemon:
    """vipd on n2 in ``scenario``, with keepalived's key 1 from a file and ``mode``
    (``signed``) or without auth_hmac."""
    section: dict[str, object] | None = None
    if signed:
        path = lab.workdir / "vipd-key-1"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(kh.key_value(1) + "\n")
        section = {"keys": {1: str(path)}, "anti_replay": scenario.anti_replay, "mode": mode}
        if scenario.window is not None:
            section["window"] = scenario.window
    spec = VrrpSpec(
        vip=kh.vips_of(scenario)[0],
        vrid=scenario.vrid,
        advert_interval=scenario.advert_int,
        version=scenario.version,
        unicast=scenario.unicast,
        auth_hmac=section,
    )
    return make_daemon("vipd", lab, lab.node("n2"), spec)


def _until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _kill(ka: kh.Keepalived) -> None:
    """keepalived dies (SIGKILL to its whole tree: no priority-0 advert)."""
    assert ka.proc is not None
    for pid in [ka.proc.pid, *descendants(ka.proc.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ka.proc.wait(timeout=5)


@pytest.mark.parametrize("scenario", LIVE, ids=[s.name for s in LIVE])
def test_vipd_and_keepalived_elect_by_priority_and_take_over(
    keepalived_hmac: str, netns_ok: None, make_lab: Callable[..., Lab], scenario: kh.Scenario
) -> None:
    lab = make_lab(2)
    vip = kh.vips_of(scenario)[0]
    ka = _start(lab, keepalived_hmac, scenario)  # n1, priority 100, MASTER
    vipd = _vipd(lab, scenario, signed=True)
    try:
        # vipd at 200 preempts keepalived: keepalived verified vipd's adverts.
        vipd.start(200)
        assert _until(lambda: lab.holders(vip) == ["n2"], 15), (lab.holders(vip), vipd.log_text())
        assert ka.wait_log("Entering BACKUP STATE", 5, ka.mastered), ka.log()
        backup_at = ka.log().rindex("Entering BACKUP STATE")
        time.sleep(3 * scenario.advert_int)
        assert lab.holders(vip) == ["n2"] and vipd.state() == "ACTIVE"
        # vipd dies: keepalived takes over after its Master_Down_Interval.
        vipd.stop(signal.SIGKILL)
        assert ka.wait_log("Entering MASTER STATE", 10, backup_at), ka.log()
        # vipd again, at 50: a backup that hears keepalived's signed adverts (one holder).
        vipd.start(50)
        assert _until(lambda: vipd.state() == "BACKUP", 10), vipd.log_text()
        assert _until(lambda: lab.holders(vip) == ["n1"], 10), lab.holders(vip)
        time.sleep(5 * scenario.advert_int)
        assert lab.holders(vip) == ["n1"] and vipd.state() == "BACKUP", vipd.log_text()
        # keepalived dies: vipd takes over.
        _kill(ka)
        assert _until(lambda: vipd.state() == "ACTIVE", 10), vipd.log_text()
        assert "n2" in lab.holders(vip)
        problems = [ln for ln in ka.log().splitlines() if "authentication" in ln]
        assert not problems, problems
    finally:
        vipd.stop()
        ka.stop()


def test_in_enforce_mode_an_unsigned_vipd_is_no_peer_and_a_signed_one_is(
    keepalived_hmac: str, netns_ok: None, make_lab: Callable[..., Lab]
) -> None:
    """The unsigned vipd holds the VIP first (started after keepalived, its start probe would
    find the VIP answered by a host whose adverts it cannot read, and refuse to claim it);
    keepalived drops its adverts and vipd cannot read keepalived's: two masters."""
    scenario = LIVE[0]
    lab = make_lab(2)
    vip = kh.vips_of(scenario)[0]
    unsigned = _vipd(lab, scenario, signed=False)
    ka: kh.Keepalived | None = None
    try:
        unsigned.start(50)
        assert _until(lambda: lab.holders(vip) == ["n2"], 15), unsigned.log_text()
        ka = _start(lab, keepalived_hmac, scenario)  # n1, priority 100, MASTER
        # Neither hears the other: two masters.
        assert _until(lambda: lab.holders(vip) == ["n1", "n2"], 15), lab.holders(vip)
        assert ka.wait_log("missing authentication trailer from", 5, ka.mastered), ka.log()
        time.sleep(5 * scenario.advert_int)
        assert lab.holders(vip) == ["n1", "n2"], lab.holders(vip)
        assert unsigned.state() == "ACTIVE"
        unsigned.stop()
        # The same node with the key: a backup, one holder.
        signed = _vipd(lab, scenario, signed=True)
        signed.start(50)
        assert _until(lambda: signed.state() == "BACKUP", 10), signed.log_text()
        assert _until(lambda: lab.holders(vip) == ["n1"], 10), lab.holders(vip)
        time.sleep(5 * scenario.advert_int)
        assert lab.holders(vip) == ["n1"] and signed.state() == "BACKUP"
        signed.stop()
    finally:
        unsigned.stop()
        if ka is not None:
            ka.stop()


# -- the rollout modes, vipd and keepalived each in its own ------------------------------------

MODES = ("enforce", "permissive", "receive-only")
# Every pair of modes on one transport; the same mode on both sides on the others (enforce
# on both is test_vipd_and_keepalived_elect_by_priority_and_take_over).
PAIRS = [(LIVE[0], v, k) for v in MODES for k in MODES] + [
    (s, m, m) for s in LIVE[1:] for m in ("permissive", "receive-only")
]


def _accepts(receiver: str, sender: str) -> bool:
    """A node in mode ``receiver`` takes the adverts of one in mode ``sender``: only an
    enforcing node refuses, and only a receive-only sender's adverts (unsigned)."""
    return not (receiver == "enforce" and sender == "receive-only")


@pytest.mark.parametrize(
    ("scenario", "vipd_mode", "ka_mode"),
    PAIRS,
    ids=[f"{s.name}-vipd-{v}-keepalived-{k}" for s, v, k in PAIRS],
)
def test_vipd_and_keepalived_in_rollout_modes_hear_each_other_as_the_modes_say(
    keepalived_hmac: str,
    netns_ok: None,
    make_lab: Callable[..., Lab],
    scenario: kh.Scenario,
    vipd_mode: str,
    ka_mode: str,
) -> None:
    """keepalived (priority 100, MASTER) and then vipd at 200: keepalived goes BACKUP when it
    accepts vipd's adverts, else both hold the VIP and keepalived logs the missing trailer.
    vipd again at 50: a backup and one holder when vipd accepts keepalived's adverts, else
    vipd counts them as ``missing``. Between nodes that accept each other, no failure at all."""
    lab = make_lab(2)
    vip = kh.vips_of(scenario)[0]
    ka = _start(lab, keepalived_hmac, scenario, mode=ka_mode)  # n1, priority 100, MASTER
    vipd = _vipd(lab, scenario, signed=True, mode=vipd_mode)
    ns = lab.node("n2").ns
    settle = 5 * scenario.advert_int
    try:
        vipd.start(200)
        if _accepts(ka_mode, vipd_mode):
            assert _until(lambda: lab.holders(vip) == ["n2"], 15), (lab.holders(vip), ka.log())
            assert ka.wait_log("Entering BACKUP STATE", 5, ka.mastered), ka.log()
            time.sleep(settle)
            assert lab.holders(vip) == ["n2"], lab.holders(vip)
        else:
            assert ka.wait_log("missing authentication trailer from", 15, ka.mastered), ka.log()
            assert _until(lambda: lab.holders(vip) == ["n1", "n2"], 15), lab.holders(vip)
            assert "Entering BACKUP STATE" not in ka.log()[ka.mastered :], ka.log()
        vipd.stop()
        assert _until(lambda: lab.holders(vip) == ["n1"], 10), lab.holders(vip)
        vipd.start(50)
        if _accepts(vipd_mode, ka_mode):
            assert _until(lambda: vipd.state() == "BACKUP", 10), vipd.log_text()
            time.sleep(settle)
            assert lab.holders(vip) == ["n1"] and vipd.state() == "BACKUP", vipd.log_text()
            failed = metric_counts(lab, ns, "vipd_vrrp_auth_failures_total")
            assert not sum(failed.values()), failed
        else:

            def missing() -> int:
                return metric_counts(lab, ns, "vipd_vrrp_auth_failures_total").get("missing", 0)

            assert _until(lambda: missing() > 0, 10), vipd.log_text()
        if _accepts(ka_mode, vipd_mode) and _accepts(vipd_mode, ka_mode):
            problems = [ln for ln in ka.log().splitlines() if "authentication" in ln]
            assert not problems, problems
    finally:
        vipd.stop()
        ka.stop()
