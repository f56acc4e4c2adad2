"""What a primary-key table is: its system columns, row kinds, merge spec, and validation.

The single source of truth for merge engines and aggregate functions (which
options exist, which types each function accepts) lives here, so that a table
with a bad combination fails at ``create_table`` and never at read time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from raylake.errors import InvalidOptionError, SchemaError
from raylake.format import options as opt
from raylake.format.schema import SYSTEM_PREFIX, TableSchema
from raylake.format.types import has_min_max
from raylake.table.pk.bucket import is_hashable_key_type

SEQ = f"{SYSTEM_PREFIX}seq"
KIND = f"{SYSTEM_PREFIX}kind"
SYSTEM_COLUMNS = (SEQ, KIND)

# Row kinds as stored in ``_rl_kind``. -U (a before-image) never changes the state.
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3
KIND_NAMES = ("+I", "-U", "+U", "-D")

# Level of files written by writers; compaction writes sorted runs at the top level.
LEVEL_WRITE, LEVEL_TOP = 0, 1

# Aggregate functions that need an ordered type (min/max) or a numeric one (sum).
_NUMERIC_FUNCTIONS = {"sum"}
_ORDERED_FUNCTIONS = {"min", "max"}


@dataclass(frozen=True)
class MergeSpec:
    """How rows of one key combine: the key, the engine and its per-column settings."""

    key: tuple[str, ...]
    engine: str = "deduplicate"
    sequence_field: str | None = None
    # Non-key column -> aggregate function (aggregation engine only).
    aggregates: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, ts: TableSchema) -> MergeSpec:
        return ts.derived("pk.merge_spec", lambda: cls._build(ts))

    @classmethod
    def _build(cls, ts: TableSchema) -> MergeSpec:
        options = ts.table_options
        aggregates: dict[str, str] = {}
        if options.merge_engine == "aggregation":
            for name in ts.column_names:
                if name not in ts.primary_key:
                    aggregates[name] = options.field_aggregates.get(name, options.default_aggregate)
        return cls(
            key=tuple(ts.primary_key),
            engine=options.merge_engine,
            sequence_field=options.sequence_field,
            aggregates=aggregates,
        )

    @property
    def order_columns(self) -> tuple[str, ...]:
        """The columns that order the versions of a key, besides the key itself."""
        return (self.sequence_field, SEQ) if self.sequence_field else (SEQ,)

    @property
    def drops_tombstones(self) -> bool:
        """Whether a merge over every version of a key may forget its deletes.

        With a sequence field a late row may carry an older sequence value than a
        delete; the delete must survive compaction to keep hiding it.
        """
        return self.sequence_field is None


def file_schema(ts: TableSchema) -> pa.Schema:
    """The schema of a primary-key data file: the table's columns, then the system columns."""
    return ts.derived(
        "pk.file_schema",
        lambda: ts.arrow_schema.append(pa.field(SEQ, pa.int64(), nullable=False)).append(
            pa.field(KIND, pa.int8(), nullable=False)
        ),
    )


def validate_primary_key_schema(ts: TableSchema) -> None:
    """Reject a primary-key table that could not be written or merged correctly."""
    _check_key(ts)
    options = ts.table_options
    _check_sequence_field(ts, options)
    _check_aggregates(ts, options)


def _check_key(ts: TableSchema) -> None:
    missing = [k for k in ts.partition_keys if k not in ts.primary_key]
    if missing:
        raise SchemaError(
            f"partition column(s) {missing} must be part of the primary key "
            f"{list(ts.primary_key)}: a key's versions must all live in one partition. "
            f"Use primary_key={[*ts.primary_key, *missing]}"
        )
    for name in ts.primary_key:
        dtype = ts.arrow_schema.field(name).type
        if not is_hashable_key_type(dtype):
            raise SchemaError(
                f"primary-key column {name!r} has type {dtype}; keys must be integers, "
                "strings, binaries, decimals, booleans, dates, times or timestamps "
                "(floats have no exact equality, nested types no order)"
            )


def _check_sequence_field(ts: TableSchema, options: opt.TableOptions) -> None:
    name = options.sequence_field
    if name is None:
        return
    key = opt.SEQUENCE_FIELD
    if name not in ts.column_names:
        raise InvalidOptionError(key, name, f"no such column; the table has {ts.column_names}")
    if name in ts.primary_key:
        raise InvalidOptionError(key, name, "a primary-key column cannot order its own versions")
    dtype = ts.arrow_schema.field(name).type
    if not has_min_max(dtype) or pa.types.is_floating(dtype):
        raise InvalidOptionError(key, name, f"column type {dtype} has no exact order")
    if options.merge_engine != "deduplicate":
        # Partial results of other engines depend on where a late, older row falls
        # among the versions already merged; compaction would change what reads return.
        raise InvalidOptionError(
            key,
            name,
            f"a sequence field works only with merge-engine=deduplicate, not "
            f"{options.merge_engine} (see docs/primary-keys.md)",
        )


def _check_aggregates(ts: TableSchema, options: opt.TableOptions) -> None:
    explicit = options.field_aggregates
    if options.merge_engine != "aggregation":
        reason = f"aggregate functions need merge-engine=aggregation, not {options.merge_engine}"
        for column, function in explicit.items():
            raise InvalidOptionError(_aggregate_option(column), function, reason)
        if opt.DEFAULT_AGGREGATE in options.raw:
            raise InvalidOptionError(opt.DEFAULT_AGGREGATE, options.default_aggregate, reason)
        return
    for column in explicit:
        option = _aggregate_option(column)
        if column not in ts.column_names:
            raise InvalidOptionError(
                option, explicit[column], f"no column {column!r}; the table has {ts.column_names}"
            )
        if column in ts.primary_key:
            raise InvalidOptionError(option, explicit[column], "key columns are not aggregated")
    for column, function in MergeSpec.of(ts).aggregates.items():
        dtype = ts.arrow_schema.field(column).type
        if not aggregate_supports(function, dtype):
            option = _aggregate_option(column) if column in explicit else opt.DEFAULT_AGGREGATE
            raise InvalidOptionError(
                option,
                function,
                f"aggregate function {function!r} does not support column {column!r} of "
                f"type {dtype}",
            )


def _aggregate_option(column: str) -> str:
    return f"{opt.FIELD_PREFIX}{column}{opt.AGGREGATE_SUFFIX}"


def aggregate_supports(function: str, dtype: pa.DataType) -> bool:
    if function in _NUMERIC_FUNCTIONS:
        return (
            pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)
        ) and not pa.types.is_float16(dtype)
    if function in _ORDERED_FUNCTIONS:
        return has_min_max(dtype) and not pa.types.is_duration(dtype)
    return True  # last, last-non-null, first-non-null pick a row's value: any type
