"""Casts between decimals and floats that go through the values' text."""

from __future__ import annotations

from typing import TypeVar

import pyarrow as pa

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
