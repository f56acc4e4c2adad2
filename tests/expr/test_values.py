"""Merge expressions (raylake/expr/values.py): parsing, SQL null semantics, checked
arithmetic, literals typed by the column beside them."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from raylake.errors import FilterError, FilterParseError
from raylake.expr.value_eval import evaluate, evaluate_condition
from raylake.expr.values import (
    Ref,
    parse_condition,
    parse_value,
    refs,
)

COLS = {
    "t.n": pa.array([1, 2, None, 4], pa.int64()),
    "s.n": pa.array([10, None, 30, 0], pa.int64()),
    "t.v": pa.array([0.5, 1.5, 2.5, None], pa.float32()),
    "t.d": pa.array([datetime.date(2024, 1, d) for d in (1, 2, 3, 4)]),
    "s.b": pa.array([True, False, None, True]),
}


def value(text: str) -> list:
    return evaluate(parse_value(text), COLS, 4).to_pylist()


def cond(text: str) -> list:
    return evaluate_condition(parse_condition(text), COLS, 4).to_pylist()


def test_arithmetic_precedence_and_nulls() -> None:
    assert value("t.n + s.n * 2") == [21, None, None, 4]
    assert value("(t.n + 1) * -2") == [-4, -6, None, -10]
    assert value("coalesce(s.n, t.n, 0) - 1") == [9, 1, 29, -1]
    assert value("t.n / 2") == [0, 1, None, 2]  # integer division truncates
    assert value("t.v + 1") == [1.5, 2.5, 3.5, None]
    assert evaluate(parse_value("t.v + 1"), COLS, 4).type == pa.float32()


def test_conditions_compare_columns_and_null_is_false() -> None:
    assert cond("s.n > t.n") == [True, False, False, False]
    assert cond("not (s.n > t.n)") == [False, False, False, True]  # not unknown: unknown
    assert cond("s.b") == [True, False, False, True]
    assert cond("t.n is null or s.n is null") == [False, True, True, False]
    assert cond("t.n in (1, 4) and t.n between 2 and s.n") == [False, False, False, False]
    assert cond("t.d < '2024-01-03'") == [True, True, False, False]
    assert cond("t.n not in (1)") == [False, True, False, True]


def test_refs_and_sides() -> None:
    assert refs(parse_value("t.n + coalesce(s.x, 1)")) == {Ref("t", "n"), Ref("s", "x")}
    with pytest.raises(FilterParseError, match=r"needs a qualifier: t\.n or s\.n"):
        parse_value("n + 1")
    with pytest.raises(FilterParseError, match="only columns of the target"):
        parse_condition("s.n > 1", "t")
    with pytest.raises(FilterParseError, match="unknown function"):
        parse_value("sqrt(s.n)")
    with pytest.raises(FilterParseError, match="after a complete expression"):
        parse_value("s.n s.n")
    with pytest.raises(FilterParseError, match="expected"):
        parse_condition("s.n > ")


def test_overflow_division_by_zero_and_types_are_errors() -> None:
    big = {"t.n": pa.array([2**62]), "s.n": pa.array([0])}
    with pytest.raises(FilterError, match="overflow"):
        evaluate(parse_value("t.n * 4"), big, 1)
    with pytest.raises(FilterError, match="divide by zero"):
        evaluate(parse_value("t.n / s.n"), big, 1)
    with pytest.raises(FilterError, match="not boolean"):
        evaluate_condition(parse_condition("t.n + 1"), COLS, 4)
    with pytest.raises(FilterError, match="cannot evaluate"):
        evaluate(parse_value("t.d + 1"), COLS, 4)


def test_a_quoted_name_after_its_qualifier_is_one_column() -> None:
    """``t."my id"`` and ``s.`x-y``` as SQL writes them, besides ``"t.my id"`` (was:
    'column 't.' needs a qualifier: t.t. or s.t.')."""
    expected = {Ref("t", "my id"), Ref("s", 'x-"y')}
    assert refs(parse_condition('t."my id" = s.`x-"y`')) == expected
    assert refs(parse_condition('"t.my id" = `s.x-"y`')) == expected
    assert refs(parse_value('t."a""b" + 1')) == {Ref("t", 'a"b')}
    with pytest.raises(FilterParseError, match="here only columns of the target"):
        parse_value('s."x"', "t")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("s.n = true", r"\(s\.n = True\): cannot compare column 's\.n' of type int64 with True"),
        ("true = s.n", r"cannot compare column 's\.n' of type int64 with True"),
        ("t.n in (1, true)", r"t\.n in \(1, True\): .*'t\.n' of type int64 with True: expected"),
        ("t.v > 'x'", r"cannot compare column 't\.v' of type float with 'x': expected a number"),
        ("t.d = 5", r"cannot compare column 't\.d' of type date32\[day\] with 5"),
    ],
)
def test_a_literal_of_another_kind_is_refused_naming_the_column(text: str, match: str) -> None:
    """As a filter refuses it (was: Arrow's "no kernel matching input types (int64, bool)")."""
    with pytest.raises(FilterError, match=match):
        cond(text)


def test_a_literal_of_the_same_kind_that_does_not_convert_compares_as_it_is() -> None:
    assert cond("t.n = 1.5") == [False, False, False, False]
    assert cond("t.n < 1.5") == [True, False, False, False]
    assert cond("t.n in (2, 10e30)") == [False, True, False, False]  # float beyond int64


def test_coalesce_takes_a_null_as_the_others_type() -> None:
    """coalesce(null, 3) is 3, as in SQL (was: "no kernel matching input types (null, int64)")."""
    assert value("coalesce(null, 3)") == [3, 3, 3, 3]
    assert value("coalesce(null, s.n, 7)") == [10, 7, 30, 0]


DEC = {
    "t.v": pa.array(
        [Decimal("1.5"), Decimal("-99999999999999999999.5"), None], pa.decimal128(38, 18)
    ),
    "s.v": pa.array([Decimal("0.25"), Decimal("2"), Decimal("1")], pa.decimal128(38, 18)),
    "t.a": pa.array([Decimal("1.01"), Decimal("2"), Decimal("3")], pa.decimal128(10, 2)),
    "s.b": pa.array([Decimal("1.00001"), Decimal("2"), Decimal("3")], pa.decimal128(38, 5)),
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("t.v + 1", ["2.5", "-99999999999999999998.5", None]),
        ("t.v - s.v", ["1.25", "-100000000000000000001.5", None]),
        ("t.v * 2", ["3", "-199999999999999999999", None]),
        ("t.v * s.v", ["0.375", "-199999999999999999999", None]),
        ("t.v / s.v", ["6", "-49999999999999999999.75", None]),
        ("coalesce(t.v, 0) + s.v", ["1.75", "-99999999999999999997.5", "1"]),
        ("t.a + s.b", ["2.01001", "4", "6"]),
    ],
)
def test_decimal_arithmetic_beyond_38_digits_is_exact(text: str, expected: list) -> None:
    """decimal(38, s) operands need a result type of more than 38 digits (was: "Decimal
    precision out of range [1, 38]: 39"; a literal took the column's 38 digits)."""
    got = evaluate(parse_value(text), DEC, 3).to_pylist()
    assert got == [None if e is None else Decimal(e) for e in expected]


def test_a_predicate_computes_decimals_as_a_value_does() -> None:
    assert evaluate_condition(parse_condition("t.v + 1 > 2"), DEC, 3).to_pylist() == [
        True,
        False,
        False,
    ]
    assert evaluate_condition(parse_condition("t.v * s.v = 0.375"), DEC, 3).to_pylist()[0]


def test_a_decimal_result_beyond_76_digits_is_an_error_naming_it() -> None:
    big = {"t.v": pa.array([Decimal(10**37)], pa.decimal128(38, 0))}
    with pytest.raises(FilterError, match=r"\(t\.v \* t\.v\).*more than 76 digits"):
        evaluate(parse_value("t.v * t.v"), big, 1)
