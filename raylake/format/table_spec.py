"""How a new table is laid out, as one frozen value checked once: :class:`TableSpec`.

``create_table``, ``from_pandas``, ``write_lake`` / ``LakeDatasink``, the Spark write and
the CLI's ``write --create`` all take the same four keywords (``partition_by``,
``primary_key``, ``buckets``, ``options``). Each makes a TableSpec of them at the call,
before anything is read or written, and hands that down: the keywords are checked in
one place, by one set of rules, whichever entry point a table is created from. The
rules of a table's kind (a primary key's columns, a merge engine's options) are the
kind's, checked when the schema is known (raylake/table/kind.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from raylake.arguments import check_names, check_optional_count, integer
from raylake.errors import InvalidOptionError, SchemaArgumentError, SchemaError
from raylake.format.options import SEQUENCE_FIELD
from raylake.format.schema import TableSchema
from raylake.format.types import column_type

# What the order of a layout's columns decides: a set has none, and Python orders a set
# of strings differently in every process, so a table made or checked from one would
# differ from run to run (a key's bucket, a "layout differs" refusal of the same set).
_ORDERED = {
    "partition_by": "the order of the partition directories",
    "primary_key": "the key's order hashes rows to buckets",
}


# A primary-key table's bucket count is fixed at creation; a write sizes arrays by it, so
# a count in the billions made every write of a few rows allocate gigabytes.
MAX_BUCKETS = 1 << 16


@dataclass(frozen=True)
class TableSpec:
    """The layout of a new table: partition columns, primary key, bucket count (None:
    one, or the kind's default) and table options (docs/format.md, section 2)."""

    partition_by: tuple[str, ...] = ()
    primary_key: tuple[str, ...] = ()
    buckets: int | None = None
    # A copy of the caller's options; values are stored as strings.
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        error = SchemaArgumentError
        for name in ("partition_by", "primary_key"):
            # None is no columns, as in pypaimon's, deltalake's and PyIceberg's keywords.
            value = () if getattr(self, name) is None else getattr(self, name)
            if isinstance(value, AbstractSet):  # its order would change from run to run
                raise error(name, value, f"a list of column names, in order ({_ORDERED[name]})")
            object.__setattr__(self, name, check_names(name, value, error))
        as_int = integer(self.buckets)  # numpy's (a config read with numpy) as a Python int
        buckets = self.buckets if as_int is None else as_int
        object.__setattr__(self, "buckets", check_optional_count("buckets", buckets, 1, error))
        if self.buckets is not None and self.buckets > MAX_BUCKETS:
            raise error(
                "buckets",
                buckets,
                f"at most {MAX_BUCKETS} (each bucket is a directory of files, and every "
                "write counts its rows per bucket)",
            )
        object.__setattr__(self, "options", _options(self.options))

    @classmethod
    def of(
        cls,
        *,
        partition_by: Sequence[str] | None = (),
        primary_key: Sequence[str] | None = (),
        buckets: int | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> TableSpec:
        """The spec of the keywords of a creating call (``options=None``: none)."""
        return cls(partition_by, primary_key, buckets, {} if options is None else options)  # type: ignore[arg-type]

    def differences(self, ts: TableSchema, *, given_only: bool = False) -> list[str]:
        """How the layout of an existing table ``ts`` differs from this spec's: what a
        call that may find the table already there (``exist_ok=True``, an append) must
        refuse, since writing as if the table were the one asked for would be wrong (an
        upsert into an append table appends duplicates). Partition columns and the
        primary key are compared always, or, with ``given_only``, where given; the
        bucket count and options where given (a default is no request)."""
        found = []
        asked = (("partition_by", self.partition_by, tuple(ts.partition_keys)),
                 ("primary_key", self.primary_key, tuple(ts.primary_key)))  # fmt: skip
        for name, want, have in asked:
            if want != have and (want or not given_only):
                found.append(f"{name} {list(have)} (asked for {list(want)})")
        if self.buckets is not None and self.buckets != ts.buckets:
            found.append(f"buckets {ts.buckets} (asked for {self.buckets})")
        for key, value in self.options.items():
            if ts.options.get(key) != value:
                found.append(f"option {key}={ts.options.get(key)!r} (asked for {value!r})")
        return found

    def table_schema(self, schema: pa.Schema) -> TableSchema:
        """The schema a new table of ``schema``'s columns is created with (the schema's
        own checks: key columns exist, no reserved names, valid options)."""
        if not isinstance(schema, pa.Schema):
            raise SchemaArgumentError("schema", schema, "a pyarrow.Schema")
        if self.buckets is not None and self.buckets > 1 and not self.primary_key:
            # An append table has no key to hash rows by: its files all lie in bucket 0
            # and stream shards split it by file, so more buckets would change nothing.
            raise SchemaArgumentError(
                "buckets",
                self.buckets,
                "1 or None for an append table (buckets spread the keys of a primary-key "
                "table; give primary_key=, or leave buckets out)",
            )
        if "" in schema.names:  # no filter, select or rename could name it; tables that
            # have one (made before this check) still open and read
            raise SchemaError(
                f"a column name must not be empty (the columns are {schema.names}): no "
                "filter could name it; name the column"
            )
        for name in self.primary_key:
            if name in schema.names and pa.types.is_null(schema.field(name).type):
                raise SchemaError(
                    f"primary-key column {name!r} has type null (a column without values, "
                    "as CSV and JSON readers infer it), which holds no key: give the "
                    "column a type"
                )
        sequence = self.options.get(SEQUENCE_FIELD, "").strip()
        dotted = [n for n in (*self.partition_by, *self.primary_key, sequence) if n[:1] == "."]
        if dotted:  # pyarrow's group_by and sort_indices read such a name as a struct path
            raise SchemaError(
                f"column {dotted[0]!r} cannot partition, key or order a table: its name "
                "starts with '.', which Arrow reads as a path into a struct column when it "
                "groups or sorts by it; rename the column"
            )
        fields = [
            pa.field(
                f.name, column_type(f.name, f.type), f.nullable and f.name not in self.primary_key
            )
            for f in schema
        ]
        return TableSchema(
            arrow_schema=pa.schema(fields),
            partition_keys=self.partition_by,
            primary_key=self.primary_key,
            buckets=1 if self.buckets is None else self.buckets,
            options=dict(self.options),
        )


def _options(options: object) -> dict[str, str]:
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise SchemaArgumentError("options", options, "a mapping of option names to values")
    for key, value in options.items():
        if value is None:  # it would be stored as 'None' ('none' is a compression)
            raise InvalidOptionError(
                key, value, "expected a value; leave the key out for the default"
            )
    return {k: str(v) for k, v in options.items()}
