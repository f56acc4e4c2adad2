"""Paimon snapshots: ``snapshot/snapshot-<id>`` JSON files, with a LATEST hint.

The snapshot files are the truth: the hint is used only when the snapshot after it
does not exist (a writer may have crashed before updating it).

Each is presented as a raylake :class:`~raylake.format.snapshot.Snapshot` (so that
``snapshots()``, pinning and ``as_of`` work as for raylake tables); the Paimon
manifest lists it names ride along in its properties.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from raylake.errors import CorruptMetadataError, SnapshotNotFoundError
from raylake.format.snapshot import CommitKind, Snapshot
from raylake.io import FileIO

SNAPSHOT_DIR = "snapshot"
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d+)$")
BASE_LIST = "paimon.baseManifestList"
DELTA_LIST = "paimon.deltaManifestList"
CHANGELOG_LIST = "paimon.changelogManifestList"
INDEX_MANIFEST = "paimon.indexManifest"
PAIMON_COMMIT_KIND = "paimon.commitKind"
_KINDS = {"APPEND": "APPEND", "OVERWRITE": "OVERWRITE", "COMPACT": "COMPACT", "ANALYZE": "COMPACT"}


def snapshot_ids(file_io: FileIO) -> list[int]:
    matches = (_SNAPSHOT_NAME.match(n) for n in file_io.list_names(SNAPSHOT_DIR))
    return sorted(int(m.group(1)) for m in matches if m)


def read_snapshot(file_io: FileIO, snapshot_id: int) -> Snapshot | None:
    """The snapshot, or None if its file does not exist (never written, or expired)."""
    rel = f"{SNAPSHOT_DIR}/snapshot-{snapshot_id}"
    try:
        raw = file_io.read_bytes(rel)
    except FileNotFoundError:
        return None
    return parse_snapshot(raw, file_io.full_path(rel))


def parse_snapshot(raw: bytes, path: str) -> Snapshot:
    try:
        data: dict[str, Any] = json.loads(raw)
        properties = {
            BASE_LIST: data["baseManifestList"],
            DELTA_LIST: data["deltaManifestList"],
            PAIMON_COMMIT_KIND: data["commitKind"],
        }
        for key, prop in (
            ("changelogManifestList", CHANGELOG_LIST),
            ("indexManifest", INDEX_MANIFEST),
        ):
            if data.get(key):
                properties[prop] = data[key]
        properties.update({str(k): str(v) for k, v in (data.get("properties") or {}).items()})
        sid = int(data["id"])
        return Snapshot(
            id=sid,
            schema_id=int(data["schemaId"]),
            parent_id=sid - 1 if sid > 1 else None,
            commit_kind=cast(CommitKind, _KINDS.get(data["commitKind"], "APPEND")),
            commit_user=str(data.get("commitUser", "")),
            commit_identifier=int(data.get("commitIdentifier", 0)),
            time_millis=int(data["timeMillis"]),
            base_manifests=(),
            delta_manifests=(),
            total_record_count=int(data.get("totalRecordCount") or 0),
            delta_record_count=int(data.get("deltaRecordCount") or 0),
            changelog_record_count=int(data.get("changelogRecordCount") or 0),
            properties=properties,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptMetadataError(path, f"not a valid Paimon snapshot: {exc!r}") from exc


class PaimonSnapshots:
    """Snapshot lookup by id, latest and time; the snapshot files are the truth."""

    def __init__(self, file_io: FileIO) -> None:
        self.file_io = file_io

    def ids(self) -> list[int]:
        return snapshot_ids(self.file_io)

    def get(self, snapshot_id: int) -> Snapshot:
        snap = read_snapshot(self.file_io, snapshot_id)
        if snap is None:
            ids = self.ids()
            have = f"snapshots {ids[0]}..{ids[-1]}" if ids else "no snapshots"
            raise SnapshotNotFoundError(
                f"snapshot {snapshot_id} of the Paimon table {self.file_io.uri} does not exist "
                f"(it has {have})",
                snapshot_id=snapshot_id,
            )
        return snap

    def latest(self) -> Snapshot | None:
        """The newest snapshot: the LATEST hint's, when no later snapshot file exists
        (two reads instead of a listing); otherwise found by listing."""
        hint = self._hint("LATEST")
        if hint is not None and read_snapshot(self.file_io, hint + 1) is None:
            snap = read_snapshot(self.file_io, hint)
            if snap is not None:
                return snap
        ids = self.ids()
        return self.get(ids[-1]) if ids else None

    def latest_id(self) -> int | None:
        snap = self.latest()
        return None if snap is None else snap.id

    def read_hint(self) -> int | None:
        """The id the ``LATEST`` hint names (it may lag behind), or None."""
        return self._hint("LATEST")

    def _hint(self, name: str) -> int | None:
        try:
            return int(self.file_io.read_bytes(f"{SNAPSHOT_DIR}/{name}").decode().strip())
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None

    def all(self) -> list[Snapshot]:
        found = (read_snapshot(self.file_io, i) for i in self.ids())
        return [s for s in found if s is not None]

    def as_of(self, time_millis: int) -> Snapshot:
        """The newest snapshot committed at or before ``time_millis``."""
        chosen = None
        for snap in self.all():
            if snap.time_millis <= time_millis:
                chosen = snap
        if chosen is None:
            raise SnapshotNotFoundError(
                f"the Paimon table {self.file_io.uri} has no snapshot at or before {time_millis} ms"
            )
        return chosen
