"""Visitors on hand-picked examples: NNF, row filters, projection, pruning."""

from __future__ import annotations

import datetime
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from raylake.expr import (
    AlwaysFalse,
    AlwaysTrue,
    Compare,
    IsNull,
    NotIn,
    NotNull,
    bind,
    col,
    conjuncts,
    evaluate_python,
    filter_on_columns,
    might_match,
    negate_push_down,
    parse_filter,
    to_arrow,
)

TABLE = pa.table(
    {
        "x": pa.array([1, None, 3, 4], pa.int64()),
        "s": pa.array(["a", "b", None, "a"]),
        "d": pa.array([datetime.date(2024, 1, d) for d in (1, 2, 3, 4)], pa.date32()),
    }
)


def rows(text: str) -> list[int | None]:
    expr = bind(parse_filter(text), TABLE.schema)
    result: list[int | None] = TABLE.filter(to_arrow(expr))["x"].to_pylist()
    assert result == [r["x"] for r in TABLE.to_pylist() if evaluate_python(expr, r)]
    return result


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 1", [1]),
        ("x != 1", [3, 4]),
        ("not (x = 1)", [3, 4]),
        ("not not x = 1", [1]),
        ("x not in (1, 3)", [4]),
        ("not x in (1, 3)", [4]),
        ("x in ()", []),
        ("x not in ()", [1, 3, 4]),
        ("x is null", [None]),
        ("not x is null", [1, 3, 4]),
        ("x > 1 or s = 'b'", [None, 3, 4]),
        ("not (x > 1 or s = 'b')", [1]),
        ("not (x > 1 and s = 'a')", [1, None]),
        ("d >= '2024-01-03'", [3, 4]),
        ("true", [1, None, 3, 4]),
        ("false", []),
        ("not true", []),
    ],
)
def test_row_filter_uses_sql_null_semantics(text: str, expected: list[int | None]) -> None:
    assert rows(text) == expected


def test_to_arrow_works_with_datasets_and_unbound_literals() -> None:
    expr = to_arrow(parse_filter("x >= 3 and s is null"))
    assert ds.dataset(TABLE).to_table(filter=expr)["x"].to_pylist() == [3]


def test_signed_zeros_match_in_lists_like_equality() -> None:
    table = pa.table({"f": pa.array([0.0, -0.0, 1.0])})
    for text, expected in [("f in (0.0)", 2), ("f in (-0.0)", 2), ("f not in (0)", 1)]:
        expr = bind(parse_filter(text), table.schema)
        assert table.filter(to_arrow(expr)).num_rows == expected, text


def test_nan_in_a_list_matches_nothing_like_equality() -> None:
    # is_in hashes NaN equal to NaN, where = (and the statistics a scan prunes by) never
    # match it: NaN in a list selected NaN rows in some row groups and not in others.
    nan = float("nan")
    table = pa.table({"f": pa.array([nan, 1.0, None])})
    for expr, expected in [
        (col("f").isin([nan]), []),
        (col("f").isin([nan, 1.0]), [1.0]),
        (~col("f").isin([nan]), [nan, 1.0]),  # not in: as != selects NaN
        (~col("f").isin([nan, 1.0]), [nan]),
    ]:
        for e in (expr, bind(expr, table.schema)):
            got = table.filter(to_arrow(e)).column("f").to_pylist()
            assert str(got) == str(expected), expr  # (NaN != NaN: compare as text)


def test_nan_in_a_list_of_a_half_float_column_matches_nothing() -> None:
    # pyarrow before 17 gives a bound float16 literal as numpy's float16, not a float
    nan = float("nan")
    values = np.array([nan, 1.0, 0.0], dtype=np.float16)
    table = pa.table({"h": pa.array(values, mask=np.array([False, False, True]))})
    for expr, expected in [(col("h").isin([nan, 1.0]), 1), (~col("h").isin([nan]), 2)]:
        assert table.filter(to_arrow(bind(expr, table.schema))).num_rows == expected, expr


def test_timezone_aware_timestamps_need_binding() -> None:
    table = pa.table({"t": pa.array([0, 10**12], pa.timestamp("ms", tz="UTC"))})
    expr = bind(parse_filter("t > '2000-01-01'"), table.schema)
    assert table.filter(to_arrow(expr)).num_rows == 1


