"""Paimon's ``sequence.field`` of several columns and ``sequence.field.sort-order``.

The order of versions is checked against a plain-Python model of Paimon's comparator
(``UserDefinedSeqComparator``: fields in the option's order, a null older than any
value in either direction, descending turning only the comparison of two values
around, FLOAT/DOUBLE as Java's ``Double.compare``), both directly (hypothesis) and
through whole reads of a fixture table given other sequence options.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paimon_spec import live_entries
from property_depth import examples

import raylake
from raylake.paimon.sequence import ORDER, with_order


def _java_double_key(x: float) -> tuple[int, float]:
    """Java's Double.compare as a sort key: NaN above +inf, -0.0 below 0.0."""
    if math.isnan(x):
        return (2, 0.0)
    if x == 0.0:
        return (1, 0.0) if math.copysign(1.0, x) > 0 else (0, 0.0)
    return (1, x) if x > 0 else (0, x)


def _compare_values(a: Any, b: Any, floating: bool) -> int:
    if floating:
        a, b = _java_double_key(a), _java_double_key(b)
    return (a > b) - (a < b)


def paimon_compare(r1: tuple[Any, ...], r2: tuple[Any, ...], floats: list[bool], asc: bool) -> int:
    """Paimon's comparison of two rows' sequence fields (0: a tie)."""
    for a, b, floating in zip(r1, r2, floats):
        if a is None and b is None:
            continue
        if a is None:
            return -1
        if b is None:
            return 1
        c = _compare_values(a, b, floating)
        if c:
            return c if asc else -c
    return 0


_FIELD_VALUES = {
    "int": (pa.int64(), st.none() | st.integers(-3, 3)),
    "string": (pa.string(), st.none() | st.sampled_from(["", "a", "ab", "b", "é"])),
    "double": (
        pa.float64(),
        st.none()
        | st.sampled_from([0.0, -0.0, 1.5, -1.5, math.inf, -math.inf, math.nan, 2.0**-1074]),
    ),
}


@st.composite
def _sections(draw: Any) -> tuple[pa.Table, list[str], bool]:
    kinds = draw(st.lists(st.sampled_from(sorted(_FIELD_VALUES)), min_size=1, max_size=3))
    n = draw(st.integers(1, 25))
    columns = {}
    for i, kind in enumerate(kinds):
        dtype, values = _FIELD_VALUES[kind]
        columns[f"s{i}"] = pa.array(draw(st.lists(values, min_size=n, max_size=n)), dtype)
    return pa.table(columns), list(columns), draw(st.booleans())


@settings(max_examples=examples(300), deadline=None)
@given(_sections())
def test_the_order_column_orders_rows_as_paimon_compares_them(
    section: tuple[pa.Table, list[str], bool],
) -> None:
    rows, fields, asc = section
    order = with_order(rows, fields, asc).column(ORDER).to_pylist()
    floats = [pa.types.is_floating(rows.schema.field(f).type) for f in fields]
    values = [tuple(rows.column(f)[i].as_py() for f in fields) for i in range(rows.num_rows)]
    for i in range(rows.num_rows):
        for j in range(rows.num_rows):
            want = paimon_compare(values[i], values[j], floats, asc)
            got = (order[i] > order[j]) - (order[i] < order[j])
            assert got == want, (values[i], values[j], asc)


def _set_options(table: Path, **options: str) -> None:
    """A new schema version with ``options`` added (as an ALTER TABLE SET would)."""
    path = table / "schema" / "schema-0"
    schema = json.loads(path.read_text())
    schema.update(id=1, options={**schema["options"], **options})
    (table / "schema" / "schema-1").write_text(json.dumps(schema))


def _model(table: Path, fields: list[str], asc: bool) -> dict[int, dict[str, Any]]:
    """Every stored version of every key; the greatest under Paimon's comparison of the
    sequence fields, then ``_SEQUENCE_NUMBER``, wins; a retract as the winner deletes."""
    rows = [
        r
        for e in live_entries(table)
        for r in pq.read_table(next(table.rglob(e["_FILE"]["_FILE_NAME"]))).to_pylist()
    ]
    floats = [f == "x" for f in fields]

    def compare(r1: dict[str, Any], r2: dict[str, Any]) -> int:
        c = paimon_compare(tuple(r1[f] for f in fields), tuple(r2[f] for f in fields), floats, asc)
        return c or (r1["_SEQUENCE_NUMBER"] > r2["_SEQUENCE_NUMBER"]) - (
            r1["_SEQUENCE_NUMBER"] < r2["_SEQUENCE_NUMBER"]
        )

    state: dict[int, dict[str, Any]] = {}
    for r in sorted(rows, key=functools.cmp_to_key(compare)):
        if r["_VALUE_KIND"] in (1, 3):
            state.pop(r["id"], None)
        else:
            state[r["id"]] = {k: r[k] for k in ("id", "name", "x", "op")}
    return state


