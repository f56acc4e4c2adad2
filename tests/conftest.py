"""Shared fixtures: a warehouse directory per test, one local Ray cluster per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from property_depth import examples
from ray_leftovers import leftovers, ray_running, snapshot
from run_suite import unmarked_on_cluster

import raylake  # noqa: F401  before pyarrow: it sets pyarrow's pool (raylake/memory_pool.py)

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Property tests draw the same examples on every run, so a red test suite is never the
# luck of the draw; search wider with `pytest --hypothesis-profile=explore`. CI's extra
# legs draw fewer (tests/property_depth.py).
settings.register_profile("replayable", derandomize=True, database=None, max_examples=examples(100))
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


def _uses_ray(request: pytest.FixtureRequest) -> bool:
    return (
        "ray_cluster" in request.fixturenames
        or request.node.get_closest_marker("ray") is not None
        or request.node.get_closest_marker("spark") is not None
    )


@pytest.fixture(autouse=True)
def _no_ray_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """A Ray-using test fails (at its teardown) if it leaves an actor, a placement group
    or a CPU reservation on the session's cluster (tests/ray_leftovers.py)."""
    was_running, checked = ray_running(), _uses_ray(request)
    before = snapshot() if checked and was_running else None
    yield
    if ray_running() and (checked or not was_running):  # or Ray started in the test
        left = leftovers(before)
        if left is not None:
            pytest.fail(left, pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on the session's Ray cluster carries a mark saying so: `make test` runs the
    marked tests in a session of their own (tests/run_suite.py), and an unmarked one would
    start a second cluster in the other session, and run in `make test-fast`."""
    unmarked = unmarked_on_cluster(items)
    if unmarked:
        raise pytest.UsageError(
            "these tests use the ray_cluster fixture but are not marked ray, spark or "
            f"multinode: {', '.join(unmarked)}"
        )
