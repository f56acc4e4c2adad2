"""``must_match``: files whose column statistics prove that every row matches a filter.

The dual of pruning.py's ``might_match``, as Iceberg's strict metrics evaluator is of
its inclusive one: a copy-on-write delete drops such a file whole, unread, as Delta
does. It must be false for any file that *might* hold a row the filter does not select
(a false positive deletes a row the user keeps), so every unknown statistic answers
false, a comparison needs the file to hold no null (a null is never selected), and
``not``, ``like`` and columns without statistics answer false. A float column holding
NaN has unknown bounds (pruning.py), so its files always answer false here, as NaN
matches no comparison.
"""

from __future__ import annotations

import pyarrow.compute as pc

from raylake.expr.pruning import StatsSource
from raylake.expr.tree import And, Compare, Expr, In, IsNull, Like, Not, NotIn, NotNull, Or
from raylake.expr.visitor import ExprVisitor, visit
from raylake.expr.visitors import arrow_scalar, arrow_value_set, negate_push_down

_TRUE = pc.scalar(True)
_FALSE = pc.scalar(False)


def _proven(condition: pc.Expression) -> pc.Expression:
    """Unknown (null) proves nothing: false."""
    return pc.coalesce(condition, _FALSE)


class _Strict(ExprVisitor[pc.Expression]):
    """Every result is non-null, so and/or combine them with plain boolean logic."""

    def __init__(self, stats: StatsSource) -> None:
        self.stats = stats

    def no_nulls(self, column: str) -> pc.Expression:
        return _proven(self.stats.null_count(column) == pc.scalar(0))

    def visit_true(self) -> pc.Expression:
        return _TRUE

    def visit_false(self) -> pc.Expression:
        return _FALSE

    def visit_not(self, node: Not, child: pc.Expression) -> pc.Expression:
        return _FALSE  # unreachable after negate_push_down; always a sound answer

    def visit_and(self, node: And, left: pc.Expression, right: pc.Expression) -> pc.Expression:
        return left & right

    def visit_or(self, node: Or, left: pc.Expression, right: pc.Expression) -> pc.Expression:
        return left | right  # each row matches the side proven for the whole file

    def visit_compare(self, node: Compare) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _FALSE
        lo, hi = self.stats.min(node.column), self.stats.max(node.column)
        value = arrow_scalar(node.value)
        conditions = {
            "=": lambda: (lo == value) & (hi == value),
            "!=": lambda: (hi < value) | (lo > value),
            "<": lambda: hi < value,
            "<=": lambda: hi <= value,
            ">": lambda: lo > value,
            ">=": lambda: lo >= value,
        }
        return _proven(conditions[node.op]()) & self.no_nulls(node.column)

    def visit_in(self, node: In) -> pc.Expression:
        if not node.values or not self.stats.has_stats(node.column):
            return _FALSE
        lo, hi = self.stats.min(node.column), self.stats.max(node.column)
        # Proven only for a file of one value, which the list holds.
        single = (lo == hi) & lo.isin(arrow_value_set(node.values))
        return _proven(single) & self.no_nulls(node.column)

    def visit_not_in(self, node: NotIn) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _FALSE
        if not node.values:
            return self.no_nulls(node.column)
        lo, hi = self.stats.min(node.column), self.stats.max(node.column)
        every = _TRUE
        for v in node.values:  # every value of the list lies outside the file's range
            scalar = arrow_scalar(v)
            every = every & _proven((hi < scalar) | (lo > scalar))
        return every & self.no_nulls(node.column)

    def visit_is_null(self, node: IsNull) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _FALSE
        return _proven(self.stats.null_count(node.column) == self.stats.row_count())

    def visit_not_null(self, node: NotNull) -> pc.Expression:
        if not self.stats.has_stats(node.column):
            return _FALSE
        return self.no_nulls(node.column)

    def visit_like(self, node: Like) -> pc.Expression:
        return _FALSE


def must_match(expr: Expr, stats: StatsSource) -> pc.Expression:
    """An expression over the stats table: true only for files whose every row ``expr``
    selects. ``expr`` should be bound (:func:`raylake.expr.bind`), as for
    :func:`raylake.expr.pruning.might_match`."""
    return visit(negate_push_down(expr), _Strict(stats))
