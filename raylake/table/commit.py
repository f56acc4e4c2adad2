"""The committer: turns commit messages into exactly one new snapshot, atomically.

Order of work: data files exist already (unique names); the committer writes
the delta manifest, then creates ``snapshot-<N>.json`` with create-if-absent.
If N exists another writer won: re-read the latest snapshot, check conflicts
(appends never conflict; an overwrite conflicts with a concurrent change to
the partitions it replaces; a compaction conflicts if the files it replaces
are gone), and retry as N+1. A crash at any point leaves the table readable and
unchanged: the snapshot file is the only commit point, and everything written
before it is an orphan until then.
"""

from __future__ import annotations

import getpass
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pyarrow as pa

from raylake.errors import (
    CommitConflictError,
    CommitFailedError,
    CommitStateUnknownError,
    CorruptMetadataError,
    FilterError,
    SnapshotExpiredError,
    UnsafeCommitError,
)
from raylake.expr import AlwaysTrue, Expr, bind, referenced_columns, to_arrow
from raylake.format.manifest import (
    ADD,
    DELETE,
    DataFile,
    ManifestMeta,
    data_files_from_table,
    entries_table,
    live_files,
    live_files_of,
    read_entries,
    with_commit_fields,
    write_manifest,
)
from raylake.format.schema import TableSchema
from raylake.format.schema_files import check_same_table, schema_at_least, schema_ids
from raylake.format.snapshot import CommitKind, Snapshot, SnapshotManager
from raylake.io import FileIO
from raylake.table.aborted import FilesCheck, abort_messages, raise_named
from raylake.table.idempotent import already_committed, drop_unused_files
from raylake.table.kind import kind_of
from raylake.table.lineage import check_lineage, held_after_unknown
from raylake.table.writer import COMMITTED_AS, CommitMessage
from raylake.table.written_partitions import WrittenPartitions

logger = logging.getLogger(__name__)


def default_commit_user() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class CommitRequest:
    messages: Sequence[CommitMessage]
    kind: CommitKind = "APPEND"
    # None: no files are replaced. Otherwise a filter on partition columns (AlwaysTrue for
    # the whole table), or the partitions a dynamic overwrite wrote: every live file in
    # those partitions is replaced.
    overwrite: Expr | WrittenPartitions | None = None
    # The snapshot the writer read or started from; changes after it are checked for conflicts.
    base_snapshot_id: int | None = None
    commit_user: str = ""
    commit_identifier: int | None = None
    properties: Mapping[str, str] | None = None
    # A caller's own conflict rule, run on every attempt against the latest snapshot when
    # commits landed after the base: a merge checks that none changed what it read. It
    # raises CommitConflictError; running it per attempt keeps it atomic with the commit.
    conflict_check: Callable[[Snapshot], None] | None = None
    # New files keep the sequence_base they carry, as a compaction's do: an append
    # table's delete rewrites files whose rows stay where they were in the read order.
    keep_sequences: bool = False
    # Waited for before each create and before an idempotent retry returns: raises to
    # refuse the commit. It runs meanwhile (commit_or_abort's existence checks).
    before_create: Callable[[], None] | None = None


