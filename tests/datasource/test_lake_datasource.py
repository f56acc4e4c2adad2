"""LakeDatasource on a real local Ray cluster: reads equal ``Table.to_arrow`` for the same snapshot."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")
from lake_ray_util import DAYS, FlakyLakeDatasource, ds_to_arrow, make_events, rows  # noqa: E402
from ray import cloudpickle  # noqa: E402
from ray.data.datasource import ReadTask  # noqa: E402
from ray.data.expressions import col as rcol  # noqa: E402

import raylake  # noqa: E402
from raylake import LakeDatasource, read_lake  # noqa: E402
from raylake.datasource._ray_compat import detected_read_parallelism  # noqa: E402
from raylake.datasource.api import read_task_options, whole_task_blocks  # noqa: E402
from raylake.datasource.datasource import contiguous_groups, pack_splits  # noqa: E402
from raylake.errors import FilterError, UnknownColumnError  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    """Read-only for every test of this module; tests that change a table make their own."""
    return make_events(tmp_path_factory.mktemp("events") / "events")


# -- reads equal Table.to_arrow ----------------------------------------------------------


@pytest.mark.parametrize("blocks", [None, 1, 3, 50])
def test_full_read_equals_to_arrow(ray_cluster: Any, events: raylake.Table, blocks: Any) -> None:
    ds = read_lake(events.uri, override_num_blocks=blocks)
    got = ds_to_arrow(ds)
    assert got.schema == events.schema
    assert rows(got) == rows(events.to_arrow())


def test_columns_and_string_filter(ray_cluster: Any, events: raylake.Table) -> None:
    text = "dt = '2024-01-02' and label = 1"
    got = ds_to_arrow(read_lake(events.uri, columns=["id", "x"], filter=text))
    assert got.schema.names == ["id", "x"]
    assert rows(got) == rows(events.to_arrow(columns=["id", "x"], filter=text))


def test_ray_expression_as_filter_argument(ray_cluster: Any, events: raylake.Table) -> None:
    expr = (rcol("label") == 1) & rcol("tag").is_in(["a", "b"])
    got = ds_to_arrow(read_lake(events.uri, filter=expr))
    assert rows(got) == rows(events.to_arrow(filter="label = 1 and tag in ('a', 'b')"))


def test_pushdown_through_ray_api(ray_cluster: Any, events: raylake.Table) -> None:
    ds = (
        ray.data.read_datasource(LakeDatasource(events.uri))
        .select_columns(["id", "label", "dt"])
        .filter(expr=(rcol("label") == 1) & (rcol("dt") == DAYS[2]))
    )
    got = ds_to_arrow(ds)
    assert got.schema.names == ["id", "label", "dt"]
    expected = events.to_arrow(
        columns=["id", "label", "dt"], filter=f"label = 1 and dt = '{DAYS[2]}'"
    )
    assert rows(got) == rows(expected)


def test_pushed_filter_on_a_column_that_is_not_selected(
    ray_cluster: Any, events: raylake.Table
) -> None:
    ds = ray.data.read_datasource(LakeDatasource(events.uri)).filter(expr=rcol("label") == 2)
    got = ds_to_arrow(ds.select_columns(["id"]))
    assert rows(got) == rows(events.to_arrow(columns=["id"], filter="label = 2"))


def test_unconvertible_conjunct_is_applied_in_the_read(
    ray_cluster: Any, events: raylake.Table
) -> None:
    """``id % 7 == 0`` has no raylake form: it stays exact, evaluated on each batch."""
    ds = (
        ray.data.read_datasource(LakeDatasource(events.uri))
        .filter(expr=(rcol("id") % 7 == 0) & (rcol("dt") == DAYS[0]))
        .select_columns(["id"])
    )
    expected = [{"id": i} for i in range(0, 2_000, 7)]
    assert rows(ds_to_arrow(ds)) == expected


@pytest.mark.parametrize("blocks", [1, 4])
def test_time_travel(ray_cluster: Any, events: raylake.Table, blocks: int) -> None:
    first = events.snapshots()[0]
    by_id = ds_to_arrow(read_lake(events.uri, snapshot_id=first.id, override_num_blocks=blocks))
    assert rows(by_id) == rows(events.to_arrow(snapshot_id=first.id))
    second = events.snapshots()[1]
    by_time = ds_to_arrow(read_lake(events.uri, as_of=second.time_millis))
    assert rows(by_time) == rows(events.to_arrow(snapshot_id=second.id))


def test_snapshot_is_pinned_when_the_datasource_is_created(
    ray_cluster: Any, tmp_path: Path
) -> None:
    tbl = make_events(tmp_path / "t", rows_per_day=100)
    source = LakeDatasource(tbl.uri)
    tbl.write(make_events(tmp_path / "other", rows_per_day=10).to_arrow())
    got = ds_to_arrow(ray.data.read_datasource(source))
    assert got.num_rows == 300
    assert source.snapshot_id == 3


def test_count_and_empty_projection(ray_cluster: Any, events: raylake.Table) -> None:
    assert read_lake(events.uri).count() == 6_000
    assert read_lake(events.uri, filter="label = 0").count() == events.count(filter="label = 0")
    assert read_lake(events.uri).filter(expr=rcol("x") > 0.5).count() == events.count(
        filter="x > 0.5"
    )


def test_read_task_options_are_named_parameters_without_a_deprecation_warning(
    ray_cluster: Any, events: raylake.Table
) -> None:
    """Ray 2.60 deprecates ``read_datasource(ray_remote_args=...)`` and attributes the
    warning to its caller, raylake (an error in the tests): options it names travel as
    named parameters, only the rest as ``ray_remote_args`` (issue 15)."""
    assert read_task_options({"num_cpus": 0.5, "scheduling_strategy": "SPREAD"}) == {
        "num_cpus": 0.5,
        "ray_remote_args": {"scheduling_strategy": "SPREAD"},
    }
    assert read_task_options(None) == {}
    ds = read_lake(events.uri, ray_remote_args={"num_cpus": 0.5, "memory": 10_000_000})
    assert ds.count() == events.count()


def test_table_without_snapshots_reads_nothing(ray_cluster: Any, tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "empty"), pa.schema([("a", pa.int64())]))
    ds = read_lake(tbl.uri)
    assert ds.schema().names == ["a"]
    assert ds.count() == 0
    (task,) = LakeDatasource(tbl.uri).get_read_tasks(4)
    assert task.metadata.num_rows == 0


def test_filter_that_matches_nothing_keeps_the_schema(
    ray_cluster: Any, events: raylake.Table
) -> None:
    ds = read_lake(events.uri, filter="id < 0", columns=["id", "tag"])
    assert ds.schema().names == ["id", "tag"]
    assert ds.count() == 0


# -- planning: tasks, metadata, sizes --------------------------------------------------


def test_read_tasks_carry_exact_metadata(events: raylake.Table) -> None:
    tasks = LakeDatasource(events.uri).get_read_tasks(3)
    assert 1 < len(tasks) <= 3
    assert sum(t.metadata.num_rows for t in tasks) == 6_000
    sizes = [t.metadata.size_bytes for t in tasks]
    assert all(s > 0 for s in sizes)
    assert max(sizes) <= 2 * min(sizes), "tasks are balanced by bytes"
    files = [f for t in tasks for f in t.metadata.input_files]
    assert len(files) == len(set(files)) and all(os.path.isfile(f) for f in files)
    assert all(t.schema == events.schema for t in tasks)


def test_row_counts_are_unknown_when_rows_are_filtered(events: raylake.Table) -> None:
    tasks = LakeDatasource(events.uri, filter="label = 1").get_read_tasks(2)
    assert all(t.metadata.num_rows is None for t in tasks)


def test_never_more_tasks_than_parallelism(events: raylake.Table) -> None:
    source = LakeDatasource(events.uri)
    splits = len(source.get_read_tasks(10_000))
    assert splits > 3
    for parallelism in (1, 2, 3, splits + 5):
        assert len(source.get_read_tasks(parallelism)) == min(parallelism, splits)


@pytest.mark.parametrize("blocks", [None, 1, 2, 3, 4, 6])
def test_preserve_order_reads_in_table_order(
    ray_cluster: Any, tmp_path: Path, preserve_order: None, blocks: int | None
) -> None:
    """Under preserve_order each task reads a contiguous run of the plan: an append log
    read in order, then upserted, keeps the last version of each key."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    options = {"read.split.target-size": 1, "read.split.open-file-cost": 1}  # a split a file
    tbl = raylake.create_table(str(tmp_path / "log"), schema, options=options)
    for version in range(6):  # later commits get larger files, so LPT would interleave
        n = 10 * (version + 1)
        tbl.write(pa.table({"id": pa.array(range(n), pa.int64()), "v": [version] * n}))
    got = ds_to_arrow(read_lake(tbl.uri, override_num_blocks=blocks))
    assert got == tbl.to_arrow()
    versions = got.column("v").to_pylist()
    assert versions == sorted(versions)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_contiguous_groups_are_the_most_balanced_runs(count: int) -> None:
    weights = [5, 1, 1, 9, 2, 2, 2, 8, 1]
    bounds = contiguous_groups(weights, count)
    runs = list(itertools.pairwise(bounds))
    assert bounds[0] == 0 and bounds[-1] == len(weights)
    assert len(runs) == count and all(a < b for a, b in runs)
    cuts = itertools.combinations(range(1, len(weights)), count - 1)
    best = min(
        max(sum(weights[a:b]) for a, b in itertools.pairwise([0, *c, len(weights)])) for c in cuts
    )
    assert max(sum(weights[a:b]) for a, b in runs) == best


