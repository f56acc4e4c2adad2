"""raylake.spark.merge: a Spark DataFrame merged into a primary-key table, one commit,
equal to Table.merge of the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
import raylake.spark as rs
from raylake.errors import UnsupportedOperationError

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), ("n", pa.int64()), ("s", pa.string())]
)


def _clauses(merger: Any) -> Any:
    return (
        merger.when_matched_delete(predicate="s.s = 'del'")
        .when_matched_update({"n": "t.n + s.n", "s": "s.s"}, predicate="s.n > 0")
        .when_not_matched_insert(predicate="s.n is not null")
    )


def test_spark_merge_equals_the_local_merge(spark: Any, warehouse: Path) -> None:
    target = pa.table(
        {"k": range(200), "n": [i % 7 for i in range(200)], "s": ["a"] * 200}, schema=SCHEMA
    )
    rows = [
        (k, -1 if i % 5 == 0 else i, "del" if i % 4 == 0 else "u")
        for i, k in enumerate(range(0, 300, 3))
    ]
    source = pa.table(
        {"k": [r[0] for r in rows], "n": [r[1] for r in rows], "s": [r[2] for r in rows]}
    )
    tables = []
    for name in ("local", "spark"):
        tbl = raylake.create_table(str(warehouse / name), SCHEMA, primary_key=["k"], buckets=4)
        tbl.write(target)
        tables.append(tbl)
    local = _clauses(tables[0].merge(source, on="k")).execute()
    df = spark.createDataFrame(rows, "k long, n long, s string").repartition(3)
    remote = _clauses(rs.merge(df, tables[1].uri, on="k")).execute()
    counts = (remote.inserted, remote.updated, remote.deleted)
    assert counts == (local.inserted, local.updated, local.deleted) and all(counts)
    assert [len(t.snapshots()) for t in tables] == [2, 2]
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")
    data = warehouse / "spark" / "data"
    committed = {p for s in tables[1].scan().plan() for p in s.paths}
    on_disk = {str(p.relative_to(warehouse / "spark")) for p in data.rglob("*.parquet")}
    assert on_disk == committed  # no file of a discarded attempt is left


def test_spark_merge_refusals_write_nothing(spark: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA, primary_key=["k"], buckets=2)
    tbl.write(pa.table({"k": [1, 2], "n": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))
    before = set((warehouse / "t" / "data").rglob("*"))
    twice = spark.createDataFrame([(2, 1, "x"), (2, 1, "y")], "k long, n long, s string")
    with pytest.raises(Exception, match=r"matched 2 source rows"):
        rs.merge(twice, tbl.uri, on="k").when_matched_update().execute()
    with pytest.raises(UnsupportedOperationError, match="by_source"):
        rs.merge(twice, tbl.uri, on="k").when_not_matched_by_source_delete().execute()
    assert len(tbl.snapshots()) == 1
    assert set((warehouse / "t" / "data").rglob("*")) == before
