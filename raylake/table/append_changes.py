"""The change of an append table over a range that holds compactions.

A compaction (raylake/table/append_compaction.py) replaces files with new ones that
hold the same rows. Compared by path, the two ends of a range that holds one would give
the new files' rows as inserts (rows that were there before the range among them) and
the replaced files' as removals. Here each file a compaction in the range wrote stands
for the files that compaction replaced in its partition, again and again back to the
range's start: the comparison then sees the files as they were written.

Only files named as compaction writes them (``compact-*``) send the snapshot that added
them to be read: a catch-up over many appends reads no snapshot more than before. (A
file of another writer named so costs one read, and is taken as it is.)

Within one partition and one COMPACT snapshot its new files stand or go together: only
another compaction (whose files then stand for them) or an overwrite of the partition
(which removes them all) can remove one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.compute as pc

from raylake.errors import SnapshotExpiredError
from raylake.format.manifest import DELETE, DataFile, data_files_from_table, read_entries
from raylake.format.snapshot import SnapshotManager
from raylake.table.append_compaction import COMPACTED_PREFIX
from raylake.table.changes import ChangeRange

Replaced = dict[tuple[Any, ...], list[DataFile]]  # partition -> files replaced there
Lookup = Callable[[int], Replaced | None]  # snapshot id -> what it compacted (None: no compaction)


def through_compactions(rng: ChangeRange) -> Callable[[list[DataFile]], list[DataFile]]:
    """``ChangeRange.file_changes``'s ``expand`` for ``rng``: files written by a COMPACT
    snapshot in the range, replaced by the files it compacted (read once per snapshot)."""
    first, last = rng.before_id, rng.after.id
    snapshots = SnapshotManager(rng.file_io)
    replaced: dict[int, Replaced | None] = {}  # None: not a compaction

    def of(snapshot_id: int) -> Replaced | None:
        if snapshot_id not in replaced:
            snap = snapshots.read_if_present(snapshot_id)
            if snap is None:
                earliest = snapshots.earliest_id() or snapshot_id + 1
                raise SnapshotExpiredError(snapshot_id, earliest, rng.file_io.uri)
            found: Replaced | None = None
            if snap.commit_kind == "COMPACT":
                with snapshots.reading(snapshot_id):
                    entries = read_entries(rng.file_io, snap.delta_manifests, rng.ts, ())
                gone = entries.filter(pc.equal(entries.column("kind"), DELETE))
                found = {}
                for f in data_files_from_table(gone, rng.ts):
                    found.setdefault(f.partition, []).append(f)
            replaced[snapshot_id] = found
        return replaced[snapshot_id]

    def expand(files: list[DataFile]) -> list[DataFile]:
        return list({f.path: f for f in _expanded(files, first, last, of)}.values())

    return expand


def _expanded(files: list[DataFile], first: int, last: int, of: Lookup) -> Iterator[DataFile]:
    pending = list(files)
    seen: set[tuple[int, tuple[Any, ...]]] = set()
    while pending:
        f = pending.pop()
        added = f.added_snapshot
        written = f.path.rsplit("/", 1)[-1].startswith(COMPACTED_PREFIX + "-")
        sources = of(added) if written and first < added <= last else None
        if sources is None:
            yield f
            continue
        if (added, f.partition) not in seen:  # its partition's files of that compaction
            seen.add((added, f.partition))
            pending.extend(sources.get(f.partition, []))
