"""Reading the change rows of Paimon changelog and delta files (planned by the Paimon
kind, raylake/paimon/kind.py).

Changelog files' rows are the changes, in sequence order, with their row kinds. A
primary-key bucket's delta files (a table without a changelog producer) are merged
into each key's last version (a ``-D`` kept as a delete); an append table's rows are
inserts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import UnsupportedPaimonError
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema
from raylake.paimon.read import prepare_merge, read_file, read_plan
from raylake.table.pk.engines import merge
from raylake.table.pk.read import ReadPlan
from raylake.table.pk.schema import KIND, SEQ
from raylake.table.split import by_bucket

_UPSERTS = pa.array([0, 2], pa.int8())
_RETRACTS = pa.array([1, 3], pa.int8())


def changelog_producer(ts: PaimonTableSchema) -> str:
    return ts.info.options.changelog_producer


def read_change_files(
    ctx: Any, files: Sequence[PaimonFileSlice], merge_delta: bool
) -> list[pa.Table]:
    """The change rows (with an int8 ``_rl_kind``) of changelog files (``merge_delta``:
    delta files, a primary-key bucket's merged into each key's last version), bucket by
    bucket."""
    ts: PaimonTableSchema = ctx.table_schema
    plan = read_plan(ts, ctx.columns, ctx.filter)
    parts = []
    for slices in by_bucket(files).values():
        if not ts.primary_key:
            rows = pa.concat_tables([read_file(ctx, s, plan.table_columns) for s in slices])
            rows = rows.append_column(KIND, pa.array(np.zeros(rows.num_rows, np.int8)))
        else:
            wanted = plan.table_columns
            rows = pa.concat_tables([read_file(ctx, s, wanted, system=True) for s in slices])
            rows = rows.sort_by(SEQ)
            if merge_delta:
                rows = _merge_delta(rows, ts, plan, ctx.file_io.uri)
        parts.append(rows)
    if merge_delta and len(parts) > 1 and ts.primary_key:
        # Several buckets' merged deltas (a table whose keys move partitions): each holds
        # a key once, and a moved key's -D (old bucket) must come before its +I.
        rows = pa.concat_tables(parts, promote_options="default")  # nullability may differ
        retract = pc.is_in(rows.column(KIND), _RETRACTS)
        order = pc.sort_indices(pa.table({"r": pc.invert(retract)}), [("r", "ascending")])
        return [rows.take(order)]
    return parts


def check_deltas_merge(ts: PaimonTableSchema, uri: str) -> None:
    """Refuse to read a primary-key table's changes from its delta files unless its merge
    engine is ``deduplicate``: the others' delta files hold partial rows. Planning calls
    this, so that the refusal comes before any read (a Ray task, a Spark job)."""
    if ts.info.options.merge_engine != "deduplicate":
        raise UnsupportedPaimonError(
            uri,
            f"following a table of the {ts.info.options.merge_engine!r} merge engine needs "
            "a changelog producer ('changelog-producer' = 'input', 'lookup' or "
            "'full-compaction'): its delta files hold partial rows",
        )


def deltas_need_both_ends(ts: PaimonTableSchema) -> bool:
    """Whether a primary-key table's changes without a changelog are the diff of the
    range's two ends rather than its delta files: with ``sequence.field`` a row written
    in the range loses to an older version of its key with a higher sequence value, which
    the delta files do not hold, so they gave it as the key's new value. (With deletion
    vectors too: the ends are read as a stream reads them, level 0 included.)"""
    return bool(ts.info.options.sequence_fields)


def _merge_delta(rows: pa.Table, ts: PaimonTableSchema, plan: ReadPlan, uri: str) -> pa.Table:
    check_deltas_merge(ts, uri)
    return merge(prepare_merge(rows, plan, ts.info, uri), plan.spec, keep_deletes=True)
