"""Streaming: follow a table's new snapshots with consumer progress (docs/streaming.md).

    reader = table.stream(consumer_id="etl", start="earliest")
    for plan in reader:
        process(plan.to_arrow())
        reader.checkpoint()

``StreamingJob`` runs one Ray actor per shard, exactly once into a sink table;
``read_lake_stream`` yields a ``ray.data.Dataset`` per new snapshot.
"""

from __future__ import annotations

from typing import Any

from raylake.streaming.options import StreamOptions, StreamPosition
from raylake.streaming.plan import StreamPlan
from raylake.streaming.reader import StreamReader
from raylake.streaming.shard import ShardSpec
from raylake.streaming.splits import ROW_KIND, ChangelogSplit, DiffSplit, InsertSplit

__all__ = [
    "ROW_KIND",
    "ChangelogSplit",
    "DiffSplit",
    "InsertSplit",
    "ShardSpec",
    "StreamOptions",
    "StreamPlan",
    "StreamPosition",
    "StreamReader",
    "StreamingJob",
    "read_lake_stream",
]


def __getattr__(name: str) -> Any:
    # The Ray parts import Ray: only when asked for.
    if name == "StreamingJob":
        from raylake.streaming.job import StreamingJob

        return StreamingJob
    if name == "read_lake_stream":
        import raylake.datasource  # noqa: F401 - without Ray, names the extra to install
        from raylake.streaming.ray_source import read_lake_stream

        return read_lake_stream
    raise AttributeError(f"module 'raylake.streaming' has no attribute {name!r}")
