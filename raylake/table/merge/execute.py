"""Running a merge: read what it must, decide, write, commit once (docs/merge.md).

* Append tables, copy-on-write: the live files that may hold a matching key (by
  partition and key statistics) are read, each kept apart; only those holding a
  matched row that changes are rewritten, inserts go to new files, and one
  OVERWRITE-kind commit removes the rewritten files and adds the new ones.
* Primary-key tables, merge-on-read: with ``on`` = the primary key, the target
  rows are looked up by key (only the buckets the source's keys hash to are read);
  otherwise the table is read. Changed rows are written as ``-D``/``+U``/``+I``
  rows with the primary-key writer, one commit.

The commit carries a conflict rule: if a commit after the merge's base removed a
file it read (append) or changed a bucket it read (primary key), the merge runs
again on the new state, up to ``MAX_ATTEMPTS`` times, then raises
:class:`CommitConflictError`. Files of an attempt that does not commit are deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raylake.expr import AlwaysTrue, Expr
from raylake.format.manifest import DataFile
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.table.aborted import abort_messages
from raylake.table.merge.builder import MergeResult
from raylake.table.merge.commit import check_schema_current, commit_merge, unchanged
from raylake.table.merge.plan import (
    BY_SOURCE,
    NOT_MATCHED,
    Clause,
    JoinOn,
    decide,
    others,
)
from raylake.table.merge.primary_key import _merge_primary_key, by_key_lookup, key_pruning
from raylake.table.replaced import (
    ATTEMPTS,
    check_files_kept,
    rerun_on_conflict,
    vanished_as_conflict,
)
from raylake.table.scan import pruned_live_files
from raylake.table.whole_files import batches_of as batches_of
from raylake.table.whole_files import read_whole_files
from raylake.table.writer import CommitMessage, writing

if TYPE_CHECKING:
    from raylake.table.table import Table

MAX_ATTEMPTS = ATTEMPTS
# An append-table merge reads and rewrites its candidate files this many bytes at a time.
BATCH_BYTES = 256 * 1024 * 1024


def merge_once(
    tbl: Table, source: pa.Table, on: JoinOn, clauses: tuple[Clause, ...]
) -> MergeResult:
    """One attempt of a checked merge: decide, write and commit, by the table's kind."""
    with vanished_as_conflict(tbl.file_io, tbl.table_schema, "merge"):  # expired while read
        if tbl.table_schema.is_primary_key_table:
            return _merge_primary_key(tbl, source, on, clauses)
        return _merge_append(tbl, source, on, clauses)


def with_attempts(attempt: Callable[[], MergeResult]) -> MergeResult:
    """``attempt`` again after each concurrent commit that changed what it read, up to
    ``MAX_ATTEMPTS`` times (every engine's merge); the result counts the attempts."""
    result, attempts = rerun_on_conflict(attempt, MAX_ATTEMPTS)
    return replace(result, attempts=attempts)


@dataclass(frozen=True)
class AppendPart:
    """What one merge of some target files wrote (picklable, for Ray tasks)."""

    messages: tuple[CommitMessage, ...]
    rewritten: tuple[DataFile, ...]  # files the new ones replace
    inserted: int
    updated: int
    deleted: int
    matched_source: np.ndarray  # source positions a target row of these files matched


def candidate_files(tbl: Table, snap: Snapshot | None, pruning: Expr) -> list[DataFile]:
    if snap is None:
        return []
    return pruned_live_files(tbl.file_io, tbl.table_schema, snap, pruning)


def pruning_for(on: JoinOn, source: pa.Table, ts: Any, clauses: tuple[Clause, ...]) -> Expr:
    """What the merge may skip: nothing with a by-source clause (every row counts)."""
    if any(c.group == BY_SOURCE for c in clauses):
        return AlwaysTrue()
    return key_pruning(on, source, ts)


def append_part(
    tbl: Table,
    snap: Snapshot | None,
    files: Sequence[DataFile],
    source: pa.Table,
    on: JoinOn,
    clauses: tuple[Clause, ...],
    *,
    file_prefix: str = "data",
) -> AppendPart:
    """Decide the merge for the rows of ``files`` and write (not commit) the rewrites
    of the files holding changed rows, and the inserts of ``clauses``."""
    schema = tbl.table_schema.arrow_schema
    tables = _read_files(tbl, snap, files)
    target = pa.concat_tables(tables) if tables else schema.empty_table()
    file_of = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
    outcome = decide(target, source, on, clauses, schema)
    if outcome.changes_nothing:
        return AppendPart((), (), 0, 0, 0, outcome.matched_source)
    touched = np.unique(file_of[np.concatenate([outcome.updated, outcome.deleted])])
    drop = np.zeros(target.num_rows, dtype=bool)
    drop[outcome.updated] = True
    drop[outcome.deleted] = True
    kept = target.filter(pa.array(np.isin(file_of, touched) & ~drop))
    new_writer = tbl.kind.new_writer(tbl.file_io, file_prefix=file_prefix)
    with writing(new_writer) as writer:
        for part in (kept, outcome.updated_rows, outcome.inserted_rows):
            if part.num_rows:
                writer.write(part)
        messages = writer.prepare_commit()
    return AppendPart(
        tuple(messages),
        tuple(files[i] for i in touched),
        outcome.inserted_rows.num_rows,
        len(outcome.updated),
        len(outcome.deleted),
        outcome.matched_source,
    )


