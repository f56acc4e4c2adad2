"""Schema changes: add, rename, widen and delete columns, producing the next schema version.

:class:`SchemaUpdate` collects changes against one schema and checks each as it is
made, so a bad change raises at once, naming the column; ``apply()`` returns the
next :class:`TableSchema` (id + 1, format version 2, field ids kept). Writing it is
the table's business (raylake/table/evolve.py). The rules (docs/schema-evolution.md):

- a new column is nullable (defaults are not supported), gets a new field id, and
  reads as null in files written before it;
- a rename keeps the field id: no data moves;
- a type may only widen (:func:`can_widen`);
- primary-key, partition and sequence columns cannot be renamed, retyped or deleted:
  buckets, partition paths and merges depend on their stored values;
- a deleted column's id is never used again, so a column added later under the same
  name is a new column (it reads as null in older files).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TypeVar

import pyarrow as pa

from raylake.arguments import check_exclusive, check_flag, refuse_unknown_keywords
from raylake.errors import (
    ColumnExistsError,
    IncompatibleTypeChangeError,
    InvalidArgumentError,
    ProtectedColumnError,
    SchemaEvolutionArgumentError,
    SchemaEvolutionError,
    UnknownColumnError,
)
from raylake.format import options as opt
from raylake.format.schema import FORMAT_VERSION, SYSTEM_PREFIX, TableSchema
from raylake.format.types import column_type

_SIGNED = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_UNSIGNED = (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())


def can_widen(current: pa.DataType, requested: pa.DataType) -> bool:
    """Whether every value of ``current`` converts exactly to ``requested``.

    Integers to wider integers of the same signedness, unsigned to a wider signed type,
    integers of up to 32 bits to float64, float16/float32 to float64, decimals to a
    larger precision at the same scale, string/binary to their large forms, and a column
    of type null (no value to lose) to any type. Timestamps to another time zone
    spelling of the same unit are not included: only these, which Arrow casts exactly.
    """
    if current.equals(requested):
        return True
    if pa.types.is_null(current):
        return True
    if current in _SIGNED and requested in _SIGNED:
        return _SIGNED.index(requested) > _SIGNED.index(current)
    if current in _UNSIGNED and requested in _UNSIGNED:
        return _UNSIGNED.index(requested) > _UNSIGNED.index(current)
    if current in _UNSIGNED and requested in _SIGNED:
        return requested.bit_width > current.bit_width
    if pa.types.is_integer(current) and requested == pa.float64():
        return current.bit_width <= 32
    if current in (pa.float16(), pa.float32()) and requested == pa.float64():
        return True
    if current == pa.float16() and requested == pa.float32():
        return True
    if pa.types.is_decimal(current) and pa.types.is_decimal(requested):
        return (
            requested.scale == current.scale
            and requested.precision >= current.precision
            and requested.bit_width >= current.bit_width
        )
    return (current, requested) in (
        (pa.string(), pa.large_string()),
        (pa.binary(), pa.large_binary()),
    )


U = TypeVar("U", bound="SchemaUpdate")


class SchemaUpdate:
    """Changes to one schema, checked as they are made; ``apply()`` gives the result."""

    def __init__(self, ts: TableSchema) -> None:
        self.base = ts
        self._fields: list[pa.Field] = list(ts.arrow_schema)
        self._ids: list[int] = list(ts.field_ids)
        self._options: dict[str, str] = dict(ts.options)
        self._next_id = ts.highest_field_id + 1
        self._changed = False
        self._closed = False  # set when an update_schema() block ends or commits

    # -- changes ----------------------------------------------------------------------

    @refuse_unknown_keywords
    def add_column(
        self: U,
        name: str,
        field_type: pa.DataType,
        *,
        nullable: bool = True,
        after: str | None = None,
        before: str | None = None,
    ) -> U:
        """Add a nullable column at the end, or right ``after``/``before`` another."""
        self._check_open()
        self._check_new_name(name)
        _check_type(name, field_type)
        if not check_flag("nullable", nullable):
            raise SchemaEvolutionError(
                f"new column {name!r} must be nullable: files written before it have no "
                "values for it, and raylake does not support column defaults",
                column=name,
            )
        check_exclusive(
            {"after": after, "before": before},
            functools.partial(SchemaEvolutionArgumentError, column=name),
        )
        position = len(self._fields)
        if after is not None:
            position = self._index(after) + 1
        elif before is not None:
            position = self._index(before)
        self._fields.insert(position, pa.field(name, column_type(name, field_type), nullable=True))
        self._ids.insert(position, self._next_id)
        self._next_id += 1
        self._changed = True
        return self

    @refuse_unknown_keywords
    def rename_column(self: U, name: str, new_name: str) -> U:
        """Rename a column; its field id stays, so no data is rewritten."""
        self._check_open()
        i = self._index(name)
        self._check_protected(name, "rename")
        if new_name == name:
            return self
        self._check_new_name(new_name, "new_name")
        self._fields[i] = self._fields[i].with_name(new_name)
        aggregate = _aggregate_key(name)
        if aggregate in self._options:
            self._options[_aggregate_key(new_name)] = self._options.pop(aggregate)
        self._changed = True
        return self

    @refuse_unknown_keywords
    def update_column(
        self: U, name: str, field_type: pa.DataType | None = None, *, nullable: bool | None = None
    ) -> U:
        """Widen a column's type (:func:`can_widen`), or make it nullable."""
        self._check_open()
        i = self._index(name)
        current = self._fields[i]
        new = current
        if field_type is not None:
            requested = column_type(name, _check_type(name, field_type))
            if not requested.equals(current.type):
                self._check_protected(name, "change the type of")
                if not can_widen(current.type, requested):
                    raise IncompatibleTypeChangeError(name, current.type, requested)
                new = new.with_type(requested)
        if nullable is not None and check_flag("nullable", nullable) != current.nullable:
            if not nullable:
                raise SchemaEvolutionError(
                    f"cannot make column {name!r} required: rows already written may hold "
                    "nulls in it",
                    column=name,
                )
            self._check_protected(name, "make nullable")
            new = new.with_nullable(True)
        if new is not current:
            self._fields[i] = new
            self._changed = True
        return self

    @refuse_unknown_keywords
    def delete_column(self: U, name: str) -> U:
        """Delete a column; its values stay in old files but no read returns them."""
        self._check_open()
        i = self._index(name)
        self._check_protected(name, "delete")
        if len(self._fields) == 1:
            raise SchemaEvolutionError(
                f"cannot delete {name!r}: a table needs at least one column", column=name
            )
        del self._fields[i], self._ids[i]
        self._options.pop(_aggregate_key(name), None)
        self._changed = True
        return self

    @refuse_unknown_keywords
    def union_by_name(self: U, schema: pa.Schema) -> U:
        """Add the columns of ``schema`` that the table lacks, at the end, in its order
        (system columns a write may carry are not table columns)."""
        self._check_open()
        if not isinstance(schema, pa.Schema):
            raise InvalidArgumentError("schema", schema, "a pyarrow.Schema")
        names = {f.name for f in self._fields}
        for f in schema:
            if f.name in names or f.name.startswith(SYSTEM_PREFIX):
                continue
            if pa.types.is_null(f.type):
                raise SchemaEvolutionError(
                    f"new column {f.name!r} has no values to tell its type (Arrow type "
                    "null); give it a type, or add it with update_schema().add_column",
                    column=f.name,
                )
            self.add_column(f.name, f.type)
        return self

    # -- result -----------------------------------------------------------------------

    @property
    def has_changes(self) -> bool:
        return self._changed

    def apply(self) -> TableSchema:
        """The next schema version (the base itself when nothing changed)."""
        if not self._changed:
            return self.base
        return replace(
            self.base,
            arrow_schema=pa.schema(self._fields),
            options=self._options,
            schema_id=self.base.schema_id + 1,
            format_version=FORMAT_VERSION,
            field_ids=tuple(self._ids),
            highest_field_id=self._next_id - 1,
        )

    # -- checks -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SchemaEvolutionError(
                "this schema update already ended (committed, or abandoned on an error); "
                "start a new one with tbl.update_schema()"
            )

    def _index(self, name: str) -> int:
        for i, f in enumerate(self._fields):
            if f.name == name:
                return i
        raise UnknownColumnError(name, [f.name for f in self._fields])

    def _check_new_name(self, name: str, argument: str = "name") -> None:
        if not isinstance(name, str) or not name:
            raise SchemaEvolutionArgumentError(argument, name, "a column name (a non-empty string)")
        if name.startswith(SYSTEM_PREFIX):
            raise SchemaEvolutionError(
                f"column name {name!r} uses the reserved prefix {SYSTEM_PREFIX!r}", column=name
            )
        if any(f.name == name for f in self._fields):
            raise ColumnExistsError(name)

    def _check_protected(self, name: str, change: str) -> None:
        role = protected_role(self.base, name)
        if role is not None:
            raise ProtectedColumnError(name, role, change)


def protected_role(ts: TableSchema, name: str) -> str | None:
    """Why a column may not change (its role), or None."""
    if name in ts.primary_key:
        return "primary-key"
    if name in ts.partition_keys:
        return "partition"
    if ts.options.get(opt.SEQUENCE_FIELD) == name:
        return "sequence"
    return None


def _aggregate_key(name: str) -> str:
    return f"{opt.FIELD_PREFIX}{name}{opt.AGGREGATE_SUFFIX}"


def _check_type(name: str, field_type: object) -> pa.DataType:
    if not isinstance(field_type, pa.DataType):
        raise SchemaEvolutionArgumentError(
            "field_type",
            field_type,
            f"a pyarrow DataType (pa.int64(), ...) for column {name!r}",
            column=name,
        )
    return field_type
