"""Filter expressions: one small immutable tree, many interpretations.

Build filters with ``col("x") > 3`` or parse them with ``parse_filter("x > 3")``;
``bind`` them to a schema; then ``to_arrow`` filters rows, ``might_match`` prunes
files by statistics, ``must_match`` proves from them that a file's every row matches,
and ``filter_on_columns`` projects onto key columns.
"""

from __future__ import annotations

from raylake.errors import FilterArgumentError
from raylake.expr.bind import bind, bind_literal, referenced_columns
from raylake.expr.column import Column, col
from raylake.expr.like import escape_like
from raylake.expr.parser import parse_filter
from raylake.expr.pruning import StatsSource, might_match
from raylake.expr.strict import must_match
from raylake.expr.tree import (
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
    and_,
    not_,
    or_,
)
from raylake.expr.visitor import ExprVisitor, render, visit
from raylake.expr.visitors import (
    conjuncts,
    evaluate_python,
    filter_on_columns,
    nan_sensitive,
    negate_push_down,
    to_arrow,
)


def as_expr(filter: str | Expr | None) -> Expr:
    """Normalise the ``filter=`` argument that public APIs accept.

    ``None`` means no filter (AlwaysTrue), a string is parsed, an expression is
    returned as is; anything else raises :class:`FilterArgumentError` (an
    InvalidArgumentError and a FilterError) naming it.
    """
    if filter is None:
        return AlwaysTrue()
    if isinstance(filter, str):
        return parse_filter(filter)
    if isinstance(filter, Expr):
        return filter
    raise FilterArgumentError("filter", filter, "a filter string, a raylake expression or None")


__all__ = [
    "AlwaysFalse",
    "AlwaysTrue",
    "And",
    "Column",
    "Compare",
    "Expr",
    "ExprVisitor",
    "In",
    "IsNull",
    "Like",
    "Not",
    "NotIn",
    "NotNull",
    "Or",
    "Predicate",
    "StatsSource",
    "and_",
    "as_expr",
    "bind",
    "bind_literal",
    "col",
    "conjuncts",
    "escape_like",
    "evaluate_python",
    "filter_on_columns",
    "might_match",
    "must_match",
    "nan_sensitive",
    "negate_push_down",
    "not_",
    "or_",
    "parse_filter",
    "referenced_columns",
    "render",
    "to_arrow",
    "visit",
]
