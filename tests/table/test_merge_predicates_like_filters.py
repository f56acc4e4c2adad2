"""A merge predicate selects the rows the same filter selects, NaN and nulls included:
``tbl.delete(f)`` and ``merge(...).when_matched_delete(predicate=f)`` take one set."""

from __future__ import annotations

from decimal import Decimal
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


TEXT = pa.table(
    {
        "k": [1, 2, 3, 4, 5, 6],
        "s": ["apple", "banana", None, "a%b", "Apple", "C:\\temp"],
        "d": pa.array(
            [Decimal(v) if v else None for v in ("1.00", "1.01", "", "2.50", "0", "5091.15")],
            pa.decimal128(10, 2),
        ),
    }
)


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("t.s like 'a%'", {1, 4}),
        ("t.s not like 'a%'", {2, 5, 6}),
        ("not (t.s like '_pple')", {2, 4, 6}),
        ("t.s like 'a\\%b'", {4}),
        ("starts_with(t.s, 'a%')", {4}),
        ("starts_with(t.s, 'a') and t.d > 1", {4}),
        # a value the decimal column cannot hold matches nothing, as `=` compares it
        # (was: cast into the column's type, 1.001 rounded to 1.00 and matched it)
        ("t.d in (1.001, 1.009)", set()),
        ("t.d in (1.004, 2.5)", {4}),
        ("t.d not in (1.001)", {1, 2, 4, 5, 6}),
        # compared with the decimal's nearest float (was: Arrow's cast read 5091.15 as
        # 5091.150000000001, which then matched)
        ("t.d = 5091.150000000001", set()),
        ("t.d in (5091.150000000001)", set()),
        ("t.d = 5091.15", {6}),
        ("t.d in (100000000000000000000)", set()),  # beyond 64 bits: a decimal
        # a prefix is text, not a pattern (was: "ends with an unfinished escape")
        ("starts_with(t.s, 'C:\\')", {6}),
        ("null like 'a%' or t.k = 1", {1}),  # null, as in SQL (was: an error)
    ],
)
def test_like_and_value_lists_in_a_merge_predicate(
    tmp_path: Path, predicate: str, expected: set[int]
) -> None:
    """LIKE and starts_with are filter syntax, and merge expressions are its superset
    (was: a parse error)."""
    tbl = raylake.create_table(str(tmp_path / "t"), TEXT.schema)
    tbl.write(TEXT)
    merge = tbl.merge(pa.table({"k": [1, 2, 3, 4, 5, 6]}), on="k")
    result = merge.when_matched_delete(predicate=predicate).execute()
    assert {1, 2, 3, 4, 5, 6} - set(tbl.to_arrow()["k"].to_pylist()) == expected
    assert result.deleted == len(expected)


def test_a_condition_is_a_value_for_a_boolean_column(tmp_path: Path) -> None:
    """``SET flag = s.n > 1`` (was: a parse error; only arithmetic parsed as a value)."""
    schema = pa.schema([("k", pa.int64()), ("flag", pa.bool_())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"k": [1, 2, 3], "flag": [None, None, None]}, schema=schema))
    source = pa.table({"k": [1, 2, 3], "n": [0, 0, None], "s": ["ab", "b", "a"]})
    merge = tbl.merge(source, on="k")
    merge.when_matched_update({"flag": "s.n > 1 or s.s like 'a%'"}).execute()
    assert tbl.to_arrow().sort_by("k")["flag"].to_pylist() == [True, False, True]


def test_a_value_list_on_a_category_source_column(tmp_path: Path) -> None:
    """A pandas category is dictionary-encoded (was: "Array type doesn't match type of
    values set"; `=` and LIKE took it)."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("k", pa.int64())]))
    tbl.write(pa.table({"k": [1, 2, 3]}))
    source = pa.table({"k": [1, 2, 3], "c": pa.array(["a", "b", None]).dictionary_encode()})
    merge = tbl.merge(source, on="k").when_matched_delete(predicate="s.c not in ('b')")
    assert merge.execute().deleted == 1
    assert tbl.to_arrow().sort_by("k")["k"].to_pylist() == [2, 3]


@pytest.mark.parametrize("dtype", [pa.float16(), pa.float32()])
def test_a_decimal_against_a_narrow_float_compares_as_doubles(
    tmp_path: Path, dtype: pa.DataType
) -> None:
    """As Spark compares them (was: the decimal read as a float32, so 16777217 equalled
    16777216; against float16, no kernel)."""
    schema = pa.schema([("k", pa.int64()), ("d", pa.decimal128(20, 2))])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"k": [1, 2], "d": [Decimal("16777217"), Decimal("1.5")]}, schema=schema))
    source = pa.table({"k": [1, 2], "f": pa.array([16777216.0, 1.5]).cast(dtype, safe=False)})
    merge = tbl.merge(source, on="k").when_matched_delete(predicate="t.d = s.f")
    assert merge.execute().deleted == 1
    assert tbl.to_arrow()["k"].to_pylist() == [1]
