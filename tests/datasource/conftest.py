"""Fixtures of the Ray Data tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def preserve_order() -> Iterator[None]:
    """Ray Data keeps the dataset's order: it decides which duplicate key wins an upsert,
    and a read's order is the table's only with it (docs/ray-data.md)."""
    import ray

    options = ray.data.DataContext.get_current().execution_options
    old = options.preserve_order
    options.preserve_order = True
    yield
    options.preserve_order = old
