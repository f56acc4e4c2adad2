"""Arrow types to and from the JSON form stored in schema files.

Primitive types are stored as the names pyarrow itself uses (``"int64"``,
``"string"``, ``"date32"``); parameterized and nested types as small objects,
so that a reader in another language can decode them (see docs/format.md).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pyarrow as pa

from raylake.errors import SchemaError

_PRIMITIVES: dict[str, pa.DataType] = {
    str(t): t
    for t in (
        pa.null(),
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint16(),
        pa.uint32(),
        pa.uint64(),
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.date32(),
        pa.date64(),
    )
}
# pyarrow prints these with other names than the constructors; store the clearer spelling.
_ALIASES = {
    "halffloat": "float16",
    "float": "float32",
    "double": "float64",
    "utf8": "string",
    "date32[day]": "date32",
    "date64[ms]": "date64",
}
_PRIMITIVES = {_ALIASES.get(name, name): dtype for name, dtype in _PRIMITIVES.items()}

JsonType = str | dict[str, Any]


def type_to_json(dtype: pa.DataType) -> JsonType:
    """Encode an Arrow type; raise SchemaError for types the format does not store."""
    name = _ALIASES.get(str(dtype), str(dtype))
    if name in _PRIMITIVES:
        return name
    if pa.types.is_timestamp(dtype):
        return {"type": "timestamp", "unit": dtype.unit, "tz": dtype.tz}
    if pa.types.is_time32(dtype) or pa.types.is_time64(dtype):
        return {"type": "time32" if pa.types.is_time32(dtype) else "time64", "unit": dtype.unit}
    if pa.types.is_duration(dtype):
        return {"type": "duration", "unit": dtype.unit}
    if pa.types.is_decimal(dtype):
        # decimal32 and decimal64 (pyarrow 18+) are stored as decimal128 of the same
        # digits, the type Parquet reads them back as and polars and DuckDB take.
        kind = "decimal256" if isinstance(dtype, pa.Decimal256Type) else "decimal128"
        return {"type": kind, "precision": dtype.precision, "scale": dtype.scale}
    if pa.types.is_fixed_size_binary(dtype):
        return {"type": "fixed_size_binary", "byte_width": dtype.byte_width}
    if pa.types.is_fixed_size_list(dtype):
        return {
            "type": "fixed_size_list",
            "size": dtype.list_size,
            "element": field_to_json(dtype.value_field),
        }
    if pa.types.is_large_list(dtype) or pa.types.is_list(dtype):
        kind = "large_list" if pa.types.is_large_list(dtype) else "list"
        return {"type": kind, "element": field_to_json(dtype.value_field)}
    if pa.types.is_map(dtype):
        return {
            "type": "map",
            "key": field_to_json(dtype.key_field),
            "item": field_to_json(dtype.item_field),
        }
    if pa.types.is_struct(dtype):
        if dtype.num_fields == 0:  # Parquet has no group without fields: no write would work
            raise SchemaError(
                f"Arrow type {dtype} cannot be stored in a raylake table: a struct needs a field"
            )
        return {"type": "struct", "fields": [field_to_json(f) for f in dtype]}
    if pa.types.is_dictionary(dtype):
        # Dictionary encoding is a property of the in-memory batch, not of the table.
        return type_to_json(dtype.value_type)
    raise SchemaError(f"Arrow type {dtype} cannot be stored in a raylake table")


_OFFSET = re.compile(r"[+-]([01][0-9]|2[0-3]):?[0-5][0-9]")


@functools.lru_cache(maxsize=256)
def _known_zone(tz: str) -> bool:
    """Whether ``tz`` is a zone a reader knows: an offset, or a name that Python's zone
    database, Arrow's or the installed pandas knows.
    pyarrow takes any string as a zone; one neither knows ('Mars/Base', '+25:00', 'Z')
    was stored, and every to_pandas of the table failed."""
    if _OFFSET.fullmatch(tz):
        return True
    try:
        import zoneinfo

        zoneinfo.ZoneInfo(tz)
        return True
    except Exception:  # ZoneInfoNotFoundError, ValueError for a malformed key
        pass
    try:
        pa.array([0], pa.timestamp("s", tz)).cast(pa.string())
        return True
    except pa.ArrowException:
        pass
    try:  # pandas 2's pytz also takes 'utc', in any case
        import pandas as pd

        pd.DatetimeTZDtype("ns", tz)
        return True
    except Exception:
        return False


def type_from_json(value: JsonType) -> pa.DataType:
    if isinstance(value, str):
        name = _ALIASES.get(value, value)
        if name not in _PRIMITIVES:
            raise SchemaError(f"unknown type name {value!r} in schema")
        return _PRIMITIVES[name]
    kind = value.get("type")
    if kind == "timestamp":
        return pa.timestamp(value["unit"], tz=value.get("tz"))
    if kind == "time32":
        return pa.time32(value["unit"])
    if kind == "time64":
        return pa.time64(value["unit"])
    if kind == "duration":
        return pa.duration(value["unit"])
    if kind == "decimal128":
        return pa.decimal128(value["precision"], value["scale"])
    if kind == "decimal256":
        return pa.decimal256(value["precision"], value["scale"])
    if kind == "fixed_size_binary":
        return pa.binary(value["byte_width"])
    if kind == "fixed_size_list":
        return pa.list_(field_from_json(value["element"]), value["size"])
    if kind == "list":
        return pa.list_(field_from_json(value["element"]))
    if kind == "large_list":
        return pa.large_list(field_from_json(value["element"]))
    if kind == "map":
        key, item = field_from_json(value["key"]), field_from_json(value["item"])
        return pa.map_(key, item)
    if kind == "struct":
        return pa.struct([field_from_json(f) for f in value["fields"]])
    raise SchemaError(f"unknown type {value!r} in schema")


def field_to_json(field: pa.Field) -> dict[str, Any]:
    return {"name": field.name, "type": type_to_json(field.type), "nullable": field.nullable}


def field_from_json(value: dict[str, Any]) -> pa.Field:
    return pa.field(value["name"], type_from_json(value["type"]), nullable=value["nullable"])


def normalize_type(dtype: pa.DataType) -> pa.DataType:
    """The type a new column is stored as: dictionary-encoded columns store their values.
    A type that the format stores but its readers would not read back is refused."""
    stored = type_from_json(type_to_json(dtype))
    _refuse_unreadable(stored)
    return stored


def _refuse_unreadable(dtype: pa.DataType) -> None:
    """Refuse, for a column being added, a type that Parquet and the schema file store
    but a reader fails on or reads wrong. Checked where a column is made (create,
    add_column, a merge write), never when a stored schema is written again or compared
    at a commit: a table that holds one already stays as writable and readable as it was."""
    if pa.types.is_timestamp(dtype) and dtype.tz and not _known_zone(dtype.tz):
        raise SchemaError(
            f"Arrow type {dtype} cannot be stored in a raylake table: {dtype.tz!r} is "
            "neither a time zone name (IANA: 'UTC', 'Europe/Paris') nor an offset "
            "('+05:30'), and pandas could not read the column back"
        )
    if pa.types.is_fixed_size_list(dtype) and dtype.list_size == 0:
        # Parquet writes it, but every read of it fails in pyarrow.
        raise SchemaError(
            f"Arrow type {dtype} cannot be stored in a raylake table: a fixed-size list "
            "needs width >= 1"
        )
    if pa.types.is_struct(dtype):
        names = [f.name for f in dtype]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:  # pandas and DuckDB read one of them, and drop the others' values
            raise SchemaError(
                f"Arrow type {dtype} cannot be stored in a raylake table: a struct's fields "
                f"need distinct names ({repeated} repeat)"
            )
        for f in dtype:
            _refuse_unreadable(f.type)
    elif pa.types.is_map(dtype):
        _refuse_unreadable(dtype.key_type)
        _refuse_unreadable(dtype.item_type)
    elif _is_list_of_any_size(dtype):
        _refuse_unreadable(dtype.value_type)


def _is_list_of_any_size(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
    )


def column_type(column: str, dtype: pa.DataType) -> pa.DataType:
    """The type ``column`` is stored as; a type the format does not store is refused
    naming the column (a DataFrame or a data schema may have many)."""
    try:
        return normalize_type(dtype)
    except SchemaError as exc:
        raise SchemaError(f"column {column!r}: {exc}") from None


def has_min_max(dtype: pa.DataType) -> bool:
    """Whether per-file min/max statistics are kept for a column of this type."""
    return (
        pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_temporal(dtype)
        or pa.types.is_decimal(dtype)
    ) and not pa.types.is_float16(dtype)
