"""Which part of a table one stream reader follows: a shard of the buckets, or a list.

Primary-key tables and Paimon's bucketed append tables are sharded by bucket (bucket
``b`` belongs to shard ``b % n``), so one shard sees every change of a key, in order.
A raylake append table (its files all lie in bucket 0, whatever its ``buckets``) and a
Paimon table without buckets are sharded by data file instead (a stable hash of the
file's path), since their rows have no key to keep together.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raylake.errors import StreamArgumentError

if TYPE_CHECKING:
    from raylake.streaming.options import StreamOptions
    from raylake.table.kind import TableKind


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
        """The part that stream options name (checked by StreamOptions: one of them)."""
        from raylake.streaming.options import StreamOptions

        return cls.of_options(
            StreamOptions(shard=shard, buckets=buckets, bucket_filter=bucket_filter)  # type: ignore[arg-type]
        )

    @classmethod
    def of_options(cls, options: StreamOptions) -> ShardSpec:
        if options.shard is not None:
            return cls(*options.shard)
        if options.buckets is not None:
            return cls(buckets=options.buckets)
        if options.bucket_filter is not None:
            return cls(bucket_filter=options.bucket_filter)
        return cls()

    def within(self, kind: TableKind, uri: str) -> ShardSpec:
        """This spec, once its bucket list is checked against the table's bucket count: a
        bucket the table has no files in would be read as nothing, without a word."""
        count = kind.bucket_count
        if self.buckets is None or count is None:
            return self
        beyond = sorted(b for b in self.buckets if b >= count)
        if beyond:
            raise StreamArgumentError(
                "buckets",
                sorted(self.buckets),
                f"bucket numbers below {count}: {uri} has {count} bucket(s), 0 to "
                f"{count - 1}, so bucket {beyond[0]} holds none of its rows",
            )
        return self

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