def test_negate_push_down() -> None:
    def nnf(text: str) -> str:
        return str(negate_push_down(parse_filter(text)))

    assert nnf("not x < 3") == "x >= 3"
    assert nnf("not x != 3") == "x = 3"
    assert nnf("not x in (1, 2)") == "x not in (1, 2)"
    assert nnf("not x not in (1)") == "x in (1)"
    assert nnf("not x is null") == "x is not null"
    assert nnf("not x is not null") == "x is null"
    assert nnf("not (a = 1 and (b = 2 or not c = 3))") == "a != 1 or b != 2 and c = 3"
    assert nnf("not not a > 1") == "a > 1"
    assert nnf("not (a = 1 and true)") == "a != 1"
    assert nnf("not (a = 1 or true)") == "false"
    assert negate_push_down(parse_filter("a = 1")) == Compare("=", "a", 1)


def test_conjuncts() -> None:
    expr = parse_filter("a = 1 and (b = 2 or c = 3) and not d = 4")
    assert [str(e) for e in conjuncts(expr)] == ["a = 1", "b = 2 or c = 3", "not d = 4"]
    assert conjuncts(AlwaysTrue()) == []
    assert conjuncts(IsNull("a")) == [IsNull("a")]


@pytest.mark.parametrize(
    ("text", "columns", "expected"),
    [
        ("k = 1 and v > 2", {"k"}, "k = 1"),
        ("k = 1 and v > 2", {"v"}, "v > 2"),
        ("k = 1 and v > 2", {"other"}, "true"),
        ("k = 1 or v > 2", {"k"}, "true"),
        ("k = 1 or k = 2 and v > 2", {"k"}, "k = 1 or k = 2"),
        ("(k = 1 or j = 2) and v > 2", {"k", "j"}, "k = 1 or j = 2"),
        ("not (k != 1 or v = 2)", {"k"}, "k = 1"),
        ("not (k = 1 and v = 2)", {"k"}, "true"),
        ("k in (1, 2) and v is null", {"k", "v"}, "k in (1, 2) and v is null"),
        ("false and v = 1", {"k"}, "false"),
    ],
)
def test_filter_on_columns(text: str, columns: set[str], expected: str) -> None:
    assert str(filter_on_columns(parse_filter(text), columns)) == expected


class ColumnStats:
    """Stats table layout: ``<col>_min``, ``<col>_max``, ``<col>_nulls``, ``rows``."""

    def __init__(self, tracked: set[str]) -> None:
        self.tracked = tracked

    def has_stats(self, column: str) -> bool:
        return column in self.tracked

    def min(self, column: str) -> pc.Expression:
        return pc.field(f"{column}_min")

    def max(self, column: str) -> pc.Expression:
        return pc.field(f"{column}_max")

    def null_count(self, column: str) -> pc.Expression:
        return pc.field(f"{column}_nulls")

    def row_count(self) -> pc.Expression:
        return pc.field("rows")


# One row per file: x values of each file are described in "note".
FILES = pa.table(
    {
        "note": ["1..5", "5,5 + nulls", "all null", "unknown", "10..20 no nulls", "empty"],
        "x_min": pa.array([1, 5, None, None, 10, None], pa.int64()),
        "x_max": pa.array([5, 5, None, None, 20, None], pa.int64()),
        "x_nulls": pa.array([0, 2, 3, None, 0, 0], pa.int64()),
        "rows": pa.array([4, 6, 3, 7, 9, 0], pa.int64()),
    }
)
SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.int64())])


def kept(text: str, tracked: frozenset[str] = frozenset({"x"})) -> list[str]:
    expr = bind(parse_filter(text), SCHEMA)
    return FILES.filter(might_match(expr, ColumnStats(set(tracked))))["note"].to_pylist()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 5", ["1..5", "5,5 + nulls", "unknown"]),
        ("x = 7", ["unknown"]),
        ("x != 5", ["1..5", "unknown", "10..20 no nulls"]),
        ("not x = 5", ["1..5", "unknown", "10..20 no nulls"]),
        ("x < 5", ["1..5", "unknown"]),
        ("x <= 5", ["1..5", "5,5 + nulls", "unknown"]),
        ("x > 5", ["unknown", "10..20 no nulls"]),
        ("x >= 20", ["unknown", "10..20 no nulls"]),
        ("x in (0, 7, 30)", ["unknown"]),
        ("x in (0, 15)", ["unknown", "10..20 no nulls"]),
        ("x in ()", []),
        ("x not in (5)", ["1..5", "unknown", "10..20 no nulls"]),
        ("x not in (5, 6)", ["1..5", "unknown", "10..20 no nulls"]),
        ("x not in ()", ["1..5", "5,5 + nulls", "unknown", "10..20 no nulls"]),
        ("x is null", ["5,5 + nulls", "all null", "unknown"]),
        ("x is not null", ["1..5", "5,5 + nulls", "unknown", "10..20 no nulls"]),
        ("x < 3 or x > 18", ["1..5", "unknown", "10..20 no nulls"]),
        ("x > 3 and x < 12", ["1..5", "5,5 + nulls", "unknown", "10..20 no nulls"]),
        ("x > 6 and x < 8", ["unknown"]),
        ("not (x < 10 or x is null)", ["unknown", "10..20 no nulls"]),
        ("y = 1 and x = 7", ["unknown"]),
        ("y = 1 or x = 7", FILES["note"].to_pylist()),
        ("true", FILES["note"].to_pylist()),
        ("false", []),
    ],
)
def test_might_match(text: str, expected: list[str]) -> None:
    assert kept(text) == expected


