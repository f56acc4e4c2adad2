"""A pass reads, last, the piece the next epoch's pass starts with, and leaves it to that
pass: a training loop's next epoch does not wait for its first read. The batches are
the same as a fresh loader's, nothing is read twice, and nothing is carried out of a
pass stopped early, into a pickled copy or across an unexpected epoch."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from read_threads import raylake_threads
from test_torch_iterable import ids_of, make

import raylake
from raylake.train import LakeIterableDataset


class Reads:
    """Every piece read through a dataset's source, in order (the real read, counted)."""

    def __init__(self, ds: LakeIterableDataset) -> None:
        self.pieces: list[int] = []
        source = ds._loader.source
        read = source.read_piece

        def counted(index: int, **kwargs: Any) -> Any:
            self.pieces.append(index)
            return read(index, **kwargs)

        object.__setattr__(source, "read_piece", counted)  # the source is a frozen value


def epoch(ds: LakeIterableDataset, number: int) -> list[list[int]]:
    ds.set_epoch(number)
    return [ids_of(b) for b in ds]


def fresh(table: raylake.Table, number: int, **kwargs: Any) -> tuple[list[list[int]], list[int]]:
    """Epoch ``number`` of a new dataset, and the pieces it read."""
    ds = make(table, **kwargs)
    reads = Reads(ds)
    return epoch(ds, number), reads.pieces


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_next_epoch_takes_its_first_piece_from_the_pass_before(
    table: raylake.Table, shuffle: bool
) -> None:
    ds = make(table, shuffle=shuffle, read_ahead=2)
    reads = Reads(ds)
    for number in range(3):
        alone, plain = fresh(table, number, shuffle=shuffle, read_ahead=0, prefetch=0)
        assert len(set(plain)) > 4
        reads.pieces.clear()
        it = iter(ds.set_epoch(number) or ds)
        batches = [ids_of(next(it))]
        # By its first batch a pass has read its first piece, unless the pass before
        # read it (the read of the next pass's first piece comes last, after the others).
        assert (plain[0] in reads.pieces) == (number == 0)
        batches += [ids_of(b) for b in it]
        assert batches == alone
        # Every piece of the pass read once, and at most one more: the next pass's first.
        extra = sorted(reads.pieces)
        for p in plain[1:] if number else plain:
            extra.remove(p)
        assert len(extra) <= 1
    assert not raylake_threads()


def test_a_pass_stopped_early_carries_nothing(append_table: raylake.Table) -> None:
    ds = make(append_table, shuffle=False, read_ahead=4)
    reads = Reads(ds)
    for _ in ds:
        break
    assert not raylake_threads()
    reads.pieces.clear()
    alone, alone_reads = fresh(append_table, 1, shuffle=False, read_ahead=4)
    assert epoch(ds, 1) == alone
    assert reads.pieces[: len(alone_reads)] == alone_reads  # its first piece read again


def test_an_epoch_other_than_the_next_reads_the_same_batches(table: raylake.Table) -> None:
    ds = make(table, shuffle=True, read_ahead=4)
    epoch(ds, 0)
    assert epoch(ds, 7) == fresh(table, 7, shuffle=True)[0]
    assert epoch(ds, 7) == fresh(table, 7, shuffle=True)[0]  # the same epoch again


def test_without_read_ahead_nothing_is_read_ahead_for_the_next_epoch(
    append_table: raylake.Table,
) -> None:
    ds = make(append_table, shuffle=False, read_ahead=0, prefetch=0)
    reads = Reads(ds)
    alone, alone_reads = fresh(append_table, 0, shuffle=False, read_ahead=0, prefetch=0)
    assert epoch(ds, 0) == alone
    assert reads.pieces == alone_reads


def test_a_pickled_dataset_does_not_take_the_carried_piece_along(
    append_table: raylake.Table,
) -> None:
    ds = make(append_table, shuffle=False, read_ahead=4)
    before = len(pickle.dumps(ds))
    epoch(ds, 0)
    assert len(pickle.dumps(ds)) < before + 1024  # DataLoader workers get no piece
    copy = pickle.loads(pickle.dumps(ds))
    assert epoch(copy, 1) == fresh(append_table, 1, shuffle=False)[0]


def test_a_one_piece_table_is_read_once_for_every_epoch(tmp_path: Any) -> None:
    schema = pa.schema([("x", pa.float32()), ("label", pa.int32())])
    tbl = raylake.create_table(str(tmp_path / "one"), schema)
    tbl.write(pa.table({"x": np.arange(50, dtype=np.float32), "label": np.zeros(50, np.int32)}))
    ds = LakeIterableDataset(tbl, feature_columns=["x"], label_column="label", batch_size=8)
    reads = Reads(ds)
    for number in range(3):
        ds.set_epoch(number)
        assert sum(len(y) for _, y in ds) == 50
    assert reads.pieces == [0]  # the piece stays in the pass's cache, carried on, not re-read
