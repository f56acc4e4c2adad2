"""Ray Data expressions converted into raylake filters, checked against pyarrow's own evaluation.

The oracle is Ray's lowering of the same expression to pyarrow (``Expr.to_pyarrow``),
which is how Ray applies a ``filter(expr=...)`` that is not pushed down: a converted
filter must select exactly the same rows, nulls and NaN included.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("ray.data")
from property_depth import examples
from ray.data.expressions import col, lit

from raylake.datasource.ray_expr import from_ray_expr, render, split_ray_predicate
from raylake.errors import FilterError
from raylake.expr import AlwaysTrue, Compare, Like, to_arrow

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("f", pa.float64()),
        ("g", pa.float32()),
        ("s", pa.string()),
        ("b", pa.bool_()),
    ]
)
ROWS = pa.table(
    {
        "i": [1, 2, 3, None, 5, -1, 0, 2, 7, 8],
        "f": [0.5, math.nan, 2.0, None, -1.0, 3.5, 0.0, 2.0, 1.0, None],
        "g": [0.1, 0.2, None, 1.5, math.nan, -2.0, 0.0, 1.0, 0.5, None],
        "s": ["a", "b", None, "c", "a", "", "zz", "b", "a%", "a\\"],
        "b": [True, False, None, True, False, True, None, False, True, None],
    },
    schema=SCHEMA,
)


def ray_selects(expr: Any) -> list[int]:
    index = pa.array(range(ROWS.num_rows))
    return ROWS.append_column("__i", index).filter(expr.to_pyarrow()).column("__i").to_pylist()


def lake_selects(expr: Any) -> list[int]:
    index = pa.array(range(ROWS.num_rows))
    return ROWS.append_column("__i", index).filter(to_arrow(expr)).column("__i").to_pylist()


# -- examples --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        col("i") > 1,
        lit(2) < col("i"),
        col("s") == "a",
        col("s") != "a",
        (col("i") >= 2) & (col("s") == "b"),
        (col("i") < 0) | col("s").is_null(),
        ~(col("i") == 2),
        col("i").is_in([1, 5]),
        ~col("i").is_in([1, 5]),
        col("i").not_in([1, 5]),
        col("i").is_in([1, None]),
        col("i").not_in([1, None]),
        col("s").is_not_null(),
        col("b"),
        ~col("b"),
        col("f") > 1.0,
        col("f") != 2.0,
        ~(col("f") == 2.0),
        (col("i") == 2).alias("x"),
        col("s").str.starts_with("a"),
        col("s").str.starts_with(""),
        ~col("s").str.starts_with("z"),
        col("s").str.match("a%"),
        col("s").str.match("%z"),
        col("s").str.match("_"),
        col("s").str.match("a\\%"),
        ~col("s").str.match("b"),
        col("s").str.match("a%") | (col("i") > 2),
    ],
    ids=lambda e: render(e) if not isinstance(e, str) else e,
)
def test_conversion_selects_what_pyarrow_selects(expr: Any) -> None:
    converted = from_ray_expr(expr, SCHEMA)
    assert lake_selects(converted) == ray_selects(expr)


def test_string_predicates_become_like() -> None:
    assert from_ray_expr(col("s").str.starts_with("a_"), SCHEMA) == Like("s", "a\\_%")
    assert from_ray_expr(col("s").str.match("a%b"), SCHEMA) == Like("s", "a%b")


def test_simple_comparison_becomes_a_bound_compare() -> None:
    converted = from_ray_expr(col("i") > 1, SCHEMA)
    assert converted == Compare(">", "i", pa.scalar(1, pa.int64()))


@pytest.mark.parametrize(
    ("expr", "part"),
    [
        (col("i") + 1 > 3, "`((col('i') + 1) > 3)`"),
        (col("i") == col("f"), "`(col('i') == col('f'))`"),
        (~(col("f") < 1.0), "float column 'f'"),
        (col("g") > 0.1, "0.1"),
        (col("i") > 1.5, "1.5"),
        (col("nope") == 1, "unknown column 'nope'"),
        (col("s") == None, "null"),  # noqa: E711
        (col("i"), "not boolean"),
        (col("s").str.match("a%", ignore_case=True), "without other options"),
        (col("s").str.starts_with("A", ignore_case=True), "without other options"),
        (col("i").str.starts_with("1"), "needs a string column"),
        (col("s").str.ends_with("a"), "only starts_with and match"),
    ],
    ids=lambda e: render(e) if not isinstance(e, str) else e,
)
def test_unconvertible_parts_are_named(expr: Any, part: str) -> None:
    with pytest.raises(FilterError, match="cannot evaluate the part") as info:
        from_ray_expr(expr, SCHEMA)
    assert part in str(info.value)


def test_split_pushes_what_it_can_and_keeps_the_rest() -> None:
    expr = (col("i") > 0) & (col("i") + 1 > 3) & (col("s") == "b")
    split = split_ray_predicate(expr, SCHEMA)
    assert split.residual is not None
    assert render(split.residual) == "((col('i') + 1) > 3)"
    assert set(lake_selects(split.pushed)) & set(ray_selects(split.residual)) == set(
        ray_selects(expr)
    )


def test_split_of_a_fully_unconvertible_predicate_pushes_nothing() -> None:
    split = split_ray_predicate(col("i") * 2 > 3, SCHEMA)
    assert split.pushed == AlwaysTrue()
    assert split.residual is not None


# -- property: random expressions ------------------------------------------------------

_LITERALS = {
    "i": st.one_of(st.integers(-2, 6), st.sampled_from([2.0, 2.5])),
    "f": st.sampled_from([0.0, 0.5, 2.0, -1.0, 1, 3]),
    "g": st.sampled_from([0.0, 0.1, 1.5, 1.0, -2]),
    "s": st.sampled_from(["a", "b", "", "zz", "q"]),
}


@st.composite
def leaves(draw: st.DrawFn) -> Any:
    name = draw(st.sampled_from(sorted(_LITERALS)))
    kind = draw(st.sampled_from(["cmp", "flip", "in", "not_in", "null", "not_null"]))
    value = draw(_LITERALS[name])
    if kind == "cmp":
        op = draw(st.sampled_from(["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"]))
        return getattr(col(name), op)(value)
    if kind == "flip":
        return lit(value) < col(name)
    if kind in ("in", "not_in"):
        values = draw(st.lists(_LITERALS[name], max_size=3))
        if draw(st.booleans()):
            values.append(None)
        return col(name).is_in(values) if kind == "in" else col(name).not_in(values)
    return col(name).is_null() if kind == "null" else col(name).is_not_null()


def expressions() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(leaves(), st.just(col("b"))),
        lambda inner: st.one_of(
            st.builds(lambda a, b: a & b, inner, inner),
            st.builds(lambda a, b: a | b, inner, inner),
            st.builds(lambda a: ~a, inner),
        ),
        max_leaves=6,
    )


def ray_selects_or_skip(expr: Any) -> list[int]:
    """Ray's selection; examples that Ray itself cannot evaluate say nothing."""
    try:
        return ray_selects(expr)
    except (pa.ArrowException, ValueError, TypeError):
        assume(False)
        raise


