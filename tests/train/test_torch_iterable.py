"""LakeIterableDataset: exactly once across ranks and workers, equal steps, one global order."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from conftest import FILTER, expected_ids
from torch.utils.data import DataLoader

import raylake
from raylake.train.torch import LakeIterableDataset

BATCH = 16
# This machine has 2 cores; 3 workers are still correct, only slower.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def make(tbl: raylake.Table, rank: int = 0, world: int = 1, **kwargs: Any) -> LakeIterableDataset:
    kwargs.setdefault("feature_columns", ["id", "x", "emb"])
    kwargs.setdefault("label_column", "label")
    kwargs.setdefault("batch_size", BATCH)
    kwargs.setdefault("shuffle_window", 64)
    return LakeIterableDataset(tbl, rank=rank, world_size=world, **kwargs)


def ids_of(batch: Any) -> list[int]:
    features, _ = batch
    return features[:, 0].long().tolist()


def epoch_by_rank(
    tbl: raylake.Table, world: int, workers: int, *, real: bool, epoch: int = 0, **kwargs: Any
) -> list[list[list[int]]]:
    """Each rank's batches (as id lists) in the order the training loop receives them.

    ``real``: a torch DataLoader with ``workers`` processes (0: in-process); otherwise the
    workers are simulated in-process and their batches interleaved round-robin, as
    DataLoader does.
    """
    out = []
    for rank in range(world):
        ds = make(tbl, rank, world, **kwargs)
        ds.set_epoch(epoch)
        if real:
            loader = DataLoader(ds, batch_size=None, num_workers=workers)
            out.append([ids_of(b) for b in loader])
            continue
        streams = [
            [ids_of(b) for b in ds.iter_shard(w, max(workers, 1))] for w in range(max(workers, 1))
        ]
        merged = []
        for i in range(max((len(s) for s in streams), default=0)):
            merged += [s[i] for s in streams if i < len(s)]
        out.append(merged)
    return out


def check_exactly_once(by_rank: list[list[list[int]]], expected: list[int], world: int) -> None:
    steps = {len(batches) for batches in by_rank}
    assert len(steps) == 1, f"unequal step counts across ranks: {[len(b) for b in by_rank]}"
    seen = Counter(i for batches in by_rank for batch in batches for i in batch)
    assert set(seen) == set(expected)
    repeats = sum(seen.values()) - len(expected)
    assert 0 <= repeats <= world - 1  # only the last step's padding may repeat a row


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("workers", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("filter", [None, FILTER])
def test_exactly_once_simulated(
    table: raylake.Table, world: int, workers: int, shuffle: bool, filter: str | None
) -> None:
    by_rank = epoch_by_rank(table, world, workers, real=False, shuffle=shuffle, filter=filter)
    check_exactly_once(by_rank, expected_ids(table, filter), world)
    assert len(by_rank[0]) == len(make(table, 0, world, shuffle=shuffle, filter=filter))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_exactly_once_with_dataloader_workers(
    table: raylake.Table, world: int, workers: int
) -> None:
    filter = FILTER if world % 2 else None
    by_rank = epoch_by_rank(table, world, workers, real=True, filter=filter)
    check_exactly_once(by_rank, expected_ids(table, filter), world)
    # DataLoader's round-robin over workers is what the simulation assumes.
    assert by_rank == epoch_by_rank(table, world, workers, real=False, filter=filter)


def test_values_match_the_table(table: raylake.Table) -> None:
    truth = table.to_arrow().to_pandas().set_index("id")
    for features, label in make(table, dtype=torch.float64):
        ids = features[:, 0].long().numpy()
        np.testing.assert_allclose(
            features[:, 1].numpy(), truth.loc[ids, "x"].to_numpy(), rtol=1e-6
        )
        emb = np.stack(truth.loc[ids, "emb"].to_numpy())
        np.testing.assert_allclose(features[:, 2:].numpy(), emb)
        assert label.dtype == torch.int32
        assert label.tolist() == truth.loc[ids, "label"].tolist()
        assert features.dtype == torch.float64 and features.shape[1] == 4


def test_global_order_is_the_same_for_every_world_size_and_worker_count(
    table: raylake.Table,
) -> None:
    """Whatever the world size, every batch but the last step's is the same slice of one
    global order (that of a single reader), and each slice is read once."""
    (single,) = epoch_by_rank(table, 1, 1, real=False, epoch=3)
    order = [i for batch in single for i in batch]
    cells = {tuple(order[i : i + BATCH]): i // BATCH for i in range(0, len(order), BATCH)}
    for world, workers in [(2, 1), (3, 2), (4, 3), (2, 4)]:
        by_rank = epoch_by_rank(table, world, workers, real=False, epoch=3)
        used: list[int] = []
        rest: list[int] = []
        for batches in by_rank:
            for batch in batches:
                if len(batch) == BATCH and tuple(batch) in cells:
                    used.append(cells[tuple(batch)])
                else:
                    rest += batch
        assert len(used) == len(set(used))
        assert len(used) >= len(order) // BATCH - world  # all but the last round
        tail = [
            i
            for c in sorted(set(cells.values()) - set(used))
            for i in order[c * BATCH : (c + 1) * BATCH]
        ]
        assert sorted(set(rest)) == sorted(tail)


def test_epochs_and_seeds_change_the_order_deterministically(table: raylake.Table) -> None:
    def order(epoch: int, seed: int = 0) -> list[int]:
        ds = make(table, seed=seed)
        ds.set_epoch(epoch)
        return [i for b in ds for i in ids_of(b)]

    assert order(0) == order(0)
    assert order(0) != order(1)
    assert order(0) != order(0, seed=5)
    assert sorted(order(1)) == sorted(order(0))
    unshuffled = make(table, shuffle=False)
    first = [i for b in unshuffled for i in ids_of(b)]
    unshuffled.set_epoch(4)
    assert first == [i for b in unshuffled for i in ids_of(b)]


def test_drop_last_keeps_full_batches_and_equal_steps(append_table: raylake.Table) -> None:
    for world in (1, 3):
        by_rank = epoch_by_rank(append_table, world, 2, real=False, drop_last=True)
        assert {len(b) for batches in by_rank for b in batches} == {BATCH}
        assert len({len(batches) for batches in by_rank}) == 1
        seen = [i for batches in by_rank for b in batches for i in b]
        assert len(seen) == len(set(seen))
        assert 700 - len(seen) < world * BATCH


def test_dict_batches_and_transform(append_table: raylake.Table) -> None:
    ds = LakeIterableDataset(
        append_table,
        columns=["id", "emb", "label"],
        label_column="label",
        batch_size=100,
        transform=lambda batch: (batch[0]["emb"] * 2, batch[1]),
    )
    emb, label = next(iter(ds))
    assert emb.shape == (100, 2) and label.shape == (100,)
    plain = LakeIterableDataset(append_table, columns=["id", "x"], batch_size=100, shuffle=False)
    batch = next(iter(plain))
    assert set(batch) == {"id", "x"} and batch["id"].dtype == torch.int64


def test_empty_table_and_filter(tmp_path: Any, append_table: raylake.Table) -> None:
    from conftest import SCHEMA

    empty = raylake.create_table(str(tmp_path / "empty"), SCHEMA)
    ds = LakeIterableDataset(empty, feature_columns=["x"], batch_size=4, rank=1, world_size=2)
    assert list(ds) == [] and len(ds) == 0 and ds.snapshot_id is None
    none = make(append_table, filter="x > 5")
    assert list(none) == [] and len(none) == 0


def test_snapshot_is_pinned_at_construction(tmp_path: Any) -> None:
    from conftest import SCHEMA, rows

    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(rows(np.arange(50)))
    ds = make(tbl)
    tbl.write(rows(np.arange(50, 80)))
    assert sorted(i for b in ds for i in ids_of(b)) == list(range(50))
    old = make(tbl, snapshot_id=1)
    assert old.snapshot_id == 1 and old.num_rows == 50


def test_spawned_workers_get_a_picklable_dataset(pk_table: raylake.Table) -> None:
    """With the spawn start method (macOS, CUDA jobs) the dataset travels pickled."""
    ds = make(pk_table, filter=FILTER)
    loader = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert sorted(i for b in loader for i in ids_of(b)) == expected_ids(pk_table, FILTER)


def test_the_rows_a_loader_reads_keep_credentials_out_of_their_repr() -> None:
    from raylake.train.setup import TableRows

    rows = TableRows("s3://bucket/t", storage_options={"secret": "hunter2"})
    assert "hunter2" not in repr(rows)
    assert rows.storage_options == {"secret": "hunter2"}
