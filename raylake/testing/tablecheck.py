"""What a table holds after faults: every snapshot readable, which files are named by
a snapshot, which files lie under the table's data and manifest folders unnamed.

Tests and the soak (bench/soak.py) check a table with :func:`inspect_table` through a
FileIO without faults: the check must see the store as it is, not as a faulty
connection shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raylake.errors import CorruptMetadataError
from raylake.format.manifest import live_files, read_entries
from raylake.format.snapshot import SnapshotManager
from raylake.table import Table, open_table

METADATA_DIRS = ("data", "manifest", "changelog")


@dataclass
class TableState:
    snapshot_ids: list[int]
    commit_ids: dict[int, str]
    rows: int  # in the latest snapshot
    # Files named by a snapshot of the history (data, changelog and manifest files),
    # relative to the root.
    referenced: set[str] = field(default_factory=set)
    # Snapshots below the history: a slow commit's, created at an id that expiration had
    # freed (docs/format.md 6.6). Expiration removes them; until then the files they name
    # are kept, but may be gone where they were their expired parent's.
    strays: list[int] = field(default_factory=list)
    stray_referenced: set[str] = field(default_factory=set)
    # Files under data/, manifest/ and changelog/ (temporary files included).
    on_store: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    @property
    def missing(self) -> set[str]:
        """Named by a snapshot of the history, but not on the store: the table is broken."""
        return self.referenced - self.on_store

    @property
    def unreferenced(self) -> set[str]:
        """On the store, named by no snapshot (strays included): orphans."""
        return self.on_store - self.referenced - self.stray_referenced


def inspect_table(uri: str, storage_options: Any = None) -> TableState:
    """Read every snapshot's manifests, list the table's files, and read the latest
    snapshot's rows. A manifest or data file a snapshot names that is gone is in
    :attr:`TableState.missing`; the reads that failed are in :attr:`TableState.errors`."""
    tbl = open_table(uri, storage_options=storage_options)
    file_io, ts = tbl.file_io, tbl.table_schema
    state = TableState(snapshot_ids=[], commit_ids={}, rows=0)
    history = set(SnapshotManager(file_io).history_ids())
    for snap in tbl.snapshots():
        state.snapshot_ids.append(snap.id)
        state.commit_ids[snap.id] = snap.commit_id
        in_history = snap.id in history
        if not in_history:
            state.strays.append(snap.id)
        named = state.referenced if in_history else state.stray_referenced
        # The files a snapshot needs: the live files of its base, the files its delta
        # and changelog add (the files its delta deletes may be gone).
        for metas in (snap.base_manifests, snap.delta_manifests, snap.changelog_manifests):
            named |= {m.path for m in metas}
            try:
                entries = read_entries(file_io, metas, ts, ())
            except CorruptMetadataError as exc:
                if in_history:
                    state.errors.append(f"snapshot {snap.id}: {exc}")
                continue
            named |= set(live_files(entries).column("path").to_pylist())

    for folder in METADATA_DIRS:
        state.on_store |= {rel for rel, _ in file_io.list_files(folder)}
    # Every file each snapshot needs is there (checked above); the latest is read whole.
    if state.snapshot_ids and not state.missing:
        try:
            state.rows = tbl.scan(snapshot_id=state.snapshot_ids[-1]).to_arrow().num_rows
        except (CorruptMetadataError, OSError) as exc:
            state.errors.append(f"snapshot {state.snapshot_ids[-1]}: {exc}")
    return state


def rows_of(tbl: Table, column: str) -> list[Any]:
    """The values of ``column`` in the latest snapshot, sorted."""
    return sorted(tbl.to_arrow().column(column).to_pylist())