def commit_append_parts(
    tbl: Table, snap: Snapshot | None, files: Sequence[DataFile], parts: Sequence[AppendPart]
) -> MergeResult:
    """One commit of every part: an OVERWRITE that replaces the rewritten files, or
    CommitConflictError (files deleted) if a commit after ``snap`` removed a file read."""
    messages = [m for p in parts for m in p.messages]
    rewritten = tuple(f for p in parts for f in p.rewritten)
    if not rewritten and all(m.is_empty for m in messages):
        return unchanged(snap)
    if rewritten:
        messages.append(CommitMessage(deleted_files=rewritten))
    read_paths = {f.path for f in files}

    def check(latest: Snapshot) -> None:
        check_files_kept(tbl.file_io, tbl.table_schema, snap, latest, read_paths, "merge")

    kind = "OVERWRITE" if rewritten else "APPEND"
    return commit_merge(tbl, messages, snap, kind, check, parts, len(rewritten))


def _merge_append(
    tbl: Table, source: pa.Table, on: JoinOn, clauses: tuple[Clause, ...]
) -> MergeResult:
    snap = SnapshotManager(tbl.file_io).latest()
    check_schema_current(tbl, snap)
    files = candidate_files(tbl, snap, pruning_for(on, source, tbl.table_schema, clauses))
    updates = tuple(c for c in clauses if c.group != NOT_MATCHED)
    inserts = tuple(c for c in clauses if c.group == NOT_MATCHED)
    # A batch of files at a time, so that memory holds the source and one batch, not
    # the whole table: a target row's matches are decided within its own file.
    parts: list[AppendPart] = []
    try:
        for batch in batches_of(files, BATCH_BYTES):
            parts.append(append_part(tbl, snap, batch, source, on, updates))
        if inserts:
            matched = np.concatenate([p.matched_source for p in parts] or [np.empty(0, np.int64)])
            new = source.take(pa.array(others(source.num_rows, matched)))
            parts.append(append_part(tbl, snap, [], new, on, inserts))
    except BaseException:
        abort_messages(tbl.file_io, [m for p in parts for m in p.messages])
        raise
    return commit_append_parts(tbl, snap, files, parts)


def finish_append(
    tbl: Table,
    snap: Snapshot | None,
    files: Sequence[DataFile],
    parts: list[AppendPart],
    source: pa.Table,
    on: JoinOn,
    clauses: tuple[Clause, ...],
    *,
    file_prefix: str,
) -> MergeResult:
    """The end of a distributed append-table merge, on the driver: insert the source
    rows that no part matched (each part held the whole source, so a row no part
    matched matches no target row), then commit every part as one snapshot."""
    inserts = tuple(c for c in clauses if c.group == NOT_MATCHED)
    if inserts:
        matched = np.concatenate([p.matched_source for p in parts] or [np.empty(0, np.int64)])
        new = source.take(pa.array(others(source.num_rows, matched)))
        parts = [*parts, append_part(tbl, snap, [], new, on, inserts, file_prefix=file_prefix)]
    return commit_append_parts(tbl, snap, files, parts)


def _read_files(tbl: Table, snap: Snapshot | None, files: Sequence[DataFile]) -> list[pa.Table]:
    """Each file's rows under the table's schema, in file order (to know which file
    holds a row, the one a rewrite replaces)."""
    if snap is None:
        return []
    return read_whole_files(tbl.file_io, tbl.table_schema, snap.id, files)


def split_by(ts: Any, on: JoinOn, clauses: tuple[Clause, ...]) -> str | None:
    """How a distributed merge (Ray, Spark) splits its work: ``"bucket"`` (a primary-key
    table merged on its key: a task per bucket), ``"file"`` (an append table: a task per
    group of target files), or None where it cannot split (the rule lives here, with the
    kinds' merges, not in the engines' modules)."""
    if ts.is_primary_key_table:
        return "bucket" if by_key_lookup(ts, on, clauses) else None
    return "file"
