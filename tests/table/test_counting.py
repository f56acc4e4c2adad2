"""Exact row counts in one place (raylake/table/counting.py): ``TableScan.count``, the
training loaders' piece counts and the Ray datasource's task metadata all ask it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

import raylake
from raylake.table.counting import count_rows, exact_counts, metadata_counts, metadata_total
from raylake.train.source import LakeSource

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string(), nullable=False)]
)


def rows(start: int, count: int, dt: str) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({"id": ids, "dt": [dt] * count}, schema=SCHEMA)


def test_metadata_decides_unfiltered_append_counts_without_reading_data(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"])
    tbl.write(rows(0, 300, "a"))
    tbl.write(rows(300, 200, "b"))
    scan = tbl.scan()
    splits = scan.with_split_size(1).plan()
    data_files = list((tmp_path / "t" / "data").rglob("*.parquet"))
    assert data_files
    for data_file in data_files:
        data_file.unlink()  # nothing may read the rows themselves
    context = scan.read_context()
    assert scan.count() == 500
    assert sum(exact_counts(context, splits)) == 500
    assert metadata_total(context, splits) == 500


def test_filtered_and_merged_counts_agree_with_the_rows_read(tmp_path: Path) -> None:
    tbl = raylake.create_table(
        str(tmp_path / "pk"), SCHEMA, primary_key=["dt", "id"], partition_by=["dt"], buckets=2
    )
    tbl.write(rows(0, 400, "a"))
    tbl.write(rows(200, 400, "a"))  # overlapping upserts: the merge decides the count
    tbl.write(rows(0, 100, "b"))
    for flt in (None, "id >= 150"):
        scan = tbl.scan(filter=flt)
        splits = scan.with_split_size(1).plan()
        context = scan.read_context()
        expected = scan.to_arrow().num_rows
        assert count_rows(context, splits) == expected == scan.count()
        assert sum(exact_counts(context, splits)) == expected
        assert LakeSource.open(tbl, columns=None, filter=flt).total == expected
        assert metadata_total(context, splits) is None  # a merge or a filter: read
    filtered = tbl.scan(filter="id >= 150")
    assert metadata_counts(filtered.read_context(), filtered.plan()) == [None] * len(
        filtered.plan()
    )


def test_only_the_counting_module_asks_a_kind_for_exact_counts() -> None:
    """Scans, loaders and the datasource count through raylake/table/counting.py; only
    the kinds themselves (which answer) and that module call ``exact_row_count``."""
    import ast

    package = Path(raylake.__file__).parent
    answering = {"table/kind.py", "table/append.py", "table/pk/kind.py", "paimon/kind.py"}
    callers = set()
    for path in package.rglob("*.py"):
        rel = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "exact_row_count"
                and rel not in answering
            ):
                callers.add(rel)
    assert callers == {"table/counting.py"}
