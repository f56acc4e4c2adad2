"""The commit of a merge: one snapshot with the merge's conflict rule, or none and
its files deleted (docs/merge.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from raylake.errors import CommitConflictError
from raylake.format.snapshot import Snapshot
from raylake.table.aborted import abort_messages
from raylake.table.commit import CommitRequest, commit_or_abort
from raylake.table.evolve import commit_planned_schema
from raylake.table.merge.builder import MergeResult
from raylake.table.writer import CommitMessage

if TYPE_CHECKING:
    from raylake.table.table import Table


def check_schema_current(tbl: Table, snap: Snapshot | None) -> None:
    """Refuse to merge ``snap`` under an older schema than its own: a schema change that
    landed after the merge loaded the schema, with rows written under it, would lose the
    new columns of every row the merge rewrites. A conflict: the merge runs again and
    loads the new schema."""
    if snap is not None and snap.schema_id > tbl.table_schema.schema_id:
        raise CommitConflictError(
            f"the schema of {tbl.uri} changed (schema {snap.schema_id}) while the merge "
            f"planned under schema {tbl.table_schema.schema_id}",
            expected=tbl.table_schema.schema_id,
            actual=snap.schema_id,
        )


def unchanged(snap: Snapshot | None) -> MergeResult:
    return MergeResult(0, 0, 0, None if snap is None else snap.id)


def commit_merge(
    tbl: Table,
    messages: list[CommitMessage],
    base: Snapshot | None,
    kind: str,
    check: Callable[[Snapshot], None],
    parts: Sequence[Any],
    files_rewritten: int = 0,
) -> MergeResult:
    """One snapshot of ``messages`` on ``base`` under ``check``, after the schema the
    merge planned with its source's new columns, if any; the result sums what the
    merge's ``parts`` (of any engine) inserted, updated and deleted."""
    try:
        commit_planned_schema(tbl.file_io, tbl.table_schema)
    except BaseException:
        abort_messages(tbl.file_io, messages)
        raise
    request = CommitRequest(
        messages=messages,
        kind=kind,  # type: ignore[arg-type]
        base_snapshot_id=base.id if base else 0,
        conflict_check=check,
    )
    snapshot = commit_or_abort(tbl.file_io, tbl.table_schema, request)
    return MergeResult(
        inserted=sum(p.inserted for p in parts),
        updated=sum(p.updated for p in parts),
        deleted=sum(p.deleted for p in parts),
        snapshot_id=snapshot.id,
        files_rewritten=files_rewritten,
        files_added=sum(len(m.new_files) for m in messages),
    )
