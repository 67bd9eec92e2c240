"""The guest network, built once per boot (session) and shared by the guest test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.vm.guest.ipvs_net import Net, sh


@pytest.fixture(scope="session")
def net() -> Iterator[Net]:
    n = Net().build()
    # someone else's service (kube-proxy's, say), with a real server: vipd must never touch it
    sh("ipvsadm", "-A", "-t", "10.96.0.1:443", "-s", "rr")
    sh("ipvsadm", "-a", "-t", "10.96.0.1:443", "-r", "10.88.0.11:6443", "-m")
    yield n
