"""Shared fixtures: a warehouse directory per test, one local Ray cluster per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Property tests draw the same examples on every run, so a red test suite is never the
# luck of the draw; search wider with `pytest --hypothesis-profile=explore`.
settings.register_profile("replayable", derandomize=True, database=None)
settings.register_profile("explore", max_examples=1000)
settings.load_profile("replayable")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A real local Ray cluster with 2 CPUs, started once for the whole test session."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(
            # A cluster of this session's own, even where another one on the machine
            # is the "current" one (ray.init() with no address would join that).
            address="local",
            num_cpus=2,
            include_dashboard=False,
            # Small object store: tests move little data, and several developers' test
            # sessions may share this 2-core machine.
            object_store_memory=1024 * 1024 * 1024,
            log_to_driver=False,
            configure_logging=False,
        )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()
