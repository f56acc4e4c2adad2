"""A dataset's schema as the Arrow schema a sink checks and creates tables from.

Ray hands a sink Arrow schemas, ``ray.data.Schema`` s and pandas block schemas (the
dtypes of ``ray.data.from_pandas`` blocks). Rows that came from DataFrames take the types
``from_pandas`` gives (raylake/table/pandas_types.py), whichever pandas made them: pandas 3
gives microseconds and ``large_string`` where pandas 2 gives nanoseconds and ``string``,
and a table made by ``write_lake(ray.data.from_pandas(df))`` must not depend on that, nor
differ from ``from_pandas(df)``'s (docs/ray-data.md).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raylake.table.pandas_types import dataframe_schema

_DTYPES = ("numpy", "pandas")  # the modules of the dtypes a DataFrame of pandas' own has


def arrow_schema(schema: Any) -> pa.Schema | None:
    """``schema`` as Arrow, in the table types of a DataFrame's columns where it is one. A
    column whose type has no Arrow equivalent yet (a pandas object column) becomes null:
    checked on the rows, not here."""
    if schema is None or isinstance(schema, pa.Schema):
        return None if schema is None else dataframe_schema(schema)
    from ray.data import Schema

    wrapped = schema if isinstance(schema, Schema) else Schema(schema)
    if isinstance(wrapped.base_schema, pa.Schema):
        return dataframe_schema(wrapped.base_schema)
    of_pandas = _of_dtypes(wrapped.base_schema)
    if of_pandas is not None:
        return dataframe_schema(of_pandas)
    types = [t if isinstance(t, pa.DataType) else pa.null() for t in wrapped.types]
    return pa.schema([pa.field(n, t) for n, t in zip(wrapped.names, types, strict=True)])


def typed_by_rows(schema: Any) -> frozenset[str]:
    """The columns :func:`arrow_schema` types null as placeholders: a pandas object
    column (strings, most often), whose type only its rows tell, where an Arrow schema's
    null column is a column of nulls."""
    converted = arrow_schema(schema)
    if converted is None or isinstance(schema, pa.Schema):
        return frozenset()
    from ray.data import Schema

    wrapped = schema if isinstance(schema, Schema) else Schema(schema)
    if isinstance(wrapped.base_schema, pa.Schema):
        return frozenset()
    return frozenset(f.name for f in converted if pa.types.is_null(f.type))


def _of_dtypes(block_schema: Any) -> pa.Schema | None:
    """A pandas block schema as pyarrow converts a DataFrame of its dtypes (None where it
    cannot): Ray's own conversion logs a traceback for a zoned ``datetime64`` and gives up
    on the column. Another library's dtype (Ray's tensors) is left to Ray: an empty
    column of it has no shape to convert."""
    import pandas as pd

    try:
        if any(type(t).__module__.split(".")[0] not in _DTYPES for t in block_schema.types):
            return None
        columns = zip(block_schema.names, block_schema.types, strict=True)
        empty = pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns})
        return pa.Schema.from_pandas(empty, preserve_index=False)
    except (AttributeError, pa.ArrowException, TypeError, ValueError):
        return None


def dataset_types(first: pa.Schema | None, known: pa.Schema | None) -> pa.Schema | None:
    """The first bundle's schema with each column typed as in the dataset's whole schema
    (Ray's unification of every block's, where it is known): a first block whose values
    of a column are all None has it as null, one of int32 ints or without nulls has it as
    int32 or non-nullable, and a table created from it (or a column ``schema_mode="merge"``
    adds) would refuse the int64 values or the nulls of the later blocks."""
    if first is None or known is None:
        return first
    for i, field in enumerate(first):
        index = known.get_field_index(field.name)
        wider = known.field(index) if index >= 0 else None
        if wider is None or pa.types.is_null(wider.type):
            continue
        nullable = field.nullable or wider.nullable
        first = first.set(i, field.with_type(wider.type).with_nullable(nullable))
    return first
