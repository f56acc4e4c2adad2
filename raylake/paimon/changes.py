"""The rows one Paimon snapshot changed, as a Paimon streaming read sees them.

With a changelog producer (``input``, ``lookup``, ``full-compaction``) a snapshot's
changelog manifests name changelog files: their rows are the changes, in sequence
order, with their row kinds. Without one (``none``), an APPEND snapshot's delta files
are the changes: an append table's rows are inserts; a primary-key table's delta files
of one bucket are merged into each key's last version in the snapshot (a ``-D`` kept as
a delete). COMPACT snapshots change no row (their changelog, where a producer writes
one at compaction, is read); OVERWRITE snapshots are skipped, as Paimon's streaming
reads do by default (``streaming-read-overwrite`` = false).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import UnsupportedPaimonError
from raylake.format.snapshot import Snapshot
from raylake.paimon.manifest import ADD, EntryDecoder, PaimonFile, delta_manifests
from raylake.paimon.meta import PaimonTableSchema
from raylake.paimon.read import PaimonReadPlan, prepare_merge, read_file
from raylake.paimon.scan import file_slice, partition_path
from raylake.paimon.snapshot import CHANGELOG_LIST
from raylake.table.changes import with_row_kind
from raylake.table.pk.engines import merge
from raylake.table.pk.schema import KIND, KIND_NAMES, SEQ

_UPSERTS = pa.array([0, 2], pa.int8())


def changelog_producer(ts: PaimonTableSchema) -> str:
    return ts.info.current.options.get("changelog-producer", "none")


def changed_files(
    ctx: Any, snap: Snapshot, keep_bucket: Callable[[int], bool]
) -> tuple[str, list[PaimonFile]]:
    """("changelog" | "delta" | "none", the files holding what ``snap`` changed)."""
    ts: PaimonTableSchema = ctx.table_schema
    info = ts.info
    decoder = EntryDecoder(ctx.file_io, info.schemas, info.current, partition_path(info))
    if snap.properties.get(CHANGELOG_LIST):
        source, manifests = "changelog", delta_manifests(ctx.file_io, snap, changelog=True)
    elif snap.commit_kind == "APPEND" and not (ts.primary_key and changelog_producer(ts) != "none"):
        source, manifests = "delta", delta_manifests(ctx.file_io, snap)
    else:
        return "none", []
    files = [f for kind, f in decoder.entries(manifests) if kind == ADD and keep_bucket(f.bucket)]
    return source, files


def read_changes(
    ctx: Any, source: str, files: Sequence[PaimonFile], include_row_kind: bool
) -> pa.Table:
    """The change rows of ``files``: the projected columns, and ``_rl_kind`` if asked."""
    ts: PaimonTableSchema = ctx.table_schema
    plan = PaimonReadPlan.of(ts, ctx.columns, ctx.filter)
    schema = with_row_kind(ctx.output_schema, include_row_kind)
    parts = []
    for bucket_files in _by_bucket(files).values():
        slices = [file_slice(f, {}, 1.0, ts.info) for f in bucket_files]
        if not ts.primary_key:
            rows = pa.concat_tables([read_file(ctx, s, plan.read_columns) for s in slices])
            rows = rows.append_column(KIND, pa.array(np.zeros(rows.num_rows, np.int8)))
        else:
            wanted = plan.merge_columns
            rows = pa.concat_tables([read_file(ctx, s, wanted, system=True) for s in slices])
            rows = rows.sort_by(SEQ)
            if source == "delta":
                rows = _merge_delta(rows, ts, plan, ctx.file_io.uri)
        parts.append(change_rows(rows, plan, schema, include_row_kind))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def change_rows(
    rows: pa.Table, plan: PaimonReadPlan, schema: pa.Schema, include_row_kind: bool
) -> pa.Table:
    """Rows with an int8 row kind -> filtered, projected to ``schema``, the kind named
    in ``_rl_kind`` if asked, else upserts (+I, +U) only."""
    if plan.full_filter is not None:
        rows = rows.filter(plan.full_filter)
    if not include_row_kind:
        rows = rows.filter(pc.is_in(rows.column(KIND), value_set=_UPSERTS))
    arrays = [rows.column(c) for c in plan.output]
    if include_row_kind:
        names = pa.array(list(KIND_NAMES), pa.string())
        arrays.append(names.take(pc.cast(rows.column(KIND), pa.int32())))
    return pa.Table.from_arrays(arrays, schema=schema)


def _merge_delta(rows: pa.Table, ts: PaimonTableSchema, plan: PaimonReadPlan, uri: str) -> pa.Table:
    if ts.info.options.merge_engine != "deduplicate":
        raise UnsupportedPaimonError(
            uri,
            f"following a {ts.info.options.merge_engine} table needs a changelog producer "
            "('changelog-producer' = 'input', 'lookup' or 'full-compaction'): its delta "
            "files hold partial rows",
        )
    assert plan.spec is not None
    return merge(prepare_merge(rows, plan, ts.info, uri), plan.spec, keep_deletes=True)


def _by_bucket(files: Sequence[PaimonFile]) -> dict[tuple[Any, ...], list[PaimonFile]]:
    groups: dict[tuple[Any, ...], list[PaimonFile]] = {}
    for f in files:
        groups.setdefault((f.partition_bytes, f.bucket), []).append(f)
    return groups
