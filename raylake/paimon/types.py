"""Paimon data types and how raylake maps them to Arrow.

A schema file spells atomic types as SQL strings (``BIGINT NOT NULL``,
``DECIMAL(10, 2)``, ``TIMESTAMP(6) WITH LOCAL TIME ZONE``) and nested types as JSON
objects (``{"type": "ARRAY", "element": ...}``, ``MAP`` with ``key``/``value``, ``ROW``
with ``fields``). The mapping is the table in docs/paimon.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raylake.errors import UnsupportedTypeError

_ATOMIC = re.compile(r"^([A-Z_]+)\s*(?:\((\d+)(?:\s*,\s*(\d+))?\))?$")
_LTZ = "WITH LOCAL TIME ZONE"

_FIXED: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "DATE": pa.date32(),
    "STRING": pa.string(),
    "VARCHAR": pa.string(),
    "CHAR": pa.string(),
    "BYTES": pa.binary(),
    "VARBINARY": pa.binary(),
    "BINARY": pa.binary(),
    # Paimon's multimodal type, read as its bytes (a data-evolution table keeps BLOB
    # columns in .blob files, which raylake refuses by name).
    "BLOB": pa.binary(),
}
_VECTOR = re.compile(r"^VECTOR\s*<\s*(.+?)\s*,\s*(\d+)\s*>$")


@dataclass(frozen=True)
class PaimonType:
    """One Paimon type: its root name, precision/scale where it has them, nullability."""

    root: str  # "BIGINT", "DECIMAL", "TIMESTAMP", "TIMESTAMP_LTZ", "ARRAY", "MAP", "ROW", ...
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    # ROW fields, ARRAY and VECTOR element, MAP key/value (a VECTOR's length: precision)
    children: tuple[tuple[str, PaimonType], ...] = ()

    def to_arrow(self, column: str = "?") -> pa.DataType:
        if self.root in _FIXED:
            return _FIXED[self.root]
        if self.root == "DECIMAL":
            return pa.decimal128(self.precision or 10, self.scale or 0)
        if self.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            tz = "UTC" if self.root == "TIMESTAMP_LTZ" else None
            return pa.timestamp(_time_unit(self.precision), tz=tz)
        if self.root == "TIME":
            return pa.time32("ms")
        if self.root == "ARRAY":
            return pa.list_(self._child_field(0, column))
        if self.root == "VECTOR":  # an embedding: a fixed-size list of its length
            return pa.list_(self._child_field(0, column), self.precision or 0)
        if self.root == "MAP":
            key, value = self.children
            return pa.map_(key[1].to_arrow(column), value[1].to_arrow(column))
        if self.root == "ROW":
            return pa.struct([_field(name, t, column) for name, t in self.children])
        raise UnsupportedTypeError(
            column, self.root, "Arrow", "raylake cannot read this Paimon type"
        )

    def _child_field(self, i: int, column: str) -> pa.Field:
        name, child = self.children[i]
        return _field(name, child, column)

    @property
    def is_compact(self) -> bool:
        """Whether a BinaryRow stores the value in its 8-byte fixed slot."""
        if self.root == "DECIMAL":
            return (self.precision or 10) <= 18
        if self.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            return (self.precision if self.precision is not None else 6) <= 3
        return True


def _field(name: str, t: PaimonType, column: str) -> pa.Field:
    return pa.field(name, t.to_arrow(f"{column}.{name}"), nullable=t.nullable)


def _time_unit(precision: int | None) -> str:
    p = 6 if precision is None else precision
    return "s" if p == 0 else "ms" if p <= 3 else "us" if p <= 6 else "ns"


def parse_type(spec: Any) -> PaimonType:
    """The type of a schema file's ``type`` entry (a string or a JSON object)."""
    if isinstance(spec, dict):
        return _parse_nested(spec)
    text = str(spec).strip()
    nullable = True
    if text.upper().endswith("NOT NULL"):
        nullable, text = False, text[: -len("NOT NULL")].strip()
    text = text.upper()
    vector = _VECTOR.match(text)
    if vector is not None:
        element = parse_type(vector.group(1))
        return PaimonType("VECTOR", nullable, int(vector.group(2)), None, (("element", element),))
    ltz = text.endswith(_LTZ)
    if ltz:
        text = text[: -len(_LTZ)].strip()
    match = _ATOMIC.match(text)
    if match is None or (ltz and match.group(1) != "TIMESTAMP"):
        raise UnsupportedTypeError("?", spec, "Arrow", "not a Paimon type raylake knows")
    root, precision, scale = match.groups()
    if ltz:
        root = "TIMESTAMP_LTZ"
    return PaimonType(
        root=root,
        nullable=nullable,
        precision=None if precision is None else int(precision),
        scale=None if scale is None else int(scale),
    )


def _parse_nested(spec: dict[str, Any]) -> PaimonType:
    text = str(spec.get("type", "")).strip()
    nullable = not text.upper().endswith("NOT NULL")
    root = text.upper().replace("NOT NULL", "").strip()
    children: tuple[tuple[str, PaimonType], ...]
    if root == "VECTOR":
        element = parse_type(spec["element"])
        return PaimonType("VECTOR", nullable, int(spec["length"]), None, (("element", element),))
    if root == "ARRAY":
        children = (("element", parse_type(spec["element"])),)
    elif root == "MAP":
        children = (("key", parse_type(spec["key"])), ("value", parse_type(spec["value"])))
    elif root == "ROW":
        children = tuple((f["name"], parse_type(f["type"])) for f in spec["fields"])
    else:
        raise UnsupportedTypeError("?", text, "Arrow", "not a Paimon type raylake knows")
    return PaimonType(root=root, nullable=nullable, children=children)