@settings(max_examples=examples(200), deadline=None)
@given(expressions())
def test_pushed_and_residual_together_select_exactly_what_ray_selects(expr: Any) -> None:
    expected = ray_selects_or_skip(expr)
    split = split_ray_predicate(expr, SCHEMA)
    selected = set(lake_selects(split.pushed))
    if split.residual is not None:
        selected &= set(ray_selects(split.residual))
    assert sorted(selected) == expected


@settings(max_examples=examples(200), deadline=None)
@given(expressions())
def test_whole_conversion_is_exact_or_raises(expr: Any) -> None:
    expected = ray_selects_or_skip(expr)
    try:
        converted = from_ray_expr(expr, SCHEMA)
    except FilterError:
        return
    assert lake_selects(converted) == expected


@pytest.mark.parametrize(
    "expr",
    [
        col("f").is_in([-0.0]),
        col("f").is_in([0.0, 2.0]),
        col("f").not_in([-0.0]),
        col("f").is_in([0]),
        ~col("f").is_in([0.0]),
        col("g").is_in([-0.0]),
    ],
    ids=render,
)
def test_a_float_zero_in_a_list_is_left_to_ray(expr: Any) -> None:
    """pyarrow's is_in hashes floats bitwise (0.0 is not in [-0.0]), raylake's list
    holds both zeros: pushed down, ``is_in([-0.0])`` read the 0.0 rows too."""
    zeros = pa.table(
        {
            "f": pa.array([0.0, -0.0, 2.0, None]),
            "g": pa.array([0.0, -0.0, 2.0, None], pa.float32()),
        }
    )
    split = split_ray_predicate(expr, zeros.schema)
    assert split.pushed == AlwaysTrue()
    with pytest.raises(FilterError, match="zero on float column"):
        from_ray_expr(expr, zeros.schema)
    rows = zeros.filter(to_arrow(split.pushed))
    assert split.residual is not None
    assert rows.filter(split.residual.to_pyarrow()).equals(zeros.filter(expr.to_pyarrow()))
    # An int column's zero has one sign: still pushed down.
    assert split_ray_predicate(col("i").is_in([0]), SCHEMA).pushed != AlwaysTrue()
