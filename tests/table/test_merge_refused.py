"""Table.merge refusals: each names what is wrong (the column, the clause, the side it
belongs to), comes before any data file is read where the input alone is at fault, and
leaves the table as it was: no snapshot, no file, no column (schema_mode="merge")."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import (
    FilterError,
    InvalidArgumentError,
    MergeCardinalityError,
    MergeError,
    SchemaMismatchError,
    UnknownColumnError,
    UnsupportedOperationError,
)
from raylake.table import Table
from raylake.table.merge import execute

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int64())])
Build = Callable[[Any], Any]


def make(tmp_path: Path, kind: str, **kw: Any) -> Table:
    pk = {"primary_key": ["id"], "buckets": 2} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / kind), SCHEMA, **pk, **kw)
    tbl.write(pa.table({"id": [1, 2], "n": [0, 0]}, schema=SCHEMA))
    return tbl


def files_of(tbl: Table) -> list[str]:
    """Every file of the table: snapshots, manifests, schemas and data."""
    root = Path(tbl.uri.removeprefix("file://"))
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture(params=["append", "pk"])
def kind(request: Any) -> str:
    return str(request.param)


@pytest.fixture
def no_reads(monkeypatch: Any) -> None:
    """The merge must be refused before it reads (or writes) anything."""

    def refuse(*args: Any) -> Any:
        raise AssertionError("the merge started reading data")

    monkeypatch.setattr(execute, "merge_once", refuse)


def refused(tbl: Table, run: Callable[[], Any], error: type, match: str) -> None:
    """``run`` raises ``error``; the table's files and schema are as they were."""
    before, schema = files_of(tbl), tbl.schema
    with pytest.raises(error, match=match):
        run()
    assert files_of(tbl) == before
    assert raylake.open_table(tbl.uri).schema == schema == tbl.schema


# -- schema_mode="merge": a refused merge adds no column ---------------------------------

SOURCE = pa.table({"id": [2, 3], "n": [1, 2], "extra": ["x", "y"]})


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda m: m.when_matched_update({"nope": "s.n"}), UnknownColumnError, "'nope'"),
        (lambda m: m, MergeError, "at least one clause"),
        (lambda m: m.when_matched_delete(predicate="s.extra"), Exception, "boolean"),
    ],
)
def test_a_merge_refused_by_its_clauses_adds_no_column(
    tmp_path: Path, kind: str, no_reads: None, build: Build, error: type, match: str
) -> None:
    tbl = make(tmp_path, kind)
    merge = build(tbl.merge(SOURCE, on="id", schema_mode="merge"))
    refused(tbl, merge.execute, error, match)


def test_a_merge_refused_for_its_engine_adds_no_column(tmp_path: Path, no_reads: None) -> None:
    tbl = make(tmp_path, "pk", options={"merge-engine": "partial-update"})
    merge = tbl.merge(SOURCE, on="id", schema_mode="merge").when_matched_update()
    refused(tbl, merge.execute, UnsupportedOperationError, "partial-update")


def test_a_merge_refused_for_its_data_adds_no_column(tmp_path: Path, kind: str) -> None:
    tbl = make(tmp_path, kind)
    source = pa.table({"id": [2, 2], "n": [1, 2], "extra": ["x", "y"]})
    merge = tbl.merge(source, on="id", schema_mode="merge").when_matched_update()
    refused(tbl, merge.execute, MergeCardinalityError, r"\{'id': 2\} matched 2")
    # A value that does not fit its column shows only once computed.
    merge = tbl.merge(SOURCE, on="id", schema_mode="merge")
    refused(tbl, merge.when_matched_update({"n": "s.extra"}).execute, SchemaMismatchError, "'n'")
    # The same merge, once it can apply, adds the column with its data, in one go.
    merge = tbl.merge(SOURCE, on="id", schema_mode="merge").when_matched_update()
    result = merge.when_not_matched_insert().execute()
    assert tbl.schema.names == ["id", "n", "extra"]
    assert result.snapshot_id == 2
    got = tbl.to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["n"], r["extra"]) for r in got] == [(1, 0, None), (2, 1, "x"), (3, 2, "y")]


