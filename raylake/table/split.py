"""Splits: small, picklable descriptions of read work.

A split is the unit that Ray read tasks, Spark tasks, Torch workers and
streaming shards consume. It holds relative paths and row-group ranges, never
an open handle or a table object, so it pickles to a few hundred bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple, Protocol, TypeVar

from raylake.format.manifest import DataFile


@dataclass(frozen=True)
class FileSlice:
    """One data file, or a range of its row groups."""

    path: str
    row_groups: tuple[int, ...] | None  # None: the whole file
    row_count: int
    size_bytes: int  # estimated in-memory bytes of the projected columns
    file_size: int  # bytes on disk of the whole file
    level: int = 0
    sequence_base: int = 0
    min_key: tuple[Any, ...] | None = None
    max_key: tuple[Any, ...] | None = None
    # Primary-key files: the effective sequence range and the number of -D rows.
    min_sequence: int = 0
    max_sequence: int = 0
    delete_row_count: int = 0
    # The schema the file was written with: readers map its columns by field id.
    schema_id: int = 0


@dataclass(frozen=True)
class KeyRange:
    """Part ``index`` of ``count`` of a primary-key merge section, cut by key.

    The reader finds the part's keys from the section's files (table/pk/ranges.py).
    """

    index: int
    count: int


@dataclass(frozen=True)
class Split:
    snapshot_id: int
    partition: tuple[Any, ...]
    bucket: int
    files: tuple[FileSlice, ...]
    row_count: int  # rows in the files before any row filter (and, for PK tables, merging)
    size_bytes: int  # estimated in-memory bytes of the projected columns
    # Primary-key splits: the number of files of each merge section, in file order (a
    # section's files are adjacent). Planning computes sections once; readers and exact
    # row counts use them as they are. Append splits have none: they never merge.
    sections: tuple[int, ...] = ()
    # The key range of each section (None: the whole section); empty: all whole.
    ranges: tuple[KeyRange | None, ...] = ()
    # The schema the plan was made under, so a split read on its own (Table.read_split)
    # reads under it: an old snapshot's schema for time travel. None: not planned by a
    # scan (the table's current schema).
    schema_id: int | None = None

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def needs_merge(self) -> bool:
        """Whether the split is read through merge-on-read (a primary-key split)."""
        return bool(self.sections)

    def merge_sections(self) -> list[tuple[FileSlice, ...]]:
        """The files grouped by merge section (files whose key ranges overlap)."""
        groups, start = [], 0
        for size in self.sections:
            groups.append(self.files[start : start + size])
            start += size
        return groups

    def merge_parts(self) -> list[tuple[tuple[FileSlice, ...], KeyRange | None]]:
        """Each merge section with its key range (None: the whole section)."""
        ranges = self.ranges or (None,) * len(self.sections)
        return list(zip(self.merge_sections(), ranges))


class _InBucket(Protocol):
    @property
    def partition(self) -> tuple[Any, ...]: ...

    @property
    def bucket(self) -> int: ...


F = TypeVar("F", bound=_InBucket)
BucketKey = tuple[tuple[Any, ...], int]  # (partition values, bucket)


def partition_sort_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A total order over partition values, for stable plans: numbers by value (hour 9
    before hour 10), other values by their text (ISO dates, strings), NaN and None last.
    One partition column holds values of one type, so only like values meet."""
    return tuple(_partition_value_key(v) for v in values)


def _partition_value_key(v: Any) -> tuple[int, Any]:
    if v is None:
        return (3, 0)
    if isinstance(v, int | float | Decimal):  # bool is an int
        return (2, 0) if v != v else (0, v)  # NaN is not ordered: after every number
    return (1, str(v))


def name_partition_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """The order plans gave partitions before numbers were ordered by value (by their
    text), which positions saved then refer to (raylake/train/source.py)."""
    return tuple((v is None, "" if v is None else str(v)) for v in values)


def bucket_order(key: BucketKey) -> tuple[Any, ...]:
    """Buckets in partition, then bucket order."""
    partition, bucket = key
    return (partition_sort_key(partition), bucket)


def by_bucket(
    files: Iterable[F], group: Callable[[Any, int], BucketKey] | None = None
) -> dict[BucketKey, list[F]]:
    """Files by bucket (or by ``group`` of their partition and bucket), each group in
    the order the files come."""
    groups: dict[BucketKey, list[F]] = {}
    for f in files:
        key = (f.partition, f.bucket) if group is None else group(f.partition, f.bucket)
        groups.setdefault(key, []).append(f)
    return groups


