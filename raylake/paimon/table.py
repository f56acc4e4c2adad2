"""A Paimon table behind raylake's Table API: every read, no write.

:func:`open_paimon_table` loads the schemas, validates the options and returns a
:class:`PaimonTable`, a :class:`~raylake.table.table.Table` whose scans are
:class:`~raylake.paimon.scan.PaimonScan` s and whose kind reads Paimon files, so that
Ray Data, Torch, TF, Spark and the CLI read it like a raylake table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, ClassVar, NoReturn

from raylake.errors import UnsupportedPaimonError
from raylake.format.consumer import ConsumerProgress
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.paimon.fallback import load_fallback
from raylake.paimon.kind import read_only
from raylake.paimon.meta import PaimonInfo, PaimonTableSchema
from raylake.paimon.options import parse_options
from raylake.paimon.scan import PaimonScan
from raylake.paimon.schema import PaimonSchema, load_schemas, schema_ids
from raylake.paimon.snapshot import PaimonSnapshots
from raylake.table.scan import TableScan
from raylake.table.table import Table

FORMAT = "paimon"
_BRANCH = re.compile(r"/branch/branch-([^/]+)$")


def is_paimon_table(file_io: FileIO) -> bool:
    """Whether ``file_io``'s root holds a Paimon table (``schema/schema-<n>`` files)."""
    return bool(schema_ids(file_io))


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
    return PaimonTableSchema(
        arrow_schema=current.arrow_schema(),
        partition_keys=current.partition_keys,
        primary_key=current.primary_keys,
        buckets=max(options.bucket, 1),
        schema_id=current.id,
        field_ids=tuple(f.id for f in current.fields),
        paimon=PaimonInfo(uri=uri, schemas=dict(schemas), current=current, options=options),
    )


def open_paimon_table(file_io: FileIO) -> PaimonTable:
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
    return PaimonTable(file_io, by_id[max(by_id)], by_id)


class PaimonTable(Table):
    """An Apache Paimon table, read-only: ``tbl.format == "paimon"``."""

    format: ClassVar[str] = FORMAT

    def __init__(
        self,
        file_io: FileIO,
        table_schema: PaimonTableSchema,
        by_id: Mapping[int, PaimonTableSchema],
    ) -> None:
        super().__init__(file_io, table_schema)
        self._paimon_snapshots = PaimonSnapshots(file_io)
        self._by_id = dict(by_id)

    def __repr__(self) -> str:
        kind = self.kind.name
        return f"PaimonTable({self.uri!r}, {kind}, columns={self.table_schema.column_names})"

    # -- reads -----------------------------------------------------------------------

    def _new_scan(self) -> TableScan:
        # Its at() also switches to the chosen snapshot's schema (from _by_id), which
        # leaves TableScan.as_of_its_schema (raylake schema files) nothing to do.
        return PaimonScan(self.file_io, self.table_schema, schemas_by_id=self._by_id)

    def refresh(self) -> Table:
        """Load the table's latest Paimon schema (after a writer changed it); returns self."""
        self._by_id = table_schemas(self.file_io)
        self.table_schema = self._by_id[max(self._by_id)]
        return self

    def snapshots(self) -> list[Snapshot]:
        return self._paimon_snapshots.all()

    def latest_snapshot(self) -> Snapshot | None:
        return self._paimon_snapshots.latest()

    def snapshot(self, snapshot_id: int) -> Snapshot:
        return self._paimon_snapshots.get(snapshot_id)

    # -- everything that writes -----------------------------------------------------

    def _refuse(self, what: str) -> NoReturn:
        raise read_only(self.uri, what)

    def new_writer(self, *, file_prefix: str = "data") -> Any:
        self._refuse("writing")

    def update_schema(self) -> Any:
        self._refuse("update_schema()")

    def commit(self, messages: Any, **kwargs: Any) -> Any:
        self._refuse("commit()")

    def write(self, data: Any, **kwargs: Any) -> Any:
        self._refuse("write()")

    def delete(self, keys_or_filter: Any) -> Any:
        self._refuse("delete()")

    def merge(self, source: Any, on: Any, **kwargs: Any) -> Any:
        self._refuse("merge()")

    def compact(self, *, full: bool = False) -> Any:
        self._refuse("compact()")

    def changelog(self, snapshot_id: int, *, columns: Sequence[str] | None = None) -> Any:
        """The rows snapshot ``snapshot_id`` changed, with ``_rl_kind`` (``+I``/``-U``/
        ``+U``/``-D``): its changelog files, or its merged delta files (docs/paimon.md)."""
        from raylake.paimon.changes import changed_files, read_changes

        self._refuse_data_evolution("changelog()")
        snap = self.snapshot(snapshot_id)
        ctx = self.scan(columns=columns, snapshot_id=snapshot_id).read_context()
        source, files = changed_files(ctx, snap, lambda bucket: True)
        return read_changes(ctx, source, files, include_row_kind=True)

    def _refuse_data_evolution(self, what: str) -> None:
        """Changes and streams read files one by one: a data-evolution file alone holds
        some columns of rows other files hold, so they would return partial rows."""
        info = getattr(self.table_schema, "paimon", None)
        if info is not None and info.options.data_evolution:
            raise UnsupportedPaimonError(
                self.uri, f"{what} of a data-evolution table (rows joined across files)"
            )

    def _changes_scan(self, start: int | datetime, end: int | datetime | None, **kw: Any) -> Any:
        from raylake.paimon.changes_scan import paimon_changes

        self._refuse_data_evolution("changes()")
        return paimon_changes(self, start, end, **kw)

    def stream(self, *, consumer_id: str | None = None, **options: Any) -> Any:
        """A reader of the table's snapshots as a Paimon consumer (raylake/paimon/stream.py):
        ``start``, ``poll_interval``, ``shard=(i, n)``, ``include_row_kind``, ``columns``,
        ``filter``; progress in ``consumer/consumer-<id>`` as ``{"nextSnapshot": n}``."""
        from raylake.paimon.stream import PaimonStreamReader

        self._refuse_data_evolution("stream()")
        return PaimonStreamReader(self, consumer_id=consumer_id, **options)

    def consumer(self, consumer_id: str) -> ConsumerProgress | None:
        """Where Paimon consumer ``consumer_id`` stands (None: not registered)."""
        return next((c for c in self.consumers() if c.consumer_id == consumer_id), None)

    def consumers(self) -> list[ConsumerProgress]:
        """The Paimon consumers (``consumer/consumer-<id>``) and the snapshot each reads
        next; ``updated_millis`` is the file's modification time."""
        from raylake.paimon.stream import CONSUMER_DIR, read_consumer

        found = []
        for rel, mtime in self.file_io.list_files(CONSUMER_DIR):
            name = rel.rsplit("/", 1)[-1]
            if not name.startswith("consumer-"):
                continue
            consumer_id = name[len("consumer-") :]
            next_id = read_consumer(self.file_io, consumer_id)
            if next_id is not None:
                millis = int((mtime or 0) * 1000)
                found.append(ConsumerProgress(consumer_id, next_id, millis))
        return sorted(found, key=lambda c: c.consumer_id)

    def expire_snapshots(self, **kwargs: Any) -> Any:
        self._refuse("expire_snapshots()")

    def remove_orphan_files(self, **kwargs: Any) -> Any:
        self._refuse("remove_orphan_files()")

    def reset_consumer(self, consumer_id: str, snapshot_id: int) -> Any:
        self._refuse("reset_consumer()")

    def delete_consumer(self, consumer_id: str) -> Any:
        self._refuse("delete_consumer()")
