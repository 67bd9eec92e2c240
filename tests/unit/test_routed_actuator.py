"""vipd.routed.actuator's argument checks (no netlink needed: they come first)."""

from __future__ import annotations

import pytest

from vipd.routed.actuator import RouteActuator


@pytest.mark.parametrize("table", [0, 253, 254, 255, 1 << 32])
def test_the_kernel_tables_and_out_of_range_are_refused(table: int) -> None:
    with pytest.raises(ValueError, match="table must be"):
        RouteActuator(table=table)


@pytest.mark.parametrize("protocol", [0, 2, 4, 256])
def test_kernel_protocols_are_refused(protocol: int) -> None:
    with pytest.raises(ValueError, match="protocol must be 5-255"):
        RouteActuator(protocol=protocol)
