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

from raylake.errors import CorruptMetadataError
from raylake.format.snapshot import CommitKind, Snapshot, SnapshotManager

SNAPSHOT_DIR = "snapshot"
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d+)$")
BASE_LIST = "paimon.baseManifestList"
DELTA_LIST = "paimon.deltaManifestList"
CHANGELOG_LIST = "paimon.changelogManifestList"
INDEX_MANIFEST = "paimon.indexManifest"
PAIMON_COMMIT_KIND = "paimon.commitKind"
_KINDS = {"APPEND": "APPEND", "OVERWRITE": "OVERWRITE", "COMPACT": "COMPACT", "ANALYZE": "COMPACT"}


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


class PaimonSnapshots(SnapshotManager):
    """Paimon's snapshot files and ``LATEST`` hint under raylake's snapshot lookup (by
    id, latest, time); the snapshot files are the truth, the hint only a start."""

    def snapshot_ids(self) -> list[int]:
        return self.file_io.numbered(SNAPSHOT_DIR, _SNAPSHOT_NAME)

    def read_if_present(self, snapshot_id: int) -> Snapshot | None:
        """The snapshot, or None if its file does not exist (never written, or expired)."""
        rel = f"{SNAPSHOT_DIR}/snapshot-{snapshot_id}"
        try:
            raw = self.file_io.read_bytes(rel)
        except FileNotFoundError:
            return None
        return parse_snapshot(raw, self.file_io.full_path(rel))

    def hint(self) -> tuple[int | None, str]:
        """Paimon's hint names an id only."""
        try:
            return int(self.file_io.read_bytes(f"{SNAPSHOT_DIR}/LATEST").decode().strip()), ""
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None, ""
