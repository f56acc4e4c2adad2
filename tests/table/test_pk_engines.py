"""Merge engine semantics, spelled out by example, and the sequence-field model test."""

from __future__ import annotations

import math
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.table.pk.read import ReadPlan
from raylake.table.pk.schema import KIND, SEQ

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("v", pa.int64()),
        ("s", pa.string()),
        ("ts", pa.int64()),
    ]
)


def make(tmp_path: Path, **options: Any) -> raylake.Table:
    return raylake.create_table(
        str(tmp_path / uuid.uuid4().hex), SCHEMA, primary_key=["id"], buckets=2, options=options
    )


def rows(tbl: raylake.Table, **kwargs: Any) -> list[dict[str, Any]]:
    return sorted(tbl.to_arrow(**kwargs).to_pylist(), key=lambda r: r["id"])


def put(tbl: raylake.Table, *items: tuple[Any, ...], kinds: list[str] | None = None) -> None:
    data = pa.Table.from_pylist([dict(zip(SCHEMA.names, i)) for i in items], schema=SCHEMA)
    if kinds is not None:
        data = data.append_column(KIND, pa.array(kinds))
    tbl.write(data)


def test_deduplicate_last_occurrence_and_later_commit_win(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    put(tbl, (1, 10, "a", 0), (2, 20, "b", 0), (1, 11, "a2", 0))
    assert rows(tbl) == [
        {"id": 1, "v": 11, "s": "a2", "ts": 0},
        {"id": 2, "v": 20, "s": "b", "ts": 0},
    ]
    put(tbl, (2, None, None, 0))
    assert rows(tbl)[1] == {"id": 2, "v": None, "s": None, "ts": 0}


def test_first_row_keeps_the_first_row_until_deleted(tmp_path: Path) -> None:
    tbl = make(tmp_path, **{"merge-engine": "first-row"})
    put(tbl, (1, 10, "a", 0), (1, 11, "b", 0))
    put(tbl, (1, 12, "c", 0))
    assert rows(tbl) == [{"id": 1, "v": 10, "s": "a", "ts": 0}]
    tbl.delete([{"id": 1}])
    put(tbl, (1, 13, "d", 0))
    assert rows(tbl) == [{"id": 1, "v": 13, "s": "d", "ts": 0}]


def test_partial_update_fills_non_null_fields(tmp_path: Path) -> None:
    tbl = make(tmp_path, **{"merge-engine": "partial-update"})
    put(tbl, (1, 10, None, None))
    put(tbl, (1, None, "x", None), (1, None, None, 7))
    assert rows(tbl) == [{"id": 1, "v": 10, "s": "x", "ts": 7}]
    tbl.compact(full=True)
    put(tbl, (1, 11, None, None))
    assert rows(tbl) == [{"id": 1, "v": 11, "s": "x", "ts": 7}]


def test_aggregation_functions(tmp_path: Path) -> None:
    tbl = make(
        tmp_path,
        **{
            "merge-engine": "aggregation",
            "fields.v.aggregate-function": "sum",
            "fields.s.aggregate-function": "max",
            "fields.ts.aggregate-function": "first-non-null",
        },
    )
    put(tbl, (1, 1, "b", None), (1, 2, "a", 5))
    put(tbl, (1, None, "c", 6), (2, 7, None, None))
    assert rows(tbl) == [
        {"id": 1, "v": 3, "s": "c", "ts": 5},
        {"id": 2, "v": 7, "s": None, "ts": None},
    ]
    tbl.delete("id = 1")  # a delete resets the aggregate
    put(tbl, (1, 4, "a", 1))
    assert rows(tbl)[0] == {"id": 1, "v": 4, "s": "a", "ts": 1}


def test_sum_keeps_the_column_type(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("n", pa.int32())])
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        schema,
        primary_key=["id"],
        options={"merge-engine": "aggregation", "fields.n.aggregate-function": "sum"},
    )
    tbl.write(pa.table({"id": [1, 1], "n": [2, 3]}, schema=schema))
    result = tbl.to_arrow()
    assert result.schema == schema and result.to_pylist() == [{"id": 1, "n": 5}]


def test_a_decimal_sum_beyond_the_precision_is_null(tmp_path: Path) -> None:
    # Cast unchecked into decimal(5, 2), 1999.98 was an invalid value: reads returned it,
    # and a write or compaction that merged it failed in pyarrow (manifest statistics).
    dtype = pa.decimal128(5, 2)
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("d", dtype)])
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        schema,
        primary_key=["id"],
        options={
            "merge-engine": "aggregation",
            "fields.d.aggregate-function": "sum",
            "compaction.auto": "false",
        },
    )
    for values in (["999.99", "-500.00"], ["0.01", "-499.99"]):
        data = {"id": [1, 2], "d": pa.array([Decimal(v) for v in values], dtype)}
        tbl.write(pa.table(data, schema=schema))
    expected = [{"id": 1, "d": None}, {"id": 2, "d": Decimal("-999.99")}]
    merged = tbl.to_arrow()
    merged.validate(full=True)
    assert sorted(merged.to_pylist(), key=lambda r: r["id"]) == expected
    assert tbl.compact(full=True) is not None
    assert sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    # Within one write the buffer is merged before its statistics are taken.
    data = {"id": [3, 3], "d": pa.array([Decimal("999.99")] * 2, dtype)}
    tbl.write(pa.table(data, schema=schema))
    assert tbl.to_arrow(filter="id = 3").to_pylist() == [{"id": 3, "d": None}]


