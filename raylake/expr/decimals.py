"""Decimals: casts between decimals and floats that go through the values' text, and
the types decimal arithmetic is computed in (docs/filters.md, "Merge expressions")."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import FilterError

ArrowValues = TypeVar("ArrowValues", pa.Array, pa.ChunkedArray)


def cast_through_text(values: ArrowValues, target: pa.DataType) -> ArrowValues:
    """Decimals as the nearest ``target`` floats, or floats as ``target`` decimals of
    their shortest text: Arrow's own casts between the two are not what a user expects.

    - A decimal to a float rounds to the nearest, as Java's ``BigDecimal.doubleValue()``
      and Python's ``float(Decimal)`` do; Arrow's cast does not always (5091.15 read as
      5091.150000000001, in 10-28% of random values), its parse of the text does.
    - A float to a decimal takes its shortest digits, as ``Decimal(repr(x))`` and Spark's
      cast of a double: 0.1 is 0.1 at any scale (Arrow's cast gives
      0.10000000000000000555 at scale 20; a float32 0.1 is 0.1 too, where Spark widens
      it to a double first); one with more digits than the scale keeps (1.239 into
      scale 2) raises ``ArrowInvalid``, where Arrow's cast rounds it, as a decimal with
      those digits is refused.
    """
    return values.cast(pa.string()).cast(target)


# decimal256's precision: the most digits Arrow computes a decimal result in.
MAX_DIGITS = 76
_DECIMAL128_DIGITS = 38


def decimal_literal(value: Any) -> pa.Scalar | None:
    """A number literal as the smallest decimal that holds it exactly (1 as
    decimal(1, 0), 0.25 as decimal(2, 2), a float by its shortest digits), or None where
    that takes over 38 digits or the value is no finite number. Next to a decimal(38, 18)
    column, 1 typed as the column took 38 digits of its own: ``t.v * 2`` needed 77."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return None
    number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not number.is_finite():
        return None
    _, digits, exponent = number.as_tuple()
    exponent = int(exponent)  # a finite Decimal's is an int already (typed int | str)
    kept = list(digits)
    while exponent < 0 and len(kept) > 1 and kept[-1] == 0:  # 1.50 needs no 2nd place
        kept.pop()
        exponent += 1
    scale = max(-exponent, 0)
    precision = max(len(kept) + max(exponent, 0), scale, 1)
    if precision > _DECIMAL128_DIGITS:
        return None
    return pa.scalar(number, pa.decimal128(precision, scale))


def widened(func: Callable[..., Any], left: Any, right: Any, what: str) -> tuple[Any, Any]:
    """The operands of Arrow's arithmetic ``func`` (decimals, or a decimal and an
    integer) in types whose result type holds every result, so the result is exact.

    Arrow's result types are SQL's (``+``: the larger scale, one more integer digit;
    ``*``: the precisions and the scales added), which for decimal(38, s) operands
    exceed decimal128's 38 digits. Such operands are computed as decimal256 (76
    digits); where even that is too few (decimal(38, 18) * decimal(38, 18) needs 77),
    as decimal256 of the digits their values use. Beyond that, a FilterError naming
    ``what`` and the digits needed."""
    if not _decimal_operands(left, right) or _fits(func, left.type, right.type):
        return left, right
    wide = (_decimal256(left), _decimal256(right))
    if _fits(func, wide[0].type, wide[1].type):
        return wide
    narrow = (_decimal256(left, _digits_used(left)), _decimal256(right, _digits_used(right)))
    if _fits(func, narrow[0].type, narrow[1].type):
        return narrow
    raise FilterError(
        f"cannot evaluate {what}: its operands' values need {narrow[0].type} and "
        f"{narrow[1].type}, whose result type has more than {MAX_DIGITS} digits, the most "
        "a decimal holds"
    )


def _decimal_operands(left: Any, right: Any) -> bool:
    types = (left.type, right.type)
    return any(pa.types.is_decimal(t) for t in types) and all(
        pa.types.is_decimal(t) or pa.types.is_integer(t) for t in types
    )


def _fits(func: Callable[..., Any], left: pa.DataType, right: pa.DataType) -> bool:
    """Whether Arrow has a result type for ``func`` of these types: asked on no rows,
    so the rule is Arrow's own, not a copy of it."""
    try:
        func(pa.array([], left), pa.array([], right))
    except pa.ArrowInvalid:
        return False
    return True


def _decimal256(operand: Any, precision: int | None = None) -> Any:
    """A decimal or integer operand as decimal256, of its type's digits or ``precision``."""
    typ = operand.type
    if pa.types.is_integer(typ):  # every value of the type: int64 is decimal(19, 0)
        top = 2 ** (typ.bit_width - (1 if pa.types.is_signed_integer(typ) else 0)) - 1
        digits, scale = len(str(top)), 0
    else:
        digits, scale = typ.precision, typ.scale
    return operand.cast(pa.decimal256(precision or digits, scale))


def _digits_used(operand: Any) -> int:
    """The precision the operand's values need at its scale (at least 1)."""
    scale = operand.type.scale if pa.types.is_decimal(operand.type) else 0
    if isinstance(operand, pa.Scalar):
        ends = [operand.as_py()]
    else:
        bounds = pc.min_max(operand)
        ends = [bounds["min"].as_py(), bounds["max"].as_py()]
    top = max((abs(v) for v in ends if v is not None), default=0)
    whole = len(str(int(top))) if top >= 1 else 0
    return max(whole + scale, 1)
