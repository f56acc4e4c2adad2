"""A dataset iterated by DataLoader worker processes: its main-process ``state_dict()``
refuses to answer (the workers' copies read the batches), naming StatefulDataLoader and
``loader.state_dict()``; with ``num_workers=0`` it stays exact."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import expected_ids
from test_torch_iterable import epoch_by_rank, ids_of, make
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import raylake
from raylake.errors import ResumeStateError, WorkerPositionError
from raylake.train.positions import consumed_rows
from raylake.train.torch import LakeStreamDataset

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create"),
    # torchdata 0.11 calls torch.set_vital, which torch 2.13 deprecates.
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
]

FIX = r"torchdata\.stateful_dataloader\.StatefulDataLoader.*loader\.state_dict\(\)"


def test_state_after_worker_steps_is_refused_and_names_the_fix(
    append_table: raylake.Table,
) -> None:
    """The README's old pattern: 30 steps through 2 workers, then ``ds.state_dict()``."""
    ds = make(append_table, batch_size=8)
    it = iter(DataLoader(ds, batch_size=None, num_workers=2))
    head = [ids_of(b) for b in itertools.islice(it, 30)]
    assert len(head) == 30
    with pytest.raises(WorkerPositionError, match=FIX) as caught:
        ds.state_dict()
    assert isinstance(caught.value, ResumeStateError)
    del it
    # After the pass: still refused (the epoch was read, the main copy says "nothing").
    list(DataLoader(ds, batch_size=None, num_workers=2))
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()


def test_the_main_process_knows_the_position_again_after_setting_it(
    append_table: raylake.Table,
) -> None:
    ds = make(append_table)
    list(DataLoader(ds, batch_size=None, num_workers=2))
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()
    ds.set_epoch(1)  # the start of epoch 1 is a position the main process knows
    state = ds.state_dict()
    assert state["epoch"] == 1 and consumed_rows(state) == 0

    # In-process steps after a multi-worker pass: exact again.
    list(DataLoader(ds, batch_size=None, num_workers=2))
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()
    it = iter(ds)
    head = [ids_of(next(it)) for _ in range(3)]
    assert consumed_rows(ds.state_dict()) == sum(map(len, head))

    # A loaded position is known until workers read from it.
    list(DataLoader(ds, batch_size=None, num_workers=2))
    ds.load_state_dict(state)
    assert ds.state_dict() == state


def test_stateful_dataloader_keeps_the_position(append_table: raylake.Table) -> None:
    """The pattern the error names: the loader's state resumes batch for batch, and the
    dataset's own ``state_dict()`` in the main process is refused."""
    whole = [
        ids_of(b) for b in StatefulDataLoader(make(append_table), batch_size=None, num_workers=2)
    ]
    ds = make(append_table)
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
    it = iter(loader)
    head = [ids_of(b) for b in itertools.islice(it, 11)]
    state = loader.state_dict()
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()
    del it
    again = StatefulDataLoader(make(append_table), batch_size=None, num_workers=2)
    again.load_state_dict(state)
    assert head + [ids_of(b) for b in again] == whole


@pytest.mark.slow  # spawned workers import torch and raylake anew
def test_spawned_workers_are_seen_too(append_table: raylake.Table) -> None:
    """Workers started with ``spawn`` get a pickled copy; the flag is shared all the same."""
    ds = make(append_table, batch_size=64)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    assert sorted(i for b in loader for i in ids_of(b)) == expected_ids(append_table)
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_persistent_workers_read_the_epoch_the_loop_sets(
    append_table: raylake.Table, context: str
) -> None:
    """DataLoader(persistent_workers=True) keeps its workers' copies from one epoch to
    the next: set_epoch in the main process reaches them, as it reaches a
    DistributedSampler, where they read their first epoch's order every epoch."""
    ds = make(append_table, batch_size=64)
    loader = DataLoader(
        ds, batch_size=None, num_workers=2, persistent_workers=True, multiprocessing_context=context
    )
    for epoch in (0, 1, 3):
        ds.set_epoch(epoch)
        expected = epoch_by_rank(append_table, 1, 2, real=False, epoch=epoch, batch_size=64)
        assert [ids_of(b) for b in loader] == expected[0]


def test_a_pickled_copy_shares_nothing_with_the_original(append_table: raylake.Table) -> None:
    """A copy made with plain pickle (e.g. shipped to another machine) guards its own
    workers, and its state is its own."""
    ds = make(append_table)
    copy = pickle.loads(pickle.dumps(ds))
    list(DataLoader(copy, batch_size=None, num_workers=2))
    assert consumed_rows(ds.state_dict()) == 0
    with pytest.raises(WorkerPositionError, match=FIX):
        copy.state_dict()


SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float32())])


@pytest.fixture
def stream_table(warehouse: Path) -> raylake.Table:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for c in range(3):
        ids = np.arange(c * 40, (c + 1) * 40, dtype=np.int64)
        tbl.write(pa.table({"id": ids, "x": ids.astype(np.float32)}, schema=SCHEMA))
    return tbl


def stream(tbl: raylake.Table) -> LakeStreamDataset:
    return LakeStreamDataset(tbl, start="earliest", batch_size=8, until_snapshot=3)


def stream_ids(batches: Any) -> list[int]:
    return [int(i) for b in batches for i in b["id"]]


def test_stream_state_after_worker_steps_is_refused(stream_table: raylake.Table) -> None:
    ds = stream(stream_table)
    it = iter(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(list(itertools.islice(it, 4))) == 4
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()


def test_stream_loaded_position_is_not_returned_after_workers_read(
    stream_table: raylake.Table,
) -> None:
    """A loaded position, then a pass in a worker process: the old position is not the
    answer (one worker: consumer 0 of 1, as in the main process, so the position fits)."""
    first = stream(stream_table)
    it = iter(first)
    head = stream_ids([next(it) for _ in range(3)])
    state = first.state_dict()
    ds = stream(stream_table)
    ds.load_state_dict(state)
    assert ds.state_dict() == state  # known: nothing read since it was loaded
    rest = stream_ids(DataLoader(ds, batch_size=None, num_workers=1))
    assert Counter(head + rest) == Counter(stream_ids(stream(stream_table)))
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()


def test_stream_in_process_state_stays_exact(stream_table: raylake.Table) -> None:
    ds = stream(stream_table)
    list(DataLoader(ds, batch_size=None, num_workers=2))
    with pytest.raises(WorkerPositionError, match=FIX):
        ds.state_dict()
    whole = stream_ids(stream(stream_table))
    it = iter(ds)  # num_workers=0 after a multi-worker pass
    head = stream_ids([next(it) for _ in range(4)])
    state = ds.state_dict()
    resumed = stream(stream_table)
    resumed.load_state_dict(state)
    assert Counter(head + stream_ids(resumed)) == Counter(whole)
    # A position loaded into a dataset that has read: the loaded one is the answer.
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
