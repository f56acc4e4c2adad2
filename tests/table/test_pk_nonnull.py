"""Primary-key files store value columns without nulls as non-null (pk/write.py).

A merged read decodes every stored version of its value columns; a column stored
non-null has no definition levels to decode (issue 20). Files of one section then
differ in which columns they mark non-null (a null in one write, none in the next,
files written before this): every read, merge engine, compaction and the loaders
give back the table's own fields and the same rows as a model.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stored_reads import split_and_piece_reads

import raylake

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("x", pa.float32()),
        ("n", pa.int64()),
        ("s", pa.string()),
    ]
)
OPTIONS: dict[str, dict[str, str]] = {
    "deduplicate": {},
    "first-row": {"merge-engine": "first-row"},
    "sequence-field": {"sequence.field": "n"},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.n.aggregate-function": "sum"},
}


def stored_nullable(tbl: raylake.Table) -> list[dict[str, bool]]:
    """Per data file (in write order), which columns it stores nullable."""
    found = []
    root = Path(tbl.uri.removeprefix("file://"))
    for split in tbl.scan().plan():
        for f in split.files:
            meta = pq.ParquetFile(root / f.path).metadata
            schema = meta.schema.to_arrow_schema()
            found.append((f.min_sequence, {c: schema.field(c).nullable for c in SCHEMA.names}))
    return [n for _, n in sorted(found, key=lambda x: x[0])]


def rows(ids: np.ndarray, x: Any, n: Any, s: Any) -> pa.Table:
    return pa.table({"id": ids, "x": x, "n": n, "s": s}, schema=SCHEMA)


def model(engine: str, writes: list[pa.Table]) -> dict[int, tuple[Any, ...]]:
    state: dict[int, tuple[Any, ...]] = {}
    for w in writes:
        for r in w.to_pylist():
            new = (r["x"], r["n"], r["s"])
            old = state.get(r["id"])
            if old is None or engine == "deduplicate":
                state[r["id"]] = new
            elif engine == "sequence-field":
                if r["n"] is not None and (old[1] is None or r["n"] >= old[1]):
                    state[r["id"]] = new
            elif engine == "partial-update":
                state[r["id"]] = tuple(o if v is None else v for v, o in zip(new, old))
            elif engine == "aggregation":
                total = None if old[1] is None and new[1] is None else (old[1] or 0) + (new[1] or 0)
                x = old[0] if new[0] is None else new[0]
                s = old[2] if new[2] is None else new[2]
                state[r["id"]] = (x, total, s)
    return state


def by_id(pa_table: pa.Table) -> dict[int, tuple[Any, ...]]:
    return {r["id"]: (r["x"], r["n"], r["s"]) for r in pa_table.to_pylist()}


@pytest.mark.parametrize("engine", list(OPTIONS))
def test_files_that_mark_other_columns_non_null_merge_as_the_model(
    tmp_path: Path, engine: str
) -> None:
    options = {"compaction.auto": "false", "write.row-group-rows": "64", **OPTIONS[engine]}
    tbl = raylake.create_table(
        str(tmp_path / uuid.uuid4().hex), SCHEMA, primary_key=["id"], buckets=1, options=options
    )
    rng = np.random.default_rng(3)
    n = 400
    ids = np.arange(n)
    # 1: no nulls; 2: a null in x after its first row group (the file rolls there);
    # 3: nulls in every column but the key from the start.
    first = rows(ids, rng.random(n, dtype=np.float32), ids, ["a"] * n)
    picked = np.sort(rng.choice(n, 200, replace=False))
    x = pa.array([None if i == 150 else float(i) for i in range(200)], pa.float32())
    second = rows(picked, x, np.arange(200) + 1000, ["b"] * 200)
    picked = np.sort(rng.choice(n, 100, replace=False))
    third = rows(
        picked,
        pa.array([None if i % 3 else 0.5 for i in range(100)], pa.float32()),
        pa.array([None if i % 2 else 5000 + i for i in range(100)], pa.int64()),
        pa.array([None if i % 5 else "c" for i in range(100)], pa.string()),
    )
    for w in (first, second, third):
        tbl.write(w)
    nullable = stored_nullable(tbl)
    assert nullable[0] == {"id": False, "x": False, "n": False, "s": False}
    assert {"id": False, "x": True, "n": False, "s": False} in nullable  # rolled at the null
    assert nullable[-1] == {"id": False, "x": True, "n": True, "s": True}
    expected = model(engine, [first, second, third])

    whole = tbl.to_arrow()
    assert whole.schema == SCHEMA
    assert by_id(whole) == expected
    for read in split_and_piece_reads(tbl, SCHEMA):
        assert by_id(read) == expected
    assert by_id(tbl.to_arrow(filter="x > 0.25")) == {
        k: v for k, v in expected.items() if v[0] is not None and v[0] > 0.25
    }
    tbl.compact(full=True)
    assert tbl.to_arrow().schema == SCHEMA
    assert by_id(tbl.to_arrow()) == expected