def test_without_preserve_order_tasks_are_balanced_across_the_plan() -> None:
    """Ray's default order: largest first onto the lightest task, which balances skewed
    splits better than any contiguous cut."""
    weights = [10, 10, 1, 1]
    assert pack_splits(weights, 2, weight=lambda w: w) == [[10, 1], [10, 1]]
    assert pack_splits(weights, 2, weight=lambda w: w, in_order=True) == [[10], [10, 1, 1]]


def test_read_task_pickles_small(events: raylake.Table) -> None:
    """The read function holds the splits and a ReadContext, not the datasource or a table."""
    source = LakeDatasource(events.uri, filter="label = 1").apply_projection({"id": "id"})
    for task in source.get_read_tasks(2):
        payload = cloudpickle.dumps(task)
        assert len(payload) < 20_000
        assert b"LakeDatasource" not in payload
        assert b"_plan_cache" not in payload


@pytest.mark.parametrize("columns", [None, ["id", "x"], ["tag"]])
def test_estimate_is_within_2x_of_the_real_size(
    events: raylake.Table, columns: list[str] | None
) -> None:
    estimate = LakeDatasource(events.uri, columns=columns).estimate_inmemory_data_size()
    real = events.to_arrow(columns=columns).nbytes
    assert estimate is not None
    assert real / 2 <= estimate <= real * 2


