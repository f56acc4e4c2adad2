"""The checks a StreamingJob makes on the driver before any shard actor starts (issue 15).

A shard actor that cannot start (a missing table, a bad filter, an expired consumer)
fails at its first call, after the actors were placed: each check an actor would fail
at start happens here first, with the raylake error a caller can catch, before any
actor is made. Nothing here writes: no consumer is registered, nothing is committed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from raylake.arguments import check_choice
from raylake.errors import ConsumerError, StreamArgumentError, StreamPositionExpiredError
from raylake.format.consumer import STREAM_MODE
from raylake.io.fileio import location_key
from raylake.streaming.options import ON_OVERWRITE, JobSpec, StreamPosition
from raylake.table import Table, open_table
from raylake.table.conform import check_schema
from raylake.table.evolve import with_new_columns
from raylake.table.source import check_writable


def check_job(
    spec: JobSpec,
    *,
    output_schema: pa.Schema | None,
    storage_options: Mapping[str, Any] | None,
    sink_storage_options: Mapping[str, Any] | None,
) -> int:
    """Raise the error a shard would raise at start, or refuse what would go wrong later;
    the id of the source schema the job's columns and filter were checked under.

    The options are the caller's, secrets included: the driver opens the tables with
    them, while the shards get theirs through their runtime environment.
    """
    source = open_table(spec.uri, storage_options=storage_options)
    if spec.sink_uri is not None:
        sink = open_table(spec.sink_uri, storage_options=sink_storage_options)
        # A Paimon sink: every shard failed at its first commit, its consumer registered.
        check_writable(sink, "StreamingJob writing to sink_uri")
        if output_schema is not None:
            _check_output_schema(sink, sink.kind.input_schema(output_schema), spec)
    elif output_schema is not None:
        raise StreamArgumentError(
            "output_schema",
            output_schema,
            "None without sink_uri= (it describes what fn writes to the sink)",
        )
    _check_shard_count(source, spec)
    for shard in range(spec.num_shards):
        _check_shard(source, spec, shard)
    return source.table_schema.schema_id


def _check_output_schema(sink: Table, output_schema: pa.Schema, spec: JobSpec) -> None:
    """``fn``'s declared output against the sink: the columns and types the sink takes,
    or under ``schema_mode="merge"`` the columns the sink has (its new ones must be ones
    a table can add), planned as a shard's commit plans them and not committed."""
    if spec.schema_mode == "merge":
        with_new_columns(sink, output_schema)
    else:
        check_schema(output_schema, sink.schema)


def _check_shard_count(source: Table, spec: JobSpec) -> None:
    """Shards of another shard count would start over from ``start`` beside the old
    consumers: rows the old shards consumed would be processed again (or skipped)."""
    pattern = re.compile(rf"^{re.escape(spec.consumer_id)}\.shard-\d+-of-(\d+)$")
    other = sorted(
        consumer_id
        for consumer_id in source.source.consumer_ids()
        if (match := pattern.match(consumer_id)) and int(match.group(1)) != spec.num_shards
    )
    if other:
        raise ConsumerError(
            f"consumer {spec.consumer_id!r} of {source.uri} has progress under another shard "
            f"count ({', '.join(other)}), but this job has num_shards={spec.num_shards}: its "
            f"shards would start over from start={spec.stream.start!r} and repeat what those "
            "consumed. Run with the shard count of those consumers, or delete them "
            "(Table.delete_consumer) to start over on purpose",
            consumer_id=spec.consumer_id,
        )


def _check_shard(source: Table, spec: JobSpec, shard: int) -> None:
    """Open the shard's reader as its actor will, without registering its consumer."""
    consumer_id = spec.shard_consumer(shard)
    options = spec.reader_options(shard)
    progress = source.source.consumer(consumer_id)
    if progress is not None:
        earliest = source.source.earliest_id()
        if earliest is not None and progress.next_snapshot_id < earliest:
            raise StreamPositionExpiredError(
                progress.next_snapshot_id, earliest, source.uri, consumer_id
            )
        full = progress.properties.get(STREAM_MODE) == "full"
        options = options.replace(start=StreamPosition(progress.next_snapshot_id, full))
    source.stream(consumer_id=None, options=options).close()


def check_on_overwrite(on_overwrite: Any, num_shards: int, sink_uri: str | None) -> None:
    """``on_overwrite`` is one of ON_OVERWRITE, and 'refresh' only where one shard writes."""
    check_choice("on_overwrite", on_overwrite, ON_OVERWRITE, StreamArgumentError)
    if on_overwrite == "refresh" and num_shards > 1 and sink_uri is not None:
        raise StreamArgumentError(
            "on_overwrite",
            on_overwrite,
            "'skip' or 'fail' where several shards write one sink (a 'refresh' overwrites "
            "the sink, which one shard cannot do for the others; or use num_shards=1)",
        )


def check_sink_not_source(uri: str, sink_uri: str | None) -> None:
    """A job whose sink is its source reads its own output again: each commit is a new
    snapshot to process, whose output is committed again, without end."""
    if sink_uri is not None and location_key(sink_uri) == location_key(uri):
        raise StreamArgumentError(
            "sink_uri",
            sink_uri,
            "another table than the job's source (uri): a job writing into the table it "
            "reads would read its own output again, without end",
        )
