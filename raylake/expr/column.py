"""``col("x") > 3``: building predicates with Python operators."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raylake.errors import FilterError
from raylake.expr.like import escape_like
from raylake.expr.tree import And, Compare, Expr, In, IsNull, Like, NotIn, NotNull, as_values


class Column:
    """A column reference whose operators build predicates: ``col("x") > 3``.

    ``__eq__`` returns a :class:`Compare`, so columns are deliberately unhashable;
    the tree nodes store the column *name*, never a ``Column``, and so keep their
    structural equality. Python falls back to the mirrored method for
    ``3 < col("x")``, which is how a literal on the left flips the operator.
    """

    __slots__ = ("name",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"col({self.name!r})"

    def _compare(self, op: str, other: object) -> Compare:
        if isinstance(other, (Column, Expr)):
            raise FilterError(
                f"cannot compare column {self.name!r} with {other!r}: "
                "only comparisons with literal values are supported"
            )
        return Compare(op, self.name, other)

    def __eq__(self, other: object) -> Compare:  # type: ignore[override]
        return self._compare("=", other)

    def __ne__(self, other: object) -> Compare:  # type: ignore[override]
        return self._compare("!=", other)

    def __lt__(self, other: object) -> Compare:
        return self._compare("<", other)

    def __le__(self, other: object) -> Compare:
        return self._compare("<=", other)

    def __gt__(self, other: object) -> Compare:
        return self._compare(">", other)

    def __ge__(self, other: object) -> Compare:
        return self._compare(">=", other)

    def isin(self, values: Iterable[Any]) -> In:
        """``column in (values...)``."""
        return In(self.name, as_values(self.name, values))

    def not_in(self, values: Iterable[Any]) -> NotIn:
        """``column not in (values...)``; like SQL, does not match null."""
        return NotIn(self.name, as_values(self.name, values))

    def is_null(self) -> IsNull:
        """``column is null``."""
        return IsNull(self.name)

    def is_not_null(self) -> NotNull:
        """``column is not null``."""
        return NotNull(self.name)

    def like(self, pattern: str) -> Like:
        """``column like pattern``: ``%`` any run, ``_`` one character, ``\\`` escapes."""
        return Like(self.name, pattern)

    def not_like(self, pattern: str) -> Like:
        """``column not like pattern``; like SQL, does not match null."""
        return Like(self.name, pattern, negated=True)

    def starts_with(self, prefix: str) -> Like:
        """``starts_with(column, prefix)``: the prefix taken literally."""
        if not isinstance(prefix, str):
            raise FilterError(f"starts_with on column {self.name!r} needs a string, got {prefix!r}")
        return Like(self.name, escape_like(prefix) + "%")

    def between(self, low: Any, high: Any) -> Expr:
        """``column between low and high``, both ends included."""
        return And(self._compare(">=", low), self._compare("<=", high))


def col(name: str) -> Column:
    """Reference a column by name, to build predicates with Python operators."""
    if not isinstance(name, str) or not name:
        raise FilterError(f"a column name must be a non-empty string, got {name!r}")
    return Column(name)
