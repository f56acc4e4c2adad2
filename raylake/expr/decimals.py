"""Decimals read as floats, correctly rounded."""

from __future__ import annotations

from typing import TypeVar

import pyarrow as pa

ArrowValues = TypeVar("ArrowValues", pa.Array, pa.ChunkedArray)


def decimal_as_float(values: ArrowValues, target: pa.DataType) -> ArrowValues:
    """``values`` (decimals) as the nearest ``target`` floats, as Java's
    ``BigDecimal.doubleValue()`` and Python's ``float(Decimal)`` round. Arrow's cast of
    a decimal is not always correctly rounded (5091.15 read as 5091.150000000001, in
    10-28% of random values); its parse of the decimal's text is."""
    return values.cast(pa.string()).cast(target)


def float_as_decimal(values: ArrowValues, target: pa.DataType) -> ArrowValues:
    """``values`` (floats) as ``target`` decimals of their shortest text, as Python's
    ``Decimal(repr(x))`` and Spark's cast read a double: 0.1 is 0.1 at any scale (Arrow's
    cast gives 0.10000000000000000555 at scale 20; a float32 0.1 is 0.1 too, where
    Spark widens it to a double first), and a float with more digits than
    the scale keeps (1.239 into scale 2) raises ``ArrowInvalid`` where Arrow's cast
    rounds it, as a decimal with those digits is refused."""
    return values.cast(pa.string()).cast(target)
