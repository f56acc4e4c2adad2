"""A Paimon table as a :class:`~raylake.table.source.TableSource`: read-only.

Snapshots are Paimon's ``snapshot/snapshot-<id>`` files (raylake/paimon/snapshot.py);
a snapshot's files are its manifest entries (raylake/paimon/manifest.py), pruned by
partition values and statistics (raylake/paimon/scan.py); consumers are Paimon's own
``consumer/consumer-<id>`` files holding ``{"nextSnapshot": n}``, so that Paimon's
snapshot expiration keeps what a raylake consumer still needs. Those files keep no
properties: what a raylake consumer file records beside the position is not kept.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raylake.errors import ConsumerError, UnsupportedOperationError
from raylake.expr import Expr
from raylake.format.consumer import (
    STREAM_MODE,
    ConsumerProgress,
    is_consumer_id,
    validate_consumer_id,
)
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.paimon.manifest import ADD, delta_manifests
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema
from raylake.paimon.schema import schema_ids
from raylake.paimon.snapshot import PaimonSnapshots
from raylake.table.source import TableSource

if TYPE_CHECKING:
    from raylake.paimon.table import PaimonTable
    from raylake.table.kind import TableKind

CONSUMER_DIR = "consumer"
_CONSUMER_PREFIX = "consumer-"


def read_only(uri: str, what: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"{what} is not supported: {uri} is an Apache Paimon table, which raylake reads "
        "but does not write (format 'paimon', read-only in this version)"
    )


class PaimonSource(TableSource):
    """The snapshots, manifest entries and consumer files of a Paimon table."""

    format = "paimon"
    described = "an Apache Paimon table"
    writable = False
    start_id_reads_whole = False
    changes_read_start = False
    plain_files = False
    consumer_properties = False
    keeps_step_parent = False

    def __init__(self, file_io: FileIO) -> None:
        super().__init__(file_io, PaimonSnapshots(file_io))

    def exists(self) -> bool:
        return bool(schema_ids(self.file_io))

    def open(self) -> PaimonTable:
        from raylake.paimon.table import open_paimon_table

        return open_paimon_table(self.file_io, self)

    @classmethod
    def kind(cls, ts: TableSchema) -> TableKind:
        from raylake.paimon.kind import PaimonAppendKind, PaimonPrimaryKeyKind

        return PaimonPrimaryKeyKind(ts) if ts.primary_key else PaimonAppendKind(ts)

    def refuse_writes(self, what: str) -> UnsupportedOperationError:
        return read_only(self.file_io.uri, what)

    # -- files -------------------------------------------------------------------------

    def live_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[PaimonFileSlice]:
        """The live files as slices with their deletion vectors (a batch read's view:
        level 0 left out where Paimon's batch read leaves it out)."""
        from raylake.paimon.scan import batch_slices, snapshot_files

        pts = _paimon(ts)
        files = snapshot_files(self.file_io, pts.info, snap)
        return batch_slices(self.file_io, pts, snap, files, pruning)

    def stream_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[PaimonFileSlice]:
        """A stream's view of ``snap``: the levels Paimon's streaming start reads. Level
        0 too where a batch read leaves it out (deletion vectors, first-row): the COMPACT
        snapshot that later makes its rows visible there gives a stream nothing. Where
        the changelog producer writes the changelog at compaction (``lookup``: level 0;
        ``full-compaction``: every level below the top) those files are left to it, so
        that their rows do not come twice (raylake/paimon/scan.py: stream_levels)."""
        from raylake.paimon.changes import changelog_producer
        from raylake.paimon.scan import batch_slices, snapshot_files, stream_levels

        pts = _paimon(ts)
        files = snapshot_files(self.file_io, pts.info, snap)
        levels = stream_levels(pts.info, changelog_producer(pts))
        return batch_slices(self.file_io, pts, snap, files, pruning, levels)

    def added_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[PaimonFileSlice]:
        return self._added(ts, delta_manifests(self.file_io, snap), pruning)

    def changelog_files(
        self, ts: TableSchema, snap: Snapshot, pruning: Expr
    ) -> list[PaimonFileSlice]:
        return self._added(ts, delta_manifests(self.file_io, snap, changelog=True), pruning)

    def _added(self, ts: TableSchema, manifests: list[str], pruning: Expr) -> list[PaimonFileSlice]:
        from raylake.paimon.scan import decoder, file_slice, prune_files

        pts = _paimon(ts)
        added = [f for kind, f in decoder(self.file_io, pts.info).entries(manifests) if kind == ADD]
        return [file_slice(f, {}, 1.0, pts.info) for f in prune_files(added, pts, pruning)]

    def schema(self, schema_id: int) -> TableSchema:
        from raylake.paimon.table import table_schemas

        return table_schemas(self.file_io)[schema_id]

    # -- consumers ---------------------------------------------------------------------

    def consumer_ids(self) -> list[str]:
        return [consumer_id for consumer_id, _ in self._consumer_files()]

    def consumer(self, consumer_id: str) -> ConsumerProgress | None:
        found = self._progress(validate_consumer_id(consumer_id))
        return found[0] if found else None

    def consumers(self) -> list[ConsumerProgress]:
        """The consumers and the snapshot each reads next; ``updated_millis`` is the
        file's modification time. Those of Paimon's own readers whose ids raylake does
        not name consumers by (free text: ``job:1``) are left out; Paimon's expiration
        still keeps what they need."""
        return sorted(self._progress(), key=lambda c: c.consumer_id)

    def _progress(self, only: str | None = None) -> list[ConsumerProgress]:
        found = []
        for consumer_id, mtime in self._consumer_files():
            if (only is not None and consumer_id != only) or not is_consumer_id(consumer_id):
                continue
            next_id = read_consumer(self.file_io, consumer_id)
            if next_id is not None:
                found.append(ConsumerProgress(consumer_id, next_id, int((mtime or 0) * 1000)))
        return found

    def register_consumer(
        self, consumer_id: str, next_snapshot_id: int, properties: Mapping[str, str] | None = None
    ) -> ConsumerProgress:
        """Write ``{"nextSnapshot": n}``; except where the reader reads snapshot ``n``
        whole next (a stream's start), which Paimon's file cannot say: such a consumer
        registers at its first checkpoint past it (until then a restart starts over)."""
        if (properties or {}).get(STREAM_MODE) != "full":
            write_consumer(self.file_io, consumer_id, next_snapshot_id)
        return ConsumerProgress(consumer_id, next_snapshot_id, int(time.time() * 1000))

    def commit_consumer(
        self, consumer_id: str, next_snapshot_id: int, properties: Mapping[str, str] | None = None
    ) -> ConsumerProgress:
        """Record progress, forward only, as a raylake table's consumer file does."""
        current = self.consumer(consumer_id)
        if current is not None and next_snapshot_id < current.next_snapshot_id:
            raise ConsumerError(
                f"consumer {consumer_id!r} is at snapshot {current.next_snapshot_id}; committing "
                f"{next_snapshot_id} would move it backwards (Paimon's reset_consumer "
                "procedure rewinds on purpose)",
                consumer_id=consumer_id,
            )
        return self.register_consumer(consumer_id, next_snapshot_id, properties)

    def _consumer_files(self) -> list[tuple[str, float | None]]:
        found = []
        for rel, mtime in self.file_io.list_files(CONSUMER_DIR):
            name = rel.rsplit("/", 1)[-1]
            if name.startswith(_CONSUMER_PREFIX):
                found.append((name[len(_CONSUMER_PREFIX) :], mtime))
        return found


def _paimon(ts: TableSchema) -> PaimonTableSchema:
    assert isinstance(ts, PaimonTableSchema), "a Paimon source reads Paimon table schemas"
    return ts


def consumer_path(consumer_id: str) -> str:
    return f"{CONSUMER_DIR}/{_CONSUMER_PREFIX}{consumer_id}"


def read_consumer(file_io: Any, consumer_id: str) -> int | None:
    """The next snapshot a Paimon consumer reads, or None if it is not registered."""
    try:
        data = json.loads(file_io.read_bytes(consumer_path(consumer_id)))
        return int(data["nextSnapshot"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise ConsumerError(
            f"consumer file {file_io.full_path(consumer_path(consumer_id))} is not "
            f'{{"nextSnapshot": n}}: {exc!r}',
            consumer_id=consumer_id,
        ) from exc


def write_consumer(file_io: Any, consumer_id: str, next_snapshot_id: int) -> None:
    file_io.write_bytes(
        consumer_path(consumer_id), json.dumps({"nextSnapshot": next_snapshot_id}).encode()
    )
