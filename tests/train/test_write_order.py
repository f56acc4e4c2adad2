"""The loaders read rows in the order they were written, and resume positions saved when
plans put files in name order (docs/decisions.md, "Reads follow the order rows were
written").

Data file names are random; here they are made to fall in the reverse of the write
order (a counting ``uuid4``), so that name order and write order always differ.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import SCHEMA, rows
from test_torch_iterable import ids_of, make
from torchdata.stateful_dataloader import StatefulDataLoader

import raylake
from raylake.errors import ResumeStateError
from raylake.table.split import Split, name_partition_key
from raylake.train import LakeMapDataset, RandomBatchSampler

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create"),
    # torchdata 0.11 calls torch.set_vital, which torch 2.13 deprecates.
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
]

COMMITS, PER_COMMIT = 6, 40


@pytest.fixture
def names_against_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new name sorts before the one made before it."""
    count = itertools.count(10**9, -1)
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(count)))


@pytest.fixture
def written(tmp_path: Path, names_against_order: None) -> raylake.Table:
    """6 commits of 40 rows (ids in commit order), two partitions, row groups of 7 rows."""
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, partition_by=["dt"], options={"write.row-group-rows": "7"}
    )
    for c in range(COMMITS):
        tbl.write(rows(np.arange(c * PER_COMMIT, (c + 1) * PER_COMMIT)))
    return tbl


def by_name(piece: Split) -> tuple[Any, ...]:
    """Where raylake planned an append table's piece before: each partition's files by
    name (and partitions by their values' text)."""
    return (name_partition_key(piece.partition), piece.files[0].path)


def by_partition_text(piece: Split) -> tuple[Any, ...]:
    """Where raylake planned a primary-key table's piece before: partitions by text."""
    return name_partition_key(piece.partition)


def planned_before(ds: Any, key: Callable[[Split], Any] = by_name) -> Any:
    """``ds`` as an earlier raylake made it: its pieces in the older order."""
    ds._loader.source = ds._loader.source.sorted_by(key)
    return ds


def ids(batches: Iterator[Any]) -> list[int]:
    return [i for b in batches for i in ids_of(b)]


def cut(
    batches: Iterable[Any],
    k: int,
    state: Callable[[], Any],
    of: Callable[[Iterator[Any]], list[int]] = ids,
) -> tuple[list[int], Any, list[int]]:
    """The first ``k`` batches' ids, the state saved after them, and the rest's ids."""
    it = iter(batches)
    head = of(itertools.islice(it, k))
    saved = state()
    return head, saved, of(it)


def test_an_unshuffled_epoch_gives_each_partition_in_write_order(written: raylake.Table) -> None:
    every = np.arange(COMMITS * PER_COMMIT)
    expected = [*every[every % 2 == 0], *every[every % 2 == 1]]  # partition "a", then "b"
    assert ids(iter(make(written, shuffle=False))) == expected
    assert written.to_arrow(columns=["id"]).column("id").to_pylist() == expected


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_position_saved_in_name_order_resumes_the_rows_it_named(
    written: raylake.Table, shuffle: bool
) -> None:
    older = planned_before(make(written, shuffle=shuffle, seed=5))
    assert older._loader.source.digest != make(written)._loader.source.digest
    older.set_epoch(1)
    head, saved, rest = cut(older, 4, older.state_dict)

    resumed = make(written, shuffle=shuffle, seed=5)
    resumed.load_state_dict(saved)
    assert ids(iter(resumed)) == rest
    assert sorted(head + rest) == list(range(COMMITS * PER_COMMIT))
    # It keeps the older order for the rest of the run: its later positions are of it.
    resumed.set_epoch(2)
    assert resumed.state_dict()["plan"] == saved["plan"]


def test_a_loaders_saved_state_in_name_order_resumes_with_workers(
    written: raylake.Table,
) -> None:
    loader = StatefulDataLoader(
        planned_before(make(written, shuffle=True, seed=2)), batch_size=None, num_workers=0
    )
    head, saved, rest = cut(loader, 3, loader.state_dict)

    # As docs/training.md resumes under another worker count: the dataset first.
    ds = make(written, shuffle=True, seed=2)
    ds.load_state_dict(saved)
    again = ids(iter(StatefulDataLoader(ds, batch_size=None, num_workers=2)))
    assert sorted(again) == sorted(rest)
    assert sorted(head + again) == list(range(COMMITS * PER_COMMIT))


def test_a_position_of_other_pieces_is_still_refused(written: raylake.Table) -> None:
    ds = make(written, shuffle=False)
    it = iter(ds)
    next(it)
    saved = ds.state_dict()
    with pytest.raises(ResumeStateError, match="another selection"):
        make(written, shuffle=False).load_state_dict({**saved, "plan": "0" * 32})


