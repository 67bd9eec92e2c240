"""The ``announce.bgp.bfd`` section (vipd.config.bfd), read on its own: the speaker's
section (``announce.bgp``) holds it as its ``bfd`` key."""

from __future__ import annotations

from typing import Any

import pytest

from vipd.config import ConfigError
from vipd.config.bfd import Bfd
from vipd.config.schema import Check, read, walk

KEY = "announce.bgp.bfd"


def load(value: object) -> Bfd:
    return read(Check({}), KEY, Bfd, value)


def test_defaults() -> None:
    assert load(None) == load({}) == Bfd(enabled=False, min_tx_ms=100, min_rx_ms=100, multiplier=3)


def test_keys() -> None:
    assert [k.dotted for k in walk(Bfd)] == ["enabled", "min_tx_ms", "min_rx_ms", "multiplier"]


def test_values_are_read() -> None:
    got = load({"enabled": True, "min_tx_ms": 300, "min_rx_ms": 50, "multiplier": 5})
    assert got == Bfd(enabled=True, min_tx_ms=300, min_rx_ms=50, multiplier=5)


@pytest.mark.parametrize(
    ("written", "key", "words"),
    [
        ({"enabled": "yes"}, "enabled", "true or false"),
        ({"min_tx_ms": 49}, "min_tx_ms", "50"),
        ({"min_tx_ms": 60001}, "min_tx_ms", "60000"),
        ({"min_rx_ms": 10}, "min_rx_ms", "50"),
        ({"min_rx_ms": 0.5}, "min_rx_ms", "integer"),
        ({"multiplier": 1}, "multiplier", "2"),
        ({"multiplier": 256}, "multiplier", "255"),
        ({"multipler": 3}, "multipler", "multiplier"),
    ],
)
def test_bad_values_name_the_key(written: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(written)
    assert err.value.key == f"{KEY}.{key}"
    assert words in str(err.value)
