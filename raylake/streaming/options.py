"""How a stream reads, as one frozen value checked once: :class:`StreamOptions`.

Every layer that opens a stream (``Table.stream``, ``StreamReader``, ``read_lake_stream``,
a ``StreamingJob``'s shards, the continual-training loaders) takes the same options and
hands this value down, rather than ``**options`` dicts that each layer checked, or did
not. The defaults are the same for every table format (raylake's, Paimon's): the reader
is the same. A ``StreamingJob`` starts from :data:`JOB_DEFAULTS` (docs/streaming.md), and
hands its shards a :class:`JobSpec`, whose defaults are the job's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from numbers import Integral
from typing import Any, Literal

import pyarrow as pa

from raylake.arguments import (
    check_callable,
    check_choice,
    check_exclusive,
    check_flag,
    check_integer,
    check_keywords,
    check_names,
    check_optional_count,
    check_seconds,
    integer,
    refuse_unknown_keywords,
)
from raylake.errors import ConsumerArgumentError, StreamArgumentError
from raylake.expr import Expr
from raylake.io.credentials import StorageOptions
from raylake.table.args import datetime_millis

OnOverwrite = Literal["refresh", "skip", "fail"]
ON_OVERWRITE: tuple[str, ...] = ("refresh", "skip", "fail")
START_NAMES = ("latest", "earliest", "latest-new")
DEFAULT_CATCH_UP_AFTER = 32
# A week: longer waits between polls are no stream (and time.sleep refuses infinity).
MAX_POLL_INTERVAL = 7 * 24 * 3600.0


@dataclass(frozen=True)
class StreamPosition:
    """Where a reader stands: the snapshot it reads next, and whether it reads that one
    whole (a start) or as a change. ``reader.position``; ``start=`` takes it back, so a
    trainer's checkpoint can hold a stream position without a consumer file."""

    next_snapshot_id: int
    full: bool = False

    def __post_init__(self) -> None:
        # A float or string id would be waited for without end (no snapshot has it), and 0
        # or less reported as expired; a truthy non-bool ``full`` read a change as a state.
        next_id = self.next_snapshot_id
        if not isinstance(next_id, Integral) or isinstance(next_id, bool) or next_id < 1:
            raise StreamArgumentError(
                "position", self, "a stream position (next_snapshot_id an int >= 1)"
            )
        check_flag("full", self.full, StreamArgumentError)
        object.__setattr__(self, "next_snapshot_id", int(next_id))  # numpy's ints too

    def to_dict(self) -> dict[str, Any]:
        return {"next_snapshot_id": self.next_snapshot_id, "full": self.full}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamPosition:
        try:
            next_id, full = data["next_snapshot_id"], data["full"]
            if isinstance(next_id, str):  # as a text format may keep it
                next_id = int(next_id)
            return cls(next_id, full)
        except (KeyError, TypeError, ValueError) as exc:
            raise StreamArgumentError("position", data, f"a stream position ({exc})") from None


StartPosition = Literal["latest", "earliest", "latest-new"] | int | datetime | StreamPosition


@dataclass(frozen=True)
class StreamOptions:
    """The options of a stream but its consumer id, checked when made (a wrong one raises
    :class:`~raylake.errors.StreamArgumentError`, an InvalidArgumentError).

    ``start``: ``"latest"`` (the current state, then its changes), ``"earliest"``,
    ``"latest-new"`` (changes after now only), a snapshot id, a datetime or a
    :class:`StreamPosition`. ``poll_interval``: seconds between looks for a new
    snapshot. ``shard=(i, n)``, ``buckets`` or ``bucket_filter``: which part of the
    table (one of them). ``include_row_kind``: a ``_rl_kind`` column. ``on_overwrite``:
    what an OVERWRITE snapshot gives (``"refresh"``: its whole state, ``"skip"``,
    ``"fail"``). ``columns``, ``filter``: what is read. ``catch_up_after``: a reader this
    many snapshots behind reads them as one plan (None: never). ``prefetch``: read the
    next snapshot file while the caller handles a plan (a thread).
    """

    start: StartPosition = "latest"
    poll_interval: float = 1.0
    shard: tuple[int, int] | None = None
    buckets: frozenset[int] | None = None
    bucket_filter: Callable[[int], bool] | None = None
    include_row_kind: bool = False
    on_overwrite: OnOverwrite = "refresh"
    columns: tuple[str, ...] | None = None
    filter: str | Expr | None = None
    catch_up_after: int | None = DEFAULT_CATCH_UP_AFTER
    prefetch: bool = True

    def __post_init__(self) -> None:
        error = StreamArgumentError
        object.__setattr__(self, "start", _check_start(self.start))
        seconds = check_seconds("poll_interval", self.poll_interval, error, optional=False)
        if not seconds < MAX_POLL_INTERVAL:  # type: ignore[operator]  # sleep's OverflowError
            raise error(
                "poll_interval", self.poll_interval, "a number of seconds >= 0, below a week"
            )
        object.__setattr__(self, "poll_interval", float(seconds))  # type: ignore[arg-type]
        check_exclusive(
            {"shard": self.shard, "buckets": self.buckets, "bucket_filter": self.bucket_filter},
            error,
        )
        if self.shard is not None:
            object.__setattr__(self, "shard", _check_shard(self.shard))
        if self.buckets is not None:
            object.__setattr__(self, "buckets", _check_buckets(self.buckets))
        check_callable("bucket_filter", self.bucket_filter, error)
        check_flag("include_row_kind", self.include_row_kind, error)
        check_choice("on_overwrite", self.on_overwrite, ON_OVERWRITE, error)
        if self.columns is not None:
            object.__setattr__(self, "columns", check_names("columns", self.columns, error))
        if self.filter is not None and not isinstance(self.filter, str | Expr):
            raise error("filter", self.filter, "a filter string, a raylake expression or None")
        catch_up_after = check_optional_count(
            "catch_up_after", self.catch_up_after, 1, error, "None (never)"
        )
        object.__setattr__(self, "catch_up_after", catch_up_after)
        check_flag("prefetch", self.prefetch, error)

    @classmethod
    def of(cls, options: StreamOptions | None = None, **keywords: Any) -> StreamOptions:
        """``options`` (default: the defaults) with ``keywords`` replaced; an unknown
        keyword is refused with the closest option name."""
        if options is not None and not isinstance(options, StreamOptions):
            raise StreamArgumentError("options", options, "a StreamOptions or None")
        check_keywords("stream", keywords, NAMES)
        return dataclasses.replace(options or cls(), **keywords)

    def replace(self, **keywords: Any) -> StreamOptions:
        """A copy with ``keywords`` replaced (checked again)."""
        return StreamOptions.of(self, **keywords)


