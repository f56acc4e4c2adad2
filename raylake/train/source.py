"""The rows a training loader reads: one pinned snapshot, cut into pieces with exact counts.

A *piece* is the smallest unit read on its own: a row group of an append table, a
merge section of a primary-key table (whose rows exist only once its files are
merged). Pieces come from the ordinary scan planner with a 1-byte split target, so
they are exactly the splits Ray Data or Spark would read, only cut as fine as the
table allows. Their exact row counts after the filter and the merge are needed to
deal positions exactly (raylake/train/sharding.py); they come from the manifests
where they suffice and otherwise from one counting read (docs/training.md).

A :class:`LakeSource` is picklable and small (a read context and split
descriptions), and holds the counts, so DataLoader workers never recount.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from raylake.errors import CorruptMetadataError, ResumeStateError
from raylake.expr import AlwaysTrue, Expr
from raylake.io.fileio import location_key
from raylake.table import Split, Table, open_table
from raylake.table.counting import exact_counts
from raylake.table.scan import ReadContext
from raylake.table.split import name_partition_key


@dataclass(frozen=True)
class LakeSource:
    """A pinned snapshot's pieces, their exact row counts, and how to read them."""

    uri: str
    snapshot_id: int | None  # None: the table has no snapshot (no rows)
    context: ReadContext
    pieces: tuple[Split, ...]
    counts: tuple[int, ...]

    @classmethod
    def open(
        cls,
        table: str | Table,
        *,
        columns: Sequence[str] | None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> LakeSource:
        """Pin the snapshot (the latest unless ``snapshot_id``), plan pieces, count rows."""
        tbl = table_of(table, storage_options)
        scan = tbl.scan(columns=columns, filter=filter, snapshot_id=snapshot_id).pin()
        snap = scan.snapshot()
        if snap is None:
            return cls(tbl.uri, None, scan.read_context(), (), ())
        pieces = tuple(scan.with_split_size(1).plan())
        counts = exact_counts(scan.read_context(), pieces)
        return cls(tbl.uri, snap.id, scan.read_context(), pieces, counts)

    @property
    def schema(self) -> pa.Schema:
        return self.context.output_schema

    @property
    def total(self) -> int:
        return sum(self.counts)

    @property
    def filter_text(self) -> str:
        return "" if isinstance(self.context.filter, AlwaysTrue) else str(self.context.filter)

    @cached_property
    def digest(self) -> str:
        """A fingerprint of the pieces and counts, which positions are relative to."""
        h = hashlib.sha256()
        for split, count in zip(self.pieces, self.counts):
            for f in split.files:
                h.update(f"{f.path}:{f.row_groups}|".encode())
            h.update(f"{count};".encode())
        return h.hexdigest()[:32]

    @cached_property
    def offsets(self) -> np.ndarray:
        """The first row of each piece in plan order, and the total at the end."""
        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)]).astype(np.int64)

    def selection(self) -> dict[str, Any]:
        """What a saved state's row numbers refer to: the table, the pinned snapshot, the
        filter and the plan's fingerprint (checked back by :meth:`for_saved`)."""
        return {
            "table": self.uri,
            "snapshot_id": self.snapshot_id,
            "plan": self.digest,
            "filter": self.filter_text,
        }

    def sorted_by(self, key: Callable[[Split], Any]) -> LakeSource:
        """The same pieces and counts, stably sorted by ``key`` of each piece."""
        order = sorted(range(len(self.pieces)), key=lambda i: key(self.pieces[i]))
        return replace(
            self,
            pieces=tuple(self.pieces[i] for i in order),
            counts=tuple(self.counts[i] for i in order),
        )

    def for_saved(self, state: Mapping[str, Any], what: str) -> LakeSource:
        """This source, checked against the table, snapshot, filter and plan a saved
        ``state`` (a loader's ``what``) was made over, which its row numbers refer to:
        ResumeStateError naming what differs. Where it was saved while plans put files
        in name order, the same pieces in that order (:meth:`in_saved_order`)."""
        saved_table = state.get("table")
        # One table spelled two ways ('/t' and 'file:///t', a link) is the same table.
        if not isinstance(saved_table, str) or location_key(saved_table) != location_key(self.uri):
            raise ResumeStateError(
                f"this {what} is of table {saved_table!r}; this loader reads {self.uri!r}"
            )
        if state.get("snapshot_id") is None and self.snapshot_id is not None:
            # No snapshot_id= can read the table as it was before its first commit.
            raise ResumeStateError(
                f"this {what} is of {self.uri!r} before its first commit (no rows): "
                "there is nothing to resume; start without loading it"
            )
        if state.get("snapshot_id") != self.snapshot_id:
            raise ResumeStateError(
                f"this {what} is of snapshot {state.get('snapshot_id')} of {self.uri!r}, but "
                f"this loader pinned snapshot {self.snapshot_id}; pass "
                f"snapshot_id={state.get('snapshot_id')} to resume it"
            )
        saved = state.get("plan")
        if state.get("filter") == self.filter_text:
            if saved == self.digest:
                return self
            older = self.in_saved_order(saved) if isinstance(saved, str) else None
            if older is not None:
                return older
        raise ResumeStateError(
            f"this {what} is of another selection of snapshot {self.snapshot_id} "
            f"(filter {state.get('filter')!r}, this loader's {self.filter_text!r}): its "
            "row numbers would name other rows"
        )

    def in_saved_order(self, digest: str) -> LakeSource | None:
        """These pieces in the order of a position saved under ``digest`` by an earlier
        raylake, whose plans ordered partitions by their values' text and each
        partition's (or Paimon bucket's) files by name rather than in the order they
        were written (docs/decisions.md, "Reads follow the order rows were written"):
        the same pieces and counts, so the position names the rows it named then. None
        when no older order has that digest."""
        for older in (_partition_text_order, _name_order, _bucket_name_order):
            source = self.sorted_by(older)
            if source.digest == digest:
                return source
        return None

    @cached_property
    def _one_thread(self) -> ReadContext:
        return replace(self.context, use_threads=False)

    def read_piece(self, index: int, *, use_threads: bool = True) -> pa.Table:
        """The rows of one piece (filtered, merged, projected), in their stable order;
        ``use_threads=False`` decodes it on the calling thread, not on pyarrow's pool."""
        context = self.context if use_threads else self._one_thread
        rows = context.read_table([self.pieces[index]])
        if rows.num_rows != self.counts[index]:
            raise CorruptMetadataError(
                self.uri,
                f"piece {index} of snapshot {self.snapshot_id} read {rows.num_rows} rows, "
                f"but counting found {self.counts[index]}; files changed under a pinned snapshot",
            )
        return rows


def _partition_text_order(piece: Split) -> tuple[Any, ...]:
    """Where an earlier raylake planned a piece of a primary-key table: partitions by
    their values' text, each partition's pieces as now (a stable sort keeps them)."""
    return name_partition_key(piece.partition)


def _name_order(piece: Split) -> tuple[Any, ...]:
    """Where an earlier raylake planned a piece of its own append tables."""
    return (name_partition_key(piece.partition), piece.files[0].path)


def _bucket_name_order(piece: Split) -> tuple[Any, ...]:
    """Where an earlier raylake planned a piece of a Paimon append table."""
    return (
        name_partition_key(piece.partition),
        piece.bucket,
        piece.files[0].path.rsplit("/", 1)[-1],
    )


def table_of(table: str | Table, storage_options: Mapping[str, Any] | None) -> Table:
    """The table itself, or the table at a URI."""
    return table if isinstance(table, Table) else open_table(table, storage_options=storage_options)
