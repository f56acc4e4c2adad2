"""Type mapping Spark SQL <-> Arrow (raylake stores Arrow types). See docs/spark.md.

| Spark SQL | Arrow (raylake) |
| --- | --- |
| boolean | bool |
| tinyint / smallint / int / bigint | int8 / int16 / int32 / int64 |
| float / double | float32 / float64 |
| decimal(p, s) | decimal128(p, s) |
| string / binary | string / binary |
| date | date32 |
| timestamp | timestamp[us, tz=UTC] |
| timestamp_ntz | timestamp[us] |
| array<T> / map<K, V> / struct<...> | list<T> / map<K, V> / struct<...> |

Reading widens what Spark lacks: unsigned ints to the next signed width (uint64 to
decimal(20, 0)), float16 to float, large_string/large_binary/large_list to
string/binary/array, fixed_size_list to array, timestamps of any unit to
microseconds, dictionary columns to their values. Anything else (time of day,
intervals, durations, unions) raises UnsupportedTypeError naming the column.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from raylake.errors import UnsupportedTypeError

_SIMPLE_TO_ARROW: dict[type[T.DataType], pa.DataType] = {
    T.BooleanType: pa.bool_(),
    T.ByteType: pa.int8(),
    T.ShortType: pa.int16(),
    T.IntegerType: pa.int32(),
    T.LongType: pa.int64(),
    T.FloatType: pa.float32(),
    T.DoubleType: pa.float64(),
    T.StringType: pa.string(),
    T.BinaryType: pa.binary(),
    T.DateType: pa.date32(),
    T.TimestampType: pa.timestamp("us", tz="UTC"),
    T.TimestampNTZType: pa.timestamp("us"),
}


def arrow_schema_of(schema: T.StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema; an unsupported type names its column."""
    return pa.schema([_to_arrow_field(f, f.name) for f in schema.fields])


def _to_arrow_field(field: T.StructField, path: str) -> pa.Field:
    return pa.field(field.name, _to_arrow(field.dataType, path), nullable=field.nullable)


def _to_arrow(dtype: T.DataType, path: str) -> pa.DataType:
    simple = _SIMPLE_TO_ARROW.get(type(dtype))
    if simple is not None:
        return simple
    if isinstance(dtype, T.DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    if isinstance(dtype, T.ArrayType):
        element = _to_arrow(dtype.elementType, f"{path}[]")
        return pa.list_(pa.field("element", element, nullable=dtype.containsNull))
    if isinstance(dtype, T.MapType):
        key = _to_arrow(dtype.keyType, f"{path}.key")
        value = _to_arrow(dtype.valueType, f"{path}.value")
        return pa.map_(key, pa.field("value", value, nullable=dtype.valueContainsNull))
    if isinstance(dtype, T.StructType):
        return pa.struct([_to_arrow_field(f, f"{path}.{f.name}") for f in dtype.fields])
    raise UnsupportedTypeError(
        path, dtype.simpleString(), "a raylake table", "cast it in Spark (e.g. to string)"
    )


def spark_schema_of(schema: pa.Schema) -> T.StructType:
    """The Spark schema a raylake table is read as (see the module doc for widenings)."""
    return T.StructType([_to_spark_field(f, f.name) for f in schema])


def _to_spark_field(field: pa.Field, path: str) -> T.StructField:
    return T.StructField(field.name, _to_spark(field.type, path), nullable=field.nullable)


_SIMPLE_TO_SPARK: list[tuple[pa.DataType, T.DataType]] = [
    (pa.bool_(), T.BooleanType()),
    (pa.int8(), T.ByteType()),
    (pa.int16(), T.ShortType()),
    (pa.int32(), T.IntegerType()),
    (pa.int64(), T.LongType()),
    (pa.uint8(), T.ShortType()),
    (pa.uint16(), T.IntegerType()),
    (pa.uint32(), T.LongType()),
    (pa.uint64(), T.DecimalType(20, 0)),
    (pa.float16(), T.FloatType()),
    (pa.float32(), T.FloatType()),
    (pa.float64(), T.DoubleType()),
    (pa.string(), T.StringType()),
    (pa.large_string(), T.StringType()),
    (pa.binary(), T.BinaryType()),
    (pa.large_binary(), T.BinaryType()),
    (pa.date32(), T.DateType()),
    (pa.date64(), T.DateType()),
]


def _to_spark(dtype: pa.DataType, path: str) -> T.DataType:
    for arrow_type, spark_type in _SIMPLE_TO_SPARK:
        if dtype == arrow_type:
            return spark_type
    if pa.types.is_dictionary(dtype):
        return _to_spark(dtype.value_type, path)
    if pa.types.is_decimal(dtype) and dtype.precision <= 38:
        return T.DecimalType(dtype.precision, dtype.scale)
    if pa.types.is_timestamp(dtype):
        return T.TimestampType() if dtype.tz else T.TimestampNTZType()
    if pa.types.is_fixed_size_binary(dtype):
        return T.BinaryType()
    if (
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
    ):
        element = dtype.value_field
        return T.ArrayType(_to_spark(element.type, f"{path}[]"), element.nullable)
    if pa.types.is_map(dtype):
        return T.MapType(
            _to_spark(dtype.key_type, f"{path}.key"),
            _to_spark(dtype.item_type, f"{path}.value"),
            dtype.item_field.nullable,
        )
    if pa.types.is_struct(dtype):
        return T.StructType(
            [_to_spark_field(dtype.field(i), f"{path}.{dtype.field(i).name}")
             for i in range(dtype.num_fields)]
        )  # fmt: skip
    raise UnsupportedTypeError(path, dtype, "Spark SQL")


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema of the batches handed to Spark for a table of ``schema``: Spark's
    own Arrow types for :func:`spark_schema_of` (batches must match it exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema_of(schema))
