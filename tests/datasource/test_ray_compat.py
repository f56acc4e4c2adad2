"""The Ray Data internals raylake uses: a Ray upgrade that moves one fails here, loudly."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from ray.data.expressions import col

from raylake.datasource import _ray_compat


def test_internal_names_resolve() -> None:
    # Ray's Parquet source adds this all-null column to zero-column blocks and drops it
    # downstream; raylake must use the very same name or count() loses rows.
    assert isinstance(_ray_compat.BATCH_SIZE_STUB_COLUMN, str)
    assert _ray_compat.BATCH_SIZE_STUB_COLUMN
    assert _ray_compat.TaskContext.__name__ == "TaskContext"


def test_column_references_of_a_ray_expression() -> None:
    expr = (col("a") + col("b") > 1) & (col("c") == "x")
    assert _ray_compat.column_references(expr) == {"a", "b", "c"}
    assert _ray_compat.column_references(col("a") > 1) == {"a"}


def test_datasource_uses_only_the_compat_module_for_internals() -> None:
    from pathlib import Path

    import raylake.datasource as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        if path.name == "_ray_compat.py":
            continue
        assert "ray.data._internal" not in path.read_text(), path.name
