"""Primary-key tables through Ray Data: merged reads, value filters above the merge, upserts."""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples

ray = pytest.importorskip("ray")
from lake_ray_util import ds_to_arrow, rows  # noqa: E402
from ray.data.expressions import col as rcol  # noqa: E402

import raylake  # noqa: E402
from raylake import LakeDatasource, read_lake, write_lake  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        importlib.util.find_spec("raylake.table.pk.write") is None,
        reason="primary-key tables (raylake/table/pk/write.py) are not there yet",
    ),
]

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


def kv(keys: list[int], values: list[int]) -> pa.Table:
    return pa.table(
        {"k": keys, "v": values, "s": [f"s{v}" for v in values]},
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    """Four commits that update and re-update keys, so buckets hold overlapping files."""
    root = tmp_path_factory.mktemp("pk") / "t"
    tbl = raylake.create_table(str(root), SCHEMA, primary_key=["k"], buckets=3)
    rng = np.random.default_rng(7)
    for commit in range(4):
        keys = rng.choice(2_000, 800, replace=False)
        tbl.write(kv(keys.tolist(), (keys * 10 + commit).tolist()))
    return tbl


@pytest.mark.parametrize("blocks", [None, 1, 2, 5])
def test_read_equals_to_arrow(ray_cluster: Any, versions: raylake.Table, blocks: Any) -> None:
    got = ds_to_arrow(read_lake(versions.uri, override_num_blocks=blocks))
    assert rows(got, "k") == rows(versions.to_arrow(), "k")


def test_time_travel_and_projection(ray_cluster: Any, versions: raylake.Table) -> None:
    got = ds_to_arrow(read_lake(versions.uri, snapshot_id=2, columns=["k", "s"]))
    assert rows(got, "k") == rows(versions.to_arrow(columns=["k", "s"], snapshot_id=2), "k")


def test_each_task_merges_whole_buckets(versions: raylake.Table) -> None:
    tasks = LakeDatasource(versions.uri).get_read_tasks(2)
    owner: dict[str, int] = {}
    for i, task in enumerate(tasks):
        for path in task.metadata.input_files:
            bucket_dir = str(Path(path).parent)
            assert owner.setdefault(bucket_dir, i) == i, f"{bucket_dir} is split across tasks"


def test_value_filter_never_resurfaces_an_old_version(ray_cluster: Any, tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=["k"], buckets=1)
    tbl.write(kv([1, 2, 3], [10, 20, 30]))
    tbl.write(kv([1, 3], [11, 31]))

    pushed = ray.data.read_datasource(LakeDatasource(tbl.uri)).filter(expr=rcol("v") == 10)
    assert ds_to_arrow(pushed).num_rows == 0
    assert ds_to_arrow(read_lake(tbl.uri, filter="v = 10")).num_rows == 0
    assert ds_to_arrow(read_lake(tbl.uri, filter=rcol("v") < 12)).column("k").to_pylist() == [1]
    newest = ray.data.read_datasource(LakeDatasource(tbl.uri)).filter(expr=rcol("v") >= 30)
    assert rows(ds_to_arrow(newest.select_columns(["k"])), "k") == [{"k": 3}]


def test_key_filter_prunes_and_matches_to_arrow(ray_cluster: Any, versions: raylake.Table) -> None:
    ds = (
        ray.data.read_datasource(LakeDatasource(versions.uri))
        .filter(expr=(rcol("k") < 100) & (rcol("v") % 2 == 0))
        .select_columns(["k", "v"])
    )
    expected = versions.to_arrow(columns=["k", "v"], filter="k < 100").to_pylist()
    assert rows(ds_to_arrow(ds), "k") == sorted(
        (r for r in expected if r["v"] % 2 == 0), key=lambda r: r["k"]
    )


def test_upsert_from_ray_follows_the_ordering_rule(
    ray_cluster: Any, tmp_path: Path, preserve_order: None
) -> None:
    """Within one job the last occurrence wins; a later job wins over an earlier one."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=["k"], buckets=2)
    blocks = [kv([1, 2, 3], [1, 1, 1]), kv([2, 4], [2, 2]), kv([1, 4, 2], [3, 3, 3])]
    snap = write_lake(ray.data.from_arrow(blocks), tbl.uri)
    assert snap is not None and len(tbl.snapshots()) == 1
    assert rows(tbl.to_arrow(), "k") == rows(kv([1, 2, 3, 4], [3, 3, 1, 3]), "k")

    write_lake(ray.data.from_arrow([kv([3], [9])]), tbl.uri, mode="upsert")
    assert tbl.to_arrow(filter="k = 3").column("v").to_pylist() == [9]


_blocks = st.lists(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 1_000)), min_size=1, max_size=20),
    min_size=1,
    max_size=5,
)


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(jobs=st.lists(_blocks, min_size=1, max_size=3))
def test_upserts_against_a_model(
    ray_cluster: Any, tmp_path_factory: Any, preserve_order: None, jobs: Any
) -> None:
    """Random upsert jobs from Ray equal a dict where the last write of a key wins."""
    tbl = raylake.create_table(
        str(tmp_path_factory.mktemp("pk") / "t"), SCHEMA, primary_key=["k"], buckets=2
    )
    model: dict[int, int] = {}
    for job in jobs:
        tables = [kv([k for k, _ in block], [v for _, v in block]) for block in job]
        write_lake(ray.data.from_arrow(tables), tbl.uri)
        for block in job:
            model.update(block)
        expected = [{"k": k, "v": v, "s": f"s{v}"} for k, v in sorted(model.items())]
        assert rows(tbl.to_arrow(), "k") == expected
        assert rows(ds_to_arrow(read_lake(tbl.uri, override_num_blocks=2)), "k") == expected


def test_changelog_rows_with_a_row_kind(ray_cluster: Any, tmp_path: Path) -> None:
    """A dataset may carry ``_rl_kind`` (+I/-U/+U/-D) to apply a changelog to the table."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=["k"], buckets=1)
    tbl.write(kv([1, 2], [1, 2]))
    changes = kv([1, 2], [5, 2]).append_column("_rl_kind", pa.array(["+U", "-D"]))
    write_lake(ray.data.from_arrow([changes]), tbl.uri)
    assert rows(tbl.to_arrow(), "k") == [{"k": 1, "v": 5, "s": "s5"}]


def test_exact_row_counts_without_merges(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=["k"], buckets=2)
    tbl.write(kv(list(range(50)), list(range(50))))
    tasks = LakeDatasource(tbl.uri).get_read_tasks(4)
    assert sum(t.metadata.num_rows for t in tasks) == 50
    per_bucket: dict[str, int] = defaultdict(int)
    for t in tasks:
        for f in t.metadata.input_files:
            per_bucket[str(Path(f).parent)] += 1
    assert len(per_bucket) == 2


def test_ray_writes_trigger_compaction_by_the_policy(ray_cluster: Any, tmp_path: Path) -> None:
    """write_lake commits through the table: a third overlapping run in a bucket, above
    ``compaction.max-overlapping-files``, is compacted in a COMPACT snapshot."""
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        primary_key=["k"],
        buckets=2,
        options={"compaction.max-overlapping-files": 2},
    )
    for commit in range(3):
        write_lake(ray.data.from_arrow([kv(list(range(40)), [commit] * 40)]), tbl.uri)
    assert [s.commit_kind for s in tbl.snapshots()] == ["APPEND", "APPEND", "APPEND", "COMPACT"]
    assert max(n for split in tbl.scan().plan() for n in split.sections) == 1
    assert set(tbl.to_arrow().column("v").to_pylist()) == {2}
