"""Wrong keywords of read_lake / write_lake / read_lake_stream fail on the driver with an
error naming the keyword, before any Ray task runs, and a refused write leaves the table
as it was (no data file, no snapshot, no table created)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")

import raylake  # noqa: E402
from raylake import LakeDatasource, read_lake, write_lake  # noqa: E402
from raylake.errors import InvalidArgumentError  # noqa: E402
from raylake.streaming import read_lake_stream  # noqa: E402

pytestmark = pytest.mark.ray

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "x": [1.0, 2.0, 3.0]})
DICT = "a dict with string keys, or None"


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def table(tmp_path: Path) -> Path:
    raylake.from_pandas(ROWS.to_pandas(), str(tmp_path / "t"))
    return tmp_path / "t"


READS = [
    ({"columns": "id"}, "columns must be a list of column names (for one column: ['id'])"),
    ({"columns": 5}, "columns must be a list of column names, got int 5"),
    ({"override_num_blocks": 0}, "override_num_blocks must be an int >= 1 or None, got int 0"),
    ({"override_num_blocks": 1.5}, "override_num_blocks must be an int >= 1 or None"),
    ({"override_num_blocks": "2"}, "override_num_blocks must be an int >= 1 or None"),
    ({"ray_remote_args": "num_cpus=1"}, f"ray_remote_args must be {DICT}"),
    ({"storage_options": "anon"}, f"storage_options must be {DICT}, got str 'anon'"),
    ({"storage_options": [("anon", True)]}, f"storage_options must be {DICT}"),
    # Ray's own options, checked when read_lake is called, not when the read runs.
    ({"concurrency": 0}, "concurrency must be an int >= 1 or None, got int 0"),
    ({"concurrency": "2"}, "concurrency must be an int >= 1 or None, got str '2'"),
    ({"num_cpus": -1}, "num_cpus must be a value Ray takes (The quantity of resource num_cpus"),
    ({"num_gpus": "1"}, "num_gpus must be a value Ray takes (The type of keyword 'num_gpus'"),
    ({"memory": -5}, "memory must be a value Ray takes"),
    ({"ray_remote_args": {"num_cpus": -1}}, "ray_remote_args must be Ray task options (The"),
    ({"ray_remote_args": {"num_cpu": 1}}, "Invalid option keyword num_cpu for remote functions"),
    # Ray's old name of override_num_blocks: difflib's closest name was max_calls.
    ({"parallelism": 4}, "unknown keyword 'parallelism'; did you mean 'override_num_blocks'?"),
]


@pytest.mark.parametrize(("kwargs", "message"), READS)
def test_read_lake_names_a_bad_keyword(
    ray_cluster: Any, table: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        read_lake(str(table), **kwargs)


def test_a_datasource_refuses_one_column_as_a_string(table: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape("(for one column: ['id'])")):
        LakeDatasource(str(table), columns="id")  # it used to read columns 'i' and 'd'


WRITES = [
    ({"create_if_missing": "no"}, "create_if_missing must be True or False, got str 'no'"),
    ({"concurrency": 0}, "concurrency must be an int >= 1 or None, got int 0"),
    ({"concurrency": "2"}, "concurrency must be an int >= 1 or None, got str '2'"),
    ({"commit_properties": "job=1"}, f"commit_properties must be {DICT}"),
    ({"commit_properties": {"run": 1}}, "commit_properties must be a dict of strings to str"),
    ({"partition_by": "id"}, "partition_by must be a list of column names (for one column"),
    ({"primary_key": "id"}, "primary_key must be a list of column names (for one column"),
    ({"storage_options": "anon"}, f"storage_options must be {DICT}"),
    ({"ray_remote_args": {"num_cpus": -1}}, "ray_remote_args must be Ray task options (The"),
    ({"ray_remote_args": {"num_cpu": 1}}, "Invalid option keyword num_cpu for remote functions"),
]


@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
@pytest.mark.parametrize(("kwargs", "message"), WRITES)
def test_write_lake_names_a_bad_keyword_and_writes_nothing(
    ray_cluster: Any,
    table: Path,
    kwargs: dict[str, Any],
    message: str,
    existing: bool,
) -> None:
    target = table if existing else table.parent / "new"
    before = files(table)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        write_lake(ray.data.from_arrow(ROWS), str(target), **kwargs)
    assert files(table) == before
    assert not (table.parent / "new").exists()


@pytest.mark.parametrize("data", [ROWS, ROWS.to_pandas()], ids=["arrow", "pandas"])
def test_write_lake_needs_a_ray_dataset(table: Path, data: Any) -> None:
    before = files(table)
    with pytest.raises(InvalidArgumentError, match=re.escape("ds must be a ray.data.Dataset")):
        write_lake(data, str(table))
    assert files(table) == before


STREAMS = [
    ({"override_num_blocks": 0}, "override_num_blocks must be an int >= 1 or None"),
    ({"ray_remote_args": "num_cpus=1"}, f"ray_remote_args must be {DICT}"),
    ({"storage_options": "anon"}, f"storage_options must be {DICT}"),
]


@pytest.mark.parametrize(("kwargs", "message"), STREAMS)
def test_read_lake_stream_names_a_bad_keyword_before_registering_its_consumer(
    ray_cluster: Any, table: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        stream = read_lake_stream(str(table), consumer_id="etl", **kwargs)
        next(iter(stream))  # the zero block count used to be taken
    assert raylake.open_table(str(table)).consumers() == []
