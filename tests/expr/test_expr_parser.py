"""parse_filter: accepted syntax, error positions, round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylake.errors import FilterError, FilterParseError
from raylake.expr import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    Expr,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    parse_filter,
)


def eq(column: str, value: object) -> Compare:
    return Compare("=", column, value)


GOOD = [
    ("label = 1 and dt = '2024-01-01'", And(eq("label", 1), eq("dt", "2024-01-01"))),
    ("x == 1", eq("x", 1)),
    ("x=1", eq("x", 1)),
    ("  x = 1  ", eq("x", 1)),
    ("x != 1", Compare("!=", "x", 1)),
    ("x <> 1", Compare("!=", "x", 1)),
    ("x < 1.5", Compare("<", "x", 1.5)),
    ("x <= -2", Compare("<=", "x", -2)),
    ("x>=-2", Compare(">=", "x", -2)),
    ("x > 1e3", Compare(">", "x", 1000.0)),
    ("x > -1.5E-3", Compare(">", "x", -0.0015)),
    ("x = .5", eq("x", 0.5)),
    ("x = 5.", eq("x", 5.0)),
    ("x = +7", eq("x", 7)),
    ("s = 'it''s'", eq("s", "it's")),
    ("s = ''", eq("s", "")),
    ("s = 'and or not'", eq("s", "and or not")),
    ("b = true", eq("b", True)),
    ("B = FALSE", eq("B", False)),
    ("x in (1, 2, 3)", In("x", (1, 2, 3))),
    ("x IN ('a')", In("x", ("a",))),
    ("x in ()", In("x", ())),
    ("x not in (1, 'b')", NotIn("x", (1, "b"))),
    ("x Not In (1)", NotIn("x", (1,))),
    ("x is null", IsNull("x")),
    ("x IS NOT NULL", NotNull("x")),
    ("not x = 1", Not(eq("x", 1))),
    # A boolean column is a condition by itself (was "expected a comparison operator").
    ("q", eq("q", True)),
    ("not q", Not(eq("q", True))),
    ("(q) or x = 1", Or(eq("q", True), eq("x", 1))),
    ("q and not p", And(eq("q", True), Not(eq("p", True)))),
    ("NOT not x = 1", Not(Not(eq("x", 1)))),
    ("not (x = 1)", Not(eq("x", 1))),
    ("a = 1 or b = 2 and c = 3", Or(eq("a", 1), And(eq("b", 2), eq("c", 3)))),
    ("(a = 1 or b = 2) and c = 3", And(Or(eq("a", 1), eq("b", 2)), eq("c", 3))),
    ("a = 1 and b = 2 and c = 3", And(And(eq("a", 1), eq("b", 2)), eq("c", 3))),
    ("not a = 1 and b = 2", And(Not(eq("a", 1)), eq("b", 2))),
    ("not (a = 1 and b = 2)", Not(And(eq("a", 1), eq("b", 2)))),
    ("((a = 1))", eq("a", 1)),
    ("3 < x", Compare(">", "x", 3)),
    ("1 >= x", Compare("<=", "x", 1)),
    ("'a' = s", eq("s", "a")),
    ("true != b", Compare("!=", "b", True)),
    ('"weird col" = 1', eq("weird col", 1)),
    ('"a""b" = 1', eq('a"b', 1)),
    ("`and` = 1", eq("and", 1)),
    ("`a``b` is null", IsNull("a`b")),
    ("a.b.c = 1", eq("a.b.c", 1)),
    ("_x9 = 1", eq("_x9", 1)),
    ("true", AlwaysTrue()),
    ("false or x = 1", Or(AlwaysFalse(), eq("x", 1))),
    ("not true", Not(AlwaysTrue())),
]


@pytest.mark.parametrize(("text", "expected"), GOOD)
def test_parses(text: str, expected: Expr) -> None:
    assert parse_filter(text) == expected


@pytest.mark.parametrize(("text", "_expected"), GOOD)
def test_round_trip(text: str, _expected: Expr) -> None:
    expr = parse_filter(text)
    assert parse_filter(str(expr)) == expr


BAD = [
    ("", 0, "empty filter"),
    ("   ", 0, "empty filter"),
    ("x = ", 4, "expected a literal"),
    ("x = null", 4, "use 'is null'"),
    ("x != null", 5, "use 'is not null'"),
    ("null = x", 0, "is null"),
    ("(x = 1", 6, "missing ')'"),
    ("(x = 1 and (y = 2)", 18, "missing ')'"),
    ("x = 1)", 5, "unbalanced ')'"),
    ("x = 1 y = 2", 6, "after a complete filter"),
    ("x = 'abc", 4, "unterminated string"),
    ("x = 'it''s", 4, "unterminated string"),
    ('"abc = 1', 0, "unterminated quoted column name"),
    ('"" = 1', 0, "empty column name"),
    ("x ~ 1", 2, "unexpected character '~'"),
    ("x in (1, 2", 10, "missing ')'"),
    ("x in 1", 5, "expected '('"),
    ("x in (1 2)", 8, "expected ',' or ')'"),
    ("x in (1,)", 8, "expected a literal"),
    ("x in (null)", 6, "null"),
    ("x not like 1", 11, "'like' needs a quoted string"),
    ("x not frob 1", 2, "expected a comparison operator"),
    ("x like 'a\\'", 7, "unfinished escape"),
    ("x between 1 or 2", 12, "expected 'and' in 'between'"),
    ("x between 1 and y", 16, "comparing with column 'y'"),
    ("starts_with(x 'a')", 14, "expected ','"),
    ("starts_with(x, 1)", 15, "needs a quoted string"),
    ("starts_with(x, 'a'", 18, "expected ')'"),
    ("x is 1", 5, "expected 'null'"),
    ("x is not", 8, "expected 'null'"),
    ("x = y", 4, "comparing with column 'y'"),
    ("and x = 1", 0, "expected a column name"),
    ("x = 1 and", 9, "expected a column name"),
    ("x = 1 and or y = 1", 10, "unexpected 'or'"),
    ("x 1", 2, "expected a comparison operator"),
    ("1 = 2", 4, "expected a column name"),
    ("1 in (1)", 2, "expected a comparison operator"),
    ("x = 1e", 4, "invalid number"),
    ("x = 1.2.3", 4, "invalid number"),
    ("x = 3abc", 4, "invalid number"),
    ("not", 3, "end of filter"),
    ("()", 1, "unexpected ')'"),
    ("x = - 1", 4, "unexpected character '-'"),
    # Python and pandas habits: each error says what to write instead (docs/filters.md).
    ("x = 1 && y = 2", 6, "unexpected character '&' (use 'and')"),
    ("x = 1 | y = 2", 6, "unexpected character '|' (use 'or')"),
    ("!(x = 1)", 0, "unexpected character '!' (use 'not', or '!=' for not equal)"),
    ("~(x = 1)", 0, "unexpected character '~' (use 'not')"),
    ('s == "a\'b"', 5, "double quotes name a column: write the string as 'a''b'"),
    ("x == None", 5, "(write 'is null' for nulls)"),
    ("x != None", 5, "(write 'is not null' for nulls)"),
]


@pytest.mark.parametrize(("text", "position", "message"), BAD)
def test_errors_point_at_the_offending_token(text: str, position: int, message: str) -> None:
    with pytest.raises(FilterParseError) as info:
        parse_filter(text)
    error = info.value
    assert error.position == position
    assert error.text == text
    assert message in str(error)
    assert f"at position {position}" in str(error)
    assert isinstance(error, FilterError)


def test_error_message_shows_a_pointer() -> None:
    with pytest.raises(FilterParseError) as info:
        parse_filter("x = null")
    assert str(info.value).endswith("  x = null\n      ^")


def test_deep_nesting_is_a_parse_error() -> None:
    with pytest.raises(FilterParseError, match="nests too deeply"):
        parse_filter("(" * 5000 + "x = 1" + ")" * 5000)


def test_long_chains_do_not_recurse() -> None:
    text = " or ".join(f"x = {i}" for i in range(3000))
    expr = parse_filter(text)
    assert str(expr) == text
    again = parse_filter(text)
    assert expr == again
    assert hash(expr) == hash(again)
    assert expr != parse_filter(text + " or x = -1")


def test_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        parse_filter(3)  # type: ignore[arg-type]


def test_every_operator_is_documented() -> None:
    """``==`` is accepted as ``=`` (pandas and Polars habit); the docs must say so."""
    from raylake.expr.parser import _OPS

    docs = (Path(__file__).resolve().parents[2] / "docs" / "filters.md").read_text()
    syntax = docs.split("## Syntax", 1)[1].split("\n## ", 1)[0]
    missing = [op for op in _OPS if f"x {op} 1" not in syntax]
    assert not missing, f"docs/filters.md does not show {missing}"
    assert parse_filter("label == 1") == parse_filter("label = 1")
    assert str(parse_filter("label == 1")) == "label = 1"


def test_number_literals_keep_the_value_written() -> None:
    """A number a float cannot hold stays exact: as a float, ``d = 123456789012345678.91``
    on a decimal(20, 2) column selected the row 123456789012345680.00, and
    ``i = 9007199254740993.0`` on an int64 column the row 9007199254740992."""
    import decimal

    import pyarrow as pa

    from raylake.expr import bind, to_arrow

    exact = decimal.Decimal("123456789012345678.91")
    assert parse_filter("d = 123456789012345678.91") == eq("d", exact)
    assert parse_filter("i = 9007199254740993.0") == eq("i", decimal.Decimal("9007199254740993.0"))
    # A float that is the number written stays a float (and infinity, as rendered).
    assert parse_filter("x = 0.1") == eq("x", 0.1)
    assert parse_filter("x = 1.50") == eq("x", 1.5)
    assert parse_filter("x = 1e999") == eq("x", float("inf"))
    assert parse_filter(str(parse_filter("d = 123456789012345678.91"))) == eq("d", exact)

    schema = pa.schema([("d", pa.decimal128(20, 2)), ("i", pa.int64()), ("f", pa.float64())])
    rows = pa.table(
        {
            "d": [exact, decimal.Decimal("123456789012345680.00")],
            "i": [9007199254740993, 9007199254740992],
            "f": [0.1, 9007199254740992.0],
        },
        schema=schema,
    )

    def selected(text: str) -> list[int]:
        mask = rows.filter(to_arrow(bind(parse_filter(text), schema)))
        return [rows["i"].to_pylist().index(v) for v in mask["i"].to_pylist()]

    assert selected("d = 123456789012345678.91") == [0]
    assert selected("d in (123456789012345678.91)") == [0]
    assert selected("d > 123456789012345678.90") == [0, 1]
    assert selected("i = 9007199254740993.0") == [0]
    assert selected("f = 9007199254740993.0") == [1]  # the float nearest, as before
    assert selected("f = 0.1") == [0]
    with pytest.raises(FilterError, match="expected an integer"):
        bind(parse_filter("i = 9007199254740993.5"), schema)


def test_a_boolean_column_alone_is_a_condition(tmp_path: Path) -> None:
    """``filter="late"`` was refused ("expected a comparison operator") where SQL, merge
    predicates and Ray's ``col("late")`` take it; a null is neither true nor false."""
    import pyarrow as pa

    import raylake

    tbl = raylake.create_table(
        str(tmp_path / "t"), pa.schema([("late", pa.bool_()), ("x", pa.int64())])
    )
    tbl.write(pa.table({"late": [True, False, None, True], "x": [1, 2, 3, 4]}))
    for text, rows in [("late", [1, 4]), ("not late", [2]), ("late and x > 1", [4])]:
        assert tbl.to_arrow(filter=text).column("x").to_pylist() == rows
    with pytest.raises(FilterError, match="column 'x' of type int64"):
        tbl.to_arrow(filter="x")
