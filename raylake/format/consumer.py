"""Consumer registry: the persisted progress of named consumers, ``consumer/consumer-<id>``.

A consumer (a streaming job, a shard of one) records the next snapshot it will
read. The file is small JSON written whole through :class:`FileIO` (write then
rename on local files; one object put elsewhere), so a reader sees the old or
the new progress, never half of it. Expiration reads the registry and never
removes a snapshot a consumer still needs (see maintenance.py).

Each consumer id has one writer (its stream reader); the registry does not
arbitrate between two processes that commit progress for the same id.

Registration and expiration are made safe against each other with expiry markers
(``consumer/EXPIRING-<uuid>``): an expiration writes one before it re-reads the
consumers, and removes it when it has deleted what it chose. A registering
consumer writes its file, waits while a marker exists, then checks that the
snapshots it needs are still there. Either the expiration's re-read sees the new
consumer, or the consumer's check runs after the expiration is done: it is never
left believing in snapshots that are gone (docs/maintenance.md).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from raylake.arguments import check_count
from raylake.errors import (
    ConsumerArgumentError,
    ConsumerError,
    CorruptMetadataError,
    StreamPositionExpiredError,
    TableNotFoundError,
)
from raylake.format.metadata_json import json_object
from raylake.format.schema import SCHEMA_DIR
from raylake.format.snapshot import SnapshotManager
from raylake.io import FileIO
from raylake.io.temp_names import TEMP_SUFFIX

logger = logging.getLogger(__name__)

CONSUMER_DIR = "consumer"
_PREFIX = "consumer-"
# Safe on every filesystem and object store: no separators, no "." or ".." names, and no
# ".tmp" suffix, which FileIO's write-then-rename uses for its temporary files.
_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Consumer property: "full" when the next snapshot is read whole (a start, or a position
# whose previous snapshot is gone), "delta" when it is read as a change.
STREAM_MODE = "stream.mode"
_MARKER_PREFIX = "EXPIRING-"
# A marker this old belongs to an expiration that crashed: registrations stop waiting.
MARKER_STALE_MS = 10 * 60 * 1000
# Per table URI, expiry markers of finished expirations whose delete failed
_LEFT_MARKERS: dict[str, set[str]] = {}


def is_consumer_id(name: str) -> bool:
    """Whether ``name`` is an id raylake names consumers by (see validate_consumer_id)."""
    return bool(_ID_PATTERN.match(name)) and not name.endswith(TEMP_SUFFIX)


def validate_consumer_id(consumer_id: Any) -> str:
    """Return ``consumer_id`` if it is a safe file-name component, else raise
    :class:`ConsumerArgumentError` (an InvalidArgumentError and a ConsumerError)."""
    if not isinstance(consumer_id, str):
        raise ConsumerArgumentError("consumer_id", consumer_id, "a string")
    if not is_consumer_id(consumer_id):
        raise ConsumerArgumentError(
            "consumer_id",
            consumer_id,
            "a valid consumer id: 1-128 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit and not ending in '.tmp'",
            consumer_id=consumer_id,
        )
    return consumer_id


def validate_next_snapshot_id(consumer_id: str, next_snapshot_id: Any) -> int:
    """``next_snapshot_id`` of consumer ``consumer_id`` if it is a snapshot id (>= 1)."""
    return check_count(
        f"next_snapshot_id of consumer {consumer_id!r}",
        next_snapshot_id,
        1,
        functools.partial(ConsumerArgumentError, consumer_id=consumer_id),
    )


_MARKER_NAME = re.compile(_MARKER_PREFIX + r"[0-9a-f]{32}")


def is_stale_marker(name: str, mtime_millis: float, now_millis: int) -> bool:
    """Whether ``name`` in consumer/ is an expiry marker of an expiration that crashed
    (older than ``MARKER_STALE_MS``): orphan removal collects it."""
    return _MARKER_NAME.fullmatch(name) is not None and mtime_millis < now_millis - MARKER_STALE_MS


def consumer_path(consumer_id: str) -> str:
    return f"{CONSUMER_DIR}/{_PREFIX}{validate_consumer_id(consumer_id)}"


@dataclass(frozen=True)
class ConsumerProgress:
    """Where one consumer stands: the snapshot it reads next (which may not exist yet)."""

    consumer_id: str
    next_snapshot_id: int
    updated_millis: int
    # Free-form facts a stream reader wants back after a restart (shard, options ...).
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        validate_consumer_id(self.consumer_id)
        validate_next_snapshot_id(self.consumer_id, self.next_snapshot_id)

    def to_bytes(self) -> bytes:
        data = {
            "format_version": 1,
            "consumer_id": self.consumer_id,
            "next_snapshot_id": self.next_snapshot_id,
            "updated_millis": self.updated_millis,
            "properties": dict(self.properties),
        }
        return json.dumps(data, indent=1).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, path: str, expected_id: str) -> ConsumerProgress:
        data = json_object(raw, path)
        try:
            progress = cls(
                consumer_id=data["consumer_id"],
                next_snapshot_id=data["next_snapshot_id"],
                updated_millis=int(data["updated_millis"]),
                properties={str(k): str(v) for k, v in data.get("properties", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptMetadataError(path, f"not a valid consumer file: {exc!r}") from exc
        if progress.consumer_id != expected_id:
            raise CorruptMetadataError(
                path, f"file holds consumer {progress.consumer_id!r}, not {expected_id!r}"
            )
        return progress


class ConsumerManager:
    """Lists, reads, commits, resets and deletes the consumers of one table."""

    def __init__(self, file_io: FileIO) -> None:
        self.file_io = file_io

    def ids(self) -> list[str]:
        """Ids of the registered consumers; other files in the directory are ignored."""
        names = self.file_io.list_names(CONSUMER_DIR)
        ids = [n[len(_PREFIX) :] for n in names if n.startswith(_PREFIX)]
        return [i for i in ids if is_consumer_id(i)]

    def list(self) -> list[ConsumerProgress]:
        """Every registered consumer, by id. A corrupt file raises: expiration must not guess."""
        found = (self.get(consumer_id) for consumer_id in self.ids())
        return [p for p in found if p is not None]  # None: deleted while listing

    def get(self, consumer_id: str) -> ConsumerProgress | None:
        rel = consumer_path(consumer_id)
        try:
            raw = self.file_io.read_bytes(rel)
        except FileNotFoundError:
            return None
        return ConsumerProgress.from_bytes(raw, self.file_io.full_path(rel), consumer_id)

    def commit(
        self,
        consumer_id: str,
        next_snapshot_id: int,
        properties: Mapping[str, str] | None = None,
    ) -> ConsumerProgress:
        """Record progress. It only moves forward; use :meth:`reset` to rewind on purpose."""
        current = self.get(consumer_id)
        validate_next_snapshot_id(consumer_id, next_snapshot_id)
        if current is not None and next_snapshot_id < current.next_snapshot_id:
            raise ConsumerError(
                f"consumer {consumer_id!r} is at snapshot {current.next_snapshot_id}; committing "
                f"{next_snapshot_id} would move it backwards (use reset to rewind on purpose)",
                consumer_id=consumer_id,
            )
        if properties is None and current is not None:
            properties = current.properties
        return self._write(consumer_id, next_snapshot_id, properties)

    def reset(
        self,
        consumer_id: str,
        next_snapshot_id: int,
        properties: Mapping[str, str] | None = None,
    ) -> ConsumerProgress:
        """Set a consumer's next snapshot, backwards or forwards; creates it if absent."""
        return self._write(consumer_id, next_snapshot_id, properties)

    def delete(self, consumer_id: str) -> bool:
        """Remove a consumer; True if it existed. Its snapshots become expirable."""
        rel = consumer_path(consumer_id)
        existed = self.file_io.exists(rel)
        self.file_io.delete(rel)
        return existed

    def min_next_snapshot(self, ignoring: Collection[str] = ()) -> int | None:
        """The smallest next snapshot of any consumer but those ``ignoring`` (expired):
        expiration keeps it and all after it."""
        progress = [p for p in self.list() if p.consumer_id not in ignoring]
        return min((p.next_snapshot_id for p in progress), default=None)

    def expire(self, cutoff_millis: int, *, dry_run: bool = False) -> tuple[str, ...]:
        """Remove the consumers whose progress was last recorded before ``cutoff_millis``
        (Paimon's ``consumer.expiration-time``); their ids, by id. Each is read again
        just before it is deleted, and kept if it recorded progress meanwhile."""
        stale = [p.consumer_id for p in self.list() if p.updated_millis < cutoff_millis]
        if dry_run:
            return tuple(stale)
        removed = []
        for consumer_id in stale:
            current = self.get(consumer_id)
            if current is not None and current.updated_millis < cutoff_millis:
                self.file_io.delete(consumer_path(consumer_id))
                removed.append(consumer_id)
        if removed:
            logger.info("expired consumers %s of %s", removed, self.file_io.uri)
        return tuple(removed)

    def register(
        self,
        consumer_id: str,
        next_snapshot_id: int,
        properties: Mapping[str, str] | None = None,
    ) -> ConsumerProgress:
        """:meth:`reset`, safe against a concurrent expiration: once it returns,
        ``next_snapshot_id`` (and the one before it, if it existed) and all after it are
        kept until the consumer moves on.

        Raises :class:`StreamPositionExpiredError` (and unregisters the consumer) when an
        expiration removed ``next_snapshot_id`` while the consumer registered, and
        :class:`TableNotFoundError` where the table is gone (dropped under a reader or a
        job's shard that opened it before): a consumer file would stand in its place.
        """
        if not self.file_io.exists(SCHEMA_DIR):
            raise TableNotFoundError(self.file_io.uri)
        progress = self.reset(consumer_id, next_snapshot_id, properties)
        self.wait_for_expirations()
        earliest = SnapshotManager(self.file_io).earliest_id()
        if earliest is not None and next_snapshot_id < earliest:
            self.delete(consumer_id)
            raise StreamPositionExpiredError(
                next_snapshot_id, earliest, self.file_io.uri, consumer_id
            )
        return progress

    @contextmanager
    def expiring(self) -> Iterator[None]:
        """Hold an expiry marker while an expiration re-reads consumers and deletes."""
        rel = f"{CONSUMER_DIR}/{_MARKER_PREFIX}{uuid.uuid4().hex}"
        try:
            # A write that failed may have been carried out (its answer lost): a marker
            # left behind would hold up every registration until it goes stale.
            self.file_io.write_bytes(rel, json.dumps({"time_millis": _now_millis()}).encode())
            yield
        except BaseException:
            self.file_io.delete_quietly([rel])  # must not hide the error that got here
            raise
        self._release(rel)

    def release_left_markers(self) -> None:
        """Delete the markers this process's finished expirations could not delete; one
        that still cannot be deleted stays listed, for the next expiration to name."""
        self._delete_left()

    def _delete_left(self) -> OSError | None:
        """Delete the listed leftover markers; the error of the last that failed."""
        left = _LEFT_MARKERS.get(self.file_io.uri, set())
        error = None
        for rel in sorted(left):
            try:
                self.file_io.delete(rel)
            except OSError as exc:
                logger.warning("could not delete the expiry marker %s: %s", rel, exc)
                error = exc
            else:
                left.discard(rel)
        return error

    def _release(self, rel: str) -> None:
        """Delete a done expiration's marker, or say that registrations will wait: a
        warning alone let a marker hold up every registration for 10 minutes unseen."""
        _LEFT_MARKERS.setdefault(self.file_io.uri, set()).add(rel)
        error = self._delete_left()
        left = sorted(_LEFT_MARKERS[self.file_io.uri])
        if not left:
            return
        markers = f"its marker {left[0]}" if left == [rel] else f"the markers {', '.join(left)}"
        raise ConsumerError(
            f"the expiration is done, but {markers} in {self.file_io.uri} could not be "
            f"deleted ({error}): consumer registrations (reset_consumer, a stream's first "
            f"start) wait until they are deleted or {MARKER_STALE_MS // 60_000} minutes "
            "old. Delete them, or run expire_snapshots again in this process, which "
            "deletes them first"
        ) from error

    def wait_for_expirations(self) -> None:
        """Return once no expiration holds a fresh marker (a marker goes stale after
        ``MARKER_STALE_MS``: its expiration crashed). Waiting less would let a slow
        expiration delete what the registering consumer needs."""
        waited = False
        while self._fresh_markers():
            if not waited:
                logger.info("waiting for an expiration of %s to finish", self.file_io.uri)
                waited = True
            time.sleep(0.02)

    def _fresh_markers(self) -> tuple[str, ...]:
        fresh: tuple[str, ...] = ()
        now = _now_millis()
        for name in self.file_io.list_names(CONSUMER_DIR):
            if not name.startswith(_MARKER_PREFIX) or name.endswith(TEMP_SUFFIX):
                continue
            try:
                written = int(
                    json.loads(self.file_io.read_bytes(f"{CONSUMER_DIR}/{name}"))["time_millis"]
                )
            except FileNotFoundError:
                continue  # released meanwhile
            except (ValueError, KeyError, TypeError):
                written = now  # unreadable: being written, treat as fresh
            if now - written < MARKER_STALE_MS:
                fresh += (name,)
        return fresh

    def _write(
        self, consumer_id: str, next_snapshot_id: int, properties: Mapping[str, str] | None
    ) -> ConsumerProgress:
        progress = ConsumerProgress(
            consumer_id=consumer_id,
            next_snapshot_id=next_snapshot_id,
            updated_millis=_now_millis(),
            properties=dict(properties or {}),
        )
        self.file_io.write_bytes(consumer_path(consumer_id), progress.to_bytes())
        return progress


def _now_millis() -> int:
    return int(time.time() * 1000)
