"""The HMAC trailer of one virtual router's adverts: keys read, adverts signed and verified.

What it is: the driver's shell around ``vipd.vrrp.auth`` (the pure codec and policy,
keepalived's ``auth_hmac``, draft-cassen-vrrp-auth-hmac): `AdvertAuth` reads the key files
once (``vipd.vrrp.keyfile``), keeps one ``auth.Signer`` and one ``auth.Verifier`` and the wall
clock the trailer's timestamps are on (UTC, not the election's monotonic clock). The module
is imported only where ``election.vrrp.auth_hmac`` is set: it pulls in hashlib.

A reload (``rekey``, from ``events.reconfigure``) swaps the keys, the signing key and the
mode in place and keeps the replay state (the last sequence sent, the peers' high-water
marks): a key rotation without a flag day is a reload per node, one node at a time, and no
peer's old capture becomes fresh again by it (draft-cassen-vrrp-auth-hmac's key id exists for
that rotation: several keys accepted, one sending).

What it must not do: log or count (``adverts`` does, by the verdict's reason), or put a key's
bytes anywhere but into the HMAC.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from vipd.config import AuthHmac, Vrrp
from vipd.vrrp import auth, keyfile
from vipd.vrrp.driver.wire import IPAddress

__all__ = ["AdvertAuth"]


class AdvertAuth:
    """One virtual router's Signer and Verifier (replay marks for ``peers`` unicast peers, or
    keepalived's `auth.MCAST_SENDERS` for multicast)."""

    def __init__(self, v: Vrrp, *, peers: int, wall: Callable[[], float] = time.time) -> None:
        a = _section(v)
        keys = keyfile.read_keyring(a.key_paths, a.signing_key)
        mode = auth.Mode(a.mode)
        replay = auth.Replay(a.anti_replay)
        window = v.auth_window
        self.mode = mode
        self.window = window
        self.wall = wall
        self.signer = auth.Signer(keys, mode=mode, replay=replay, window=window)
        self.verifier = auth.Verifier(
            keys, mode=mode, replay=replay, window=window, senders=peers or auth.MCAST_SENDERS
        )

    def rekey(self, v: Vrrp) -> None:
        """A reload's keys, signing key and mode (``vipd.reload.LIVE``): the key files are
        read first, so one that fails changes nothing (raises ``keyfile.KeyFileError``)."""
        a = _section(v)
        keys = keyfile.read_keyring(a.key_paths, a.signing_key)
        mode = auth.Mode(a.mode)
        self.mode = mode
        self.signer.keys = self.verifier.keys = keys
        self.signer.mode = self.verifier.mode = mode

    def split(self, payload: bytes, *, ipv6: bool) -> tuple[bytes, bytes | None]:
        """The VRRP message and the trailer (None: there is none) of a received payload."""
        return auth.split(payload, ipv6=ipv6)

    def verify(self, message: bytes, trailer: bytes | None, src: IPAddress) -> auth.Verdict:
        return self.verifier.verify(message, trailer, src=src, now=self.wall())

    def trailer(self, message: bytes, src: IPAddress) -> bytes:
        """The trailer of one logical advert (b"" in receive-only): ``message`` is any of its
        copies, as the checksum is outside the HMAC."""
        return self.signer.trailer(message, src=src, now=self.wall())


def _section(v: Vrrp) -> AuthHmac:
    if v.auth_hmac is None:
        raise ValueError("election.vrrp.auth_hmac is not set")
    return v.auth_hmac