class Committer:
    def __init__(self, file_io: FileIO, ts: TableSchema) -> None:
        self.file_io = file_io
        self.ts = ts
        self.snapshots = SnapshotManager(file_io)
        self.max_retries = ts.table_options.commit_max_retries

    def commit(self, request: CommitRequest) -> Snapshot:
        check_commit_safety(self.file_io, self.ts)
        check_same_table(self.file_io, self.ts)
        if isinstance(request.overwrite, Expr):
            check_partition_filter(request.overwrite, self.ts)
        user = request.commit_user or default_commit_user()
        commit_id = uuid.uuid4().hex
        for attempt in range(self.max_retries):
            latest = self.snapshots.latest()
            try:
                done = already_committed(self.snapshots, self.ts, request, user, latest)
            except SnapshotExpiredError:
                continue  # newer commits landed and an expiration removed what it read
            if done is not None:
                _ready(request)
                drop_unused_files(self.file_io, self.ts, request, user, done)
                return done
            if request.base_snapshot_id is None:
                # No base given: the commit is based on what it first sees, so only commits
                # that land while it retries can conflict (not all history since snapshot 1).
                request = replace(request, base_snapshot_id=0 if latest is None else latest.id)
            written: list[str] = []  # filled as files are written, so a failure cleans them up
            snap: Snapshot | None = None
            try:
                self._check_conflicts(request, latest)
                snap = replace(self._prepare(request, user, latest, written), commit_id=commit_id)
                _ready(request)
                lineage = partial(check_lineage, self.snapshots, self.ts, snap)
                if self.snapshots.try_create(snap, then=lineage):
                    logger.info("committed snapshot %d (%s)", snap.id, snap.commit_kind)
                    return snap
            except CommitStateUnknownError:
                # An expiration may have removed the snapshot since its create: where
                # others went on from it, its files live in the latest snapshot tell.
                if snap is not None and held_after_unknown(self.snapshots, self.ts, snap):
                    logger.info("committed snapshot %d, expired since", snap.id)
                    return snap
                raise  # the snapshot may be visible and name what this attempt wrote
            except (CorruptMetadataError, FileNotFoundError):
                self.file_io.delete_quietly(written)
                # The snapshot read as the latest was expired meanwhile (newer ones were
                # committed), and with it manifests or files this attempt read: another
                # writer won this id, as when the create finds the snapshot taken.
                if latest is None or self.snapshots.read_if_present(latest.id) is not None:
                    raise
                continue
            except BaseException:
                self.file_io.delete_quietly(written)
                raise
            self.file_io.delete_quietly(written)
            time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))
        raise CommitFailedError(
            f"could not commit to {self.file_io.uri} after {self.max_retries} attempts "
            "(too many concurrent commits); nothing was committed"
        )

    def _check_conflicts(self, request: CommitRequest, latest: Snapshot | None) -> None:
        if latest is None:
            return
        deleted = [f for m in request.messages for f in m.deleted_files]
        if deleted:
            # Paths only: no statistics decoded (the set a plan without a filter shares).
            live = live_files_of(self.file_io, latest.base_manifests, self.ts, ())
            live_paths = set(live.column("path").to_pylist())
            gone = [f.path for f in deleted if f.path not in live_paths]
            if gone:
                raise CommitConflictError(
                    f"{len(gone)} file(s) this commit replaces were removed by a concurrent "
                    f"commit (up to snapshot {latest.id}), e.g. {gone[0]}; re-run it",
                    expected=request.base_snapshot_id,
                    actual=latest.id,
                )
        if request.conflict_check is not None and latest.id > (request.base_snapshot_id or 0):
            request.conflict_check(latest)
        if request.overwrite is None:
            return
        base = request.base_snapshot_id or 0
        for snap in snapshots_after(self.snapshots, base, latest, "overwrite"):
            if snap.commit_kind == "COMPACT":
                # It changed no row: the overwrite replaces the compacted files too. (A
                # compaction landing after the overwrite finds its files gone and loses.)
                continue
            changed = read_entries(self.file_io, snap.delta_manifests, self.ts)
            if _select_partitions(changed, request.overwrite, self.ts).num_rows:
                raise CommitConflictError(
                    f"overwrite of {request.overwrite} conflicts with snapshot {snap.id} "
                    f"({snap.commit_kind}), which changed the same partitions after snapshot "
                    f"{base}; nothing was committed",
                    expected=base,
                    actual=snap.id,
                )

    def _prepare(
        self, request: CommitRequest, user: str, latest: Snapshot | None, written: list[str]
    ) -> Snapshot:
        snapshot_id = 1 if latest is None else latest.id + 1
        # The snapshot records the table's newest schema, as Paimon's commit does: one
        # of a writer opened before a schema change no snapshot had recorded yet kept
        # the older id, and the latest snapshot read under the older schema by its id
        # and under the newer without one.
        newest_schema = max(schema_ids(self.file_io), default=self.ts.schema_id)
        next_sequence = 0 if latest is None else latest.next_sequence
        base_manifests = () if latest is None else latest.base_manifests

        added: list[DataFile] = []
        for message in request.messages:
            for f in message.new_files:
                if request.kind == "COMPACT" or request.keep_sequences:  # (as numbered)
                    added.append(with_commit_fields(f, snapshot_id, f.sequence_base))
                    continue
                added.append(with_commit_fields(f, snapshot_id, next_sequence))
                next_sequence += f.max_sequence - f.min_sequence + 1
        deleted = [f for m in request.messages for f in m.deleted_files]
        if request.overwrite is not None and latest is not None:
            live = live_files_of(self.file_io, base_manifests, self.ts)
            replaced = _select_partitions(live, request.overwrite, self.ts)
            deleted += data_files_from_table(replaced, self.ts)
        changelog = [
            with_commit_fields(f, snapshot_id, f.sequence_base)
            for m in request.messages
            for f in m.changelog_files
        ]

        if request.kind == "APPEND":
            # The before-images are rows of ``latest``: read under a schema that has all
            # their columns, not an older one of a writer opened before a change.
            lookup = (
                self.ts
                if latest is None
                else schema_at_least(self.file_io, self.ts, latest.schema_id)
            )
            looked_up = kind_of(lookup).commit_changelog(self.file_io, latest, added)
            written += [f.path for f in looked_up]
            changelog += [with_commit_fields(f, snapshot_id, 0) for f in looked_up]
        delta_entries = [(DELETE, f) for f in deleted] + [(ADD, f) for f in added]
        delta = write_manifest(self.file_io, entries_table(delta_entries, self.ts))
        written.append(delta.path)
        new_base = self._merge_base([*base_manifests, delta], written)
        changelog_manifests: tuple[ManifestMeta, ...] = ()
        if changelog:
            meta = write_manifest(
                self.file_io, entries_table([(ADD, f) for f in changelog], self.ts)
            )
            written.append(meta.path)
            changelog_manifests = (meta,)

        delta_rows = sum(f.row_count for f in added) - sum(f.row_count for f in deleted)
        now = int(time.time() * 1000)
        snap = Snapshot(
            id=snapshot_id,
            # A writer that opened the table before a schema change still commits under
            # the newer schema: its files record the schema they were written with.
            schema_id=max(self.ts.schema_id, newest_schema, latest.schema_id if latest else 0),
            parent_id=None if latest is None else latest.id,
            parent_commit_id="" if latest is None else latest.commit_id,
            commit_kind=request.kind,
            commit_user=user,
            commit_identifier=(
                request.commit_identifier if request.commit_identifier is not None else snapshot_id
            ),
            # Snapshot times never go backwards, so time travel by timestamp is well defined.
            time_millis=now if latest is None else max(now, latest.time_millis),
            base_manifests=tuple(new_base),
            delta_manifests=(delta,),
            changelog_manifests=changelog_manifests,
            total_record_count=(0 if latest is None else latest.total_record_count) + delta_rows,
            delta_record_count=delta_rows,
            changelog_record_count=sum(f.row_count for f in changelog),
            next_sequence=next_sequence,
            properties=dict(request.properties or {}),
            named_commits=_named_commits(latest, user, request.commit_identifier, snapshot_id),
            last_overwrite_id=_last_overwrite_id(latest, request.kind, snapshot_id),
        )
        return snap

    def _merge_base(self, metas: list[ManifestMeta], written: list[str]) -> list[ManifestMeta]:
        """Fold many small manifests into one of live ADD entries, so planning stays cheap."""
        if len(metas) < self.ts.table_options.manifest_merge_min_count:
            return metas
        merged = write_manifest(
            self.file_io, live_files(read_entries(self.file_io, metas, self.ts))
        )
        written.append(merged.path)
        return [merged]


