"""A merge predicate selects the rows the same filter selects, NaN and nulls included:
``tbl.delete(f)`` and ``merge(...).when_matched_delete(predicate=f)`` take one set."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake

ROWS = pa.table({"k": [1, 2, 3, 4], "v": [float("nan"), 1.0, -1.0, None]})

PREDICATES = [
    "t.v < 0",
    "not (t.v < 0)",
    "t.v >= 0 or t.v < 0",
    "t.v != 1",
    "not (t.v = 1)",
    "t.v between -5 and 5",
    "t.v not between -5 and 5",
    "not (t.v between -5 and 5)",
    "t.v in (1.0, -1.0)",
    "t.v not in (1.0)",
    "t.v is null",
]


@pytest.mark.parametrize("predicate", PREDICATES)
def test_a_merge_predicate_selects_what_the_filter_selects(tmp_path: Path, predicate: str) -> None:
    """Was: pyarrow's NaN < 0 is false, so ``not (t.v < 0)`` deleted the NaN row in a
    merge, where the filter, for which NaN matches no ordering comparison, keeps it."""
    probe = raylake.create_table(str(tmp_path / "filter"), ROWS.schema)
    probe.write(ROWS)
    expected = set(probe.to_arrow(filter=predicate.replace("t.", ""))["k"].to_pylist())
    tbl = raylake.create_table(str(tmp_path / "merge"), ROWS.schema)
    tbl.write(ROWS)
    merge = tbl.merge(pa.table({"k": [1, 2, 3, 4]}), on="t.k = s.k")
    merge.when_matched_delete(predicate=predicate).execute()
    assert {1, 2, 3, 4} - set(tbl.to_arrow()["k"].to_pylist()) == expected
