"""``scan.fallback-branch``: partitions the main branch lacks, read from another branch.

Paimon's ``FallbackReadFileStoreTable``: a batch read plans the main branch; the
partitions its snapshot holds (after the read's partition predicate) are complete and
read from it alone; every other partition the fallback branch's snapshot holds is read
from the fallback branch, under that branch's own schema and options (it may be a
primary-key table behind an append table: a real-time branch behind a batch one). A
branch keeps its snapshots and schemas under ``branch/branch-<name>/`` and shares the
table's manifests, data and index files. Time travel maps the main snapshot's commit
time to the fallback branch's last snapshot at or before it (its first if none).

Splits of the fallback branch are marked on their files (``PaimonFileSlice.branch``)
and read, counted and pruned by the branch's table kind (raylake/paimon/kind.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from raylake.errors import UnsupportedPaimonError
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema
from raylake.paimon.snapshot import PaimonSnapshots
from raylake.table.split import Split


def branch_io(file_io: FileIO, branch: str) -> FileIO:
    """The branch's own directory (its snapshots and schemas)."""
    return FileIO(f"{file_io.uri}/branch/branch-{branch}", file_io.options)


def load_fallback(file_io: FileIO, branch: str, main: PaimonTableSchema) -> PaimonTableSchema:
    """The fallback branch's latest schema, checked against the main branch's columns."""
    from raylake.paimon.schema import schema_ids
    from raylake.paimon.table import table_schemas

    other = branch_io(file_io, branch)
    if not schema_ids(other):
        raise UnsupportedPaimonError(
            file_io.uri, f"'scan.fallback-branch'={branch!r} names no branch of the table"
        )
    found = table_schemas(other, fallback=False)
    ts = found[max(found)]
    ours = [(f.name, f.type) for f in main.arrow_schema]
    theirs = [(f.name, f.type) for f in ts.arrow_schema]
    if ours != theirs:
        # Paimon refuses the read too: the branches must have the same row type.
        raise UnsupportedPaimonError(
            file_io.uri,
            f"the fallback branch {branch!r} has columns {theirs}, the main branch {ours}",
        )
    return ts


def fallback_snapshot(file_io: FileIO, branch: str, main: Snapshot | None) -> Snapshot | None:
    """The fallback branch's snapshot to read beside the main branch's ``main`` (the
    latest where ``main`` is the main branch's latest or there is none)."""
    snaps = PaimonSnapshots(branch_io(file_io, branch))
    main_latest = PaimonSnapshots(file_io).latest_id()
    if main is None or main.id == main_latest:
        return snaps.latest()
    chosen = None
    for snap in snaps.all():
        if snap.time_millis <= main.time_millis:
            chosen = snap
    if chosen is None:
        ids = snaps.snapshot_ids()
        return snaps.get(ids[0]) if ids else None
    return chosen


def is_fallback(split: Split) -> bool:
    return any(isinstance(f, PaimonFileSlice) and f.branch is not None for f in split.files)


def split_by_branch(splits: Sequence[Split]) -> tuple[list[Split], list[Split]]:
    main = [s for s in splits if not is_fallback(s)]
    other = [s for s in splits if is_fallback(s)]
    return main, other


def fallback_context(ctx: Any) -> Any:
    """``ctx`` for the fallback branch's splits: its table schema, the same columns."""
    from dataclasses import replace

    fallback = ctx.table_schema.info.fallback
    assert fallback is not None
    return replace(ctx, table_schema=fallback)


def conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A fallback branch's batch under the main branch's output schema (the columns
    match by name and type; nullability may differ)."""
    if not schema:  # a counting read: no columns, the batch's row count is the answer
        return batch
    return pa.RecordBatch.from_arrays(list(batch.columns), schema=schema)