def test_a_merge_that_changes_nothing_adds_no_column(tmp_path: Path, kind: str) -> None:
    tbl = make(tmp_path, kind)
    before = files_of(tbl)
    merge = tbl.merge(SOURCE, on="id", schema_mode="merge")
    result = merge.when_matched_update(predicate="s.n > 5").execute()
    assert (result.updated, result.snapshot_id) == (0, 1)
    assert files_of(tbl) == before and tbl.schema.names == ["id", "n"]


def test_a_retried_merge_adds_its_columns_once(tmp_path: Path, kind: str, monkeypatch: Any) -> None:
    """The first attempt commits the new column, then loses the race for its snapshot;
    the second finds the column there and commits only its data."""
    from raylake.table.merge import commit, primary_key

    tbl = make(tmp_path, kind)
    real = commit.commit_planned_schema
    calls: list[int] = []

    def schema_then_other_writer(file_io: Any, ts: Any) -> None:
        real(file_io, ts)
        calls.append(1)
        if len(calls) == 1:
            other = raylake.open_table(tbl.uri)
            other.write(pa.table({"id": [9], "n": [9]}), schema_mode="merge")

    monkeypatch.setattr(commit, "commit_planned_schema", schema_then_other_writer)
    if kind == "append":  # an append elsewhere conflicts with no append merge: remove one
        monkeypatch.setattr(execute, "check_files_kept", _always_conflict(1))
    else:
        monkeypatch.setattr(primary_key, "_check_buckets_unchanged", _always_conflict(1))
    merge = tbl.merge(SOURCE, on="id", schema_mode="merge").when_matched_update()
    result = merge.when_not_matched_insert().execute()
    assert result.attempts == 2
    assert raylake.open_table(tbl.uri).table_schema.schema_id == 1
    got = tbl.to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["extra"]) for r in got] == [(1, None), (2, "x"), (3, "y"), (9, None)]


def _always_conflict(times: int) -> Callable[..., None]:
    from raylake.errors import CommitConflictError

    calls: list[int] = []

    def check(*args: Any) -> None:
        calls.append(1)
        if len(calls) <= times:
            raise CommitConflictError("a concurrent commit", expected=0, actual=0)

    return check


# -- refusals by name, before any work ----------------------------------------------------


@pytest.mark.parametrize(
    ("clause", "values"),
    [
        ("when_matched_update", {"n": "s.n", "t.n": "s.n + 100"}),
        ("when_matched_update", {"n": 1, "t.n": 2}),
        ("when_not_matched_insert", {"id": "s.id", "t.id": "s.n"}),
        ("when_not_matched_by_source_update", {"t.n": 1, "n": 2}),
    ],
)
def test_a_column_set_twice_in_one_clause_is_refused(
    tmp_path: Path, clause: str, values: dict[str, Any]
) -> None:
    tbl = make(tmp_path, "append")
    merge = tbl.merge(pa.table({"id": [1], "n": [5]}), on="id")
    column = next(iter(values)).removeprefix("t.")
    refused(
        tbl,
        lambda: getattr(merge, clause)(values),
        MergeError,
        rf"{clause} sets column '{column}' twice",
    )