def java_order(value: float) -> tuple[int, float, float]:
    """Java's Double.compare as a sort key: NaN above every number, -0.0 below 0.0."""
    if math.isnan(value):
        return (1, 0.0, 0.0)
    return (0, value, math.copysign(1.0, value))


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.0, -1.0, math.inf, math.nan])),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([pa.float32(), pa.float64()]),
)
def test_float_min_and_max_order_as_java(
    tmp_path: Path, versions: list[tuple[int, float | None, bool]], dtype: pa.DataType
) -> None:
    """Arrow's min/max skipped NaN and took either zero: a max over 1.0 and NaN was 1.0,
    where Paimon (Double.compare) gives NaN; over -0.0 and 0.0 it gave -0.0. Merged by
    a read, across commits (a commit per version, or all in one write's buffer)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("lo", dtype), ("hi", dtype)])
    options = {
        "merge-engine": "aggregation",
        "fields.lo.aggregate-function": "min",
        "fields.hi.aggregate-function": "max",
    }
    tbl = raylake.create_table(
        str(tmp_path / uuid.uuid4().hex), schema, primary_key=["id"], options=options
    )
    batch: list[dict[str, Any]] = []
    for key, value, commit in versions:
        batch.append({"id": key, "lo": value, "hi": value})
        if commit:
            tbl.write(pa.Table.from_pylist(batch, schema=schema))
            batch = []
    if batch:
        tbl.write(pa.Table.from_pylist(batch, schema=schema))
    expected = {}
    for key in {k for k, _, _ in versions}:
        present = [v for k, v, _ in versions if k == key and v is not None]
        low = min(present, key=java_order) if present else None
        high = max(present, key=java_order) if present else None
        expected[key] = (low, high)
    got = {r["id"]: (r["lo"], r["hi"]) for r in tbl.to_arrow().to_pylist()}
    assert {k: tuple(map(java_key, v)) for k, v in got.items()} == {
        k: tuple(map(java_key, v)) for k, v in expected.items()
    }


def java_key(value: float | None) -> Any:
    return None if value is None else java_order(value)


def test_row_kinds_apply_a_changelog(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    put(tbl, (1, 1, "a", 0), (2, 2, "b", 0))
    put(
        tbl,
        (1, 1, "a", 0),
        (1, 5, "a", 0),
        (2, 2, "b", 0),
        (3, 3, "c", 0),
        kinds=["-U", "+U", "-D", "+I"],
    )
    assert [(r["id"], r["v"]) for r in rows(tbl)] == [(1, 5), (3, 3)]
    # int codes work too: 0 +I, 1 -U, 2 +U, 3 -D
    data = pa.table({"id": [3], "v": [3], "s": ["c"], "ts": [0], KIND: pa.array([3], pa.int8())})
    tbl.write(data)
    assert [r["id"] for r in rows(tbl)] == [1]


def test_value_filter_never_resurfaces_an_old_version(tmp_path: Path) -> None:
    tbl = make(tmp_path, **{"compaction.auto": "false"})
    put(tbl, (1, 1, "old", 0), (2, 1, "old", 0))
    put(tbl, (1, 2, "new", 0))
    tbl.delete([{"id": 2}])
    assert rows(tbl, filter="s = 'old'") == []
    assert rows(tbl, filter="v = 1") == []
    assert rows(tbl, filter="v = 2 and id = 1") == [{"id": 1, "v": 2, "s": "new", "ts": 0}]
    assert tbl.count(filter="s = 'old'") == 0


def test_projection_reads_projected_key_and_system_columns_only(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    scan = tbl.scan(columns=["v"], filter="s = 'x'")
    plan = ReadPlan.of(tbl.table_schema, scan.columns, scan.filter)
    assert plan.merge_columns == ("id", "v", "s", SEQ, KIND)
    assert plan.output == ("v",)
    assert plan.key_filter is None and plan.residual is not None
    key_plan = ReadPlan.of(tbl.table_schema, ["v"], tbl.scan(filter="id > 3").filter)
    assert key_plan.merge_columns == ("id", "v", SEQ, KIND)
    assert key_plan.key_filter is not None and key_plan.residual is None


def test_time_travel_reads_each_snapshot(tmp_path: Path) -> None:
    tbl = make(tmp_path)
    put(tbl, (1, 1, "a", 0))
    put(tbl, (1, 2, "b", 0))
    tbl.delete([{"id": 1}])
    tbl.compact(full=True)
    assert [r["v"] for r in rows(tbl, snapshot_id=1)] == [1]
    assert [r["v"] for r in rows(tbl, snapshot_id=2)] == [2]
    assert rows(tbl, snapshot_id=3) == [] == rows(tbl)


# -- sequence field -----------------------------------------------------------------------

Op = tuple[str, Any]
seq_rows = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 9), st.none() | st.integers(0, 4)), max_size=8
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), seq_rows),
        st.tuples(
            st.just("changelog"),
            st.lists(
                st.tuples(
                    st.integers(0, 5),
                    st.integers(0, 9),
                    st.none() | st.integers(0, 4),
                    st.sampled_from(["+I", "-U", "+U", "-D"]),
                ),
                max_size=6,
            ),
        ),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 5), max_size=3)),
        st.tuples(st.just("compact"), st.booleans()),
    ),
    max_size=10,
)


class SequenceModel:
    """Versions ordered by (sequence field, nulls first; then commit order); the last wins."""

    def __init__(self) -> None:
        self.winner: dict[int, tuple[tuple[Any, ...], str, dict[str, Any]]] = {}
        self.counter = 0

    def offer(self, row: dict[str, Any], kind: str) -> None:
        self.counter += 1
        if kind == "-U":
            return
        ts = row["ts"]
        order = ((0, 0) if ts is None else (1, ts), self.counter)
        current = self.winner.get(row["id"])
        if current is None or order > current[0]:
            self.winner[row["id"]] = (order, kind, row)

    def state(self) -> list[dict[str, Any]]:
        live = [w[2] for w in self.winner.values() if w[1] != "-D"]
        return sorted(live, key=lambda r: r["id"])


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=ops)
def test_sequence_field_matches_model(tmp_path: Path, operations: list[Op]) -> None:
    tbl = make(tmp_path, **{"sequence.field": "ts", "compaction.max-overlapping-files": 2})
    model = SequenceModel()
    for name, arg in operations:
        if name == "upsert":
            items = [{"id": i, "v": v, "s": None, "ts": ts} for i, v, ts in arg]
            for item in items:
                model.offer(item, "+I")
            tbl.write(pa.Table.from_pylist(items, schema=SCHEMA))
        elif name == "changelog":
            items = [{"id": i, "v": v, "s": None, "ts": ts} for i, v, ts, _ in arg]
            for item, (*_, kind) in zip(items, arg):
                model.offer(item, kind)
            data = pa.Table.from_pylist(items, schema=SCHEMA)
            tbl.write(data.append_column(KIND, pa.array([k for *_, k in arg], pa.string())))
        elif name == "delete":
            live = {r["id"]: r for r in model.state()}
            for key in sorted(set(arg)):
                if key in live:
                    model.offer(live[key], "-D")
            tbl.delete(pa.table({"id": pa.array(arg, pa.int64())}))
        else:
            tbl.compact(full=arg)
        assert rows(tbl) == model.state()


@pytest.mark.parametrize("engine", ["first-row", "partial-update", "aggregation"])
def test_sequence_field_needs_deduplicate(tmp_path: Path, engine: str) -> None:
    with pytest.raises(raylake.InvalidOptionError, match="only with merge-engine=deduplicate"):
        make(tmp_path, **{"sequence.field": "ts", "merge-engine": engine})


def test_overwrite_replaces_a_primary_key_table(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), *SCHEMA])
    tbl = raylake.create_table(
        str(tmp_path / "p"), schema, primary_key=["dt", "id"], partition_by=["dt"], buckets=2
    )
    first = {"dt": ["a", "a", "b"], "id": [1, 2, 1], "v": [1, 2, 3], "s": [None] * 3, "ts": [0] * 3}
    tbl.write(pa.table(first, schema=schema))
    tbl.write(
        pa.table({"dt": ["a"], "id": [3], "v": [9], "s": ["x"], "ts": [0]}, schema=schema),
        mode="overwrite",
        overwrite_filter="dt = 'a'",
    )
    assert sorted((r["dt"], r["id"], r["v"]) for r in tbl.to_arrow().to_pylist()) == [
        ("a", 3, 9),
        ("b", 1, 3),
    ]
    tbl.write(pa.table({"dt": ["b"], "id": [1], "v": [4], "s": [None], "ts": [0]}, schema=schema))
    tbl.write(
        pa.table({"dt": ["c"], "id": [1], "v": [5], "s": [None], "ts": [0]}, schema=schema),
        mode="overwrite",
    )
    assert [(r["dt"], r["v"]) for r in tbl.to_arrow().to_pylist()] == [("c", 5)]