def projected_size(f: DataFile, column_indices: Sequence[int] | None) -> int:
    """Estimated in-memory bytes of a file's projected columns, from manifest sizes."""
    total = f.in_memory_size
    if column_indices is None or not f.column_sizes:
        return total
    all_columns = sum(f.column_sizes) or 1
    # A file of an older schema version has other columns: its sizes are an estimate.
    wanted = sum(f.column_sizes[i] for i in column_indices if i < len(f.column_sizes))
    return int(total * wanted / all_columns)


def slice_file(
    f: DataFile, target_size: int, column_indices: Sequence[int] | None
) -> Iterator[FileSlice]:
    """Cut a large file into row-group ranges of about ``target_size`` projected bytes."""
    size = projected_size(f, column_indices)
    groups = len(f.row_group_rows)
    if size <= target_size or groups <= 1:
        yield _slice(f, None, f.row_count, size)
        return
    scale = size / max(f.in_memory_size, 1)
    start, acc_rows, acc_size = 0, 0, 0.0
    for i in range(groups):
        acc_rows += f.row_group_rows[i]
        acc_size += f.row_group_sizes[i] * scale
        if acc_size >= target_size or i == groups - 1:
            yield _slice(f, tuple(range(start, i + 1)), acc_rows, int(acc_size))
            start, acc_rows, acc_size = i + 1, 0, 0.0


def _slice(f: DataFile, row_groups: tuple[int, ...] | None, rows: int, size: int) -> FileSlice:
    return FileSlice(
        path=f.path,
        row_groups=row_groups,
        row_count=rows,
        size_bytes=size,
        file_size=f.file_size,
        level=f.level,
        sequence_base=f.sequence_base,
        min_key=f.min_key,
        max_key=f.max_key,
        min_sequence=f.min_sequence,
        max_sequence=f.max_sequence,
        delete_row_count=f.delete_row_count,
        schema_id=f.schema_id,
    )


def pack_slices(
    snapshot_id: int,
    slices: Sequence[tuple[tuple[Any, ...], int, FileSlice]],
    target_size: int,
    open_file_cost: int,
) -> list[Split]:
    """Greedy packing of (partition, bucket, slice) in order into splits of about target size.

    A slice costs at least ``open_file_cost`` so that thousands of tiny files do not
    end up in one split. Splits never mix partitions or buckets.
    """
    splits: list[Split] = []
    current: list[FileSlice] = []
    weight = 0
    key: tuple[tuple[Any, ...], int] | None = None

    def flush() -> None:
        if current and key is not None:
            splits.append(
                Split(
                    snapshot_id=snapshot_id,
                    partition=key[0],
                    bucket=key[1],
                    files=tuple(current),
                    row_count=sum(s.row_count for s in current),
                    size_bytes=sum(s.size_bytes for s in current),
                )
            )

    for partition, bucket, piece in slices:
        cost = max(piece.size_bytes, open_file_cost)
        if current and ((partition, bucket) != key or weight + cost > target_size):
            flush()
            current, weight = [], 0
        key = (partition, bucket)
        current.append(piece)
        weight += cost
    flush()
    return splits


class ReadUnit(NamedTuple):
    """Files read together (a merge section, or a key range of one), their packing
    weight and their rows before merging."""

    files: Sequence[FileSlice]
    weight: int
    rows: int
    range: KeyRange | None = None


def pack_sections(
    snapshot_id: int,
    files: Iterable[F],
    units: Callable[[list[F]], Iterable[ReadUnit]],
    target_size: int,
) -> list[Split]:
    """Each bucket's files cut into read ``units``, packed whole in order into splits of
    one bucket of about ``target_size``; buckets in partition and bucket order."""
    splits: list[Split] = []
    for (partition, bucket), members in sorted(
        by_bucket(files).items(), key=lambda kv: bucket_order(kv[0])
    ):
        current: list[ReadUnit] = []
        size = 0
        for unit in units(members):
            if current and size + unit.weight > target_size:
                splits.append(_section_split(snapshot_id, partition, bucket, current))
                current, size = [], 0
            current.append(unit)
            size += unit.weight
        if current:
            splits.append(_section_split(snapshot_id, partition, bucket, current))
    return splits


def _section_split(
    snapshot_id: int, partition: tuple[Any, ...], bucket: int, units: list[ReadUnit]
) -> Split:
    files = tuple(f for unit in units for f in unit.files)
    ranges = tuple(unit.range for unit in units)
    return Split(
        snapshot_id=snapshot_id,
        partition=partition,
        bucket=bucket,
        files=files,
        row_count=sum(unit.rows for unit in units),
        size_bytes=sum(f.size_bytes for f in files),
        sections=tuple(len(unit.files) for unit in units),
        ranges=ranges if any(r is not None for r in ranges) else (),
    )
