"""RandomBatchSampler and DistributedBatchSampler yield, batch for batch, what torch's
and torchdata's samplers yield, and resume under StatefulDataLoader without replaying."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import torchdata.stateful_dataloader as stateful
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler
from torchdata.stateful_dataloader.sampler import BatchSampler as StatefulBatchSampler
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler

import raylake
from raylake.errors import InvalidArgumentError, ResumeStateError
from raylake.train import DistributedBatchSampler, LakeMapDataset, RandomBatchSampler


class Rows(torch.utils.data.Dataset[int]):
    """A map-style dataset whose rows are their indices."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(1, 2_000),  # torch refuses an empty data source; ours yields nothing
    batch_size=st.integers(1, 300),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_random_batches_are_torchdatas_epoch_after_epoch(
    n: int, batch_size: int, drop_last: bool, seed: int
) -> None:
    ours = RandomBatchSampler(Rows(n), batch_size, drop_last, _generator(seed))
    theirs = StatefulBatchSampler(
        StatefulRandomSampler(Rows(n), generator=_generator(seed)), batch_size, drop_last
    )
    for _ in range(3):  # one generator: each epoch draws the next permutation
        assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)
    # The first epoch is also torch's own BatchSampler(RandomSampler) with that generator.
    first = BatchSampler(RandomSampler(Rows(n), generator=_generator(seed)), batch_size, drop_last)
    assert list(RandomBatchSampler(Rows(n), batch_size, drop_last, _generator(seed))) == list(first)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 2])
def test_random_batches_are_a_shuffling_stateful_dataloaders_given_its_generator(
    workers: int,
) -> None:
    """StatefulDataLoader(shuffle=True, generator=g) draws its workers' base seed from g
    after each epoch's permutation (with workers, it then starts the sampler again): a
    loader given the sampler's generator draws the same, and the two match every epoch;
    a loader of its own, the first epoch without workers only."""
    ds, g = Rows(50), _generator(3)
    shared = stateful.StatefulDataLoader(
        ds, batch_sampler=RandomBatchSampler(ds, 8, generator=g), generator=g, num_workers=workers
    )
    own = stateful.StatefulDataLoader(
        ds, batch_sampler=RandomBatchSampler(ds, 8, generator=_generator(3)), num_workers=workers
    )
    theirs = stateful.StatefulDataLoader(
        ds, batch_size=8, shuffle=True, generator=_generator(3), num_workers=workers
    )
    for epoch in range(3):
        expected = [b.tolist() for b in theirs]
        assert [b.tolist() for b in shared] == expected
        assert ([b.tolist() for b in own] == expected) == (epoch == 0 and not workers)


def test_an_empty_dataset_has_no_batches() -> None:
    assert list(RandomBatchSampler(Rows(0), 4)) == [] and len(RandomBatchSampler(Rows(0), 4)) == 0


