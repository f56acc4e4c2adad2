"""The expression tree: construction, simplification, equality, rendering."""

from __future__ import annotations

import datetime

import pyarrow as pa
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
    and_,
    as_expr,
    col,
    not_,
    or_,
    parse_filter,
)

A = Compare("=", "a", 1)
B = Compare(">", "b", 2)
C = IsNull("c")


def test_column_operators_build_predicates() -> None:
    assert (col("x") == 3) == Compare("=", "x", 3)
    assert (col("x") != 3) == Compare("!=", "x", 3)
    assert (col("x") < 3) == Compare("<", "x", 3)
    assert (col("x") <= 3) == Compare("<=", "x", 3)
    assert (col("x") > 3) == Compare(">", "x", 3)
    assert (col("x") >= 3) == Compare(">=", "x", 3)
    assert col("x").isin([1, 2]) == In("x", (1, 2))
    assert col("x").not_in({5}) == NotIn("x", (5,))
    assert col("x").is_null() == IsNull("x")
    assert col("x").is_not_null() == NotNull("x")


def test_literal_on_the_left_flips_the_operator() -> None:
    assert (3 < col("x")) == Compare(">", "x", 3)  # noqa: SIM300
    assert (3 >= col("x")) == Compare("<=", "x", 3)  # noqa: SIM300
    assert (3 == col("x")) == Compare("=", "x", 3)  # noqa: SIM300
    assert ("a" != col("s")) == Compare("!=", "s", "a")  # noqa: SIM300
    d = datetime.date(2024, 1, 1)
    assert (d <= col("d")) == Compare(">=", "d", d)


def test_combinators() -> None:
    assert ((col("a") == 1) & (col("b") > 2)) == And(A, B)
    assert ((col("a") == 1) | (col("b") > 2)) == Or(A, B)
    assert ~(col("a") == 1) == Not(A)
    assert ~~(col("a") == 1) == A
    with pytest.raises(TypeError):
        _ = A & 3  # type: ignore[operator]


def test_nodes_compare_structurally_and_hash() -> None:
    assert And(A, B) == And(Compare("=", "a", 1), Compare(">", "b", 2))
    assert And(A, B) != And(B, A)
    assert And(A, B) != Or(A, B)
    assert hash(And(A, B)) == hash(And(Compare("=", "a", 1), Compare(">", "b", 2)))
    assert len({A, Compare("=", "a", 1), B, AlwaysTrue(), AlwaysTrue()}) == 3
    assert {A: "x"}[Compare("=", "a", 1)] == "x"
    assert AlwaysTrue() == AlwaysTrue()
    assert AlwaysTrue() != AlwaysFalse()
    assert A != "a = 1"


def test_literal_equality_is_type_strict() -> None:
    assert Compare("=", "a", 1) != Compare("=", "a", 1.0)
    assert Compare("=", "a", 1) != Compare("=", "a", True)
    assert In("a", (1, 2)) != In("a", (1, 2.0))
    assert Compare("=", "a", pa.scalar(1)) == Compare("=", "a", pa.scalar(1))
    assert Compare("=", "a", pa.scalar(1)) != Compare("=", "a", pa.scalar(1, pa.int32()))


def test_truth_value_is_ambiguous() -> None:
    with pytest.raises(TypeError, match="ambiguous"):
        bool(col("x") > 3)
    with pytest.raises(TypeError):
        _ = 1 < col("x") < 5  # chained comparisons would silently drop a term


def test_columns_are_unhashable() -> None:
    with pytest.raises(TypeError):
        hash(col("x"))


def test_invalid_nodes() -> None:
    with pytest.raises(FilterError, match="is_null"):
        _ = col("x") == None  # noqa: E711
    with pytest.raises(FilterError, match="column"):
        _ = col("x") == col("y")
    with pytest.raises(FilterError, match="operator"):
        Compare("~", "x", 1)
    with pytest.raises(FilterError, match="collection"):
        col("x").isin("abc")
    with pytest.raises(FilterError, match="null"):
        col("x").isin([1, None])
    with pytest.raises(FilterError, match="null"):
        Compare("=", "x", pa.scalar(None, pa.int64()))
    with pytest.raises(FilterError, match="column name"):
        col("")
    with pytest.raises(FilterError, match="column name"):
        IsNull(3)  # type: ignore[arg-type]


def test_operator_aliases_are_canonical() -> None:
    assert Compare("==", "x", 1) == Compare("=", "x", 1)
    assert Compare("<>", "x", 1).op == "!="


def test_and_simplifies() -> None:
    assert and_() == AlwaysTrue()
    assert and_(A) == A
    assert and_(A, AlwaysTrue()) == A
    assert and_(AlwaysTrue(), A, B) == And(A, B)
    assert and_(A, B, C) == And(And(A, B), C)
    assert and_(A, AlwaysFalse(), B) == AlwaysFalse()
    assert (A & AlwaysTrue()) == A


def test_or_simplifies() -> None:
    assert or_() == AlwaysFalse()
    assert or_(A, AlwaysFalse()) == A
    assert or_(A, B, C) == Or(Or(A, B), C)
    assert or_(A, AlwaysTrue()) == AlwaysTrue()
    assert (AlwaysFalse() | A) == A


def test_not_simplifies() -> None:
    assert not_(AlwaysTrue()) == AlwaysFalse()
    assert not_(AlwaysFalse()) == AlwaysTrue()
    assert not_(Not(A)) == A
    assert not_(A) == Not(A)
    with pytest.raises(FilterError, match="int"):
        and_(A, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (A, "a = 1"),
        (And(A, B), "a = 1 and b > 2"),
        (Or(A, And(B, C)), "a = 1 or b > 2 and c is null"),
        (And(Or(A, B), C), "(a = 1 or b > 2) and c is null"),
        (Or(A, Or(B, C)), "a = 1 or (b > 2 or c is null)"),
        (Not(And(A, B)), "not (a = 1 and b > 2)"),
        (Not(Not(A)), "not not a = 1"),
        (Compare("=", "weird name", "it's"), "\"weird name\" = 'it''s'"),
        (Compare("=", "and", True), '"and" = true'),
        (In("x", (1, 2.5, "s")), "x in (1, 2.5, 's')"),
        (NotIn("x", ()), "x not in ()"),
        (NotNull("a.b"), "a.b is not null"),
        (Compare("=", "d", datetime.date(2024, 1, 2)), "d = '2024-01-02'"),
        (
            Compare("<", "t", pa.scalar(datetime.datetime(2024, 1, 2, 3))),
            "t < '2024-01-02 03:00:00'",
        ),
        (AlwaysTrue(), "true"),
        (In("f", (float("inf"), -float("inf"))), "f in (1e999, -1e999)"),
        (Not(AlwaysFalse()), "not false"),
    ],
)
def test_str_renders_filter_syntax(expr: Expr, text: str) -> None:
    assert str(expr) == text


def test_infinite_floats_round_trip() -> None:
    expr = In("f", (float("inf"), -float("inf")))
    assert parse_filter(str(expr)) == expr


def test_as_expr() -> None:
    assert as_expr(None) == AlwaysTrue()
    assert as_expr("a = 1") == A
    assert as_expr(A) is A
    with pytest.raises(FilterError, match="int"):
        as_expr(3)  # type: ignore[arg-type]
    with pytest.raises(FilterParseError):
        as_expr("a =")
