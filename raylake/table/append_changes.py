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

A compaction's new files in a partition stand for the files it replaced there only
while all of them are live (or stood for by a later compaction's): a merge or a delete
that rewrote one leaves its siblings taken as they are, so that the rows it removed
come out (with the kept rows of the files involved out and in again, unchanged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow.compute as pc

from raylake.errors import SnapshotExpiredError
from raylake.format.manifest import DELETE, DataFile, data_files_from_table, read_entries
from raylake.format.snapshot import SnapshotManager
from raylake.table.append_compaction import COMPACTED_PREFIX
from raylake.table.changes import ChangeRange

# partition -> (the files a compaction replaced there, the paths of those it wrote there)
Replaced = dict[tuple[Any, ...], tuple[list[DataFile], set[str]]]
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
                found = {}
                for f in data_files_from_table(entries, rng.ts):
                    found.setdefault(f.partition, ([], set()))
                for f in data_files_from_table(
                    entries.filter(pc.equal(entries.column("kind"), DELETE)), rng.ts
                ):
                    found[f.partition][0].append(f)
                for f in data_files_from_table(
                    entries.filter(pc.not_equal(entries.column("kind"), DELETE)), rng.ts
                ):
                    found[f.partition][1].add(f.path)
            replaced[snapshot_id] = found
        return replaced[snapshot_id]

    def expand(files: list[DataFile]) -> list[DataFile]:
        return _expanded(files, first, last, of)

    return expand


def _expanded(files: list[DataFile], first: int, last: int, of: Lookup) -> list[DataFile]:
    """``files`` with the files each compaction in the range wrote in a partition put
    back as the files it replaced there, where all of them are at hand: a merge or a
    delete that rewrote one of them since leaves the others as they are (their rows
    then come out and in again, unchanged, as the rewrite's do). Put back, a compaction's
    files can complete an earlier compaction's: repeated until nothing changes."""
    present = {f.path: f for f in files}
    changed = True
    while changed:
        changed = False
        for f in list(present.values()):
            if f.path not in present:
                continue
            added = f.added_snapshot
            written = f.path.rsplit("/", 1)[-1].startswith(COMPACTED_PREFIX + "-")
            found = of(added) if written and first < added <= last else None
            if found is None or f.partition not in found:
                continue
            sources, outputs = found[f.partition]
            if outputs <= present.keys():
                for path in outputs:
                    del present[path]
                present.update((s.path, s) for s in sources)
                changed = True
    return list(present.values())