@pytest.mark.parametrize(
    ("source", "on", "build", "match"),
    [
        (
            {"key": [1], "n": [5]},
            "id",
            lambda m: m.when_matched_update(),
            r"unknown column 'id' in on='id'; the source has columns \['key', 'n'\]",
        ),
        (
            {"id": [1]},
            "id",
            lambda m: m.when_matched_delete(predicate="s.n = 0"),
            r"unknown column 's\.n' in when_matched_delete; the source has columns \['id'\]",
        ),
        (
            {"id": [1]},
            "t.id = s.id",
            lambda m: m.when_matched_delete(predicate="t.x = 0"),
            r"unknown column 't\.x' in when_matched_delete; the target has columns \['id', 'n'\]",
        ),
        (
            {"id": [1]},
            "t.id = s.id and s.x > 0",
            lambda m: m.when_matched_delete(),
            r"unknown column 's\.x' in on='t\.id = s\.id and s\.x > 0'; the source has",
        ),
        (
            {"id": [1]},
            "t.key = s.id",
            lambda m: m.when_matched_delete(),
            r"unknown column 'key' in on='t\.key = s\.id'; the target has columns",
        ),
        (
            {"id": [1]},
            "id",
            lambda m: m.when_not_matched_insert({"x": "s.id"}),
            r"unknown column 'x' in when_not_matched_insert; the target has columns",
        ),
        (
            {},
            "id",
            lambda m: m.when_not_matched_by_source_delete(),
            r"unknown column 'id' in on='id'; the source has columns \[\]",
        ),
    ],
)
def test_an_unknown_column_names_its_side_and_clause(
    tmp_path: Path, no_reads: None, source: dict[str, Any], on: str, build: Build, match: str
) -> None:
    tbl = make(tmp_path, "append")
    with pytest.raises(UnknownColumnError, match=match) as caught:
        build(tbl.merge(pa.table(source), on=on)).execute()
    assert caught.value.owner in ("the source", "the target") and caught.value.where


@pytest.mark.parametrize(
    ("column", "dtype", "value"),
    [
        ("l", pa.list_(pa.int64()), [1]),
        ("st", pa.struct([("a", pa.int64())]), {"a": 1}),
        ("m", pa.map_(pa.string(), pa.int64()), [("k", 1)]),
    ],
)
def test_a_nested_join_key_is_refused_by_name(
    tmp_path: Path, no_reads: None, column: str, dtype: pa.DataType, value: Any
) -> None:
    schema = pa.schema([("id", pa.int64()), (column, dtype)])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"id": [1], column: [value]}, schema=schema))
    merge = tbl.merge(tbl.to_arrow(), on=column).when_matched_update({"id": "s.id"})
    refused(tbl, merge.execute, MergeError, rf"column '{column}' has nested type")


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda m: m.when_matched_update({"n": None}), "when_matched_update sets non-nullable"),
        (lambda m: m.when_matched_update({"n": "null"}), "sets non-nullable column 'n' to null"),
        (lambda m: m.when_not_matched_by_source_update({"n": "null"}), "column 'n' to null"),
        (lambda m: m.when_not_matched_insert({"id": "s.id"}), r"no value for .* \['n'\]"),
        (lambda m: m.when_not_matched_insert({"id": "s.id", "n": None}), "'n' to null"),
    ],
)
def test_a_null_that_a_clause_gives_a_non_nullable_column_is_refused_before_any_work(
    tmp_path: Path, kind: str, no_reads: None, build: Build, match: str
) -> None:
    """A null literal, or a column an insert names no value for, is null in every row the
    clause takes: known from the clause, like a literal of another type (was: refused
    only on the rows, and a merge whose clause took no row went through)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("n", pa.int64(), nullable=False)])  # fmt: skip
    pk = {"primary_key": ["id"]} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / kind), schema, **pk)
    tbl.write(pa.table({"id": [1, 2], "n": [0, 0]}, schema=schema))
    merge = build(tbl.merge(pa.table({"id": [5], "n": [1]}), on="id"))
    refused(tbl, merge.execute, SchemaMismatchError, match)


@pytest.mark.parametrize(
    ("values", "column"),
    [
        ({"n": "s.label"}, "n"),  # '12' parsed into an int
        ({"label": "s.n"}, "label"),  # 5 formatted as '5'
        ({"label": "coalesce(t.n, s.n)"}, "label"),
    ],
)
def test_a_value_of_another_kind_is_refused_before_any_work(
    tmp_path: Path, kind: str, no_reads: None, values: dict[str, str], column: str
) -> None:
    """By the rules of a write: a string column does not parse into an int column, nor a
    number format into a string one (was: cast, so the merge went through or failed
    by the rows' values, in a Ray or Spark merge's tasks)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int64()),
                        ("label", pa.string())])  # fmt: skip
    pk = {"primary_key": ["id"]} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / kind), schema, **pk)
    tbl.write(pa.table({"id": [1], "n": [0], "label": ["a"]}, schema=schema))
    source = pa.table({"id": [1], "n": [5], "label": ["12"]})
    merge = tbl.merge(source, on="id").when_matched_update(values)
    refused(tbl, merge.execute, SchemaMismatchError, rf"sets column '{column}' of type")