def test_large_in_lists_use_the_value_range() -> None:
    values = ", ".join(str(v) for v in [*range(100, 140), 0])
    # Coarse: [0, 139] overlaps every file with values, although only "1..5" could match.
    assert kept(f"x in ({values})") == ["1..5", "5,5 + nulls", "unknown", "10..20 no nulls"]
    assert kept("x in (" + ", ".join(str(v) for v in range(30, 60)) + ")") == ["unknown"]


def test_a_nan_in_a_large_in_list_prunes_no_file_that_matches() -> None:
    """NaN is unordered: sorted into the list's range it stood first (or last) and every
    file was pruned, so ``isin(df.f.unique())`` of a column holding NaN read no row."""
    stats = pa.table(
        {
            "f_min": pa.array([1.0, 30.0]),
            "f_max": pa.array([1.0, 30.0]),
            "f_nulls": pa.array([0, 0], pa.int64()),
            "rows": pa.array([1, 1], pa.int64()),
        }
    )
    schema = pa.schema([("f", pa.float64())])
    tail = [float(v) for v in range(11, 27)]
    for values in ([math.nan, 1.0, *tail], [10.0, math.nan, *tail, 1.0], [*tail, 1.0, math.nan]):
        expr = bind(col("f").isin(values), schema)
        kept = stats.filter(might_match(expr, ColumnStats({"f"})))
        assert kept["f_min"].to_pylist() == [1.0], values
    only_nan = bind(col("f").isin([math.nan] * 20), schema)
    assert stats.filter(might_match(only_nan, ColumnStats({"f"}))).num_rows == 0


def test_a_large_in_list_of_nanosecond_times_keeps_their_order() -> None:
    """``as_py`` cuts a time64[ns] to microseconds: values that differ below one sorted
    as written, so the list's range missed its smallest value and pruned its file."""
    one_hour = 3600 * 10**9
    stats = pa.table(
        {
            "t_min": pa.array([one_hour + 1], pa.time64("ns")),
            "t_max": pa.array([one_hour + 1], pa.time64("ns")),
            "t_nulls": pa.array([0], pa.int64()),
            "rows": pa.array([1], pa.int64()),
        }
    )
    schema = pa.schema([("t", pa.time64("ns"))])
    text = ", ".join(f"'01:00:00.{n:09d}'" for n in [5, *range(6, 22), 1])
    expr = bind(parse_filter(f"t in ({text})"), schema)
    assert stats.filter(might_match(expr, ColumnStats({"t"}))).num_rows == 1


def test_columns_without_stats_are_kept() -> None:
    assert kept("x = 7", tracked=frozenset()) == FILES["note"].to_pylist()
    assert kept("x is null", tracked=frozenset()) == FILES["note"].to_pylist()


def test_visitors_agree_on_constants() -> None:
    assert str(filter_on_columns(AlwaysFalse(), set())) == "false"
    assert negate_push_down(NotIn("x", ())) == NotIn("x", ())
    assert negate_push_down(NotNull("x")) == NotNull("x")


def test_deep_filters_do_not_recurse() -> None:
    expr = bind(parse_filter(" or ".join(f"x = {i}" for i in range(1500))), TABLE.schema)
    assert TABLE.filter(to_arrow(expr))["x"].to_pylist() == [1, 3, 4]
    assert len(FILES.filter(might_match(expr, ColumnStats({"x"})))) == 4
