"""Whether the schema a ``Table`` was opened with is still its table's.

A table dropped and created again under a ``Table`` object (other columns, at the same
schema id) must not be read under the old schema: its files would read as nulls, or not
at all. Commits check it by reading the schema file afresh (schema_files.check_same_table);
reads check it here, once per line of commits: a snapshot made on one already checked
is of the same table (a replaced table starts a new line), so a table that only grows
costs one schema read per ``Table``, not one per read. Only snapshots made under the
``Table``'s schema or a later one are checked: for an older snapshot, the schema may
be one planned and not yet written.
"""

from __future__ import annotations

from raylake.errors import SchemaError
from raylake.format.schema import TableSchema
from raylake.format.schema_files import stored_schema
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO

# Checked commit ids kept per Table: enough for the snapshots between two reads.
_KEEP = 64


class SameTableCheck:
    """The commits known to be of the table a ``Table``'s schema was read from."""

    def __init__(self) -> None:
        self._schema: TableSchema | None = None
        self._commits: set[str] = set()

    def check(self, file_io: FileIO, ts: TableSchema, snap: Snapshot | None) -> None:
        """Raise SchemaError where ``snap`` belongs to a table created again since ``ts``."""
        if snap is None or snap.schema_id < ts.schema_id:
            # A schema newer than the snapshot's may not be written yet (a merge plans
            # its added columns before it commits them): nothing on the store to compare.
            return
        known = (
            self._schema is ts
            and snap.commit_id
            and (snap.commit_id in self._commits or snap.parent_commit_id in self._commits)
        )
        if not known:
            stored = stored_schema(file_io, ts.schema_id)
            if stored is None or stored.to_json() != ts.to_json():
                raise SchemaError(
                    f"the table at {file_io.uri!r} was dropped and created again after this "
                    f"Table was opened: its schema {ts.schema_id} is "
                    f"{'gone' if stored is None else 'another'}, so its snapshot {snap.id} "
                    "cannot be read under the old columns; open it again (open_table) or "
                    "call refresh()"
                )
            if self._schema is not ts or len(self._commits) >= _KEEP:
                self._schema, self._commits = ts, set()
        if snap.commit_id:
            self._commits.add(snap.commit_id)
