"""Paimon schema files: ``schema/schema-<id>``, JSON with field ids.

Every schema change writes a new file; a data file records the id of the schema it
was written with, and its columns are mapped onto the schema being read by field id
(renames keep the id, added columns read as nulls).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from raylake.errors import CorruptMetadataError, TableNotFoundError
from raylake.format.metadata_json import read_json_object
from raylake.io import FileIO
from raylake.paimon.types import PaimonType, parse_type

SCHEMA_DIR = "schema"
_SCHEMA_NAME = re.compile(r"^schema-(\d+)$")


@dataclass(frozen=True)
class PaimonField:
    id: int
    name: str
    type: PaimonType


@dataclass(frozen=True)
class PaimonSchema:
    id: int
    fields: tuple[PaimonField, ...]
    partition_keys: tuple[str, ...] = ()
    primary_keys: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> PaimonField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def by_id(self) -> dict[int, PaimonField]:
        return {f.id: f for f in self.fields}

    def arrow_schema(self) -> pa.Schema:
        return pa.schema(
            [
                pa.field(f.name, f.type.to_arrow(f.name), nullable=f.type.nullable)
                for f in self.fields
            ]
        )

    def types_of(self, names: tuple[str, ...] | list[str]) -> list[PaimonType]:
        return [self.field(n).type for n in names]

    @property
    def trimmed_primary_keys(self) -> tuple[str, ...]:
        """The key columns a PK data file stores as ``_KEY_<name>``: the primary key
        without the partition columns (a partition has one value per file)."""
        trimmed = tuple(k for k in self.primary_keys if k not in self.partition_keys)
        return trimmed or self.primary_keys

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str) -> PaimonSchema:
        try:
            return cls(
                id=int(data["id"]),
                fields=tuple(
                    PaimonField(int(f["id"]), str(f["name"]), parse_type(f["type"]))
                    for f in data["fields"]
                ),
                partition_keys=tuple(data.get("partitionKeys") or ()),
                primary_keys=tuple(data.get("primaryKeys") or ()),
                options={str(k): str(v) for k, v in (data.get("options") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptMetadataError(path, f"not a valid Paimon schema: {exc!r}") from exc


def schema_ids(file_io: FileIO) -> list[int]:
    return file_io.numbered(SCHEMA_DIR, _SCHEMA_NAME)


def read_schema(file_io: FileIO, schema_id: int) -> PaimonSchema:
    data, path = read_json_object(file_io, f"{SCHEMA_DIR}/schema-{schema_id}", "the schema file")
    return PaimonSchema.from_json(data, path)


def load_schemas(file_io: FileIO) -> dict[int, PaimonSchema]:
    """Every schema of the table by id (a table has a handful)."""
    ids = schema_ids(file_io)
    if not ids:
        raise TableNotFoundError(file_io.uri)
    return {i: read_schema(file_io, i) for i in ids}