@pytest.mark.parametrize(
    ("on", "match"),
    [
        ("t.id = s.key and t.small = s.key", "t.small has type int32 but s.key has type int64"),
        ("t.small = s.key and t.id = s.key", "t.id has type int64 but s.key has type int32"),
    ],
)
def test_a_source_key_joining_target_keys_of_two_types_is_refused_before_any_work(
    tmp_path: Path, no_reads: None, on: str, match: str
) -> None:
    """A source column the target lacks is cast to the type of the first target key it
    joins: a second key of another type failed the hash join with Arrow's bare
    'Incompatible data types for corresponding join field keys', after the reads."""
    schema = pa.schema([("id", pa.int64()), ("small", pa.int32())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"id": [1], "small": pa.array([1], pa.int32())}))
    merge = tbl.merge(pa.table({"key": [1]}), on=on).when_matched_delete()
    refused(tbl, merge.execute, SchemaMismatchError, match)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda m: m.when_matched_update("s.n"), "updates must be a non-empty dict"),
        (lambda m: m.when_matched_update({}), "updates must be a non-empty dict"),
        (lambda m: m.when_not_matched_insert(["s.n"]), "values must be a non-empty dict"),
        (lambda m: m.when_not_matched_by_source_update("t.n"), "updates must be a non-empty"),
        (lambda m: m.when_matched_delete(predicate=5), "predicate must be an expression string"),
    ],
)
def test_a_clause_argument_of_the_wrong_kind_is_an_argument_error(
    tmp_path: Path, build: Build, message: str
) -> None:
    """A merge's other argument mistakes are MergeArgumentError (an InvalidArgumentError
    and a MergeError); these raised a MergeError or a FilterError alone."""
    tbl = make(tmp_path, "append")
    merger = tbl.merge(pa.table({"id": [1], "n": [5]}), on="id")
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        build(merger)
    assert isinstance(caught.value, MergeError)


@pytest.mark.parametrize("assign", ["s.x", "t.f * 1e39"])
def test_an_update_beyond_a_float32_columns_range_is_refused(
    tmp_path: Path, kind: str, assign: str
) -> None:
    """As a write refuses it, and an insert: a finite value that the column's type would
    make infinite (was: an update wrote inf)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("f", pa.float32())])
    pk = {"primary_key": ["id"], "buckets": 2} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / kind), schema, **pk)
    tbl.write(pa.table({"id": [1, 2], "f": [1.5, 2.5]}, schema=schema))
    source = pa.table({"id": [2], "x": [1e39]})
    merge = tbl.merge(source, on="id").when_matched_update({"f": assign})
    refused(tbl, merge.execute, SchemaMismatchError, "'f'.*1 value.*would become infinite")
    assert tbl.to_arrow().sort_by("id").column("f").to_pylist() == [1.5, 2.5]


@pytest.mark.parametrize("assign", ["s.f", "1.239", "t.d + 0.001", 1.23456])
def test_a_float_with_more_digits_than_a_decimal_columns_scale_is_refused(
    tmp_path: Path, kind: str, assign: Any
) -> None:
    """As a decimal source with those digits is refused (was: Arrow's safe cast rounded
    1.239 into decimal(10, 2) as 1.24 and the update wrote it)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("d", pa.decimal128(10, 2))])
    pk = {"primary_key": ["id"], "buckets": 2} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / kind), schema, **pk)
    tbl.write(pa.table({"id": [1, 2], "d": [Decimal("0.50"), Decimal("1.00")]}, schema=schema))
    merge = tbl.merge(pa.table({"id": [2], "f": [1.239]}), on="id").when_matched_update(
        {"d": assign}
    )
    refused(tbl, merge.execute, SchemaMismatchError, "'d'.*a value has more digits than its scale")


