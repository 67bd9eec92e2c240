"""Hypothesis budgets for the unit suite's property tests.

By default a fixed budget, derandomized: every run tries the same examples, so the verdict
depends on the code alone and the suite's run time is known (what ``scripts/test`` and CI
run). With ``VIPD_HYPOTHESIS_DEEP=1`` each property gets ten times the examples, drawn at
random and with no deadline: a search for new counterexamples, minutes instead of seconds,
for a change to the config loader or the Lease logic (a counterexample it finds belongs in
the test as an ``@example``).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import settings

DEEP = os.environ.get("VIPD_HYPOTHESIS_DEEP") == "1"


def budget(examples: int, **kwargs: Any) -> settings:
    """``settings`` with ``examples`` examples (ten times as many, at random, when deep)."""
    if DEEP:
        kwargs["deadline"] = None
        return settings(max_examples=10 * examples, derandomize=False, **kwargs)
    return settings(max_examples=examples, derandomize=True, **kwargs)
