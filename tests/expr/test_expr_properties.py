"""Property tests: every interpretation agrees with the slow Python oracle."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples

from raylake.expr import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    Expr,
    In,
    IsNull,
    Like,
    Not,
    NotIn,
    NotNull,
    Or,
    Predicate,
    bind,
    evaluate_python,
    filter_on_columns,
    might_match,
    must_match,
    negate_push_down,
    parse_filter,
    referenced_columns,
    to_arrow,
)

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("b", pa.bool_()),
    ]
)
COLUMNS = SCHEMA.names
DAY0 = datetime.date(2024, 1, 1)

FLOATS = st.sampled_from([-2.5, -1.0, 0.0, 0.5, 1.0, 3.25, 1e3]) | st.floats(-4, 4, allow_nan=False)
STRINGS = st.sampled_from(["", "a", "ab", "b", "B", "é", "a b"])
DATES = st.integers(0, 6).map(lambda n: DAY0 + datetime.timedelta(days=n))

# Values stored in the tables.
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "i": st.integers(-4, 4),
    "f": FLOATS,
    "s": STRINGS,
    "d": DATES,
    "b": st.booleans(),
}
# Literals as a user might write them; bind converts them to the column type.
LITERALS: dict[str, st.SearchStrategy[Any]] = {
    "i": st.integers(-5, 5) | st.integers(-5, 5).map(float),
    "f": FLOATS | st.integers(-5, 5),
    "s": STRINGS | st.text(max_size=3),
    "d": DATES | DATES.map(lambda d: d.isoformat()),
    "b": st.booleans(),
}
OPS = ["=", "!=", "<", "<=", ">", ">="]
# LIKE patterns over the strings above: wildcards, escapes and literal pattern characters.
PATTERNS = st.lists(
    st.sampled_from(["a", "b", "é", " ", "%", "_", "\\%", "\\_", "\\\\", "\\a"]), max_size=4
).map("".join)

SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def predicates(draw: st.DrawFn) -> Expr:
    column = draw(st.sampled_from(COLUMNS))
    literal = LITERALS[column]
    kinds = ["cmp", "cmp", "cmp", "in", "not_in", "is_null", "not_null"]
    kind = draw(st.sampled_from([*kinds, "like", "like"] if column == "s" else kinds))
    if kind == "like":
        return Like(column, draw(PATTERNS), draw(st.booleans()))
    if kind == "cmp":
        return Compare(draw(st.sampled_from(OPS)), column, draw(literal))
    if kind in ("in", "not_in"):
        values = tuple(draw(st.lists(literal, max_size=4)))
        return In(column, values) if kind == "in" else NotIn(column, values)
    return IsNull(column) if kind == "is_null" else NotNull(column)


LEAVES = st.one_of(predicates(), predicates(), st.sampled_from([AlwaysTrue(), AlwaysFalse()]))
EXPRS = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.builds(And, children, children),
        st.builds(Or, children, children),
        st.builds(Not, children),
    ),
    max_leaves=8,
)


@st.composite
def tables(draw: st.DrawFn, max_rows: int = 30, some_without_nulls: bool = False) -> pa.Table:
    """``some_without_nulls``: each column may hold no null (half the values are null
    otherwise, so a column of many rows always holds one)."""
    n = draw(st.integers(0, max_rows))
    columns = {}
    for c in COLUMNS:
        values = VALUES[c] if some_without_nulls and draw(st.booleans()) else st.none() | VALUES[c]
        columns[c] = pa.array(draw(st.lists(values, min_size=n, max_size=n)), SCHEMA.field(c).type)
    return pa.table(columns, schema=SCHEMA)


def selected(expr: Expr, table: pa.Table) -> list[dict[str, Any]]:
    return [row for row in table.to_pylist() if evaluate_python(expr, row)]


@SETTINGS
@given(tables(), EXPRS)
def test_to_arrow_matches_the_oracle(table: pa.Table, expr: Expr) -> None:
    bound = bind(expr, SCHEMA)
    assert table.filter(to_arrow(bound)).to_pylist() == selected(bound, table)


@SETTINGS
@given(tables(max_rows=12), EXPRS)
def test_negation_normal_form_is_exact(table: pa.Table, expr: Expr) -> None:
    bound = bind(expr, SCHEMA)
    for e in (bound, Not(bound)):  # both together pin down the three-valued result
        nnf = negate_push_down(e)
        plain = (
            str(nnf).replace(" not in ", " ").replace(" not null", "").replace(" not like ", " ")
        )
        assert "not " not in plain
        for row in table.to_pylist():
            assert evaluate_python(nnf, row) == evaluate_python(e, row)


def _plain_literals(expr: Expr) -> bool:
    """Whether every literal is of a type the string syntax reproduces exactly."""
    if isinstance(expr, Compare):
        return not isinstance(expr.value, datetime.date)
    if isinstance(expr, (In, NotIn)):
        return not any(isinstance(v, datetime.date) for v in expr.values)
    return all(_plain_literals(c) for c in expr.children())


@SETTINGS
@given(EXPRS)
def test_string_round_trip(expr: Expr) -> None:
    if _plain_literals(expr):
        assert parse_filter(str(expr)) == expr
    bound = bind(expr, SCHEMA)
    assert bind(parse_filter(str(bound)), SCHEMA) == bound


@SETTINGS
@given(tables(), EXPRS, st.sets(st.sampled_from(COLUMNS)))
def test_filter_on_columns_is_implied(table: pa.Table, expr: Expr, columns: set[str]) -> None:
    bound = bind(expr, SCHEMA)
    projected = filter_on_columns(bound, columns)
    assert referenced_columns(projected) <= columns
    kept = table.filter(to_arrow(projected)).to_pylist()
    assert all(row in kept for row in selected(bound, table))
    everything = filter_on_columns(bound, set(COLUMNS))
    assert table.filter(to_arrow(everything)).to_pylist() == selected(bound, table)


class TableStats:
    """A StatsSource over a table with ``<col>.min``, ``<col>.max``, ``<col>.nulls``, ``rows``."""

    def __init__(self, tracked: set[str]) -> None:
        self.tracked = tracked

    def has_stats(self, column: str) -> bool:
        return column in self.tracked

    def min(self, column: str) -> pc.Expression:
        return pc.field(f"{column}.min")

    def max(self, column: str) -> pc.Expression:
        return pc.field(f"{column}.max")

    def null_count(self, column: str) -> pc.Expression:
        return pc.field(f"{column}.nulls")

    def row_count(self) -> pc.Expression:
        return pc.field("rows")


def stats_table(files: list[pa.Table], forget: Callable[[], bool]) -> pa.Table:
    """One row per file; ``forget()`` decides, per statistic, to report it as unknown."""

    def known(value: Any) -> Any:
        return None if forget() else value

    data: dict[str, pa.Array] = {"file": pa.array(range(len(files)), pa.int64())}
    for c in COLUMNS:
        min_max = [pc.min_max(f[c]) for f in files]
        typ = SCHEMA.field(c).type
        data[f"{c}.min"] = pa.array([known(m["min"].as_py()) for m in min_max], typ)
        data[f"{c}.max"] = pa.array([known(m["max"].as_py()) for m in min_max], typ)
        data[f"{c}.nulls"] = pa.array([known(f[c].null_count) for f in files], pa.int64())
    data["rows"] = pa.array([f.num_rows for f in files], pa.int64())
    return pa.table(data)


def files_and_stats(
    table: pa.Table, data: st.DataObject
) -> tuple[list[pa.Table], pa.Table, set[str]]:
    """``table`` cut into files at drawn rows, their statistics (some drawn unknown), and
    the columns whose statistics are tracked."""
    cuts = sorted(data.draw(st.lists(st.integers(0, table.num_rows), max_size=5)))
    edges = [0, *cuts, table.num_rows]
    files = [table.slice(a, b - a) for a, b in itertools.pairwise(edges)]
    tracked = data.draw(st.sets(st.sampled_from(COLUMNS)) | st.just(set(COLUMNS)))
    rng = data.draw(st.randoms(use_true_random=False))
    forget_rate = data.draw(st.sampled_from([0.0, 0.0, 0.2]))
    return files, stats_table(files, lambda: rng.random() < forget_rate), tracked


@SETTINGS
@given(tables(max_rows=40), EXPRS, st.data())
def test_might_match_never_prunes_a_matching_file(
    table: pa.Table, expr: Expr, data: st.DataObject
) -> None:
    bound = bind(expr, SCHEMA)
    files, stats, tracked = files_and_stats(table, data)
    kept = set(stats.filter(might_match(bound, TableStats(tracked)))["file"].to_pylist())
    for index, file in enumerate(files):
        if selected(bound, file):
            assert index in kept, f"file {index} was pruned but has a row matching {bound}"


@SETTINGS
@given(tables(max_rows=20), predicates())
def test_might_match_is_exact_where_stats_allow(table: pa.Table, predicate: Expr) -> None:
    """With exact stats, one-sided comparisons, '!=' and null tests prune exactly."""
    bound = bind(predicate, SCHEMA)
    assert isinstance(bound, Predicate)
    stats = stats_table([table], lambda: False)
    kept = stats.filter(might_match(bound, TableStats(set(COLUMNS)))).num_rows == 1
    matches = bool(selected(bound, table))
    assert kept or not matches
    if isinstance(bound, (IsNull, NotNull)) or (
        isinstance(bound, Compare) and bound.op in ("<", "<=", ">", ">=", "!=")
    ):
        assert kept == matches
    if table[bound.column].null_count == table.num_rows and not isinstance(bound, IsNull):
        assert not kept  # an all-null (or empty) file matches no comparison


# More, smaller files than for pruning: a proof needs a file without nulls whose bound
# meets the literal.
MUST_SETTINGS = settings(SETTINGS, max_examples=examples(400))


@MUST_SETTINGS
@given(tables(max_rows=24, some_without_nulls=True), EXPRS, st.data())
def test_must_match_proves_only_files_whose_every_row_matches(
    table: pa.Table, expr: Expr, data: st.DataObject
) -> None:
    # A copy-on-write delete drops a proven file unread: one wrong proof deletes a row
    # the user keeps.
    bound = bind(expr, SCHEMA)
    files, stats, tracked = files_and_stats(table, data)
    proven = set(stats.filter(must_match(bound, TableStats(tracked)))["file"].to_pylist())
    for index, file in enumerate(files):
        if index in proven:
            assert len(selected(bound, file)) == file.num_rows, f"file {index}, {bound}"


@MUST_SETTINGS
@given(tables(max_rows=8, some_without_nulls=True), predicates())
def test_must_match_is_exact_where_stats_allow(table: pa.Table, predicate: Expr) -> None:
    """With exact stats, one-sided comparisons and null tests prove exactly."""
    bound = bind(predicate, SCHEMA)
    assert isinstance(bound, Predicate)
    stats = stats_table([table], lambda: False)
    proven = stats.filter(must_match(bound, TableStats(set(COLUMNS)))).num_rows == 1
    every = len(selected(bound, table)) == table.num_rows
    assert every or not proven
    if isinstance(bound, (IsNull, NotNull)) or (
        isinstance(bound, Compare) and bound.op in ("<", "<=", ">", ">=") and table.num_rows
    ):
        assert proven == every
