"""Which part of a table one stream reader follows: a shard of the buckets, or a list.

Primary-key tables and bucketed append tables are sharded by bucket (bucket ``b``
belongs to shard ``b % n``), so one shard sees every change of a key, in order.
An append table with one bucket is sharded by data file instead (a stable hash of
the file's path), since its rows have no key to keep together.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from raylake.errors import StreamError


@dataclass(frozen=True)
class ShardSpec:
    """A shard ``index`` of ``count``, or an explicit set of buckets, or a predicate."""

    index: int = 0
    count: int = 1
    buckets: frozenset[int] | None = None
    bucket_filter: Callable[[int], bool] | None = None

    @classmethod
    def of(
        cls,
        shard: tuple[int, int] | None = None,
        buckets: Iterable[int] | None = None,
        bucket_filter: Callable[[int], bool] | None = None,
    ) -> ShardSpec:
        given = [name for name, v in (("shard", shard), ("buckets", buckets),
                                      ("bucket_filter", bucket_filter)) if v is not None]  # fmt: skip
        if len(given) > 1:
            raise StreamError(f"give one of shard, buckets and bucket_filter, not {given}")
        if shard is not None:
            return cls(*_check_shard(shard))
        if buckets is not None:
            chosen = list(buckets)
            if not chosen or not all(isinstance(b, int) and b >= 0 for b in chosen):
                raise StreamError(f"buckets must be a non-empty list of ints >= 0, got {chosen!r}")
            return cls(buckets=frozenset(chosen))
        if bucket_filter is not None:
            if not callable(bucket_filter):
                raise StreamError(f"bucket_filter must be callable, got {bucket_filter!r}")
            return cls(bucket_filter=bucket_filter)
        return cls()

    @property
    def is_everything(self) -> bool:
        return self.count == 1 and self.buckets is None and self.bucket_filter is None

    def takes_bucket(self, bucket: int) -> bool:
        if self.buckets is not None:
            return bucket in self.buckets
        if self.bucket_filter is not None:
            return bool(self.bucket_filter(bucket))
        return bucket % self.count == self.index

    def takes_file(self, path: str, bucket: int, by_file: bool) -> bool:
        """Whether this shard reads a data file (``by_file``: an unbucketed append table)."""
        if self.is_everything:
            return True
        if by_file and self.buckets is None and self.bucket_filter is None:
            return zlib.crc32(path.encode()) % self.count == self.index
        return self.takes_bucket(bucket)

    def describe(self) -> str:
        if self.buckets is not None:
            return f"buckets {sorted(self.buckets)}"
        if self.bucket_filter is not None:
            return "a bucket filter"
        return f"shard {self.index} of {self.count}"


def _check_shard(shard: object) -> tuple[int, int]:
    if not isinstance(shard, tuple | list) or len(shard) != 2:
        raise StreamError(f"shard must be a pair (index, count) of ints, got {shard!r}")
    first, second = shard
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (first, second)):
        raise StreamError(f"shard must be a pair (index, count) of ints, got {shard!r}")
    if second < 1 or not 0 <= first < second:
        raise StreamError(f"shard ({first}, {second}) is out of range: need 0 <= index < count")
    return int(first), int(second)
