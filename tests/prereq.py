"""What a test needs from the machine, and what happens when it is missing.

Outside CI a missing prerequisite (root, a tool scripts/setup installs) skips the test with the
reason printed. Under ``CI=true`` (root, set up by scripts/setup) it fails instead: a skipped
test there would be a check that silently stopped running.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(reason: str) -> NoReturn:
    """Skip (or, in CI, fail) the running test because ``reason``."""
    if in_ci():
        pytest.fail(f"CI must run this test, but: {reason}")
    print(f"\nskipping: {reason}")
    pytest.skip(reason)


def promtool() -> str:
    """Path of Debian's promtool (package prometheus)."""
    path = shutil.which("promtool")
    if path is None:
        missing("needs promtool (apt-get install prometheus; scripts/setup does it)")
    return path
