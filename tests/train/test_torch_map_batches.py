"""LakeMapDataset.__getitems__ with LakeMapDataset.collate: the gathered batch handed
over as it is equals the per-sample path (samples, then the default collate) exactly,
for any list of indices (duplicates, any order), every batch structure, dtypes,
filled nulls, primary-key and schema-evolved tables."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples
from torch.utils.data import DataLoader, RandomSampler, default_collate

import raylake
from raylake.train.samples import Samples
from raylake.train.stats import FeedStats
from raylake.train.torch import LakeMapDataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

LAYOUTS: dict[str, dict[str, Any]] = {
    "features+label": {"feature_columns": ["id", "x", "emb"], "label_column": "label"},
    "features": {"feature_columns": ["x", "emb"], "dtype": torch.float64},
    "one feature column": {"feature_columns": ["emb"], "label_column": "label"},
    "dict": {"columns": ["id", "x", "emb"]},
    "dict+label": {"columns": ["id", "emb", "label"], "label_column": "label"},
    "bfloat16": {"columns": ["x", "emb", "label"], "dtype": torch.bfloat16},
}


def assert_same(ours: Any, theirs: Any) -> None:
    """Equal structures (types included), shapes, dtypes and values."""
    assert type(ours) is type(theirs)
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert torch.equal(ours, theirs)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for k in theirs:
            assert_same(ours[k], theirs[k])
    else:
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert_same(a, b)


def per_sample(ds: LakeMapDataset, indices: list[int]) -> Any:
    """What DataLoader built before: one sample per index, stacked by the default collate."""
    return default_collate([ds[i] for i in indices])


def index_lists(n: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, n - 1), min_size=1, max_size=80)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_gathered_batch_equals_samples_collated(pk_table: raylake.Table, layout: str) -> None:
    ds = LakeMapDataset(pk_table, cache_bytes=4_000, **LAYOUTS[layout])  # pieces evicted

    @settings(max_examples=examples(25), deadline=None)
    @given(index_lists(len(ds)))
    def check(indices: list[int]) -> None:
        samples = ds.__getitems__(indices)
        batch = LakeMapDataset.collate(samples)
        assert list.__len__(samples) == 0  # no sample was made
        assert_same(batch, per_sample(ds, indices))
        # the same list read as samples by the default collate: today's result
        assert_same(default_collate(ds.__getitems__(indices)), batch)

    check()


def test_duplicates_out_of_order_and_one_piece(append_table: raylake.Table) -> None:
    ds = LakeMapDataset(append_table, **LAYOUTS["features+label"])
    for indices in ([5, 5, 5], [699, 0, 350, 0, 699], [3, 2, 1, 0], list(range(30, 0, -1))):
        assert_same(LakeMapDataset.collate(ds.__getitems__(indices)), per_sample(ds, indices))
        assert_same(LakeMapDataset.collate(ds.__getitems__(indices)), list(ds[indices]))


def test_samples_are_a_full_list_when_read(append_table: raylake.Table) -> None:
    ds = LakeMapDataset(append_table, columns=["id", "label"], label_column="label")
    samples = ds.__getitems__([4, 1, 4])
    assert isinstance(samples, list) and len(samples) == 3
    assert list.__len__(samples) == 0  # not made yet
    for got, i in zip(samples, [4, 1, 4], strict=True):
        assert_same(got, ds[i])
    assert list.__len__(samples) == 3  # made once, on the first read


def test_a_transform_of_samples_is_applied_per_sample(append_table: raylake.Table) -> None:
    ds = LakeMapDataset(append_table, columns=["id", "emb"], transform=lambda s: s["emb"].sum())
    indices = [7, 3, 7, 0]
    samples = ds.__getitems__(indices)
    assert isinstance(samples, Samples) and samples.batch is None
    assert_same(LakeMapDataset.collate(samples), per_sample(ds, indices))


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    """Old files without column c (null there), c added by a later schema."""
    schema = pa.schema([("id", pa.int64()), ("x", pa.float32())])
    tbl = raylake.create_table(str(tmp_path_factory.mktemp("evolved") / "t"), schema)
    tbl.write(pa.table({"id": np.arange(40), "x": np.arange(40, dtype=np.float32)}))
    with tbl.update_schema() as u:
        u.update_column("x", pa.float64())
        u.add_column("c", pa.float32())
    tbl.write(pa.table({"id": np.arange(40, 60), "x": np.arange(40.0, 60.0),
                        "c": pa.array(np.arange(20, dtype=np.float32))}))  # fmt: skip
    return tbl


@pytest.mark.parametrize(
    "kwargs",
    [
        {"feature_columns": ["x", "c"], "fill_null": {"c": -1.0}},
        {"columns": ["id", "c"], "fill_null": 7},
        {"feature_columns": ["id", "x"], "snapshot_id": 1, "dtype": torch.float32},
    ],
)
def test_evolved_tables_and_filled_nulls(evolved: raylake.Table, kwargs: dict[str, Any]) -> None:
    ds = LakeMapDataset(evolved, **kwargs)

    @settings(max_examples=examples(20), deadline=None)
    @given(index_lists(len(ds)))
    def check(indices: list[int]) -> None:
        assert_same(LakeMapDataset.collate(ds.__getitems__(indices)), per_sample(ds, indices))

    check()


def test_dataloader_with_the_collate_covers_every_row(table: raylake.Table) -> None:
    ds = LakeMapDataset(table, feature_columns=["id", "x"], label_column="label")
    gen = torch.Generator().manual_seed(5)
    fast = DataLoader(
        ds, batch_size=64, sampler=RandomSampler(ds, generator=gen), collate_fn=ds.collate
    )
    ids = [int(i) for features, _ in fast for i in features[:, 0]]
    assert sorted(ids) == sorted(int(i) for i in ds[list(range(len(ds)))][0][:, 0])
    workers = DataLoader(ds, batch_size=64, num_workers=2, collate_fn=LakeMapDataset.collate)
    plain = DataLoader(ds, batch_size=64, num_workers=0)
    for ours, theirs in zip(workers, plain, strict=True):
        assert_same(ours, theirs)


def test_stats_count_the_batched_fetches(append_table: raylake.Table) -> None:
    ds = LakeMapDataset(append_table, feature_columns=["x"], label_column="label")
    assert ds.stats() == FeedStats()
    ds.__getitems__([0, 1, 2])
    ds[[600, 5]]
    ds[9]  # one sample: not a batch
    stats = ds.stats()
    assert (stats.batches, stats.rows) == (2, 5)
    assert stats.bytes == 5 * (4 + 4)  # a float32 feature and an int32 label a row
    assert stats.windows == 2  # pieces decoded: the first (rows 0-22) and row 600's
    assert stats.wait_s > 0 and stats.device_copies == 0
