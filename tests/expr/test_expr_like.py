"""LIKE / NOT LIKE, BETWEEN and starts_with: parsing, row semantics, pruning, tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import FilterError
from raylake.expr import (
    And,
    Compare,
    Like,
    Not,
    bind,
    col,
    escape_like,
    parse_filter,
    to_arrow,
)
from raylake.expr.like import like_prefix, like_regex, prefix_successor

WORDS = pa.table({"s": ["apple", "apricot", "banana", "a%b", "a_b", "ab", None, "APPLE"]})


def rows(text: str, table: pa.Table = WORDS) -> list[str | None]:
    return table.filter(to_arrow(bind(parse_filter(text), table.schema)))["s"].to_pylist()


def test_column_builders() -> None:
    assert col("s").like("ap%") == parse_filter("s like 'ap%'")
    assert col("s").not_like("ap%") == parse_filter("s not like 'ap%'")
    assert col("s").starts_with("a%") == parse_filter("starts_with(s, 'a%')")
    assert col("x").between(1, 3) == parse_filter("x between 1 and 3")
    assert ~col("x").between(1, 3) == parse_filter("x not between 1 and 3")


def test_parse_forms() -> None:
    assert parse_filter("s like 'ap%'") == Like("s", "ap%")
    assert parse_filter("s NOT LIKE 'ap%'") == Like("s", "ap%", negated=True)
    assert parse_filter("x between 1 and 3") == And(Compare(">=", "x", 1), Compare("<=", "x", 3))
    assert parse_filter("x not between 1 and 3") == Not(parse_filter("x between 1 and 3"))
    assert parse_filter("starts_with(s, 'a%_')") == Like("s", "a\\%\\_%")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s like 'ap%'", ["apple", "apricot"]),
        ("s like 'a_b'", ["a%b", "a_b"]),
        ("s like 'a\\_b'", ["a_b"]),
        ("s like 'a\\%%'", ["a%b"]),
        ("s like '%an%'", ["banana"]),
        ("s like 'ab'", ["ab"]),
        ("s not like 'a%'", ["banana", "APPLE"]),  # null is unknown: never selected
        ("not s like 'a%'", ["banana", "APPLE"]),
        ("starts_with(s, 'a%')", ["a%b"]),
        ("starts_with(s, 'ap')", ["apple", "apricot"]),
        ("s between 'ab' and 'apricot'", ["apple", "apricot", "ab"]),  # inclusive
        ("s not between 'b' and 'z'", ["apple", "apricot", "a%b", "a_b", "ab", "APPLE"]),
    ],
)
def test_row_semantics(text: str, expected: list[str]) -> None:
    assert rows(text) == expected


ESCAPES = pa.table({"s": ["a", "xa", "\\a", "x\\a", "\\", "%", "x%", "a.b", "a\nb"]})


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        # A backslash makes the next character literal wherever it stands; pyarrow's own
        # match_like does not match 'a' with '%\\a', nor a backslash with '%\\\\'.
        ("%\\a", ["a", "xa", "\\a", "x\\a"]),
        ("\\a", ["a"]),
        ("_\\a", ["xa", "\\a"]),
        ("%\\\\", ["\\"]),
        ("%\\\\a", ["\\a", "x\\a"]),
        ("%\\%", ["%", "x%"]),
        ("a\\.b", ["a.b"]),  # an escaped regex metacharacter is literal too
        ("a_b", ["a.b", "a\nb"]),
    ],
)
def test_escapes_mean_the_same_everywhere(pattern: str, expected: list[str]) -> None:
    assert rows_of(Like("s", pattern), ESCAPES) == expected
    assert rows_of(Like("s", pattern), ESCAPES) == [
        s for s in ESCAPES["s"].to_pylist() if like_regex(pattern).fullmatch(s)
    ]


def rows_of(expr: Like, table: pa.Table) -> list[str | None]:
    return table.filter(to_arrow(bind(expr, table.schema)))["s"].to_pylist()


def test_like_on_dictionary_and_large_strings() -> None:
    for typ in (pa.dictionary(pa.int32(), pa.string()), pa.large_string()):
        table = pa.table({"s": pa.array(["apple", "banana", None]).cast(typ)})
        assert rows("s like 'b%'", table) == ["banana"]


def test_like_needs_a_string_column() -> None:
    with pytest.raises(FilterError, match="'like' needs a string column, but 'x' is int64"):
        bind(parse_filter("x like '1%'"), pa.schema([("x", pa.int64())]))


def test_pattern_helpers() -> None:
    assert like_prefix("ab%c") == ("ab", False)
    assert like_prefix("a\\%b") == ("a%b", True)
    assert prefix_successor("ab") == "ac"
    assert prefix_successor("a\U0010ffff") == "b"
    assert prefix_successor("\ud7ff") == "\ue000"  # skips the surrogate range
    assert escape_like("50%_\\") == "50\\%\\_\\\\"


def test_prefix_like_prunes_files(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), pa.schema([("s", pa.string())]))
    for prefix in ("aa", "ab", "ba", "bb"):
        tbl.write(pa.table({"s": [f"{prefix}{i}" for i in range(5)]}))
    for text, files in (("s like 'ab%'", 1), ("starts_with(s, 'b')", 2), ("s like '%1'", 4)):
        plan = tbl.scan(filter=text).plan()
        assert sum(len(s.files) for s in plan) == files, text
    assert tbl.count(filter="s like 'ab%' or s like 'bb1'") == 6
    assert tbl.count(filter="s not like 'a%'") == 10
