"""The table schema: columns, primary key, partition keys, buckets and options.

Stored as ``schema/schema-<id>.json``, one file per version of the schema (ids 0,
1, 2, ...; the largest is current). Columns have field ids: a rename keeps the
id, a dropped column's id is never used again, so data files and statistics
written under any version map onto any other by id (docs/format.md, section 2).
Format version 1 tables have one schema, id 0, whose field ids are the positions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from raylake.errors import CorruptMetadataError, SchemaError
from raylake.format.options import TableOptions, check_primary_key_only
from raylake.format.types import field_from_json, field_to_json

T = TypeVar("T")

FORMAT_VERSION = 2
# Tables of format version 1 keep writing version-1 metadata until their first schema
# change, which upgrades them (docs/schema-evolution.md).
V1 = 1
SCHEMA_DIR = "schema"
# System columns that primary-key data files carry; user columns may not use the prefix.
SYSTEM_PREFIX = "_rl_"


@dataclass(frozen=True)
class TableSchema:
    """Everything about a table that does not change from commit to commit."""

    arrow_schema: pa.Schema
    partition_keys: tuple[str, ...] = ()
    primary_key: tuple[str, ...] = ()
    buckets: int = 1
    options: Mapping[str, str] = field(default_factory=dict)
    schema_id: int = 0
    format_version: int = FORMAT_VERSION
    # The id of each column, in column order (default: the positions, as in version 1).
    field_ids: tuple[int, ...] = ()
    # The largest field id ever given in this table: new columns get larger ones.
    highest_field_id: int = -1
    # The table format whose source (raylake/table/source.py) names the schema's kind.
    table_format: ClassVar[str] = "raylake"

    def __post_init__(self) -> None:
        names = self.arrow_schema.names
        if not self.field_ids:
            object.__setattr__(self, "field_ids", tuple(range(len(names))))
        if len(self.field_ids) != len(names) or len(set(self.field_ids)) != len(names):
            raise SchemaError(f"field ids {list(self.field_ids)} do not match columns {names}")
        if self.highest_field_id < max(self.field_ids, default=-1):
            object.__setattr__(self, "highest_field_id", max(self.field_ids, default=-1))
        if not names:
            raise SchemaError("a table needs at least one column")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SchemaError(f"duplicate column names: {duplicates}")
        reserved = [n for n in names if n.startswith(SYSTEM_PREFIX)]
        if reserved:
            raise SchemaError(f"column names {reserved} use the reserved prefix {SYSTEM_PREFIX!r}")
        for role, keys in (("partition", self.partition_keys), ("primary key", self.primary_key)):
            missing = [k for k in keys if k not in names]
            if missing:
                raise SchemaError(f"{role} column(s) {missing} are not in the schema {names}")
            if len(set(keys)) != len(keys):
                raise SchemaError(f"{role} columns repeat a column: {list(keys)}")
        for key in self.partition_keys:
            dtype = self.arrow_schema.field(key).type
            if pa.types.is_nested(dtype) or pa.types.is_floating(dtype):
                raise SchemaError(
                    f"partition column {key!r} has type {dtype}, which cannot partition"
                )
        if self.buckets < 1:
            raise SchemaError(f"buckets must be >= 1, got {self.buckets}")
        TableOptions.from_mapping(self.options)  # validates
        if not self.primary_key:
            check_primary_key_only(self.options)

    @property
    def is_primary_key_table(self) -> bool:
        return bool(self.primary_key)

    @property
    def column_names(self) -> list[str]:
        return list(self.arrow_schema.names)

    @property
    def stored_options(self) -> dict[str, str]:
        """The options as the table's format stores them (``raylake info`` shows them):
        another format's are its own, which ``options`` (raylake's) leaves out."""
        return dict(self.options)

    @property
    def table_options(self) -> TableOptions:
        return self.derived("options", lambda: TableOptions.from_mapping(self.options))

    @property
    def partition_schema(self) -> pa.Schema:
        return self.derived(
            "partition_schema",
            lambda: pa.schema([self.arrow_schema.field(k) for k in self.partition_keys]),
        )

    def field_id(self, name: str) -> int:
        """The field id of a column of this schema."""
        return self.field_ids[self.arrow_schema.get_field_index(name)]

    @property
    def names_by_id(self) -> dict[int, str]:
        return self.derived("names_by_id", lambda: dict(zip(self.field_ids, self.column_names)))

    def stats_key(self, name: str) -> str:
        """The name of a column's statistics in manifests written under this schema.

        Version 2 keys statistics by field id, so a rename never moves them; version 1
        by column name.
        """
        if self.format_version == V1:
            return name
        return str(self.field_id(name))

    def keyed_stats(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        """Statistics gathered by column name (table columns only), keyed as stored."""
        names = set(self.column_names)
        return {self.stats_key(k): v for k, v in stats.items() if k in names}

    def derived(self, key: str, compute: Callable[[], T]) -> T:
        """A value derived from this schema, computed once per schema object.

        The schema never changes, so what other layers derive from it (parsed options,
        a merge spec, the file schema, the table kind) is kept here instead of being
        recomputed on every read. Derived values are not pickled.
        """
        memo: dict[str, Any] = self.__dict__.setdefault("_derived", {})
        if key not in memo:
            memo[key] = compute()
        return memo[key]  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_derived"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "schema_id": self.schema_id,
            "fields": [
                {"id": i, **field_to_json(f)} for i, f in zip(self.field_ids, self.arrow_schema)
            ],
            **({} if self.format_version == V1 else {"highest_field_id": self.highest_field_id}),
            "partition_keys": list(self.partition_keys),
            "primary_key": list(self.primary_key),
            "buckets": self.buckets,
            "options": dict(self.options),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str = "<schema>") -> TableSchema:
        try:
            version = int(data["format_version"])
            if version > FORMAT_VERSION:
                raise CorruptMetadataError(
                    path, f"format version {version} is newer than this raylake ({FORMAT_VERSION})"
                )
            return cls(
                arrow_schema=pa.schema([field_from_json(f) for f in data["fields"]]),
                partition_keys=tuple(data.get("partition_keys", ())),
                primary_key=tuple(data.get("primary_key", ())),
                buckets=int(data.get("buckets", 1)),
                options=dict(data.get("options", {})),
                schema_id=int(data["schema_id"]),
                format_version=version,
                field_ids=tuple(int(f["id"]) for f in data["fields"]),
                highest_field_id=int(data.get("highest_field_id", -1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptMetadataError(path, f"not a valid schema: {exc!r}") from exc

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=2).encode()


def build_table_schema(
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] | None = (),
    primary_key: Sequence[str] | None = (),
    buckets: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> TableSchema:
    """Validate user input and normalize the Arrow schema into what is stored (the
    keywords' checks are :class:`~raylake.format.table_spec.TableSpec`'s)."""
    from raylake.format.table_spec import TableSpec

    spec = TableSpec.of(
        partition_by=partition_by, primary_key=primary_key, buckets=buckets, options=options
    )
    return spec.table_schema(schema)
