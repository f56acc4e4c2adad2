"""Visitor framework: a bottom-up fold over the tree, plus the string renderer.

Every interpretation of a filter (row filter, pruning, projection, binding) is a
visitor, so adding a node type means touching each interpretation in one obvious place.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from raylake.expr._syntax import quote_identifier, quote_string, render_literal
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
    check_expr,
)

T = TypeVar("T")


class ExprVisitor(Generic[T]):
    """Bottom-up fold over the tree: each method gets its children's results.

    Override the predicate methods you need; the defaults call :meth:`visit_predicate`.
    """

    def visit_true(self) -> T:
        raise NotImplementedError

    def visit_false(self) -> T:
        raise NotImplementedError

    def visit_not(self, node: Not, child: T) -> T:
        raise NotImplementedError

    def visit_and(self, node: And, left: T, right: T) -> T:
        raise NotImplementedError

    def visit_or(self, node: Or, left: T, right: T) -> T:
        raise NotImplementedError

    def visit_predicate(self, node: Predicate) -> T:
        raise NotImplementedError(f"{type(self).__name__} does not handle {type(node).__name__}")

    def visit_compare(self, node: Compare) -> T:
        return self.visit_predicate(node)

    def visit_in(self, node: In) -> T:
        return self.visit_predicate(node)

    def visit_not_in(self, node: NotIn) -> T:
        return self.visit_predicate(node)

    def visit_is_null(self, node: IsNull) -> T:
        return self.visit_predicate(node)

    def visit_not_null(self, node: NotNull) -> T:
        return self.visit_predicate(node)

    def visit_like(self, node: Like) -> T:
        return self.visit_predicate(node)


class ExprRewriter(ExprVisitor[Expr]):
    """A fold that rebuilds the tree: override the predicate methods that change a leaf."""

    def visit_true(self) -> Expr:
        return AlwaysTrue()

    def visit_false(self) -> Expr:
        return AlwaysFalse()

    def visit_not(self, node: Not, child: Expr) -> Expr:
        return Not(child)

    def visit_and(self, node: And, left: Expr, right: Expr) -> Expr:
        return And(left, right)

    def visit_or(self, node: Or, left: Expr, right: Expr) -> Expr:
        return Or(left, right)


def visit(expr: Expr, visitor: ExprVisitor[T]) -> T:
    """Fold ``expr`` bottom-up with ``visitor``, without recursion."""
    results: list[T] = []
    stack: list[tuple[Expr, bool]] = [(check_expr(expr), False)]
    while stack:
        node, expanded = stack.pop()
        children = node.children()
        if children and not expanded:
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children))
            continue
        args = results[len(results) - len(children) :]
        del results[len(results) - len(children) :]
        results.append(node._accept(visitor, args))
    return results[0]


# Precedence levels for rendering: OR < AND < NOT < predicate.
_OR, _AND, _NOT, _ATOM = 1, 2, 3, 4


def _wrap(part: tuple[str, int], level: int, right: bool = False) -> str:
    text, own = part
    # The right operand of a left-associative operator needs parentheses at equal level.
    return f"({text})" if own < level or (right and own == level) else text


def render(expr: Expr) -> str:
    """Render ``expr`` in the syntax of :func:`raylake.expr.parse_filter` (its ``str()``)."""
    return visit(expr, _Renderer())[0]


class _Renderer(ExprVisitor[tuple[str, int]]):
    """Render the filter syntax accepted by :func:`raylake.expr.parse_filter`."""

    def visit_true(self) -> tuple[str, int]:
        return "true", _ATOM

    def visit_false(self) -> tuple[str, int]:
        return "false", _ATOM

    def visit_not(self, node: Not, child: tuple[str, int]) -> tuple[str, int]:
        return f"not {_wrap(child, _NOT)}", _NOT

    def visit_and(
        self, node: And, left: tuple[str, int], right: tuple[str, int]
    ) -> tuple[str, int]:
        return f"{_wrap(left, _AND)} and {_wrap(right, _AND, right=True)}", _AND

    def visit_or(self, node: Or, left: tuple[str, int], right: tuple[str, int]) -> tuple[str, int]:
        return f"{_wrap(left, _OR)} or {_wrap(right, _OR, right=True)}", _OR

    def visit_compare(self, node: Compare) -> tuple[str, int]:
        return f"{quote_identifier(node.column)} {node.op} {render_literal(node.value)}", _ATOM

    def visit_in(self, node: In) -> tuple[str, int]:
        values = ", ".join(render_literal(v) for v in node.values)
        return f"{quote_identifier(node.column)} in ({values})", _ATOM

    def visit_not_in(self, node: NotIn) -> tuple[str, int]:
        values = ", ".join(render_literal(v) for v in node.values)
        return f"{quote_identifier(node.column)} not in ({values})", _ATOM

    def visit_is_null(self, node: IsNull) -> tuple[str, int]:
        return f"{quote_identifier(node.column)} is null", _ATOM

    def visit_not_null(self, node: NotNull) -> tuple[str, int]:
        return f"{quote_identifier(node.column)} is not null", _ATOM

    def visit_like(self, node: Like) -> tuple[str, int]:
        op = "not like" if node.negated else "like"
        return f"{quote_identifier(node.column)} {op} {quote_string(node.pattern)}", _ATOM
