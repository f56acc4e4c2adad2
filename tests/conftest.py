"""Shared fixtures: a warehouse directory per test, one local Ray cluster per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
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
            # Always a cluster of its own: without an address, ray.init joins the newest
            # cluster started on this machine (another test session's, say), if any.
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
