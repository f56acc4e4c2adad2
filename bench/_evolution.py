"""bench/scan.py's schema-evolution case (issue 18): 64 files under 5 schema versions
against the same rows written under one schema.

The evolved table is written day by day, 16 commits a day, and its schema changes
every 13 commits: rename ``g15`` to ``f15``, widen ``label`` from int16 to int32, add
``extra`` (float64), drop ``tag``. The baseline table has the final schema and holds
exactly the rows the evolved table reads (``extra`` null and ``f15`` under its new
name in the older files). Both are read with ``Table.to_arrow``; runs alternate, and
the median of each is reported with the ratio evolved / one schema.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from _synthetic import DATES, batches_for_date, rate

import raylake
from raylake.table import clear_caches

COMMITS_PER_DAY = 16
CHANGE_EVERY = 13  # 64 commits: 5 schema versions


def _first_form(batch: pa.Table) -> pa.Table:
    """A batch as the first schema version writes it: ``g15`` and an int16 ``label``."""
    names = ["g15" if n == "f15" else n for n in batch.column_names]
    batch = batch.rename_columns(names)
    return batch.set_column(names.index("label"), "label", batch.column("label").cast(pa.int16()))


def _change(tbl: raylake.Table, version: int) -> None:
    with tbl.update_schema() as u:
        if version == 1:
            u.rename_column("g15", "f15")
        elif version == 2:
            u.update_column("label", pa.int32())
        elif version == 3:
            u.add_column("extra", pa.float64())
        else:
            u.delete_column("tag")


def _as_written(batch: pa.Table, version: int) -> pa.Table:
    """The batch in the columns of schema ``version``."""
    batch = _first_form(batch)
    if version >= 1:
        batch = batch.rename_columns(["f15" if n == "g15" else n for n in batch.column_names])
    if version >= 2:
        i = batch.column_names.index("label")
        batch = batch.set_column(i, "label", batch.column("label").cast(pa.int32()))
    if version >= 3:
        batch = batch.append_column("extra", pc.cast(batch.column("f0"), pa.float64()))
    if version >= 4:
        batch = batch.drop_columns(["tag"])
    return batch


def _final(batch: pa.Table, version: int, schema: pa.Schema) -> pa.Table:
    """The batch as the evolved table reads it under its final schema."""
    written = _as_written(batch, version)
    written = written.rename_columns(["f15" if n == "g15" else n for n in written.column_names])
    columns = [
        written.column(f.name).cast(f.type)
        if f.name in written.column_names
        else pa.nulls(written.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def build(root: Path, rows: int) -> tuple[raylake.Table, raylake.Table]:
    if root.exists():
        shutil.rmtree(root)
    per_day = rows // len(DATES)
    chunk = per_day // COMMITS_PER_DAY
    batches = [b for day in range(len(DATES)) for b in batches_for_date(day, per_day, chunk)]
    evolved = raylake.create_table(
        str(root / "evolved"), _first_form(batches[0]).schema, partition_by=["dt"]
    )
    version = 0
    written: list[tuple[pa.Table, int]] = []
    for i, batch in enumerate(batches):
        if i and i % CHANGE_EVERY == 0:
            version += 1
            _change(evolved, version)
        evolved.write(_as_written(batch, version))
        written.append((batch, version))
    final = evolved.schema
    single = raylake.create_table(str(root / "single"), final, partition_by=["dt"])
    for batch, v in written:
        single.write(_final(batch, v, final))
    files = sum(len(s.files) for s in evolved.scan().plan())
    print(f"\n### schema evolution: {rows:,} rows, {files} files, {version + 1} schema versions")
    return evolved, single


def _median_times(
    evolved: Callable[[], object], single: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """Median wall times of two functions run alternately (the same machine state)."""
    t_e, t_s = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        evolved()
        t_e.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        single()
        t_s.append(time.perf_counter() - t0)
    return statistics.median(t_e), statistics.median(t_s)


def run_evolution_cases(root: Path, rows: int, repeat: int = 9) -> None:
    evolved, single = build(root / "evolution", rows)
    assert evolved.to_arrow().sort_by("id").equals(single.to_arrow().sort_by("id"))
    per_day = rows // len(DATES)
    lo = per_day + per_day // 2
    cases: list[tuple[str, dict[str, object]]] = [
        ("full scan", {}),
        ("projection (renamed, widened)", {"columns": ["id", "f15", "label", "extra"]}),
        ("filter on a renamed column", {"filter": f"f15 > 0.99 and id >= {lo}"}),
        ("filter extra is null", {"filter": "extra is null and label = 1"}),
    ]
    print(f"{'case':<32} {'5 versions':>18} {'one schema':>18} {'ratio':>7}")
    for name, kwargs in cases:
        t_e, t_s = _median_times(
            lambda kw=kwargs: evolved.to_arrow(**kw),
            lambda kw=kwargs: single.to_arrow(**kw),
            repeat,
        )
        print(f"{name:<32} {rate(rows, t_e):>18} {rate(rows, t_s):>18} {t_e / t_s:>6.2f}x")
    # Planning: manifests only. Cold reads every manifest again; warm reuses them.
    for label, cold in (("plan, cold", True), ("plan, warm", False)):

        def plan(tbl: raylake.Table, cold: bool = cold) -> None:
            if cold:
                clear_caches()
            tbl.scan(filter="f15 > 0.5").plan()

        t_e, t_s = _median_times(lambda: plan(evolved), lambda: plan(single), repeat)
        print(f"{label:<32} {t_e * 1000:>15.2f} ms {t_s * 1000:>15.2f} ms {t_e / t_s:>6.2f}x")