def test_large_split_yields_several_blocks(ray_cluster: Any, events: raylake.Table) -> None:
    ctx = ray.data.DataContext.get_current()
    old = ctx.target_max_block_size
    ctx.target_max_block_size = 16 * 1024
    try:
        ds = read_lake(events.uri, override_num_blocks=1).materialize()
    finally:
        ctx.target_max_block_size = old
    block_sizes = [m.size_bytes for b in ds.iter_internal_ref_bundles() for m in b.metadata]
    assert len(block_sizes) > 4
    assert max(block_sizes) <= 2 * 16 * 1024
    assert ds.count() == 6_000


def test_default_read_keeps_each_task_output_whole(ray_cluster: Any, tmp_path: Path) -> None:
    """A table with fewer splits than Ray's default parallelism: read_lake makes one task
    per split and delivers each task's output as one block; Ray's own default over the
    same tasks cuts every output into pieces (SplitBlocks)."""
    # Splits of at most one file each: three files, three splits.
    options = {"read.split.target-size": 1, "read.split.open-file-cost": 1}
    tbl = raylake.create_table(
        str(tmp_path / "t"), pa.schema([("id", pa.int64())]), options=options
    )
    for start in (0, 100, 200):
        tbl.write(pa.table({"id": pa.array(range(start, start + 100), pa.int64())}))
    source = LakeDatasource(tbl.uri)
    parallelism = detected_read_parallelism(source)
    groups = [t.metadata.input_files for t in source.get_read_tasks(parallelism)]
    assert len(groups) == 3 < parallelism
    assert whole_task_blocks(source) == 3
    # The same tasks as under Ray's parallelism: pack_splits makes min(parallelism, splits).
    assert [t.metadata.input_files for t in source.get_read_tasks(3)] == groups

    ds = read_lake(tbl.uri).materialize()
    assert ds.num_blocks() == 3
    assert rows(ds_to_arrow(ds)) == [{"id": i} for i in range(300)]
    assert ray.data.read_datasource(LakeDatasource(tbl.uri)).materialize().num_blocks() > 3
    assert read_lake(tbl.uri, override_num_blocks=1).materialize().num_blocks() == 1


