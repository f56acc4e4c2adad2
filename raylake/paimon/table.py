"""A Paimon table behind raylake's Table API: every read, no write.

:func:`open_paimon_table` loads the schemas, validates the options and returns a
:class:`PaimonTable`, a :class:`~raylake.table.table.Table` whose scans are
:class:`~raylake.paimon.scan.PaimonScan` s and whose kind reads Paimon files, so that
Ray Data, Torch, TF, Spark and the CLI read it like a raylake table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from raylake.errors import UnsupportedPaimonError
from raylake.io import FileIO
from raylake.paimon.fallback import load_fallback
from raylake.paimon.meta import PaimonInfo, PaimonTableSchema
from raylake.paimon.options import parse_options
from raylake.paimon.scan import PaimonScan
from raylake.paimon.schema import PaimonSchema, load_schemas
from raylake.paimon.source import PaimonSource
from raylake.table.scan import TableScan
from raylake.table.table import Table

_BRANCH = re.compile(r"/branch/branch-([^/]+)$")


def table_schemas(file_io: FileIO, *, fallback: bool = True) -> dict[int, PaimonTableSchema]:
    """A raylake table schema per Paimon schema id (options validated for each); the
    latest carries its fallback branch's schema where it names one (unless
    ``fallback`` is False: the branch itself is read without its own fallback)."""
    schemas = load_schemas(file_io)
    found = {i: _table_schema(file_io.uri, schemas, s) for i, s in schemas.items()}
    latest = found[max(found)] if found else None
    branch = None if latest is None else latest.info.options.fallback_branch
    if fallback and latest is not None and branch is not None:
        other = load_fallback(file_io, branch, latest)
        info = replace(latest.info, fallback=other)
        found[latest.schema_id] = replace(latest, paimon=info)
    return found


def _table_schema(
    uri: str, schemas: Mapping[int, PaimonSchema], current: PaimonSchema
) -> PaimonTableSchema:
    options = parse_options(current.options, current.names, current.primary_keys, uri)
    for key, t in zip(current.partition_keys, current.types_of(list(current.partition_keys))):
        if t.root in ("FLOAT", "DOUBLE"):
            # Java names their directories by Float/Double.toString, whose digits differ
            # between JVMs; raylake's own tables do not partition by floats either.
            raise UnsupportedPaimonError(
                uri, f"it is partitioned by {t.root} column {key!r} (no float partitions)"
            )
    return PaimonTableSchema(
        arrow_schema=current.arrow_schema(),
        partition_keys=current.partition_keys,
        primary_key=current.primary_keys,
        buckets=max(options.bucket, 1),
        schema_id=current.id,
        field_ids=tuple(f.id for f in current.fields),
        paimon=PaimonInfo(uri=uri, schemas=dict(schemas), current=current, options=options),
    )


def open_paimon_table(file_io: FileIO, source: PaimonSource | None = None) -> PaimonTable:
    branch = _BRANCH.search(file_io.uri.rstrip("/"))
    if branch is not None:
        # A branch keeps its own snapshots and schemas but shares the table's manifests
        # and data files: read on its own, its snapshots name files it does not hold.
        raise UnsupportedPaimonError(
            file_io.uri,
            f"it is branch {branch.group(1)!r} of a table (raylake reads a table's main "
            "branch: open the table's own directory)",
        )
    by_id = table_schemas(file_io)
    return PaimonTable(file_io, by_id[max(by_id)], by_id, source)


class PaimonTable(Table):
    """An Apache Paimon table, read-only (its source is not writable): ``tbl.format ==
    "paimon"``; snapshots and consumers come from :class:`PaimonSource`."""

    def __init__(
        self,
        file_io: FileIO,
        table_schema: PaimonTableSchema,
        by_id: Mapping[int, PaimonTableSchema],
        source: PaimonSource | None = None,
    ) -> None:
        super().__init__(file_io, table_schema, source or PaimonSource(file_io))
        self._by_id = dict(by_id)

    def __repr__(self) -> str:
        kind = self.kind.name
        return f"PaimonTable({self.uri!r}, {kind}, columns={self.table_schema.column_names})"

    # -- reads -----------------------------------------------------------------------

    def _new_scan(self) -> TableScan:
        # Its at() also switches to the chosen snapshot's schema (from _by_id), which
        # leaves TableScan.as_of_its_schema (raylake schema files) nothing to do.
        return PaimonScan(
            self.file_io, self.table_schema, schemas_by_id=self._by_id, table_source=self.source
        )

    def refresh(self) -> Table:
        """Load the table's latest Paimon schema (after a writer changed it); returns self."""
        self._by_id = table_schemas(self.file_io)
        self.table_schema = self._by_id[max(self._by_id)]
        return self
