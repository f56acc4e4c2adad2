"""The filter expression tree: small immutable nodes, walked by visitors.

One tree, many interpretations (row filter, statistics pruning, projection onto
key columns, string rendering), in the style of PyIceberg's expressions. Nodes are
frozen dataclasses that compare structurally and hash, so they can be cached, used as
dict keys and asserted on in tests. Literal equality is type-strict (``1``, ``1.0``
and ``True`` are different literals) so that a round trip through the string syntax
is checked exactly.

Traversal, equality and hashing are iterative (:func:`raylake.expr.visitor.visit`),
so a filter with thousands of ``or`` terms does not hit Python's recursion limit.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from raylake.errors import FilterError
from raylake.expr._syntax import COMPARE_OPS
from raylake.expr.like import check_pattern

if TYPE_CHECKING:
    from raylake.expr.visitor import ExprVisitor

T = TypeVar("T")

_OP_ALIASES = {"==": "=", "<>": "!="}


def _tag(value: Any) -> Any:
    """Equality key of a literal field: literals carry their type, so ``1 != True``."""
    if isinstance(value, tuple):
        return tuple(_tag(v) for v in value)
    return (type(value), value)


class Expr:
    """Base class of every node: a boolean-valued filter under SQL three-valued logic."""

    def children(self) -> Sequence[Expr]:
        """Sub-expressions, visited before their parent."""
        return ()

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        raise NotImplementedError

    def __and__(self, other: object) -> Expr:
        return and_(self, other) if isinstance(other, Expr) else NotImplemented

    def __or__(self, other: object) -> Expr:
        return or_(self, other) if isinstance(other, Expr) else NotImplemented

    def __invert__(self) -> Expr:
        return not_(self)

    def __bool__(self) -> bool:
        # Catches ``3 < col("x") < 5`` and ``a and b``, which would silently drop a term.
        raise TypeError(
            f"the truth value of a filter expression ({self}) is ambiguous; "
            "combine filters with &, | and ~ instead of and/or/not"
        )

    def _own_key(self) -> tuple[Any, ...]:
        """This node's type and literal fields; children are compared separately."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        values = (getattr(self, f.name) for f in fields)
        return (type(self), *(_tag(v) for v in values if not isinstance(v, Expr)))

    def _preorder_keys(self) -> list[tuple[Any, ...]]:
        keys, stack = [], [self]
        while stack:  # iterative, like visit(), so deep trees compare and hash
            node = stack.pop()
            keys.append(node._own_key())
            stack.extend(reversed(node.children()))
        return keys

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        assert isinstance(other, Expr)
        return self is other or self._preorder_keys() == other._preorder_keys()

    def __hash__(self) -> int:
        return hash(tuple(self._preorder_keys()))

    def __str__(self) -> str:
        from raylake.expr.visitor import render

        return render(self)


@dataclasses.dataclass(frozen=True, eq=False)
class AlwaysTrue(Expr):
    """Matches every row (the empty filter)."""

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_true()


@dataclasses.dataclass(frozen=True, eq=False)
class AlwaysFalse(Expr):
    """Matches no row."""

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_false()


@dataclasses.dataclass(frozen=True, eq=False)
class And(Expr):
    """Both sides hold (Kleene AND: false wins over unknown)."""

    left: Expr
    right: Expr

    def children(self) -> Sequence[Expr]:
        return (self.left, self.right)

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_and(self, children[0], children[1])


@dataclasses.dataclass(frozen=True, eq=False)
class Or(Expr):
    """Either side holds (Kleene OR: true wins over unknown)."""

    left: Expr
    right: Expr

    def children(self) -> Sequence[Expr]:
        return (self.left, self.right)

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_or(self, children[0], children[1])


@dataclasses.dataclass(frozen=True, eq=False)
class Not(Expr):
    """Negation; unknown stays unknown, so ``not (x = 1)`` does not match a null ``x``."""

    child: Expr

    def children(self) -> Sequence[Expr]:
        return (self.child,)

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_not(self, children[0])


