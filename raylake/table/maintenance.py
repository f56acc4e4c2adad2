"""Table maintenance: expire old snapshots, and remove orphan files left by crashed writers.

Expiration removes the oldest snapshots (a contiguous prefix, so the remaining
ids have no gaps) and the files that only they reference. It deletes the
snapshot files first, oldest first, and only then data files and manifests,
so a crash midway leaves every retained snapshot readable; what a crash leaves
behind is unreferenced and :func:`remove_orphan_files` collects it later.
See docs/maintenance.md for the rules and their reasons.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc

from raylake.arguments import integer
from raylake.errors import CorruptMetadataError, InvalidOptionError, SnapshotNotFoundError
from raylake.format.consumer import CONSUMER_DIR, ConsumerManager, is_stale_marker
from raylake.format.manifest import MANIFEST_DIR
from raylake.format.schema import SCHEMA_DIR
from raylake.format.schema_files import load_schema
from raylake.format.snapshot import SNAPSHOT_DIR, Snapshot, SnapshotManager, snapshot_path
from raylake.io import FileIO
from raylake.io.temp_names import TEMP_SUFFIX, temp_names
from raylake.progress import track
from raylake.table.ages import OlderThan, cutoff_millis
from raylake.table.partition_text import could_be_written
from raylake.table.references import (
    data_paths,
    kept_data_paths,
    manifest_paths,
    read_manifest_refs,
    refs_if_present,
    stray_added_paths,
)
from raylake.table.writer import DATA_DIR, is_shortened_name, partition_key_prefix

logger = logging.getLogger(__name__)

# Changelog files of primary-key tables; they are found through changelog manifests.
# Directories that hold only files named by manifests or snapshots.
# Changelog files live under data/ beside each bucket's data files.
_REFERENCED_DIRS = (DATA_DIR, MANIFEST_DIR)
# Directories whose files are metadata in their own right: only FileIO temp files are orphans.
_TMP_ONLY_DIRS = (SNAPSHOT_DIR, CONSUMER_DIR, SCHEMA_DIR)
DEFAULT_ORPHAN_AGE = timedelta(days=1)


@dataclass(frozen=True)
class ExpireResult:
    """What :func:`expire_snapshots` removed (or, with ``dry_run``, would remove)."""

    expired_snapshot_ids: tuple[int, ...]
    deleted_data_files: tuple[str, ...]
    deleted_manifests: tuple[str, ...]
    dry_run: bool = False
    expired_consumer_ids: tuple[str, ...] = ()  # removed (dry run: to be removed)

    @property
    def snapshots_removed(self) -> int:
        return len(self.expired_snapshot_ids)

    @property
    def files_removed(self) -> int:
        return len(self.deleted_data_files) + len(self.deleted_manifests)


@dataclass(frozen=True)
class OrphanResult:
    """The orphan files :func:`remove_orphan_files` removed (or would remove)."""

    paths: tuple[str, ...]
    dry_run: bool = False

    @property
    def files_removed(self) -> int:
        return len(self.paths)


def expire_snapshots(
    file_io: FileIO,
    *,
    retain_last: int,
    older_than: OlderThan | None = None,
    consumers_older_than: OlderThan | None = None,
    dry_run: bool = False,
) -> ExpireResult:
    """Expire the oldest snapshots and delete the files only they reference.

    A snapshot is expired when it is older than ``older_than`` (always, if None)
    *and* not among the newest ``retain_last``, *and* older than the next
    snapshot of every registered consumer. Only a prefix of the history is
    expired: the first snapshot that must stay ends it. The latest snapshot is
    never expired. Consumers whose progress was last recorded before
    ``consumers_older_than`` are removed first, and protect nothing.
    """
    number = integer(retain_last)  # numpy's too, kept as a Python int
    if number is None or number < 1:
        raise InvalidOptionError("retain_last", retain_last, "expected a positive integer")
    retain_last = number
    now = _now_millis()
    cutoff = None if older_than is None else cutoff_millis(older_than, now)
    consumer_cutoff = (
        None
        if consumers_older_than is None
        else cutoff_millis(consumers_older_than, now, "consumers_older_than")
    )
    snapshots = SnapshotManager(file_io)
    consumers = ConsumerManager(file_io)
    if not dry_run:
        consumers.release_left_markers()
    gone = () if consumer_cutoff is None else consumers.expire(consumer_cutoff, dry_run=dry_run)
    # A dry run leaves them: they only count as gone. (After a real run one of those ids
    # found again has registered anew, and protects what it reads.)
    ignoring = gone if dry_run else ()
    ids = snapshots.snapshot_ids()
    protected = consumers.min_next_snapshot(ignoring)
    expired = _expirable(snapshots, ids, retain_last, cutoff, protected)
    if not expired:
        return ExpireResult((), (), (), dry_run, gone)
    if dry_run:
        return replace(
            _expire(file_io, snapshots, ids, expired, dry_run=True), expired_consumer_ids=gone
        )
    # A consumer registering now either shows up in this second read, or waits for the
    # marker to go and then finds out what is left (raylake/format/consumer.py).
    with consumers.expiring():
        expired = _protect(expired, consumers.min_next_snapshot())
        if not expired:
            return ExpireResult((), (), (), dry_run, gone)
        return replace(
            _expire(file_io, snapshots, ids, expired, dry_run=False), expired_consumer_ids=gone
        )


def _protect(expired: list[Snapshot], protected_from: int | None) -> list[Snapshot]:
    """The expired prefix, cut before what a consumer needs (see ``_expirable``)."""
    if protected_from is None:
        return expired
    return [s for s in expired if s.id < protected_from - 1]


def _expire(
    file_io: FileIO, snapshots: SnapshotManager, ids: list[int], expired: list[Snapshot],
    *, dry_run: bool,
) -> ExpireResult:  # fmt: skip
    doomed_manifests, doomed_data = _choose(file_io, snapshots, ids, expired)
    result = ExpireResult(
        tuple(s.id for s in expired), tuple(doomed_data), tuple(doomed_manifests), dry_run
    )
    if not dry_run:
        for snap in expired:  # oldest first: the remaining history never has a gap
            file_io.delete(snapshot_path(snap.id))
        _delete_all(file_io, result.deleted_data_files, "expire: data files")
        _delete_all(file_io, result.deleted_manifests, "expire: manifests")
        logger.info(
            "expired snapshots %d..%d of %s, deleted %d files",
            expired[0].id,
            expired[-1].id,
            file_io.uri,
            result.files_removed,
        )
    return result


def _choose(
    file_io: FileIO, snapshots: SnapshotManager, ids: list[int], expired: list[Snapshot]
) -> tuple[list[str], list[str]]:
    """The manifests and data files to delete with ``expired``, against the snapshots
    after them that are left (another expiration may be removing some at the same time)."""
    while True:
        later = [i for i in ids if i > expired[-1].id]
        if not later:  # the latest is never expired: only a dropped table has none
            raise SnapshotNotFoundError(f"{file_io.uri} has no snapshot after {expired[-1].id}")
        found = (snapshots.read_if_present(i) for i in later)
        retained = [s for s in found if s is not None]  # None: expired by another run
        try:
            if retained:
                return _exclusive_files(file_io, expired, retained)
        except CorruptMetadataError:
            # A manifest of a snapshot that a concurrent expiration has removed since is
            # gone with it: choose again from the snapshots left. One that still exists
            # has lost a manifest: stop before anything is deleted.
            if all(file_io.exists(snapshot_path(s.id)) for s in retained):
                raise
        ids = snapshots.snapshot_ids()  # another run may have kept only newer ones


def _expirable(
    snapshots: SnapshotManager,
    ids: list[int],
    retain_last: int,
    cutoff: int | None,
    protected_from: int | None,
) -> list[Snapshot]:
    """The oldest snapshots that may go, oldest first: stop at the first one that must stay."""
    if len(ids) <= retain_last:
        return []
    end = ids[-retain_last]  # exclusive; retain_last >= 1 keeps the latest
    if protected_from is not None:
        # A consumer reads its next snapshot as a change against the one before it (a
        # stream plans a primary-key delta or a catch-up as a diff): keep that one too.
        end = min(end, protected_from - 1)
    out = []
    for snapshot_id in ids:
        if snapshot_id >= end:
            break
        try:
            snap = snapshots.get(snapshot_id)
        except SnapshotNotFoundError:  # a concurrent expiration removed it already
            continue
        if cutoff is not None and snap.time_millis >= cutoff:
            break
        out.append(snap)
    return out


def _exclusive_files(
    file_io: FileIO, expired: list[Snapshot], retained: list[Snapshot]
) -> tuple[list[str], list[str]]:
    """Manifests and data files that expired snapshots reference and retained ones do not."""
    kept_manifests = set(manifest_paths(retained))
    old_manifests = manifest_paths(expired)
    doomed_manifests = [m for m in old_manifests if m not in kept_manifests]
    # Every manifest of an expired snapshot, shared ones too: a file a shared manifest adds
    # may have been deleted since and be referenced by no retained snapshot.
    # A manifest already gone (a crashed or concurrent expiration) names only orphans.
    old_refs = [refs_if_present(file_io, m) for m in old_manifests]
    candidates = pc.unique(data_paths(r for r in old_refs if r is not None))
    kept = pa.concat_arrays(
        [kept_data_paths(file_io, retained), stray_added_paths(file_io, expired, retained)]
    )
    doomed = candidates.filter(pc.invert(pc.is_in(candidates, value_set=kept)))
    return doomed_manifests, doomed.to_pylist()


def remove_orphan_files(
    file_io: FileIO,
    *,
    older_than: OlderThan = DEFAULT_ORPHAN_AGE,
    dry_run: bool = False,
) -> OrphanResult:
    """Delete files under data/ and manifest/ that no snapshot references.

    Only files last modified before ``older_than`` are candidates: a writer that
    has written its files but not yet committed must not lose them. Stray FileIO
    temporary files (``*.tmp``) in snapshot/, consumer/ and schema/ count too. Only
    files named as raylake names what it writes are ever deleted (:func:`is_raylake_file`):
    other files beside a table are not its orphans.
    """
    cutoff = cutoff_millis(older_than, _now_millis())
    ts = load_schema(file_io)  # partition keys are immutable: every data file's directories
    partition = [ts.arrow_schema.field(k) for k in ts.partition_keys]
    # List files before reading snapshots: a file committed in between is then referenced.
    listed = _old_files(file_io, cutoff, partition)
    if not listed:
        return OrphanResult((), dry_run)
    referenced = _referenced_paths(file_io)
    paths = pa.array(listed, pa.string())
    orphans = paths.filter(pc.invert(pc.is_in(paths, value_set=referenced))).to_pylist()
    if not dry_run:
        _delete_all(file_io, orphans, "orphans: deleting")
        logger.info("removed %d orphan files from %s", len(orphans), file_io.uri)
    return OrphanResult(tuple(orphans), dry_run)


def _old_files(file_io: FileIO, cutoff: int, partition: Sequence[pa.Field]) -> list[str]:
    """Candidate paths modified before the cutoff; a file without an mtime is kept (unknown age)."""
    found: list[tuple[str, float | None]] = []
    for rel_dir in _REFERENCED_DIRS:
        found += file_io.list_files(rel_dir)
    markers = []
    for rel_dir in _TMP_ONLY_DIRS:
        for p, m in file_io.list_files(rel_dir):
            if p.endswith(TEMP_SUFFIX):
                found.append((p, m))
            elif rel_dir == CONSUMER_DIR and m is not None and m * 1000 < cutoff:
                markers.append((p, m * 1000))
    # The expiry marker of an expiration that crashed: registrations ignore it once stale.
    now = _now_millis()
    stale = [p for p, m in markers if is_stale_marker(p.rsplit("/", 1)[-1], m, now)]
    return stale + [
        p
        for p, mtime in found
        if mtime is not None and mtime * 1000 < cutoff and is_raylake_file(p, partition)
    ]


# The names raylake gives what it writes: data and changelog files ``<prefix>-<uuid4 hex>
# .parquet`` under data/, manifests ``manifest-<uuid4 hex>.parquet``, FileIO temporary files
# ``<name>.<uuid4 hex>.tmp``. Anything else beside a table (another tool's files in a
# directory created with allow_other_files=True) is never an orphan (raylake/table/location.py).
_OWN_NAMES = {
    # a file_prefix starts with a letter or digit (table/args.py)
    DATA_DIR: re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*-[0-9a-f]{32}\.parquet"),
    MANIFEST_DIR: re.compile(r"manifest-[0-9a-f]{32}\.parquet"),
}
_TMP_NAME = temp_names()
# What a Ray Data or Spark job joining a table with no snapshot writes directly in data/
# (catalog.open_or_join_table): an orphan once its job died without deleting it.
_JOB_MARKER = temp_names(r"[A-Za-z0-9][A-Za-z0-9_.-]*-writing")
_BUCKET_DIR = re.compile(r"bucket-(0|[1-9][0-9]*)")


def is_raylake_file(rel: str, partition: Sequence[pa.Field] | None = None) -> bool:
    """Whether ``rel`` (a path in the table) is named as raylake names the files it writes
    there, and, given the table's partition columns, lies where it writes them:
    ``data/<key>=<value>/.../bucket-<n>/``, one directory per partition column in order,
    with a value the column's type prints as (writer.py's ``partition_dir``), and
    directly in manifest/. Another table kept inside this one's directory
    (``allow_other_files``, a table named ``data``) names its files alike, one level
    deeper; a user's file under a directory of another column, under ``p=abc`` for an
    integer column ``p``, or a bucket written ``bucket-00``, lies where raylake never
    writes: none is ours."""
    top, _, rest = rel.partition("/")
    name = rel.rsplit("/", 1)[-1]
    own = _OWN_NAMES.get(top)
    if not rest or not (_TMP_NAME.fullmatch(name) or (own and own.fullmatch(name))):
        return False
    directories = rest.split("/")[:-1]
    if top == MANIFEST_DIR:
        return not directories
    if top != DATA_DIR or partition is None:
        return True
    if not directories and _JOB_MARKER.fullmatch(name):
        return True
    return (
        len(directories) == len(partition) + 1
        and all(map(_partition_directory, directories, partition))
        and _BUCKET_DIR.fullmatch(directories[-1]) is not None
    )


def _partition_directory(directory: str, field: pa.Field) -> bool:
    """Whether ``directory`` is named as ``partition_dir`` names one of column ``field``
    (a name too long for a file system keeps its first 200-odd characters)."""
    prefix = partition_key_prefix(field.name)
    if is_shortened_name(directory):
        return directory.startswith(prefix[:200])
    return directory.startswith(prefix) and could_be_written(directory[len(prefix) :], field.type)


def _referenced_paths(file_io: FileIO) -> pa.Array:
    """Every manifest and every file named by any entry of any snapshot's manifests."""
    snapshots = SnapshotManager(file_io)
    live: list[Snapshot] = []
    for snapshot_id in snapshots.snapshot_ids():
        try:
            live.append(snapshots.get(snapshot_id))
        except SnapshotNotFoundError:  # expired meanwhile; its files are being deleted
            continue
    manifests = manifest_paths(live)
    found: dict[str, pa.Table] = {}
    for rel in manifests:
        ref = refs_if_present(file_io, rel)
        if ref is None and _named_by_existing_snapshot(file_io, rel, live):
            read_manifest_refs(file_io, rel)  # raises CorruptMetadataError: a real loss
        if ref is not None:
            found[rel] = ref
    if live and len(found) == len(manifests):
        # The files the live snapshots read, as expiration keeps them: one that only a
        # DELETE entry of a base manifest still names is an orphan (an expiration that
        # stopped after its snapshots went and before their files did left it for good).
        data = kept_data_paths(file_io, live, found.__getitem__)
    else:  # a concurrent expiration took manifests away: keep every file named
        data = data_paths(found.values())
    return pa.concat_arrays([pa.array(manifests, pa.string()), data])


def _named_by_existing_snapshot(file_io: FileIO, rel: str, snaps: list[Snapshot]) -> bool:
    """A missing manifest is a loss only if a snapshot naming it still exists (else: expired)."""
    return any(rel in manifest_paths([s]) and file_io.exists(snapshot_path(s.id)) for s in snaps)


def _delete_all(file_io: FileIO, paths: Iterable[str], description: str = "deleting") -> None:
    for rel in track(paths, description):
        file_io.delete(rel)


def _now_millis() -> int:
    # Rounded up, so that "older than now" includes a file written earlier in this millisecond.
    return -(-time.time_ns() // 1_000_000)
