"""The HMAC trailer of one virtual router's adverts: keys read, adverts signed and verified.

What it is: the driver's shell around ``vipd.vrrp.auth`` (the pure codec and policy,
keepalived's ``auth_hmac``, draft-cassen-vrrp-auth-hmac): `AdvertAuth` reads the key files
once (``vipd.vrrp.keyfile``), keeps one ``auth.Signer`` and one ``auth.Verifier`` and the wall
clock the trailer's timestamps are on (UTC, not the election's monotonic clock). The module
is imported only where ``election.vrrp.auth_hmac`` is set: it pulls in hashlib.

What it must not do: log or count (``adverts`` does, by the verdict's reason), or put a key's
bytes anywhere but into the HMAC.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from vipd.config import Vrrp
from vipd.vrrp import auth, keyfile
from vipd.vrrp.driver.wire import IPAddress

__all__ = ["AdvertAuth"]


class AdvertAuth:
    """One virtual router's Signer and Verifier (replay marks for ``peers`` unicast peers, or
    keepalived's `auth.MCAST_SENDERS` for multicast)."""

    def __init__(self, v: Vrrp, *, peers: int, wall: Callable[[], float] = time.time) -> None:
        a = v.auth_hmac
        if a is None:
            raise ValueError("election.vrrp.auth_hmac is not set")
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

    def split(self, payload: bytes, *, ipv6: bool) -> tuple[bytes, bytes | None]:
        """The VRRP message and the trailer (None: there is none) of a received payload."""
        return auth.split(payload, ipv6=ipv6)

    def verify(self, message: bytes, trailer: bytes | None, src: IPAddress) -> auth.Verdict:
        return self.verifier.verify(message, trailer, src=src, now=self.wall())

    def trailer(self, message: bytes, src: IPAddress) -> bytes:
        """The trailer of one logical advert (b"" in receive-only): ``message`` is any of its
        copies, as the checksum is outside the HMAC."""
        return self.signer.trailer(message, src=src, now=self.wall())