class Predicate(Expr):
    """A test on one column, named by ``column``; a leaf of the tree."""

    column: str

    def _check_column(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise FilterError(f"a column name must be a non-empty string, got {self.column!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Compare(Predicate):
    """``column <op> value``; unknown when the column is null."""

    op: str
    column: str
    value: Any

    def __post_init__(self) -> None:
        self._check_column()
        op = _OP_ALIASES.get(self.op, self.op)
        if op not in COMPARE_OPS:
            raise FilterError(f"unknown comparison operator {self.op!r}; use one of {COMPARE_OPS}")
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", plain_literal(self.value))
        if self.value is None or (isinstance(self.value, pa.Scalar) and not self.value.is_valid):
            raise FilterError(
                f"comparing column {self.column!r} with null is never true; "
                "use is_null() / is_not_null()"
            )
        if isinstance(self.value, Expr):
            raise FilterError("comparing a column with an expression is unsupported")

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_compare(self)


_TIME_UNITS = ("s", "ms", "us", "ns")
_COARSE_UNITS = ("Y", "M", "W", "D", "h", "m")  # whole seconds


def plain_literal(value: Any) -> Any:
    """A numpy or pandas scalar as the Python or Arrow value a filter holds.

    These are what ``df.x.max()`` and ``df.x.unique()`` hand back: numpy's numbers
    become Python's (so they print and bind as numbers), and times keep their
    nanoseconds, which ``datetime`` (of which ``pandas.Timestamp`` is a subclass)
    cannot hold: they become Arrow timestamps of their own unit.
    """
    if _is_pandas_missing(value):
        return None
    if isinstance(value, np.datetime64 | np.timedelta64) and np.isnat(value):
        return None
    if isinstance(value, np.datetime64):
        unit = np.datetime_data(value.dtype)[0]
        if unit in _TIME_UNITS:
            return pa.scalar(int(value.astype(np.int64)), pa.timestamp(unit))
        if unit not in _COARSE_UNITS:
            raise FilterError(f"a numpy datetime64 of unit {unit!r} is finer than nanoseconds")
        return value.astype("datetime64[s]").item()  # days, hours, minutes: exact
    if isinstance(value, np.timedelta64):
        return _duration_literal(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, datetime.datetime) and getattr(value, "nanosecond", None):
        # pandas.Timestamp: ``value`` counts nanoseconds since the epoch, in UTC if aware
        nanos = int(value.value)  # type: ignore[attr-defined]
        return pa.scalar(nanos, pa.timestamp("ns", "UTC" if value.tzinfo else None))
    return value


def _duration_literal(value: np.timedelta64) -> pa.Scalar:
    """A numpy duration as an Arrow one, which has units from seconds to nanoseconds:
    weeks, days, hours and minutes (``np.timedelta64(1, "D")``) count seconds exactly;
    months and years have no length in seconds."""
    unit = np.datetime_data(value.dtype)[0]
    if unit in _TIME_UNITS:
        return pa.scalar(value)
    if unit in ("W", "D", "h", "m"):
        return pa.scalar(value.astype("timedelta64[s]"))
    raise FilterError(
        f"a numpy timedelta64 of unit {unit!r} is not a fixed duration of seconds to "
        "nanoseconds: give it as a datetime.timedelta or in one of the units s, ms, us, ns"
    )


def _is_pandas_missing(value: Any) -> bool:
    """``pandas.NaT`` or ``pandas.NA`` (in ``df.x.unique()`` of a column with missing
    values), told apart without importing pandas. NaT is a ``datetime`` whose ``value`` is
    the int64 minimum: taken as a time it compared as the instant 1677-09-21."""
    kind = type(value)
    return kind.__name__ in ("NaTType", "NAType") and kind.__module__.startswith("pandas")


def half(value: float) -> np.float16:
    """A float as float16, beyond whose range it is infinite (as pyarrow casts floats):
    pyarrow before 17 takes only numpy's float16 for its half floats."""
    with np.errstate(over="ignore"):
        return np.float16(value)


def as_values(column: str, values: Iterable[Any]) -> tuple[Any, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise FilterError(f"'in' on column {column!r} needs a collection of values, got {values!r}")
    result = tuple(plain_literal(v) for v in values)
    if any(v is None or (isinstance(v, pa.Scalar) and not v.is_valid) for v in result):
        raise FilterError(f"'in' on column {column!r}: null never matches; use is_null()")
    return result


@dataclasses.dataclass(frozen=True, eq=False)
class In(Predicate):
    """``column in (values...)``; unknown when the column is null."""

    column: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        self._check_column()
        object.__setattr__(self, "values", as_values(self.column, self.values))

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_in(self)


@dataclasses.dataclass(frozen=True, eq=False)
class NotIn(Predicate):
    """``column not in (values...)``: exactly ``not (column in ...)``, so nulls don't match."""

    column: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        self._check_column()
        object.__setattr__(self, "values", as_values(self.column, self.values))

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_not_in(self)


@dataclasses.dataclass(frozen=True, eq=False)
class IsNull(Predicate):
    """``column is null`` (NaN is not null); never unknown."""

    column: str

    def __post_init__(self) -> None:
        self._check_column()

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_is_null(self)


@dataclasses.dataclass(frozen=True, eq=False)
class NotNull(Predicate):
    """``column is not null``; never unknown."""

    column: str

    def __post_init__(self) -> None:
        self._check_column()

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_not_null(self)


@dataclasses.dataclass(frozen=True, eq=False)
class Like(Predicate):
    """``column like 'pattern'`` (``negated``: ``not like``) on a string column.

    ``%`` matches any run of characters, ``_`` exactly one, a backslash escapes the next
    character (raylake/expr/like.py). Unknown when the column is null, either way.
    """

    column: str
    pattern: str
    negated: bool = False

    def __post_init__(self) -> None:
        self._check_column()
        check_pattern(self.pattern)
        if not isinstance(self.negated, bool):
            raise FilterError(f"Like.negated must be a bool, got {self.negated!r}")

    def _accept(self, visitor: ExprVisitor[T], children: list[T]) -> T:
        return visitor.visit_like(self)


def check_expr(expr: object) -> Expr:
    """Return ``expr`` if it is a filter expression, else raise :class:`FilterError`."""
    if not isinstance(expr, Expr):
        raise FilterError(f"expected a filter expression, got {type(expr).__name__}: {expr!r}")
    return expr


def and_(*exprs: Expr) -> Expr:
    """Conjunction of ``exprs`` (left-deep), dropping ``AlwaysTrue`` terms.

    Any ``AlwaysFalse`` term makes the whole conjunction ``AlwaysFalse``; no terms
    give ``AlwaysTrue``. Both rewrites are exact under three-valued logic.
    """
    checked = [check_expr(e) for e in exprs]
    if any(isinstance(e, AlwaysFalse) for e in checked):
        return AlwaysFalse()
    result: Expr = AlwaysTrue()
    for e in checked:
        if not isinstance(e, AlwaysTrue):
            result = e if isinstance(result, AlwaysTrue) else And(result, e)
    return result


def or_(*exprs: Expr) -> Expr:
    """Disjunction of ``exprs`` (left-deep), dropping ``AlwaysFalse`` terms."""
    checked = [check_expr(e) for e in exprs]
    if any(isinstance(e, AlwaysTrue) for e in checked):
        return AlwaysTrue()
    result: Expr = AlwaysFalse()
    for e in checked:
        if not isinstance(e, AlwaysFalse):
            result = e if isinstance(result, AlwaysFalse) else Or(result, e)
    return result


def not_(expr: Expr) -> Expr:
    """Negation, folding constants and double negation."""
    expr = check_expr(expr)
    if isinstance(expr, AlwaysTrue):
        return AlwaysFalse()
    if isinstance(expr, AlwaysFalse):
        return AlwaysTrue()
    if isinstance(expr, Not):
        return expr.child
    return Not(expr)
