"""The NAT forwarding's nftables table on the host's real nftables, IPv4 and IPv6 (the
qemu guest tests cover IPv4 end to end; this checks that the IPv6 rule is valid too), in a
throwaway namespace: installed, found, replaced idempotently, removed, scoped to the VIP."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv6Address

import pytest

from vipd.ipvs.actuator import NFT_TABLE, Masquerade
from vipd.ipvs.plan import ServiceKey


@pytest.fixture
def ns(netns_ok: None) -> Iterator[str]:
    name = "vipdnat" + secrets.token_hex(3)
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.mark.parametrize(
    ("vip", "family"), [(IPv4Address("10.0.0.100"), "ip"), (IPv6Address("fd00::100"), "ip6")]
)
def test_masquerade_table_lifecycle(ns: str, vip: IPv4Address | IPv6Address, family: str) -> None:
    m = Masquerade(ServiceKey(vip, 6443), netns=ns)
    assert not m.present()
    assert m.remove() is False
    m.install()
    m.install()  # replaced, not duplicated
    listing = subprocess.run(
        ["ip", "netns", "exec", ns, "nft", "list", "table", family, NFT_TABLE],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert listing.count("masquerade") == 1
    assert f"ct original {family} daddr {vip}" in listing
    assert "ct original proto-dst 6443" in listing
    assert "hook postrouting" in listing
    assert m.present()
    assert m.remove() is True
    assert not m.present()
    # the host's own ruleset was never touched
    host = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert NFT_TABLE not in host
