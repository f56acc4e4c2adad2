"""What a dynamic partition overwrite replaces: the partitions its rows were written into.

Spark's ``partitionOverwriteMode=dynamic`` (Delta and Iceberg follow it; Paimon's Flink
and Spark writers do it by default): an overwrite of a partitioned table replaces only
the partitions that the written data has rows in, and leaves every other partition as
it was. The set is known once the writers have prepared their files, so it is resolved
from the commit messages, not from a filter the caller writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import InvalidArgumentError, UnsupportedOperationError
from raylake.format.schema import TableSchema
from raylake.table.writer import CommitMessage

PartitionOverwriteMode = Literal["static", "dynamic"]
PARTITION_OVERWRITE_MODES: tuple[PartitionOverwriteMode, ...] = ("static", "dynamic")
_PREVIEW = 3  # partitions named in a message


@dataclass(frozen=True)
class WrittenPartitions:
    """The partitions (tuples of partition values, in the table's partition-key order)
    that a dynamic overwrite replaces."""

    keys: tuple[str, ...]
    values: frozenset[tuple[Any, ...]]

    @classmethod
    def to_come(cls, ts: TableSchema) -> WrittenPartitions:
        """A dynamic overwrite before its files are written: no partition yet."""
        return cls(tuple(ts.partition_keys), frozenset())

    def written_by(self, messages: Iterable[CommitMessage]) -> WrittenPartitions:
        """The partitions that the messages' new files lie in."""
        return WrittenPartitions(
            self.keys, frozenset(f.partition for m in messages for f in m.new_files)
        )

    def __str__(self) -> str:
        named = sorted((dict(zip(self.keys, p)) for p in self.values), key=repr)
        more = f" and {len(named) - _PREVIEW} more" if len(named) > _PREVIEW else ""
        listed = ", ".join(str(p) for p in named[:_PREVIEW])
        return f"the {len(named)} written partition(s) {listed}{more}"

    def select(self, entries: pa.Table, ts: TableSchema) -> pa.Table:
        """The manifest entries in these partitions (a null value matches a null one)."""
        if entries.num_rows == 0 or not self.values:
            return entries.slice(0, 0)
        wanted = pa.Table.from_pylist(
            [dict(zip(self.keys, p)) for p in self.values], schema=ts.partition_schema
        )
        have = pa.Table.from_struct_array(entries.column("partition").combine_chunks())
        mask = pc.is_in(*_joint_codes(have, wanted))
        return entries.filter(pc.fill_null(mask, False))


def _joint_codes(have: pa.Table, wanted: pa.Table) -> tuple[pa.Array, pa.Array]:
    """One integer per row of each side, equal where every partition value is (null
    equal to null), null on ``have``'s side where a value is not wanted. Column by
    column, densified after each, so the codes stay below the wanted rows' count
    squared however many partition keys there are."""
    codes_have: pa.Array | None = None
    codes_wanted: pa.Array | None = None
    for name in wanted.column_names:
        values = pc.unique(wanted.column(name))
        width = pa.scalar(len(values), pa.int64())
        here = pc.index_in(have.column(name).combine_chunks(), value_set=values, skip_nulls=False)
        there = pc.index_in(
            wanted.column(name).combine_chunks(), value_set=values, skip_nulls=False
        )
        here, there = here.cast(pa.int64()), there.cast(pa.int64())
        if codes_have is not None and codes_wanted is not None:
            here = pc.add(pc.multiply(codes_have, width), here)
            there = pc.add(pc.multiply(codes_wanted, width), there)
            dense = pc.unique(there)
            here = pc.index_in(here, value_set=dense).cast(pa.int64())
            there = pc.index_in(there, value_set=dense).cast(pa.int64())
        codes_have, codes_wanted = here, there
    assert codes_have is not None and codes_wanted is not None
    return codes_have, codes_wanted


def partition_overwrite_mode_arg(value: Any) -> PartitionOverwriteMode:
    """``"static"`` or ``"dynamic"``, as Spark's ``partitionOverwriteMode`` spells them
    (in either case)."""
    mode = value.lower() if isinstance(value, str) else value
    if mode not in PARTITION_OVERWRITE_MODES:
        raise InvalidArgumentError(
            "partition_overwrite_mode", value, f"one of {list(PARTITION_OVERWRITE_MODES)}"
        )
    return mode  # type: ignore[no-any-return]


def check_dynamic_mode(partition_overwrite_mode: str, mode: str | None) -> None:
    """A dynamic partition overwrite is an overwrite: refused with any other ``mode``
    (None: the table's default, append or upsert)."""
    if partition_overwrite_mode == "dynamic" and mode != "overwrite":
        raise UnsupportedOperationError(
            "partition_overwrite_mode='dynamic' applies only to mode='overwrite'"
        )


def is_dynamic(mode: str, partition_overwrite_mode: str, partition_keys: Sequence[str]) -> bool:
    """Whether an overwrite replaces only the written partitions: a dynamic overwrite of
    a partitioned table. An unpartitioned table is replaced whole, as Spark does."""
    return mode == "overwrite" and partition_overwrite_mode == "dynamic" and bool(partition_keys)
