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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import pyarrow as pa

from raylake.errors import CorruptMetadataError
from raylake.expr import AlwaysTrue, Expr
from raylake.table import Split, Table, open_table
from raylake.table.counting import exact_counts
from raylake.table.scan import ReadContext


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


def table_of(table: str | Table, storage_options: Mapping[str, Any] | None) -> Table:
    """The table itself, or the table at a URI."""
    return table if isinstance(table, Table) else open_table(table, storage_options=storage_options)
