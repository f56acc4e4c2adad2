"""Arrow batches in the exact Arrow types Spark expects for a DataFrame's schema.

``mapInArrow`` checks each batch a function yields against the Arrow schema of its
declared Spark schema (:func:`raylake.spark.types.spark_arrow_schema`): a table read by
raylake's reader, or a Ray block handed to Spark, is cast to it column by column,
widening what Spark lacks (docs/spark.md, Type mapping).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def to_spark_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Cast to the exact Arrow types Spark expects for the DataFrame's schema."""
    if batch.schema.equals(target):
        return batch
    if batch.num_columns == 0:  # a read of no columns: its placeholder, one null per row
        return pa.RecordBatch.from_arrays([pa.nulls(batch.num_rows, pa.bool_())], schema=target)
    arrays = [_cast(batch.column(i), target.field(i).type) for i in range(batch.num_columns)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _cast(array: pa.Array, dtype: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    # Spark keeps microseconds: finer timestamps are truncated (docs/spark.md).
    return _floor_nanos(array).cast(dtype, safe=not pa.types.is_timestamp(dtype))


def _floor_nanos(array: pa.Array) -> pa.Array:
    """Nanosecond timestamps (also in structs, lists and maps) floored to microseconds, as
    Spark floors them: Arrow's unsafe cast truncates toward zero, which made a time
    before 1970 (1899-01-01 00:59:20.001001002) a microsecond later (.001002)."""
    dtype = array.type
    if pa.types.is_timestamp(dtype) and dtype.unit == "ns":
        floored = pc.floor_temporal(array.view(pa.timestamp("ns")), unit="microsecond")
        return floored.view(dtype)  # floored as UTC instants, whatever the zone
    if not _has_nanos(dtype):
        return array
    if pa.types.is_struct(dtype):
        fields = [_floor_nanos(array.field(i)) for i in range(dtype.num_fields)]
        return pa.StructArray.from_arrays(fields, fields=list(dtype), mask=_nulls(array))
    if pa.types.is_map(dtype):  # a list of key/value structs, as stored
        struct = pa.struct([dtype.key_field, dtype.item_field])
        entries = pa.list_(pa.field("entries", struct, nullable=False))
        return _floor_nanos(array.view(entries)).view(dtype)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        if array.offset:  # from_arrays takes no null mask with sliced offsets
            array = pa.concat_arrays([array])
        values = _floor_nanos(array.values)
        return type(array).from_arrays(array.offsets, values, dtype, mask=_nulls(array))
    return array


def _has_nanos(dtype: pa.DataType) -> bool:
    if pa.types.is_timestamp(dtype):
        return bool(dtype.unit == "ns")
    return any(_has_nanos(dtype.field(i).type) for i in range(dtype.num_fields))


def _nulls(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None
