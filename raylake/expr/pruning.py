"""``might_match``: skip files (or partitions) using their column statistics.

The result is a pyarrow expression over a table with one row per file, so pruning a
whole manifest is a single vectorised ``filter``. It must be true for every file that
*might* hold a matching row: a false positive costs a read, a false negative returns
wrong results. Hence every unknown statistic (null min, max or null_count) keeps the
file, and min/max are only used as bounds (a truncated string min is fine).

Float NaN is not ordered: a stats writer must report an unknown (null) min/max for a
file whose float column contains NaN.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from raylake.expr.like import like_prefix, match_like, prefix_successor
from raylake.expr.tree import And, Compare, Expr, In, IsNull, Like, Not, NotIn, NotNull, Or
from raylake.expr.visitor import ExprVisitor, visit
from raylake.expr.visitors import arrow_scalar, arrow_value_set, negate_push_down
from raylake.pyvalues import exact_py

# Above this many values, ``in`` is tested against the list's [lowest, highest] range.
MAX_EXACT_IN_VALUES = 16


class StatsSource(Protocol):
    """Per-file statistics as pyarrow expressions over the caller's stats table.

    A null value of ``min``/``max``/``null_count`` means unknown.
    """

    def has_stats(self, column: str) -> bool:
        """Whether statistics are tracked for ``column`` at all."""
        ...

    def min(self, column: str) -> pc.Expression:
        """Lower bound of the non-null values; null = unknown."""
        ...

    def max(self, column: str) -> pc.Expression:
        """Upper bound of the non-null values; null = unknown."""
        ...

    def null_count(self, column: str) -> pc.Expression:
        """Number of null values; null = unknown."""
        ...

    def row_count(self) -> pc.Expression:
        """Number of rows."""
        ...


_TRUE = pc.scalar(True)
_FALSE = pc.scalar(False)


def _keep_unknown(condition: pc.Expression) -> pc.Expression:
    """Unknown (null) means the file might match: keep it."""
    return pc.coalesce(condition, _TRUE)


def _value_range(values: tuple[Any, ...]) -> tuple[Any, Any] | None:
    """The lowest and highest value of an ``in`` list, or None if they are not orderable.

    A NaN matches nothing (docs/filters.md) and is unordered: sorted beside numbers it
    could stand first or last and prune every file, so it is left out of the range."""
    # exact_py: a time64[ns] as its nanoseconds (as_py cuts them to microseconds, and the
    # range of values that differ below one was another value: files were pruned wrongly).
    plain = [(exact_py(v) if isinstance(v, pa.Scalar) else v, v) for v in values]
    plain = [(key, v) for key, v in plain if not (isinstance(key, float) and math.isnan(key))]
    if not plain:
        return None
    try:
        ordered = sorted(plain, key=lambda pair: pair[0])
    except TypeError:
        return None
    return ordered[0][1], ordered[-1][1]


class _Pruner(ExprVisitor[pc.Expression]):
    """Every result is non-null, so and/or combine them with plain boolean logic."""

    def __init__(self, stats: StatsSource) -> None:
        self.stats = stats

    def has_values(self, column: str) -> pc.Expression:
        """False only when the file is known to hold nulls alone (or no rows)."""
        null_count = self.stats.null_count(column)
        return _keep_unknown(null_count != self.stats.row_count())

    def visit_true(self) -> pc.Expression:
        return _TRUE

    def visit_false(self) -> pc.Expression:
        return _FALSE

    def visit_not(self, node: Not, child: pc.Expression) -> pc.Expression:
        return _TRUE  # unreachable after negate_push_down; always a sound answer

    def visit_and(self, node: And, left: pc.Expression, right: pc.Expression) -> pc.Expression:
        return left & right

    def visit_or(self, node: Or, left: pc.Expression, right: pc.Expression) -> pc.Expression:
        return left | right

    def visit_compare(self, node: Compare) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _TRUE
        lo, hi = self.stats.min(node.column), self.stats.max(node.column)
        value = arrow_scalar(node.value)
        conditions = {
            "=": lambda: (lo <= value) & (hi >= value),
            # Nulls never match '!=', so only the non-null values matter.
            "!=": lambda: ~((lo == value) & (hi == value)),
            "<": lambda: lo < value,
            "<=": lambda: lo <= value,
            ">": lambda: hi > value,
            ">=": lambda: hi >= value,
        }
        return _keep_unknown(conditions[node.op]()) & self.has_values(node.column)

    def visit_in(self, node: In) -> pc.Expression:
        if not node.values:
            return _FALSE
        if not self.stats.has_stats(node.column):
            return _TRUE
        lo, hi = self.stats.min(node.column), self.stats.max(node.column)
        value_range = _value_range(node.values)
        if len(node.values) > MAX_EXACT_IN_VALUES and value_range is not None:
            low, high = (arrow_scalar(v) for v in value_range)
            condition = (lo <= high) & (hi >= low)
        else:
            condition = _FALSE
            for v in node.values:
                scalar = arrow_scalar(v)
                condition = condition | ((lo <= scalar) & (hi >= scalar))
        return _keep_unknown(condition) & self.has_values(node.column)

    def visit_not_in(self, node: NotIn) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _TRUE
        has_values = self.has_values(node.column)
        if not node.values:
            return has_values
        lo, hi = self.stats.min(node.column), self.stats.max(node.column)
        # Prunable only when every non-null value is one single excluded value.
        single_excluded = (lo == hi) & lo.isin(arrow_value_set(node.values))
        return _keep_unknown(~single_excluded) & has_values

    def visit_is_null(self, node: IsNull) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _TRUE
        return _keep_unknown(self.stats.null_count(node.column) > 0)

    def visit_not_null(self, node: NotNull) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _TRUE
        return self.has_values(node.column)

    def visit_like(self, node: Like) -> pc.Expression:
        """``like 'abc%'`` prunes like the range ``'abc' <= x < 'abd'``; ``not like``
        prunes a file only when its one value matches the pattern."""
        if not self.stats.has_stats(node.column):
            return _TRUE
        lo, hi = self.stats.min(node.column), self.stats.max(node.column)
        has_values = self.has_values(node.column)
        if node.negated:
            single_match = (lo == hi) & match_like(lo.cast(pa.large_string()), node.pattern)
            return _keep_unknown(~single_match) & has_values
        prefix, exact = like_prefix(node.pattern)
        if not prefix:
            return has_values
        low = arrow_scalar(prefix)
        if exact:
            return _keep_unknown((lo <= low) & (hi >= low)) & has_values
        condition = hi >= low
        above = prefix_successor(prefix)
        if above is not None:
            condition = condition & (lo < arrow_scalar(above))
        return _keep_unknown(condition) & has_values


def might_match(expr: Expr, stats: StatsSource) -> pc.Expression:
    """An expression over the stats table: false only for files with no matching row.

    ``expr`` should be bound (:func:`raylake.expr.bind`) so that literals have the
    columns' types, which the stats columns share. ``not`` is handled by first
    rewriting to negation normal form. A file whose column is known to be all null
    (``null_count == row_count``) is pruned by every comparison on that column.
    """
    return visit(negate_push_down(expr), _Pruner(stats))