def snapshots_after(
    snapshots: SnapshotManager, base_id: int, latest: Snapshot, what: str
) -> Iterator[Snapshot]:
    """The snapshots after ``base_id`` up to ``latest``, oldest first, for a conflict
    check. One expired meanwhile (a concurrent expiration) cannot be checked: that is a
    conflict, so that the operation runs again on the latest state, not an error that
    names a missing snapshot."""
    for snapshot_id in range(base_id + 1, latest.id + 1):
        snap = latest if snapshot_id == latest.id else snapshots.read_if_present(snapshot_id)
        if snap is None:
            raise CommitConflictError(
                f"{what} based on snapshot {base_id} cannot be checked for conflicts: "
                f"snapshot {snapshot_id} was expired meanwhile; re-run it",
                expected=base_id,
                actual=latest.id,
            )
        yield snap


def check_commit_safety(file_io: FileIO, ts: TableSchema) -> None:
    """Refuse to commit where concurrent commits could silently overwrite each other."""
    if not file_io.atomic_create and not ts.table_options.commit_single_writer:
        raise UnsafeCommitError(
            file_io.uri, type(file_io.fs).__name__, file_io.atomic_create_upgrade
        )


def check_partition_filter(expr: Expr, ts: TableSchema) -> None:
    if isinstance(expr, AlwaysTrue):
        return
    others = sorted(referenced_columns(expr) - set(ts.partition_keys))
    if others:
        raise FilterError(
            f"an overwrite filter may only name partition columns {list(ts.partition_keys)}; "
            f"it names {others}"
        )


