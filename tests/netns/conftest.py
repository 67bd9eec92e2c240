"""Fixtures for tests that need root and real network namespaces.

What it is: ``netns_ok`` skips (with the reason printed in pytest's ``-ra`` summary) unless
we are root and ``ip netns add/del`` really works here; ``keepalived_ok`` also needs the
keepalived binary; ``lab`` gives a built 3-node ``vipd.lab.topology.Lab`` and always tears it
down, pass or fail; ``make_lab`` does the same for labs of other sizes.

What it must not do: leave anything behind on the host, or skip silently: every skip says
what is missing, and with CI=true a missing prerequisite is a failure, not a skip.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.prereq import missing
from vipd.lab.topology import Lab


def _netns_problem() -> str | None:
    if os.geteuid() != 0:
        return f"needs root for network namespaces (running as uid {os.geteuid()})"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    probe = "vipdprobe" + secrets.token_hex(3)
    add = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if add.returncode != 0:
        return f"`ip netns add` does not work here: {add.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@pytest.fixture(scope="session")
def netns_ok() -> None:
    problem = _netns_problem()
    if problem is not None:
        missing(problem)


@pytest.fixture(scope="session")
def keepalived_ok(netns_ok: None) -> None:
    if shutil.which("keepalived") is None:
        missing("needs keepalived (apt-get install keepalived; scripts/setup does it)")


@pytest.fixture
def make_lab(netns_ok: None) -> Iterator[Callable[..., Lab]]:
    """``make_lab(nodes=2)`` → a built Lab; every lab made is torn down after the test."""
    labs: list[Lab] = []

    def make(nodes: int = 3) -> Lab:
        lab = Lab(nodes=nodes)
        labs.append(lab)
        lab.build()
        return lab

    try:
        yield make
    finally:
        for lab in labs:
            lab.teardown()


@pytest.fixture
def lab(make_lab: Callable[..., Lab]) -> Lab:
    return make_lab(3)
