"""A fixture that copies a Paimon fixture table into a temporary directory."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from paimon_util import FIXTURES


@pytest.fixture
def paimon_copy(tmp_path: Path) -> Any:
    """Copy a fixture table into a temporary directory (tests that change files)."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(FIXTURES / name / "table", target)
        return target

    return copy
