"""CI's extra legs draw a fraction of each property test's examples (tests/property_depth.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _examples_at(depth: str, count: int) -> int:
    code = f"import property_depth; print(property_depth.examples({count}))"
    env = {**os.environ, "RAYLAKE_PROPERTY_DEPTH": depth, "PYTHONPATH": str(TESTS)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def test_the_depth_scales_each_count_and_keeps_a_floor() -> None:
    assert _examples_at("1", 200) == 200
    assert _examples_at("0.25", 200) == 50
    assert _examples_at("0.25", 12) == 5


def test_a_depth_outside_zero_to_one_is_refused() -> None:
    code = "import property_depth"
    env = {**os.environ, "RAYLAKE_PROPERTY_DEPTH": "4", "PYTHONPATH": str(TESTS)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "RAYLAKE_PROPERTY_DEPTH must be in (0, 1], got 4.0" in out.stderr


def test_every_property_test_names_its_count_through_the_depth() -> None:
    """A literal ``max_examples=200`` would draw all 200 in the extra legs too."""
    literal = re.compile(r"max_examples\s*=\s*\d")
    found = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text().splitlines(), 1)
        # the explore profile (tests/conftest.py) is a deeper search on purpose
        if literal.search(line) and "explore" not in line
    ]
    assert not found, f"use max_examples=examples(N) from property_depth: {found}"