@pytest.mark.parametrize(
    ("fields", "order"),
    [
        (["x"], "ascending"),
        (["x"], "descending"),
        (["name", "x"], "ascending"),
        (["op", "x"], "descending"),
        (["op", "name", "x"], "ascending"),
    ],
)
def test_reads_follow_the_sequence_fields(paimon_copy: Any, fields: list[str], order: str) -> None:
    """The fixture's upserts and deletes of each key, merged under other sequence
    options, read as the model merges them (whole reads and a key-filtered read)."""
    table = paimon_copy("pk_sequence_field")
    _set_options(table, **{"sequence.field": ", ".join(fields), "sequence.field.sort-order": order})
    model = _model(table, fields, order == "ascending")
    tbl = raylake.open_table(str(table))
    got = {r["id"]: r for r in tbl.to_arrow().to_pylist()}
    assert got == model
    some = {k: r for k, r in model.items() if k < 20}
    assert {r["id"]: r for r in tbl.to_arrow(filter="id < 20").to_pylist()} == some


def _applied(changes: pa.Table, key: list[str], columns: list[str]) -> dict[Any, Any]:
    """Change rows applied in order to an empty state, key by key."""
    state: dict[Any, Any] = {}
    for row in changes.to_pylist():
        k = tuple(row[c] for c in key)
        if row["_rl_kind"] in ("-U", "-D"):
            state.pop(k, None)
        else:
            state[k] = tuple(row[c] for c in columns)
    return state


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_changes_and_streams_keep_a_late_row_that_loses_by_its_sequence_field(fmt: str) -> None:
    """Java's snapshot 2 writes keys again with lower sequence.field values than snapshot
    1's: a read keeps the old versions, and so must the changes (the delta files alone
    gave the losing rows as the keys' new values)."""
    root = Path(__file__).parent / "java_fixtures" / f"{fmt}_pk_table_with_mor"
    tbl = raylake.open_table(str(root))
    key = list(tbl.table_schema.primary_key)
    latest = tbl.to_arrow()
    want = _applied(
        latest.append_column("_rl_kind", pa.array(["+I"] * len(latest))), key, latest.column_names
    )
    ids = [s.id for s in tbl.snapshots()]
    steps = pa.concat_tables(
        tbl.changes(a, b, include_row_kind=True).to_arrow() for a, b in zip([0, *ids], ids)
    )
    assert _applied(steps, key, latest.column_names) == want
    reader = tbl.stream(start=1, include_row_kind=True)
    plans = pa.concat_tables(p.to_arrow() for p in reader.plans(timeout=0))
    assert _applied(plans, key, latest.column_names) == want


def test_a_deletion_vector_tables_steps_keep_a_late_row_that_loses(tmp_path: Path) -> None:
    """With deletion vectors the steps merged the delta files alone, giving the losing
    rows of Java's snapshot 2 as the keys' new values; a stream's ends read level 0 as
    well, so the steps compare them, and reach the state a catch-up (and changes()) does."""
    import shutil

    table = tmp_path / "mor_dv"
    shutil.copytree(Path(__file__).parent / "java_fixtures" / "parquet_pk_table_with_mor", table)
    latest = max(int(p.name.split("-")[1]) for p in (table / "schema").glob("schema-*"))
    path = table / "schema" / f"schema-{latest}"
    schema = json.loads(path.read_text())
    schema["options"]["deletion-vectors.enabled"] = "true"
    path.write_text(json.dumps(schema))
    tbl = raylake.open_table(str(table))
    key, columns = list(tbl.table_schema.primary_key), tbl.table_schema.column_names
    whole = _applied(tbl.changes(0, include_row_kind=True).to_arrow(), key, columns)
    for catch_up_after in (None, 1):
        reader = tbl.stream(start="earliest", include_row_kind=True, catch_up_after=catch_up_after)
        plans = pa.concat_tables(p.to_arrow() for p in reader.plans(timeout=0))
        assert _applied(plans, key, columns) == whole
    assert len(whole) == 8 and whole[(0, 1, 0, 0)][columns.index("s1")] == "banana"
