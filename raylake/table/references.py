"""What snapshots reference: their manifests, the data and changelog files those name,
and the files that retained snapshots need (snapshot expiration and orphan removal keep
files by these rules; docs/maintenance.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raylake.errors import CorruptMetadataError
from raylake.format.manifest import ADD, live_files
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO


def manifest_paths(snaps: Iterable[Snapshot]) -> list[str]:
    """Unique paths of every base, delta and changelog manifest of some snapshots."""
    seen: dict[str, None] = {}
    for snap in snaps:
        for meta in (*snap.base_manifests, *snap.delta_manifests, *snap.changelog_manifests):
            seen.setdefault(meta.path, None)
    return list(seen)


def read_manifest_refs(file_io: FileIO, rel: str) -> pa.Table:
    """The ``kind`` and ``path`` columns of a manifest.

    Only these two columns are read, so this works whatever schema wrote the manifest.
    """
    try:
        data = file_io.read_bytes(rel)
    except FileNotFoundError as exc:
        raise CorruptMetadataError(file_io.full_path(rel), "manifest file is missing") from exc
    try:
        return pq.read_table(pa.BufferReader(data), columns=["kind", "path"])
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptMetadataError(
            file_io.full_path(rel), f"not a readable manifest: {exc}"
        ) from exc


def refs_if_present(file_io: FileIO, rel: str) -> pa.Table | None:
    """Like :func:`read_manifest_refs`, but None for a manifest that no longer exists."""
    try:
        return read_manifest_refs(file_io, rel)
    except CorruptMetadataError:
        if not file_io.exists(rel):
            return None
        raise


def data_paths(refs: Iterable[pa.Table]) -> pa.Array:
    """The paths of manifest entries, ADD and DELETE alike, as one string array."""
    chunks = [c for ref in refs for c in ref.column("path").chunks]
    return pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())


def kept_data_paths(
    file_io: FileIO, retained: list[Snapshot], read: Callable[[str], pa.Table] | None = None
) -> pa.Array:
    """Data and changelog files that retained snapshots need, as one string array.

    Each commit's base is its parent's base plus its delta, so the files live in
    any retained snapshot are those live in the oldest retained one plus those
    added by a later retained delta: this reads one base, not one per snapshot.
    A snapshot that is not the child of the one before it (a slow commit's stray,
    created at an id expiration had freed, lies below a gap: docs/format.md 6.6)
    starts another chain, whose base is read too.
    Files that a retained delta *deletes* are kept as well, so that a stream
    reader positioned at the oldest retained snapshot can still read its whole
    delta (an overwrite's removed rows included) -- except a compaction's: it
    removes rows that live on in its output, and stream readers skip it.
    """
    if read is None:
        read = lambda rel: read_manifest_refs(file_io, rel)  # noqa: E731
    refs = []
    for prev, snap in zip([None, *retained], retained):
        if prev is None or snap.id != prev.id + 1 or snap.parent_commit_id != prev.commit_id:
            base = [read(m.path) for m in snap.base_manifests]
            if base:
                refs.append(live_files(pa.concat_tables(base)))
    seen: set[str] = set()
    for snap in retained:
        for meta in (*snap.delta_manifests, *snap.changelog_manifests):
            if meta.path in seen:
                continue
            seen.add(meta.path)
            ref = read(meta.path)
            if snap.commit_kind == "COMPACT":
                ref = ref.filter(pc.equal(ref.column("kind"), ADD))
            refs.append(ref)
    return data_paths(refs)


def stray_added_paths(
    file_io: FileIO, expired: list[Snapshot], retained: list[Snapshot]
) -> pa.Array:
    """The files that expired snapshots below the history add (their delta and changelog
    manifests' ADD entries), as one string array.

    A slow commit's stray snapshot, created at an id expiration had freed (docs/format.md
    6.6), lies below the history: its commit raised CommitLineageUnknownError, and its
    retry commits the same files again, which an expiration of the stray chosen before
    the retry landed would delete under the new snapshot. They are left to orphan
    removal, whose age guard protects them. A snapshot is below the history where it is
    not the parent that the snapshot after it names (or an id lies between)."""
    child = retained[0]
    below: list[Snapshot] = []
    for i in range(len(expired) - 1, -1, -1):
        snap = expired[i]
        if snap.id != child.id - 1 or child.parent_commit_id not in ("", snap.commit_id):
            below = expired[: i + 1]
            break
        child = snap
    refs = [
        ref
        for snap in below
        for meta in (*snap.delta_manifests, *snap.changelog_manifests)
        if (ref := refs_if_present(file_io, meta.path)) is not None
    ]
    added = [r.filter(pc.equal(r.column("kind"), ADD)) for r in refs]
    return data_paths(added)
