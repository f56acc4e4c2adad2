"""Snapshots: one JSON file per commit, ``snapshot/snapshot-<id>.json``, ids 1, 2, 3 ...

The snapshot files are the truth; ``snapshot/LATEST`` is only a hint that saves
a directory listing. A snapshot lists its *base* manifests (the full file set
after the commit) and its *delta* manifests (what this commit added and
deleted), so a streaming reader one snapshot behind reads one small delta.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import pairwise
from typing import Any, Literal

from raylake.errors import CorruptMetadataError, SnapshotExpiredError, SnapshotNotFoundError
from raylake.format.manifest import ManifestMeta
from raylake.format.metadata_json import json_object
from raylake.io import FileIO

logger = logging.getLogger(__name__)

SNAPSHOT_DIR = "snapshot"
LATEST_HINT = f"{SNAPSHOT_DIR}/LATEST"
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d+)\.json$")
# Listings in a row whose newest snapshot expired before it was read (listed_latest).
_RELISTS = 100

CommitKind = Literal["APPEND", "OVERWRITE", "COMPACT"]
COMMIT_KINDS: tuple[str, ...] = ("APPEND", "OVERWRITE", "COMPACT")


def snapshot_path(snapshot_id: int) -> str:
    return f"{SNAPSHOT_DIR}/snapshot-{snapshot_id}.json"


@dataclass(frozen=True)
class Snapshot:
    id: int
    schema_id: int
    parent_id: int | None
    commit_kind: CommitKind
    commit_user: str
    commit_identifier: int
    time_millis: int
    base_manifests: tuple[ManifestMeta, ...]
    delta_manifests: tuple[ManifestMeta, ...]
    changelog_manifests: tuple[ManifestMeta, ...] = ()
    total_record_count: int = 0
    delta_record_count: int = 0
    changelog_record_count: int = 0
    # The next free sequence number: the committer gives each new file a base from it.
    next_sequence: int = 0
    properties: Mapping[str, str] = field(default_factory=dict)
    # Unique per commit call: a committer that cannot tell whether its create of this
    # file happened reads the file back and knows it by this id (docs/reliability.md).
    commit_id: str = ""
    # The commit id of the parent this commit was made on: after its create, the
    # committer checks that the parent file still holds that commit (docs/format.md 6.6).
    parent_commit_id: str = ""
    # Each user that named its commits (a streaming sink's shard): the identifier of its
    # last one, the snapshot that made it and the highest identifier it committed, carried
    # from parent to child by every commit, so they stay known after expiration removed
    # that snapshot (docs/format.md 6.4).
    named_commits: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    # The newest OVERWRITE snapshot at or before this one (0: none), carried from parent
    # to child, so a reader far behind knows without reading the snapshots in between
    # whether the table was overwritten since (a stream's catch-up, docs/format.md).
    # None where unknown: a snapshot written before the field, or of another format.
    last_overwrite_id: int | None = None

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.time_millis / 1000, tz=timezone.utc)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": 1,
            "id": self.id,
            "schema_id": self.schema_id,
            "parent_id": self.parent_id,
            "commit_kind": self.commit_kind,
            "commit_user": self.commit_user,
            "commit_identifier": self.commit_identifier,
            "time_millis": self.time_millis,
            "base_manifests": [m.to_json() for m in self.base_manifests],
            "delta_manifests": [m.to_json() for m in self.delta_manifests],
            "changelog_manifests": [m.to_json() for m in self.changelog_manifests],
            "total_record_count": self.total_record_count,
            "delta_record_count": self.delta_record_count,
            "changelog_record_count": self.changelog_record_count,
            "next_sequence": self.next_sequence,
            "properties": dict(self.properties),
            "commit_id": self.commit_id,
            "parent_commit_id": self.parent_commit_id,
            **(
                {"named_commits": {u: list(c) for u, c in self.named_commits.items()}}
                if self.named_commits
                else {}
            ),
            **(
                {"last_overwrite_id": self.last_overwrite_id}
                if self.last_overwrite_id is not None
                else {}
            ),
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=1).encode()

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str) -> Snapshot:
        try:
            kind = data["commit_kind"]
            if kind not in COMMIT_KINDS:
                raise ValueError(f"unknown commit kind {kind!r}")
            return cls(
                id=int(data["id"]),
                schema_id=int(data["schema_id"]),
                parent_id=data["parent_id"],
                commit_kind=kind,
                commit_user=str(data["commit_user"]),
                commit_identifier=int(data["commit_identifier"]),
                time_millis=int(data["time_millis"]),
                base_manifests=tuple(ManifestMeta.from_json(m) for m in data["base_manifests"]),
                delta_manifests=tuple(ManifestMeta.from_json(m) for m in data["delta_manifests"]),
                changelog_manifests=tuple(
                    ManifestMeta.from_json(m) for m in data.get("changelog_manifests", [])
                ),
                total_record_count=int(data["total_record_count"]),
                delta_record_count=int(data["delta_record_count"]),
                changelog_record_count=int(data.get("changelog_record_count", 0)),
                next_sequence=int(data.get("next_sequence", 0)),
                properties=dict(data.get("properties", {})),
                commit_id=str(data.get("commit_id", "")),
                parent_commit_id=str(data.get("parent_commit_id", "")),
                named_commits={
                    str(u): (int(i), int(at), int(top))
                    for u, (i, at, top) in dict(data.get("named_commits", {})).items()
                },
                last_overwrite_id=_optional_int(data.get("last_overwrite_id")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptMetadataError(path, f"not a valid snapshot: {exc!r}") from exc


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


class SnapshotManager:
    """Finds and reads the snapshots of one table.

    The file layout is three methods (:meth:`snapshot_ids`, :meth:`read_if_present`,
    :meth:`hint`); everything else is built on them, so that another format's
    snapshots (raylake/paimon/snapshot.py) are those three methods over its files.
    """

    def __init__(self, file_io: FileIO) -> None:
        self.file_io = file_io

    def snapshot_ids(self) -> list[int]:
        return self.file_io.numbered(SNAPSHOT_DIR, _SNAPSHOT_NAME)

    def get(self, snapshot_id: int) -> Snapshot:
        """Snapshot ``snapshot_id``; SnapshotNotFoundError names the snapshots that exist."""
        snap = self.read_if_present(snapshot_id)
        if snap is None:
            ids = self.snapshot_ids()
            if ids and snapshot_id < ids[0]:  # ids only grow: one below the earliest expired
                raise SnapshotExpiredError(snapshot_id, ids[0], self.file_io.uri)
            have = f"snapshots {ids[0]}..{ids[-1]}" if ids else "no snapshots"
            raise SnapshotNotFoundError(
                f"snapshot {snapshot_id} does not exist in {self.file_io.uri} (it has {have})",
                snapshot_id=snapshot_id,
            )
        return snap

    def _parse(self, snapshot_id: int, raw: bytes) -> Snapshot:
        path = self.file_io.full_path(snapshot_path(snapshot_id))
        snap = Snapshot.from_json(json_object(raw, path), path)
        if snap.id != snapshot_id:
            raise CorruptMetadataError(path, f"file holds snapshot id {snap.id}")
        return snap

    def latest_id(self) -> int | None:
        latest = self.latest()
        return None if latest is None else latest.id

    def latest(self) -> Snapshot | None:
        """The newest snapshot: start at the hint, then read forward (the hint may lag).

        Reads, not existence checks: on an object store a read of a missing key is one
        request, while an existence check of a missing key costs two (HEAD, then LIST).
        The hinted snapshot must hold the commit the hint names: a late write of the
        hint can land after its snapshot was expired and a slow commit made a stray
        snapshot at that id (docs/format.md 6.6), which the listing's largest id never is.
        """
        hint, hint_commit = self.hint()
        found = following = None
        if hint is not None and self.file_io.is_remote:
            # The hint is usually right: read it and the next one at once, one round
            # trip instead of two before a scan's first data request (issue 16).
            with ThreadPoolExecutor(2, thread_name_prefix="raylake-snapshot") as pool:
                found, following = pool.map(self.read_if_present, (hint, hint + 1))
        elif hint is not None:
            found = self.read_if_present(hint)
            following = None if found is None else self.read_if_present(hint + 1)
        if found is not None and hint_commit and found.commit_id != hint_commit:
            found = None  # another commit at the hint's id: a stray, below the latest
        if found is None:  # no hint, or it names an expired snapshot (or a stray): list
            return self.listed_latest()
        while following is not None:
            found = following
            following = self.read_if_present(found.id + 1)
        return found

    def listed_latest(self) -> Snapshot | None:
        """The snapshot with the largest id listed. Newer commits can make it old and an
        expiration remove it between the listing and the read: then a newer one exists,
        so list again (each time means commits landed; the bound only guards a bug)."""
        for _ in range(_RELISTS):
            ids = self.snapshot_ids()
            if not ids:
                return None
            found = self.read_if_present(ids[-1])
            if found is not None:
                return found
        return self.get(ids[-1])  # names what exists

    def read_if_present(self, snapshot_id: int) -> Snapshot | None:
        """Snapshot ``snapshot_id``, or None if it does not exist (yet, or any more)."""
        try:
            raw = self.file_io.read_bytes(snapshot_path(snapshot_id))
        except FileNotFoundError:
            return None
        return self._parse(snapshot_id, raw)

    @contextmanager
    def reading(self, snapshot_id: int) -> Iterator[None]:
        """Reads of a snapshot's manifests: one missing because an expiration removed the
        snapshot meanwhile (later commits made it old) is SnapshotExpiredError, not a
        CorruptMetadataError that would call the table damaged."""
        try:
            yield
        except CorruptMetadataError as exc:
            if self.read_if_present(snapshot_id) is not None:
                raise
            earliest = self.earliest_id()
            earliest = snapshot_id + 1 if earliest is None else earliest
            raise SnapshotExpiredError(snapshot_id, earliest, self.file_io.uri) from exc

    def history(self, latest: Snapshot, down_to: int = 0) -> Iterator[Snapshot]:
        """``latest`` and its ancestors with ids above ``down_to``, newest first, each the
        parent its child was made on. The walk ends at the first one missing (expired,
        and every older one with it) or not that parent: a slow commit's stray snapshot,
        created at an id that expiration had freed below a newer snapshot (docs/format.md
        6.6), holds a commit whose rows are in no snapshot of the table. A child written
        before snapshots named their parent's commit is taken to be made on its parent."""
        if latest.id <= down_to:
            return
        yield latest
        child = latest
        for snapshot_id in range(latest.id - 1, down_to, -1):
            snap = self.read_if_present(snapshot_id)
            if snap is None or child.parent_commit_id not in ("", snap.commit_id):
                return
            yield snap
            child = snap

    def earliest_id(self) -> int | None:
        """The earliest snapshot of the table's history (see :meth:`history_ids`)."""
        ids = self.history_ids()
        return ids[0] if ids else None

    def history_ids(self) -> list[int]:
        """The ids of the snapshots in the table's history, oldest first. A slow commit's
        stray snapshot, created at an id expiration had freed (docs/format.md 6.6), lies
        below them: below a gap in the ids (expiration removes the oldest first, so the
        history's ids have none), or just below and not the parent of the one after it."""
        ids = self.snapshot_ids()
        start = len(ids) - 1
        while start > 0 and ids[start - 1] == ids[start] - 1:
            start -= 1
        run = ids[max(start, 0) :]
        for i, (lower, upper) in enumerate(pairwise(run)):
            below, above = self.read_if_present(lower), self.read_if_present(upper)
            if below is None or above is None or above.parent_commit_id in ("", below.commit_id):
                return run[i:]
        return run[-1:]

    def all(self) -> list[Snapshot]:
        found = (self.read_if_present(i) for i in self.snapshot_ids())
        return [s for s in found if s is not None]  # None: expired while listing

    def as_of(self, time_millis: int) -> Snapshot:
        """The newest snapshot committed at or before a time."""
        found = None
        ids = self.history_ids()
        for snapshot_id in reversed(ids):
            snap = self.get(snapshot_id)
            if snap.time_millis <= time_millis:
                found = snap
                break
        if found is None and ids and ids[0] > 1:  # the state at that time expired with it
            raise SnapshotExpiredError(ids[0] - 1, ids[0], self.file_io.uri)
        if found is None:
            when = _utc_text(time_millis)
            raise SnapshotNotFoundError(f"{self.file_io.uri} has no snapshot at or before {when}")
        return found

    def try_create(self, snap: Snapshot, *, then: Callable[[], bool] | None = None) -> bool:
        """The commit point: create ``snapshot-<id>.json`` unless another writer did.

        True where the file holds this snapshot (its commit id) afterwards, even when the
        store's answer to the create was lost; raises CommitStateUnknownError where that
        cannot be told (raylake/io/fileio.py, ``create_if_absent``). Once created,
        ``then`` runs (the committer's check of its lineage), and the LATEST hint is
        written only if it returns True: a hint naming a snapshot created below the
        table's latest (``then`` raises, or returns False for a snapshot that is in the
        history but below newer ones) would make readers and writers take it for the
        latest where the snapshot after it was expired too."""
        # A snapshot file absent after a create that may have been carried out may have
        # been expired since, where a newer snapshot exists: made again, it would be a
        # stray below the history, and a slow commit's parent check would pass on it.
        # Another commit's file found there may be a stray made after that expiration.
        created = self.file_io.create_if_absent(
            snapshot_path(snap.id),
            snap.to_bytes(),
            gone_since=lambda: max(self.snapshot_ids(), default=0) > snap.id,
            replaced_since=lambda held: self._replaced_since(snap.id, held),
        )
        if created and (then is None or then()):
            self._write_hint(snap)
        return created

    def _replaced_since(self, snapshot_id: int, held: bytes) -> bool:
        """Whether ``held``, another commit's snapshot found at an id a create may have
        taken before its answer was lost, may be a stray created after an expiration
        deleted the first snapshot made there (docs/format.md 6.6): not where the next
        snapshot was made on it, nor where none is newer (expiration keeps the latest)."""
        found = self._parse(snapshot_id, held)
        child = self.read_if_present(snapshot_id + 1)
        if child is None and max(self.snapshot_ids(), default=0) > snapshot_id:
            # Newer ones were listed, so the next one existed by then: made since the
            # first look (a race lost to a busy table), or expired since (unknown).
            child = self.read_if_present(snapshot_id + 1)
            if child is None:
                return True
        return child is not None and child.parent_commit_id not in ("", found.commit_id)

    def read_hint(self) -> int | None:
        """The id the ``LATEST`` hint names (it may lag behind, never run ahead), or None."""
        return self.hint()[0]

    def hint(self) -> tuple[int | None, str]:
        """The id the ``LATEST`` hint names, or None, and the commit id it names ("" where
        it names none: a hint an older version wrote)."""
        try:
            words = self.file_io.read_bytes(LATEST_HINT).decode().split()
            return int(words[0]), words[1] if len(words) > 1 else ""
        except (FileNotFoundError, ValueError, UnicodeDecodeError, IndexError):
            return None, ""

    def _write_hint(self, snap: Snapshot) -> None:
        try:
            self.file_io.write_bytes(LATEST_HINT, f"{snap.id} {snap.commit_id}".strip().encode())
        except Exception:  # only a hint, and the commit already happened: never fail it
            logger.warning("could not update %s", LATEST_HINT, exc_info=True)


def _utc_text(millis: int) -> str:
    """A time as ISO text in UTC, or as its epoch milliseconds where no datetime holds it:
    0001-01-01T00:00:00+05:00 is in year 0 in UTC, and as_of=10**18 after year 9999."""
    try:
        return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat()
    except (ValueError, OverflowError, OSError):
        return f"{millis} ms from the epoch (outside years 1 to 9999 in UTC)"
