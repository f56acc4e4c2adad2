"""How many examples a property test draws: its own number, or fewer in CI's extra legs.

CI's lowest and newest legs (docs/dependencies.md) run the fast tests again on other
Python, Arrow, pandas and NumPy releases, to catch what those releases change. Every
property test still runs there, through the same code paths, with a fraction of its
examples (``RAYLAKE_PROPERTY_DEPTH``, set by ``make test-lowest`` and ``make
test-newest``); the 3.11 leg draws them all. A test names its own number as
``max_examples=examples(200)``; tests without one get the profile's default, scaled
the same way (tests/conftest.py).
"""

from __future__ import annotations

import os

#: The fraction of each property test's examples that this run draws (1 unless set).
DEPTH = float(os.environ.get("RAYLAKE_PROPERTY_DEPTH", "1"))
if not 0 < DEPTH <= 1:
    raise ValueError(f"RAYLAKE_PROPERTY_DEPTH must be in (0, 1], got {DEPTH}")


def examples(count: int) -> int:
    """``count`` examples at this run's depth; never fewer than 5, so every test still
    draws its edge cases and a few more."""
    return count if DEPTH == 1 else max(5, round(count * DEPTH))