@settings(max_examples=examples(80), deadline=None)
@given(
    n=st.integers(0, 500),
    replicas=st.integers(1, 7),
    data=st.data(),
    batch_size=st.integers(1, 40),
    shuffle=st.booleans(),
    seed=st.integers(-(2**63), 2**64 - 6),  # any torch seed, as seed + epoch
    epoch=st.integers(0, 5),
    drop_last=st.booleans(),
    batch_drop_last=st.booleans(),
)
def test_distributed_batches_are_torchs(
    n: int,
    replicas: int,
    data: st.DataObject,
    batch_size: int,
    shuffle: bool,
    seed: int,
    epoch: int,
    drop_last: bool,
    batch_drop_last: bool,
) -> None:
    rank = data.draw(st.integers(0, replicas - 1))
    sampler: DistributedSampler[int] = DistributedSampler(
        Rows(n), replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    sampler.set_epoch(epoch)
    theirs = BatchSampler(sampler, batch_size, batch_drop_last)
    ours = DistributedBatchSampler(
        Rows(n), batch_size, replicas, rank, shuffle, seed, drop_last, batch_drop_last
    )
    ours.set_epoch(epoch)
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


def _resumed(
    make: Callable[[], stateful.StatefulDataLoader], stop_after: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The batches of a whole epoch, and those of a loader stopped after ``stop_after``
    batches, saved, and a new loader resumed from the state (in order)."""
    whole = [b.tolist() for b in make()]
    first = make()
    it = iter(first)
    taken = [next(it).tolist() for _ in range(stop_after)]
    state = first.state_dict()
    second = make()
    second.load_state_dict(state)
    return whole, taken + [b.tolist() for b in second]


@pytest.mark.parametrize("workers", [0, 2])
def test_random_batches_resume_under_stateful_dataloader(workers: int) -> None:
    def loader() -> stateful.StatefulDataLoader:
        sampler = RandomBatchSampler(Rows(1_000), 64, generator=_generator(7))
        return stateful.StatefulDataLoader(Rows(1_000), batch_sampler=sampler, num_workers=workers)

    whole, resumed = _resumed(loader, 5)
    assert resumed == whole and len(whole) == 16
    assert sorted(i for b in whole for i in b) == list(range(1_000))


@pytest.mark.parametrize("workers", [0, 2])
def test_distributed_batches_resume_under_stateful_dataloader(workers: int) -> None:
    def loader() -> stateful.StatefulDataLoader:
        sampler = DistributedBatchSampler(Rows(1_000), 50, num_replicas=3, rank=1, seed=3)
        sampler.set_epoch(2)
        return stateful.StatefulDataLoader(Rows(1_000), batch_sampler=sampler, num_workers=workers)

    whole, resumed = _resumed(loader, 3)
    assert resumed == whole and len(whole) == 7


@pytest.mark.parametrize("workers", [0, 2])
def test_distributed_batches_saved_at_an_epoch_end_go_on_with_the_next_epoch(
    workers: int,
) -> None:
    """The loop sets the next epoch before the resumed loader's first iterator, which is
    when StatefulDataLoader loads the sampler's state; DistributedSampler's epoch stays."""

    def loader() -> tuple[DistributedBatchSampler, stateful.StatefulDataLoader]:
        sampler = DistributedBatchSampler(Rows(103), 10, num_replicas=2, rank=0, seed=5)
        data = stateful.StatefulDataLoader(Rows(103), batch_sampler=sampler, num_workers=workers)
        return sampler, data

    sampler, first = loader()
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        epochs.append([b.tolist() for b in first])
        if epoch == 0:
            state = first.state_dict()
    sampler, second = loader()
    second.load_state_dict(state)
    sampler.set_epoch(1)
    assert [b.tolist() for b in second] == epochs[1] != epochs[0]


def test_a_lake_map_dataset_takes_its_batches(tmp_path: Path) -> None:
    t = raylake.create_table(
        str(tmp_path / "t"), pa.schema([("x", pa.float32()), ("y", pa.int64())])
    )
    t.write(pa.table({"x": [float(i) for i in range(300)], "y": list(range(300))}))
    ds = LakeMapDataset(t, feature_columns=["x"], label_column="y")
    sampler = RandomBatchSampler(ds, 32, generator=_generator(1))
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=LakeMapDataset.collate)
    expected = list(RandomBatchSampler(ds, 32, generator=_generator(1)))
    for (features, label), indices in zip(loader, expected, strict=True):
        assert label.tolist() == indices and features[:, 0].tolist() == indices


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: RandomBatchSampler(Rows(5), 0), "batch_size"),
        (lambda: RandomBatchSampler(Rows(5), 2, drop_last="no"), "drop_last"),
        (lambda: RandomBatchSampler(Rows(5), 2, generator=7), "generator"),
        (lambda: DistributedBatchSampler(Rows(5), 2, num_replicas=2, rank=2), "rank"),
        (lambda: DistributedBatchSampler(Rows(5), 2, num_replicas=0, rank=0), "num_replicas"),
        (lambda: DistributedBatchSampler(Rows(5), 2, num_replicas=2), "rank"),
        (lambda: DistributedBatchSampler(Rows(5), 2, 2, 0, seed=2**64), "seed"),
        (lambda: DistributedBatchSampler(Rows(5), 2, 2, 0, seed=True), "seed"),
        (lambda: DistributedBatchSampler(Rows(5), 2, 2, 0, seed=2**64 - 1).set_epoch(1), "epoch"),
        (lambda: DistributedBatchSampler(Rows(5), 2, 2, 0).set_epoch(1.0), "epoch"),
        (lambda: DistributedBatchSampler(Rows(5), 2, 2, 0, shuffle=1), "shuffle"),
    ],
)
def test_bad_arguments_are_named(make: Callable[[], object], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        make()


@pytest.mark.parametrize("seed", [-1, -(2**63), 2**64 - 3, np.int64(-7), np.uint64(5)])
def test_distributed_batches_take_any_torch_seed_and_numpy_epochs(seed: int) -> None:
    """Any seed torch's generator takes, as DistributedSampler takes it, and epochs from a
    numpy loop (which DistributedSampler takes, then fails on at its first batch)."""
    for epoch in np.arange(3):
        sampler: DistributedSampler[int] = DistributedSampler(Rows(50), 3, 1, seed=int(seed))
        sampler.set_epoch(int(epoch))
        ours = DistributedBatchSampler(Rows(50), 4, np.int64(3), np.int64(1), seed=seed)
        ours.set_epoch(epoch)
        assert list(ours) == list(BatchSampler(sampler, 4, False))
        state = iter(ours).state_dict()  # type: ignore[attr-defined]
        assert type(state["epoch"]) is int and type(ours.seed) is int


def test_a_state_of_another_sampler_is_refused_by_name() -> None:
    theirs = iter(StatefulBatchSampler(StatefulRandomSampler(Rows(100)), 10, False))
    next(theirs)
    ours = iter(RandomBatchSampler(Rows(100), 10))
    with pytest.raises(ResumeStateError, match="not a saved position of this sampler"):
        ours.load_state_dict(theirs.state_dict())  # type: ignore[attr-defined]
    with pytest.raises(ResumeStateError, match="11 batches taken, of 10"):
        ours.load_state_dict({"generator": torch.Generator().get_state(), "batches": 11})  # type: ignore[attr-defined]
    distributed = iter(DistributedBatchSampler(Rows(100), 10, 2, 0))
    with pytest.raises(ResumeStateError, match="not a saved position"):
        distributed.load_state_dict({"batches": 1})  # type: ignore[attr-defined]
