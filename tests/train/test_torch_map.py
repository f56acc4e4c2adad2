"""LakeMapDataset: global row indices, batched gathers, samplers, a bounded cache."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from conftest import FILTER, expected_ids
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

import raylake
from raylake.errors import InvalidArgumentError
from raylake.train.torch import LakeMapDataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def make(tbl: raylake.Table, **kwargs: object) -> LakeMapDataset:
    kwargs.setdefault("feature_columns", ["id", "x", "emb"])
    kwargs.setdefault("label_column", "label")
    return LakeMapDataset(tbl, **kwargs)  # type: ignore[arg-type]


def test_every_index_is_one_row(table: raylake.Table) -> None:
    ds = make(table, filter=FILTER)
    expected = expected_ids(table, FILTER)
    assert len(ds) == len(expected)
    ids = [int(ds[i][0][0]) for i in range(len(ds))]
    assert sorted(ids) == expected
    features, label = ds[list(range(len(ds)))]
    assert features[:, 0].long().tolist() == ids
    truth = table.to_arrow().to_pandas().set_index("id")
    assert label.tolist() == truth.loc[ids, "label"].tolist()
    np.testing.assert_allclose(features[:, 1].numpy(), truth.loc[ids, "x"].to_numpy(), rtol=1e-6)


def test_batched_access_equals_single_access(pk_table: raylake.Table) -> None:
    ds = make(pk_table)
    idx = [5, -1, 0, 17, 5, len(ds) - 3]
    features, label = ds[idx]
    for row, i in enumerate(idx):
        f, y = ds[i]
        assert torch.equal(features[row], f) and int(label[row]) == int(y)
    assert torch.equal(ds[np.array(idx)][0], features)
    assert torch.equal(ds[torch.tensor(idx)][0], features)
    assert torch.equal(ds[2:5][0], ds[[2, 3, 4]][0])
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]
    empty, empty_label = ds[[]]
    assert empty.shape == (0, 4) and empty_label.shape == (0,)


def test_dataloader_with_samplers(table: raylake.Table) -> None:
    ds = make(table, cache_bytes=2_000)  # a tiny cache: pieces are read again and again
    expected = expected_ids(table)
    # __getitems__: one gather per batch, samples for the default collate.
    loader = DataLoader(ds, batch_size=32, sampler=RandomSampler(ds), num_workers=2)
    seen = [i for features, _ in loader for i in features[:, 0].long().tolist()]
    assert sorted(seen) == expected
    # A batch sampler and batch_size=None: ds[list] returns whole batches.
    batches = BatchSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(1)), 50, False)
    seen = [
        i
        for f, _ in DataLoader(ds, sampler=batches, batch_size=None)
        for i in f[:, 0].long().tolist()
    ]
    assert sorted(seen) == expected
    # DistributedSampler: two replicas together cover every row (it pads to equal lengths).
    parts = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=3)
        parts.append(
            [
                i
                for f, _ in DataLoader(ds, batch_size=16, sampler=sampler)
                for i in f[:, 0].long().tolist()
            ]
        )
    assert len(parts[0]) == len(parts[1])
    assert set(parts[0]) | set(parts[1]) == set(expected)
    assert sum(Counter(parts[0] + parts[1]).values()) - len(expected) <= 1


def test_dict_samples_and_transform(append_table: raylake.Table) -> None:
    ds = LakeMapDataset(append_table, columns=["id", "emb"], transform=lambda b: b["emb"].sum())
    assert ds[3].shape == ()
    plain = LakeMapDataset(append_table, columns=["id", "emb", "label"], label_column="label")
    sample, label = plain[3]
    assert set(sample) == {"id", "emb"} and sample["emb"].shape == (2,) and label.shape == ()
    batch = DataLoader(plain, batch_size=8)
    named, labels = next(iter(batch))
    assert named["emb"].shape == (8, 2) and labels.shape == (8,)


def test_a_zero_dimensional_index_is_one_sample(append_table: raylake.Table) -> None:
    """A 0-d tensor or array names one row, as an int does (torch's TensorDataset gives a
    sample for both): iterating ``torch.randperm(n)`` as a sampler yields them."""
    ds = make(append_table)
    features, _ = ds[3]
    for index in (np.int64(3), np.array(3), torch.tensor(3), torch.tensor(3, dtype=torch.int32)):
        f, y = ds[index]
        assert f.shape == features.shape and torch.equal(f, features) and y.shape == ()
    loader = DataLoader(ds, sampler=torch.randperm(len(ds))[:5], batch_size=None)
    assert {tuple(f.shape) for f, _ in loader} == {tuple(features.shape)}


@pytest.mark.parametrize(
    "index", [2.7, np.float64(2.0), torch.tensor(3.0), [1.5, 2], True, np.array([True, False])]
)
def test_an_index_that_is_not_an_int_is_refused(append_table: raylake.Table, index: object) -> None:
    """As a list refuses ``[2.7]``; numpy would have read row 2 (a mask: rows 1 and 0)."""
    with pytest.raises(TypeError, match=r"index must be an int, a 0-d integer tensor") as e:
        make(append_table)[index]
    assert isinstance(e.value, InvalidArgumentError) and e.value.value is index


def test_an_index_out_of_range_is_reported_as_given(append_table: raylake.Table) -> None:
    ds = make(append_table)
    n = len(ds)
    for index in (-n - 1, n, [0, -n - 5]):
        bad = index[-1] if isinstance(index, list) else index
        with pytest.raises(IndexError, match=f"row index {bad} is out of range for {n} rows"):
            ds[index]
    for big in (2**63, 2**64 - 1):  # int64 wrapped it to a negative index: a row from the end
        with pytest.raises(IndexError, match=f"row index {big} is out of range"):
            ds[np.array([0, big], dtype=np.uint64)]


def test_an_int_beyond_64_bits_is_out_of_range(append_table: raylake.Table) -> None:
    """numpy holds such ints as objects; they are row numbers out of range, as a list's
    IndexError says, not "not an int"."""
    ds = make(append_table)
    for big in (2**64, -(2**63) - 1, 2**70):
        for index in (big, [0, big]):
            with pytest.raises(IndexError, match=f"row index {big} is out of range"):
                ds[index]
        with pytest.raises(IndexError, match=f"row index {big} is out of range"):
            ds.__getitems__([big, 0])


@pytest.mark.parametrize("index", [[[1, 2], [3, 4]], np.array([[1, 2]]), torch.tensor([[1]])])
def test_an_index_of_more_than_one_dimension_is_refused(
    append_table: raylake.Table, index: object
) -> None:
    """Flattened, a (2, 2) index gave a batch of 4 rows, and __getitems__ a list whose
    len (2, the outer rows) was not its batch's (4)."""
    ds = make(append_table)
    with pytest.raises(InvalidArgumentError, match="one-dimensional"):
        ds[index]
    with pytest.raises(InvalidArgumentError, match="one-dimensional"):
        ds.__getitems__(index)  # type: ignore[arg-type]


def test_a_loaders_whole_state_is_refused_as_not_the_datasets(append_table: raylake.Table) -> None:
    """LakeIterableDataset takes a StatefulDataLoader's whole state; this dataset's
    state is its own part of it, and the whole one read as "this state is of table None"."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from raylake.errors import ResumeStateError

    ds = LakeMapDataset(append_table, feature_columns=["x"])
    loader = StatefulDataLoader(ds, batch_size=8, collate_fn=LakeMapDataset.collate)
    next(iter(loader))
    with pytest.raises(ResumeStateError, match=r"not a LakeMapDataset state_dict\(\)") as e:
        ds.load_state_dict(loader.state_dict())
    assert "loader.load_state_dict" in str(e.value) and "table None" not in str(e.value)
    ds.load_state_dict(loader.state_dict()["dataset_state"])  # its own part resumes