def _select_partitions(
    entries: pa.Table, expr: Expr | WrittenPartitions, ts: TableSchema
) -> pa.Table:
    """Manifest entries whose partition values satisfy a filter on partition columns, or
    that lie in the partitions a dynamic overwrite wrote."""
    if isinstance(expr, WrittenPartitions):
        return expr.select(entries, ts)
    if isinstance(expr, AlwaysTrue) or entries.num_rows == 0:
        return entries
    bound = bind(expr, ts.partition_schema)
    partitions = pa.Table.from_struct_array(entries.column("partition").combine_chunks())
    index_name = "_rl_entry"  # the reserved prefix: no partition column has the name
    indexed = partitions.append_column(
        index_name, pa.array(np.arange(entries.num_rows, dtype=np.int64))
    )
    keep = indexed.filter(to_arrow(bound)).column(index_name)
    return entries.take(keep)


def _ready(request: CommitRequest) -> None:
    if request.before_create is not None:
        request.before_create()


def commit_or_abort(
    file_io: FileIO, ts: TableSchema, request: CommitRequest, *, check_files: bool = False
) -> Snapshot:
    """Commit ``request`` as one snapshot; if it fails, the files its messages name are
    deleted (unless the outcome is unknown) and the messages refused from then on.

    ``check_files``: messages from elsewhere (another process, an earlier call) are
    refused where their files are gone (raylake/table/aborted.py); the checks run while
    the commit prepares, and a refusal deletes nothing of the messages."""
    _refuse_committed(request)
    check = FilesCheck(file_io, request.messages) if check_files else None
    if check is not None:
        request = replace(request, before_create=check.wait)
    try:
        snapshot = Committer(file_io, ts).commit(request)
    except BaseException as exc:
        refusal = None if check is None else check.error()
        if refusal is exc:
            raise
        if refusal is not None:  # refused before anything else failed, as if checked first
            raise refusal from exc
        abort_messages(file_io, list(request.messages), exc)
        raise_named(file_io, exc)
        raise
    kind_of(ts).after_commit(file_io, list(request.messages))
    for message in request.messages:
        if not message.is_empty:  # the message objects remember it (and copies made later)
            object.__setattr__(message, COMMITTED_AS, (snapshot.id, *_name(request)))
    return snapshot


def _name(request: CommitRequest) -> tuple[str, int | None]:
    return (request.commit_user, request.commit_identifier)


def _refuse_committed(request: CommitRequest) -> None:
    """Messages this process committed already are refused: their files are live, and
    a second snapshot naming them would read every row twice. A retry that names the
    commit as it was first named (the same ``commit_user`` and ``commit_identifier``)
    returns the first snapshot instead; under another name, or none, it is refused like
    any other. Copies made before the commit, in other processes, are not seen: naming
    the commit is what makes a retry safe there (docs/reliability.md)."""
    done = [getattr(m, COMMITTED_AS, None) for m in request.messages]
    again = [d for d in done if d is not None and (d[2] is None or d[1:] != _name(request))]
    if again:
        first = min(d[0] for d in again)
        raise CommitFailedError(
            f"{len(again)} of these commit messages were committed already, as snapshot "
            f"{first}: committing them again would add their files a second time; a retry "
            "returns the snapshot that committed them only where the first commit was "
            "named (commit_user and commit_identifier) and the retry gives the same name"
        )


def _last_overwrite_id(latest: Snapshot | None, kind: str, snapshot_id: int) -> int | None:
    """This commit's id when it overwrites, else its parent's (unknown stays unknown)."""
    if kind == "OVERWRITE":
        return snapshot_id
    return 0 if latest is None else latest.last_overwrite_id


def _named_commits(
    latest: Snapshot | None, user: str, identifier: int | None, snapshot_id: int
) -> dict[str, tuple[int, int, int]]:
    """The parent's last commit of each user that names its commits (identifier,
    snapshot, highest identifier), with this one where it names itself (docs/format.md
    6.4)."""
    named = {} if latest is None else dict(latest.named_commits)
    if identifier is not None:
        highest = max(identifier, named[user][2]) if user in named else identifier
        named[user] = (identifier, snapshot_id, highest)
    return named