NAMES = frozenset(f.name for f in dataclasses.fields(StreamOptions))
# Python's TypeError for a misspelled keyword names no option: refused with the closest.
StreamOptions.__init__ = refuse_unknown_keywords(StreamOptions.__init__)  # type: ignore[method-assign]
StreamPosition.__init__ = refuse_unknown_keywords(StreamPosition.__init__)  # type: ignore[method-assign]


def next_snapshot_arg(value: object) -> int:
    """A reader's ``next_snapshot_id`` to seek to or record (an int >= 1, numpy's too)."""
    return check_integer("next_snapshot_id", value, 1, ConsumerArgumentError)


def _check_start(start: Any) -> StartPosition:
    """``start`` checked, a snapshot id as a Python int (numpy's too: an id read from a
    DataFrame, as time travel takes it)."""
    if isinstance(start, datetime):
        datetime_millis(start, "start", StreamArgumentError)  # a naive year-1 time, say
        return start
    if isinstance(start, StreamPosition):
        return start
    expected = f"one of {list(START_NAMES)}, a snapshot id (an int >= 1) or a datetime"
    if isinstance(start, str):
        if start not in START_NAMES:
            raise StreamArgumentError("start", start, expected)
        return start  # type: ignore[return-value]
    snapshot_id = integer(start)
    if snapshot_id is None or snapshot_id < 1:
        raise StreamArgumentError("start", start, expected)
    return snapshot_id


def _check_shard(shard: object) -> tuple[int, int]:
    expected = "a pair (index, count) of ints with 0 <= index < count"
    if not isinstance(shard, tuple | list) or len(shard) != 2:
        raise StreamArgumentError("shard", shard, expected)
    first, second = integer(shard[0]), integer(shard[1])
    if first is None or second is None or not 0 <= first < second:
        raise StreamArgumentError("shard", shard, expected)
    return first, second


def _check_buckets(buckets: Iterable[int]) -> frozenset[int]:
    chosen = [integer(b) for b in buckets] if isinstance(buckets, Iterable) else None
    if not chosen or not all(b is not None and b >= 0 for b in chosen):
        raise StreamArgumentError("buckets", buckets, "a non-empty list of ints >= 0")
    return frozenset(chosen)  # type: ignore[arg-type]


# A StreamingJob reads everything once, into a sink: it starts at the earliest snapshot,
# looks often, and stops at an OVERWRITE rather than let one shard of several refresh.
JOB_DEFAULTS = StreamOptions(start="earliest", poll_interval=0.2, on_overwrite="fail")

# The function a StreamingJob applies to each batch of a plan (as a pyarrow Table).
BatchFn = Callable[[pa.Table], Any]


@dataclass(frozen=True)
class JobSpec:
    """What every shard of a ``StreamingJob`` needs; picklable (the function is pickled by
    Ray). Its defaults are the job's (``StreamingJob`` takes them from here)."""

    uri: str
    fn: BatchFn
    consumer_id: str
    num_shards: int
    sink_uri: str | None = None
    # How the shards read the source (their shard and prefetch are set per shard).
    stream: StreamOptions = JOB_DEFAULTS
    storage_options: StorageOptions | None = field(default=None, repr=False)
    sink_storage_options: StorageOptions | None = field(default=None, repr=False)
    max_plans_per_step: int = 8
    # "merge": columns of fn's output that the sink lacks are added with its commit.
    schema_mode: str = "strict"
    # The source schema the stream's columns and filter name (the driver's, at start): a
    # shard restarted after a rename takes them by field id under the new names.
    source_schema_id: int | None = None

    def shard_consumer(self, shard: int) -> str:
        return f"{self.consumer_id}.shard-{shard}-of-{self.num_shards}"

    def reader_options(self, shard: int) -> StreamOptions:
        """The stream options of a shard's reader: the same for the actor's reader and
        for the driver's check of it (job_check.py)."""
        # A step reads what is there; the actor holds no threads.
        return self.stream.replace(shard=(shard, self.num_shards), prefetch=False)
