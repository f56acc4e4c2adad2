"""Wrong StreamingJob keywords fail when the job is made (or run() is called), with an
error naming the keyword, before any shard actor starts: no consumer is registered and
nothing reaches the sink. A max_plans_per_step of '8' or an include_row_kind of 'yes'
used to fail inside the shard actor; a max_plans_per_step of 0 processed nothing."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from committer import SCHEMA, batch

import raylake
from raylake.errors import InvalidArgumentError, StreamArgumentError
from raylake.streaming import StreamingJob

DICT = "a dict with string keys, or None"
BAD = [
    ({"max_plans_per_step": 0}, "max_plans_per_step must be an int >= 1, got int 0"),
    ({"max_plans_per_step": "8"}, "max_plans_per_step must be an int >= 1, got str '8'"),
    ({"include_row_kind": "yes"}, "include_row_kind must be True or False, got str 'yes'"),
    ({"columns": "id"}, "columns must be a list of column names (for one column: ['id'])"),
    ({"columns": 5}, "columns must be a list of column names, got int 5"),
    ({"max_restarts": "3"}, "max_restarts must be an int >= -1, got str '3'"),
    ({"max_restarts": -2}, "max_restarts must be an int >= -1, got int -2"),
    ({"actor_options": "num_cpus=1"}, f"actor_options must be {DICT}"),
    ({"storage_options": "anon"}, f"storage_options must be {DICT}"),
    ({"sink_storage_options": "anon"}, f"sink_storage_options must be {DICT}"),
]


def tables(warehouse: Path) -> tuple[raylake.Table, raylake.Table]:
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    source.write(batch(0, 10))
    return source, raylake.create_table(str(warehouse / "dst"), SCHEMA)


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_a_bad_keyword_is_refused_when_the_job_is_made(
    warehouse: Path, kwargs: dict[str, Any], message: str
) -> None:
    source, sink = tables(warehouse)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        StreamingJob(source.uri, lambda t: t, consumer_id="job", sink_uri=sink.uri, **kwargs)
    assert source.consumers() == [] and sink.latest_snapshot() is None


def test_the_tables_are_taken_as_open_table_takes_them(warehouse: Path) -> None:
    """A pathlib.Path (open_table's too) failed with AttributeError ('PosixPath' object has
    no attribute 'startswith'), and so did None or a number, where a named error is due."""
    source, sink = tables(warehouse)
    job = StreamingJob(
        warehouse / "src", lambda t: t, consumer_id="job", sink_uri=warehouse / "dst"
    )
    assert (job.spec.uri, job.spec.sink_uri) == (source.uri, sink.uri)
    with pytest.raises(InvalidArgumentError, match="uri must be a non-empty path or URL string"):
        StreamingJob(None, lambda t: t, consumer_id="job")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="sink_uri must be a non-empty path or URL"):
        StreamingJob(source.uri, lambda t: t, consumer_id="job", sink_uri=5)  # type: ignore[arg-type]


def test_a_sink_that_is_the_source_is_refused_when_the_job_is_made(warehouse: Path) -> None:
    """A job writing into the table it reads was made and ran: each of its commits was
    a new snapshot for it to process, its output committed again, without end. Spelled
    another way (relative, a trailing slash, a file:// URL, a link) it is the same table."""
    source, _ = tables(warehouse)
    (warehouse / "link").symlink_to(warehouse / "src")
    for sink_uri in [source.uri, f"{source.uri}/", f"file://{source.uri}", warehouse / "link"]:
        with pytest.raises(StreamArgumentError, match="sink_uri must be another table than"):
            StreamingJob(source.uri, lambda t: t, consumer_id="job", sink_uri=sink_uri)
    StreamingJob(source.uri, lambda t: t, consumer_id="job", sink_uri=warehouse / "dst")
    assert source.consumers() == []


@pytest.mark.ray
def test_run_refuses_bad_ray_actor_options_before_starting_the_shards(
    ray_cluster: Any, warehouse: Path
) -> None:
    """Ray's own ValueError came out ('The quantity of resource num_cpus cannot be
    negative', 'Invalid option keyword num_cpu for actors')."""
    source, sink = tables(warehouse)
    for options, message in [
        ({"num_cpus": -1}, "actor_options must be Ray actor options (The quantity of resource"),
        ({"num_cpu": 1}, "Invalid option keyword num_cpu for actors"),
        ({"max_restarts": 1}, "actor_options must be Ray actor options"),
    ]:
        job = StreamingJob(
            source.uri, lambda t: t, consumer_id="job", sink_uri=sink.uri, actor_options=options
        )
        with pytest.raises(StreamArgumentError, match=re.escape(message)):
            job.start()
        assert job.actors == []
    assert source.consumers() == [] and sink.latest_snapshot() is None


@pytest.mark.ray
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"until_snapshot": "1"}, "until_snapshot must be an int >= 0, got str '1'"),
        ({"until_snapshot": 1.0}, "until_snapshot must be an int >= 0, got float 1.0"),
        ({"duration": -1}, "duration must be a number of seconds >= 0 or None, got int -1"),
        ({"duration": "5"}, "duration must be a number of seconds >= 0 or None, got str '5'"),
    ],
)
def test_run_refuses_a_bad_bound_before_starting_the_shards(
    ray_cluster: Any, warehouse: Path, kwargs: dict[str, Any], message: str
) -> None:
    source, sink = tables(warehouse)
    job = StreamingJob(source.uri, lambda t: t, consumer_id="job", sink_uri=sink.uri)
    try:
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            job.run(**kwargs)
        assert job.actors == []
    finally:
        job.stop()
    assert source.consumers() == [] and sink.latest_snapshot() is None


@pytest.mark.ray
def test_a_function_ray_cannot_pickle_is_named_before_the_shards_start(
    ray_cluster: Any, warehouse: Path
) -> None:
    """Ray's TypeError ('Could not serialize the argument JobSpec(...)') named the job's
    spec, not fn."""
    source, sink = tables(warehouse)
    lock = threading.Lock()

    def fn(rows: Any) -> Any:
        with lock:
            return rows

    job = StreamingJob(source.uri, fn, consumer_id="job", sink_uri=sink.uri)
    try:
        with pytest.raises(StreamArgumentError, match="fn must be a function Ray can pickle"):
            job.run(until_snapshot=1)
        assert job.actors == []
    finally:
        job.stop()
    assert source.consumers() == [] and sink.latest_snapshot() is None