def test_a_window_process_resumes_the_older_order(written: raylake.Table) -> None:
    """Its child was given the pieces at its start: it is started again in the older order."""
    older = planned_before(make(written, shuffle=True, seed=7))
    _, saved, rest = cut(older, 5, older.state_dict)

    ds = make(written, shuffle=True, seed=7, window_process=True)
    try:
        assert sorted(ids(iter(ds))) == list(range(COMMITS * PER_COMMIT))  # the child starts
        ds.load_state_dict(saved)
        assert ids(iter(ds)) == rest
    finally:
        ds.close()


def map_loader(ds: LakeMapDataset, workers: int) -> StatefulDataLoader:
    g = torch.Generator()
    g.manual_seed(11)
    sampler = RandomBatchSampler(ds, 16, generator=g)
    return StatefulDataLoader(
        ds, batch_sampler=sampler, collate_fn=LakeMapDataset.collate, num_workers=workers
    )


def labels(batches: Iterator[Any]) -> list[int]:
    return [i for _, label in batches for i in label.tolist()]


def map_dataset(tbl: raylake.Table, **kwargs: Any) -> LakeMapDataset:
    return LakeMapDataset(tbl, feature_columns=["x"], label_column="id", **kwargs)


@pytest.mark.parametrize("workers", [0, 2])
def test_map_dataset_indices_saved_in_name_order_resume_the_rows_they_named(
    written: raylake.Table, workers: int
) -> None:
    older = map_dataset(written)
    older._source = older._source.sorted_by(by_name)
    assert older[[0]][1].tolist() != map_dataset(written)[[0]][1].tolist()
    loader = map_loader(older, workers)
    head, saved, rest = cut(loader, 3, loader.state_dict, labels)

    resumed = map_loader(map_dataset(written), workers)
    resumed.load_state_dict(saved)
    assert labels(iter(resumed)) == rest
    assert sorted(head + rest) == list(range(COMMITS * PER_COMMIT))


@pytest.mark.parametrize(
    ("other", "named"),
    [
        (lambda tbl: map_dataset(tbl), "pinned snapshot 7"),
        (lambda tbl: map_dataset(tbl, snapshot_id=6, filter="x < 0.5"), "another selection"),
    ],
)
def test_map_dataset_indices_of_other_rows_are_refused(
    written: raylake.Table, other: Callable[[raylake.Table], LakeMapDataset], named: str
) -> None:
    """Without a pinned snapshot a new commit changes what the indices mean: the saved
    sampler's rest would silently be other rows."""
    loader = map_loader(map_dataset(written), 0)
    it = iter(loader)
    next(it)
    saved = loader.state_dict()
    written.write(rows(np.arange(1000, 1010)))
    resumed = map_loader(other(written), 0)
    resumed.load_state_dict(saved)  # kept until the loader's next iterator is made
    with pytest.raises(ResumeStateError, match=named):
        iter(resumed)


def test_a_primary_key_position_saved_with_partitions_by_text_resumes(
    tmp_path: Path, names_against_order: None
) -> None:
    """Partitions of numbers were planned by their text (10 before 9): a primary-key
    table's position of then resumes the rows it named. Two commits of disjoint keys
    make two merge sections in each bucket, whose files' names run against key order."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("h", pa.int32())])
    tbl = raylake.create_table(
        str(tmp_path / "pk"), schema, partition_by=["h"], primary_key=["id", "h"], buckets=1
    )
    for first in (0, 120):
        part = np.arange(first, first + 120)
        tbl.write(pa.table({"id": part, "h": (part % 12).astype(np.int32)}, schema=schema))

    def dataset() -> Any:
        return make(tbl, shuffle=False, feature_columns=["id"], label_column="h", batch_size=7)

    older = planned_before(dataset(), by_partition_text)
    assert older._loader.source.digest != dataset()._loader.source.digest
    _, saved, rest = cut(older, 4, older.state_dict)

    resumed = dataset()
    resumed.load_state_dict(saved)
    assert ids(iter(resumed)) == rest


@pytest.mark.parametrize("kind", [{}, {"primary_key": ["id", "dt"], "buckets": 2}])
def test_two_tables_written_alike_give_the_same_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: dict[str, Any]
) -> None:
    """The same commits into two tables whose file names sort in opposite orders: the
    same shuffled epoch (same seed) and the same rows at the same indices."""
    runs = []
    for step in (1, -1):
        names = map(lambda i: uuid.UUID(int=i), itertools.count(10**9, step))
        monkeypatch.setattr(uuid, "uuid4", names.__next__)
        tbl = raylake.create_table(
            str(tmp_path / str(step)),
            SCHEMA,
            partition_by=["dt"],
            options={"write.row-group-rows": "7"},
            **kind,
        )
        tbl.write(rows(np.arange(200)))
        for v in range(1, 4):
            tbl.write(rows(np.arange(v * 30, v * 30 + 80), v))
        epoch = [ids_of(b) for b in make(tbl, shuffle=True, seed=9, shuffle_window=50)]
        rows_at = map_dataset(tbl)[list(range(0, len(map_dataset(tbl)), 7))][1].tolist()
        runs.append((epoch, rows_at))
    assert runs[0] == runs[1]