def test_default_read_of_many_splits_is_rays_default(
    ray_cluster: Any, events: raylake.Table
) -> None:
    """At least as many splits as Ray's parallelism: Ray's default applies unchanged."""
    source = LakeDatasource(events.uri)
    parallelism = detected_read_parallelism(source)
    assert len(source._splits()) >= parallelism  # small splits (SMALL in lake_ray_util)
    assert whole_task_blocks(source) is None


# -- pruning ------------------------------------------------------------------------------


def test_statistics_pruning_skips_files(ray_cluster: Any, tmp_path: Path) -> None:
    """Files the filter excludes by statistics are never opened: deleting them changes nothing."""
    tbl = make_events(tmp_path / "t")
    predicate = (rcol("id") >= 4_100) & (rcol("id") < 4_400)
    expected = rows(tbl.to_arrow(columns=["id", "label"], filter="id >= 4100 and id < 4400"))

    everything = _files(LakeDatasource(tbl.uri).get_read_tasks(100))
    pruned = LakeDatasource(tbl.uri).apply_predicate(predicate)
    needed = _files(pruned.get_read_tasks(100))
    assert 0 < len(needed) < len(everything)
    for path in everything - needed:
        os.remove(path)

    ds = (
        ray.data.read_datasource(LakeDatasource(tbl.uri))
        .select_columns(["id", "label"])
        .filter(expr=predicate)
    )
    assert rows(ds_to_arrow(ds)) == expected


def _files(tasks: Iterable[ReadTask]) -> set[str]:
    return {f for t in tasks for f in t.metadata.input_files}


# -- failures and bad input -----------------------------------------------------------


def test_read_task_retried_after_a_worker_crash(
    ray_cluster: Any, events: raylake.Table, tmp_path: Path
) -> None:
    marker = tmp_path / "crashed"
    source = FlakyLakeDatasource(events.uri, str(marker))
    got = ds_to_arrow(ray.data.read_datasource(source, override_num_blocks=3))
    assert marker.exists(), "a worker crashed"
    assert rows(got) == rows(events.to_arrow())


def test_unconvertible_ray_filter_argument_names_the_part(events: raylake.Table) -> None:
    with pytest.raises(FilterError, match=r"`\(\(col\('x'\) \* 2\) > 1\)`"):
        LakeDatasource(events.uri, filter=(rcol("label") == 1) & (rcol("x") * 2 > 1))


def test_bad_filter_arguments(events: raylake.Table) -> None:
    with pytest.raises(UnknownColumnError, match="'nope'"):
        LakeDatasource(events.uri, filter="nope = 1")
    with pytest.raises(FilterError, match="got int"):
        LakeDatasource(events.uri, filter=3)  # type: ignore[arg-type]
    with pytest.raises(UnknownColumnError, match="'nope'"):
        LakeDatasource(events.uri, columns=["nope"])


def test_unknown_columns_pushed_by_ray_are_refused_on_the_driver(
    ray_cluster: Any, events: raylake.Table
) -> None:
    """select_columns of a missing column returned rows of Ray's stub column alone; a
    filter on one, or one pyarrow cannot type, failed with Arrow's error in every task."""
    ds = ray.data.read_datasource(LakeDatasource(events.uri))
    with pytest.raises(UnknownColumnError, match="'nope' in select_columns"):
        ds.select_columns(["id", "nope"]).take(1)
    with pytest.raises(UnknownColumnError, match="'nope' in filter"):
        ds.filter(expr=rcol("nope") > 1).take(1)
    with pytest.raises(UnknownColumnError, match="'label' in filter"):
        read_lake(events.uri, columns=["id"]).filter(expr=rcol("label") == 1).take(1)
    with pytest.raises(FilterError, match=r"`\(col\('tag'\) > 1\)`"):
        ds.filter(expr=rcol("tag") > 1).take(1)


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(raylake.TableNotFoundError):
        LakeDatasource(str(tmp_path / "nothing"))


_WITHOUT_RAY = """
import sys
sys.modules["ray"] = None  # as if ray were not installed
import raylake
try:
    raylake.read_lake
except raylake.MissingDependencyError as exc:
    print(exc)
"""


def test_missing_ray_names_the_extra() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_RAY], capture_output=True, text=True, check=True
    )
    assert "pip install 'raylake[ray]'" in out.stdout


def test_import_raylake_does_not_import_ray() -> None:
    code = "import sys, raylake; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