def test_a_float_a_decimal_holds_is_assigned_exactly(tmp_path: Path, kind: str) -> None:
    """Floats whose shortest text fits the scale go in, among them those Arrow's own
    decimal-to-float cast reads back one unit off (5091.15)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("d", pa.decimal128(10, 2))])
    pk = {"primary_key": ["id"], "buckets": 2} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / kind), schema, **pk)
    tbl.write(pa.table({"id": [1, 2], "d": [Decimal("0.50"), Decimal("1.00")]}, schema=schema))
    source = pa.table({"id": [1, 2], "f": [5091.15, 0.1]})
    tbl.merge(source, on="id").when_matched_update({"d": "s.f"}).execute()
    got = tbl.to_arrow().sort_by("id").column("d").to_pylist()
    assert got == [Decimal("5091.15"), Decimal("0.10")]


def test_a_float_takes_its_shortest_digits_at_a_wide_scale(tmp_path: Path) -> None:
    """0.1 into decimal(38, 20) is 0.1, as Spark's cast stores it (was: Arrow's cast
    stored the binary float's 0.10000000000000000555)."""
    schema = pa.schema([("id", pa.int64()), ("d", pa.decimal128(38, 20))])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"id": [1, 2]}).append_column("d", pa.nulls(2, pa.decimal128(38, 20))))
    merge = tbl.merge(pa.table({"id": [1, 2], "f": [0.1, -2.5e-7]}), on="id")
    merge.when_matched_update({"d": "s.f"}).execute()
    got = tbl.to_arrow().sort_by("id").column("d").to_pylist()
    assert got == [Decimal("0.1"), Decimal("-2.5e-7")]
    assert str(got[0]) == "0.10000000000000000000"


def test_a_source_with_a_duplicate_column_is_refused(tmp_path: Path, kind: str) -> None:
    """As a write refuses it (was: pyarrow's KeyError 'Field "n" exists 2 times')."""
    tbl = make(tmp_path, kind)
    source = pa.Table.from_arrays([pa.array([1]), pa.array([5]), pa.array([6])], ["id", "n", "n"])
    refused(tbl, lambda: tbl.merge(source, on="id"), SchemaMismatchError, r"duplicate.*\['n'\]")


def test_an_integer_literal_beyond_64_bits_is_a_decimal(tmp_path: Path, kind: str) -> None:
    """As in SQL: refused naming the column where it does not fit (was: a bare
    OverflowError from pyarrow, "Python int too large to convert"), assigned where it
    does, and beyond any decimal type a FilterError naming the literal."""
    tbl = make(tmp_path, kind)
    merge = tbl.merge(pa.table({"id": [1]}), on="id").when_matched_update({"n": 2**64})
    refused(tbl, merge.execute, SchemaMismatchError, "'n' has type decimal128.*does not fit int64")
    merge = tbl.merge(pa.table({"id": [1]}), on="id").when_matched_update({"n": 10**80})
    refused(tbl, merge.execute, FilterError, "literal 10{80} has more digits than any decimal")
    wide = pa.schema([pa.field("id", pa.int64(), nullable=False), ("d", pa.decimal128(38, 0))])
    pk = {"primary_key": ["id"], "buckets": 2} if kind == "pk" else {}
    big = raylake.create_table(str(tmp_path / "wide"), wide, **pk)
    big.write(pa.table({"id": [1, 2], "d": [Decimal(0), Decimal(10**20)]}, schema=wide))
    merge = big.merge(pa.table({"id": [1, 2]}), on="id")
    merge.when_matched_update({"d": 10**20}, predicate="t.d != 100000000000000000000").execute()
    assert big.to_arrow().column("d").to_pylist() == [Decimal(10**20)] * 2
