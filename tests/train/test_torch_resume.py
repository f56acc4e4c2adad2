"""Resuming LakeIterableDataset mid-epoch: in-process, through StatefulDataLoader, elastic."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest
from conftest import FILTER, SCHEMA, expected_ids, rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples
from test_torch_iterable import ids_of, make
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import raylake
from raylake.errors import ResumeStateError
from raylake.train.positions import consumed_rows

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create"),
    # torchdata 0.11 calls torch.set_vital, which torch 2.13 deprecates.
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
]


def take(iterable: Any, k: int) -> list[list[int]]:
    return [ids_of(b) for b in itertools.islice(iterable, k)]


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def check_exact(seen: list[int], expected: list[int], slack: int) -> None:
    counts = Counter(seen)
    assert set(counts) == set(expected)
    assert 0 <= len(seen) - len(expected) <= slack


@pytest.mark.parametrize(
    ("world", "new_world", "new_workers"),
    [(1, 1, 1), (1, 3, 2), (2, 1, 1), (2, 4, 3), (3, 2, 2), (4, 3, 1)],
)
def test_resume_in_process_under_another_world_size(
    table: raylake.Table, world: int, new_world: int, new_workers: int
) -> None:
    """Every rank reads k batches; rank 0's position resumes ranks of another world size."""
    k = 5
    first: list[int] = []
    states = []
    for rank in range(world):
        ds = make(table, rank, world, filter=FILTER)
        ds.set_epoch(2)
        it = iter(ds)
        first += flat(take(it, k))
        states.append(ds.state_dict())
    # Any rank's position stands for all of them (every rank took k steps).
    assert len({str(sorted(s["remaining"])) for s in [states[0]]}) == 1
    rest: list[int] = []
    steps = set()
    for rank in range(new_world):
        ds = make(table, rank, new_world, filter=FILTER)
        ds.load_state_dict(states[0])
        assert ds.epoch == 2
        n = 0
        for worker in range(new_workers):
            batches = [ids_of(b) for b in ds_copy(ds).iter_shard(worker, new_workers)]
            rest += flat(batches)
            n += len(batches)
        steps.add(n)
    assert len(steps) == 1
    check_exact(first + rest, expected_ids(table, FILTER), world + new_world)


def ds_copy(ds: Any) -> Any:
    """What a DataLoader worker gets: its own copy of the dataset, loaded position included."""
    import pickle

    return pickle.loads(pickle.dumps(ds))


def test_resume_reads_exactly_the_rest_of_the_same_order(append_table: raylake.Table) -> None:
    ds = make(append_table)
    full = [ids_of(b) for b in ds]
    ds2 = make(append_table)
    it = iter(ds2)
    head = take(it, 7)
    state = ds2.state_dict()
    assert consumed_rows(state) == sum(len(b) for b in head)
    ds3 = make(append_table)
    ds3.load_state_dict(state)
    assert len(ds3) == len(full) - 7
    assert head + [ids_of(b) for b in ds3] == full
    # The position resumes one pass; the next pass is a whole epoch again.
    assert [ids_of(b) for b in ds3] == full


def test_state_at_epoch_end_and_next_epoch(append_table: raylake.Table) -> None:
    ds = make(append_table)
    list(ds)
    state = ds.state_dict()
    assert state["remaining"] == [] and consumed_rows(state) == 700
    again = make(append_table)
    again.load_state_dict(state)
    assert list(again) == []
    again.set_epoch(1)
    assert sorted(i for b in again for i in ids_of(b)) == list(range(700))


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_saved_at_an_epoch_end_goes_on_with_the_next_epoch(
    append_table: raylake.Table, workers: int
) -> None:
    """The loop sets the next epoch before the resumed loader's first iterator, which is
    when StatefulDataLoader loads the dataset's state in the main process."""
    ds = make(append_table)
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
    epochs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        epochs.append([ids_of(b) for b in loader])
        if epoch == 0:
            state = loader.state_dict()
    resumed_ds = make(append_table)
    resumed = StatefulDataLoader(resumed_ds, batch_size=None, num_workers=workers)
    resumed.load_state_dict(state)
    resumed_ds.set_epoch(1)
    assert [ids_of(b) for b in resumed] == epochs[1]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("workers", [0, 2, 3])
def test_a_state_saved_at_an_epoch_last_batch_goes_on_with_the_next_epoch(
    append_table: raylake.Table, workers: int, drop_last: bool
) -> None:
    """Saved after the epoch's last batch, before the loader saw its end (a checkpoint
    every n steps), each worker's position has read its whole block; with drop_last the
    dropped rows remain in it. Neither leaves anything of that epoch to resume. The next
    epoch comes batch for batch as uninterrupted: StatefulDataLoader's round-robin goes
    on from the worker after the last one it heard from (43 steps over 2 workers, 44
    over 3), so the workers read their blocks in that order; they read them the other
    way round, the same batches in another order."""
    ds = make(append_table, drop_last=drop_last)
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
    batches = iter(loader)
    take(batches, len(loader))
    state = loader.state_dict()
    del batches
    ds.set_epoch(1)
    epoch1 = [ids_of(b) for b in loader]
    resumed_ds = make(append_table, drop_last=drop_last)
    resumed = StatefulDataLoader(resumed_ds, batch_size=None, num_workers=workers)
    resumed.load_state_dict(state)
    resumed_ds.set_epoch(1)
    assert [ids_of(b) for b in resumed] == epoch1
    elastic = make(append_table, drop_last=drop_last)
    elastic.set_epoch(1)
    elastic.load_state_dict(state)
    assert elastic.epoch == 1 and len(elastic) == len(epoch1)
    # Without workers: the same batches, read by one consumer in its own order.
    assert sorted(ids_of(b) for b in DataLoader(elastic, batch_size=None)) == sorted(epoch1)


@pytest.mark.parametrize("seen_the_end", [True, False])
def test_states_between_snapshots_at_an_epoch_end_resume_with_the_next_epoch(
    append_table: raylake.Table, seen_the_end: bool
) -> None:
    """With workers and snapshot_every_n_steps=4, a state saved at epoch 0's end holds
    the workers' positions of 3 steps before, which the loader replays. Saved after the
    loop (the usual checkpoint), the loader starts afresh and epoch 1 reads whole. Saved
    after the last batch but before the loop saw the end, the workers cannot tell that
    the replay finishes epoch 0: the loader's pass is epoch 0's end, with no batch, and
    the next one is epoch 1 (docs/training.md)."""

    def loader(state: dict[str, Any] | None = None) -> StatefulDataLoader:
        ds = make(append_table, drop_last=True)  # 43 steps
        one = StatefulDataLoader(ds, batch_size=None, num_workers=2, snapshot_every_n_steps=4)
        if state is not None:
            one.load_state_dict(state)
        return one

    first = loader()
    if seen_the_end:
        assert len(list(first)) == 43
    else:
        batches = iter(first)
        take(batches, len(first))
    state = first.state_dict()
    first.dataset.set_epoch(1)
    epoch1 = [ids_of(b) for b in first]
    resumed = loader(state)
    if not seen_the_end:
        assert list(resumed) == []  # epoch 0: the 3 steps replayed, and its end
    resumed.dataset.set_epoch(1)
    assert [ids_of(b) for b in resumed] == epoch1


@pytest.mark.parametrize("workers", [2, 3])
def test_resumes_in_a_pass_that_went_on_from_an_epoch_end_keep_its_order(
    append_table: raylake.Table, workers: int
) -> None:
    """The pass a loader makes of a state saved after an epoch's last batch starts at
    another worker; states saved inside it, and after its last batch, resume batch for
    batch as one uninterrupted run of three epochs."""

    def loader(state: dict[str, Any] | None, epoch: int) -> StatefulDataLoader:
        ds = make(append_table, drop_last=True)  # 43 steps: blocks of 22 and 21
        one = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
        if state is not None:
            one.load_state_dict(state)
        ds.set_epoch(epoch)
        return one

    whole = loader(None, 0)
    uninterrupted = []
    for epoch in range(3):
        whole.dataset.set_epoch(epoch)
        uninterrupted.append([ids_of(b) for b in whole])
    steps = len(uninterrupted[0])

    def run(state: dict[str, Any] | None, epoch: int, k: int) -> tuple[Any, list[Any]]:
        one = loader(state, epoch)
        batches = iter(one)
        head = take(batches, k)
        saved = one.state_dict()
        del batches
        return saved, head

    state, _ = run(None, 0, steps)  # at epoch 0's last batch
    state, head = run(state, 1, 7)  # inside the pass that went on
    state, rest = run(state, 1, steps - 7)  # at epoch 1's last batch
    assert head + rest == uninterrupted[1]
    assert [ids_of(b) for b in loader(state, 2)] == uninterrupted[2]


@pytest.mark.parametrize("workers", [2, 3])
def test_a_state_of_an_epoch_a_resumed_loader_went_on_to_resumes_elastically(
    append_table: raylake.Table, workers: int
) -> None:
    """A loader resumed from a state saved after an epoch's last batch counts its steps
    on into the next epoch, and asks the worker after the last one it heard from first;
    a state it saves there still resumes another worker count exactly."""
    loader = StatefulDataLoader(make(append_table), batch_size=None, num_workers=workers)
    batches = iter(loader)
    take(batches, len(loader))
    state = loader.state_dict()
    del batches
    ds = make(append_table)
    resumed = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
    resumed.load_state_dict(state)
    ds.set_epoch(1)
    batches = iter(resumed)
    head = take(batches, 9)
    later = resumed.state_dict()
    del batches
    elastic = make(append_table)
    elastic.set_epoch(1)
    elastic.load_state_dict(later)
    rest = [ids_of(b) for b in DataLoader(elastic, batch_size=None, num_workers=1)]
    check_exact(flat(head) + flat(rest), expected_ids(append_table), 0)


def test_a_resume_under_another_batch_size_keeps_its_batches_to_that_size(
    append_table: raylake.Table,
) -> None:
    """The workers' runs read in batches of 16 leave rows off the grid of 24 at each end;
    they make full batches, not one last batch of all of them."""
    loader = StatefulDataLoader(make(append_table), batch_size=None, num_workers=2)
    it = iter(loader)
    head = take(it, 9)
    state = loader.state_dict()
    del it
    ds = make(append_table, batch_size=24)
    ds.load_state_dict(state)
    steps = len(ds)
    rest = [ids_of(b) for b in DataLoader(ds, batch_size=None, num_workers=2)]
    assert max(len(b) for b in rest) == 24 and len(rest) == steps
    check_exact(flat(head) + flat(rest), expected_ids(append_table), 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_position_loaded_before_dataloader_workers_is_for_their_next_pass_only(
    append_table: raylake.Table, workers: int
) -> None:
    """Every DataLoader iteration forks or pickles the main copy again, loaded position
    included; a loop that never calls set_epoch reads whole epochs after the resumed one."""
    loader = StatefulDataLoader(make(append_table), batch_size=None, num_workers=2)
    it = iter(loader)
    head = take(it, 9)
    state = loader.state_dict()
    del it
    ds = make(append_table)
    ds.load_state_dict(state)
    again = DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=False)
    rest = [ids_of(b) for b in again]
    check_exact(flat(head) + flat(rest), expected_ids(append_table), 0)
    for _ in range(2):
        assert len(again) == len(make(append_table))  # what an LR schedule counts on
        assert sorted(flat([ids_of(b) for b in again])) == expected_ids(append_table)


@pytest.mark.parametrize(("workers", "every"), [(0, 1), (2, 1), (2, 4)])
def test_stateful_dataloader_same_config(table: raylake.Table, workers: int, every: int) -> None:
    # every > 1: the workers' states are snapshotted every few batches, and the loader
    # replays the batches after the last snapshot on resume (torchdata's protocol).
    expected = expected_ids(table)
    ds = make(table)
    ds.set_epoch(1)
    loader = StatefulDataLoader(
        ds, batch_size=None, num_workers=workers, snapshot_every_n_steps=every
    )
    it = iter(loader)
    head = take(it, 9)
    state = loader.state_dict()
    del it
    ds2 = make(table)
    ds2.set_epoch(1)
    loader2 = StatefulDataLoader(
        ds2, batch_size=None, num_workers=workers, snapshot_every_n_steps=every
    )
    loader2.load_state_dict(state)
    rest = [ids_of(b) for b in loader2]
    assert len(head) + len(rest) == len(ds)
    check_exact(flat(head) + flat(rest), expected, 0)
    # The same as one uninterrupted pass.
    ds.set_epoch(1)
    assert head + rest == [
        ids_of(b) for b in StatefulDataLoader(ds, batch_size=None, num_workers=workers)
    ]


@pytest.mark.parametrize(("workers", "new_world", "new_workers"), [(2, 1, 3), (2, 3, 0), (0, 2, 2)])
def test_stateful_dataloader_elastic(
    table: raylake.Table, workers: int, new_world: int, new_workers: int
) -> None:
    """Two ranks stop after k steps; the loader state of rank 0 resumes another world."""
    expected = expected_ids(table, FILTER)
    head: list[int] = []
    states = []
    for rank in range(2):
        loader = StatefulDataLoader(
            make(table, rank, 2, filter=FILTER), batch_size=None, num_workers=workers
        )
        head += flat(take(iter(loader), 4))
        states.append(loader.state_dict())
    rest: list[int] = []
    steps = set()
    for rank in range(new_world):
        ds = make(table, rank, new_world, filter=FILTER)
        ds.load_state_dict(states[0])  # the loader's whole state dict
        batches = [
            ids_of(b) for b in StatefulDataLoader(ds, batch_size=None, num_workers=new_workers)
        ]
        steps.add(len(batches))
        rest += flat(batches)
    assert len(steps) == 1
    check_exact(head + rest, expected, 2 + new_world)


def test_a_worker_position_resumes_only_its_worker(append_table: raylake.Table) -> None:
    ds = make(append_table)
    it = ds.iter_shard(1, 2)
    take(it, 2)
    state = ds.state_dict()
    assert state["progress"]["worker"] == 1 and state["progress"]["batches"] == 2
    same = make(append_table)
    same.load_state_dict(state)
    assert [ids_of(b) for b in same.iter_shard(1, 2)] == [ids_of(b) for b in ds.iter_shard(1, 2)][
        2:
    ]
    other = make(append_table)
    other.load_state_dict(state)
    with pytest.raises(ResumeStateError, match="load the StatefulDataLoader's whole state_dict"):
        next(other.iter_shard(0, 3))


def test_a_worker_position_refused_for_another_batch_size_names_it(
    append_table: raylake.Table,
) -> None:
    """The same worker of the same loader but another batch size: the message named only
    the worker, rank and counts, all equal on both sides, never the batch size."""
    ds = make(append_table, batch_size=8)
    take(ds.iter_shard(1, 2), 2)
    other = make(append_table, batch_size=16)
    other.load_state_dict(ds.state_dict())
    with pytest.raises(ResumeStateError, match=r"here batch_size is 16, not 8\. To resume"):
        next(other.iter_shard(1, 2))


def test_foreign_positions_are_refused(
    append_table: raylake.Table, pk_table: raylake.Table, tmp_path: Any
) -> None:
    ds = make(append_table)
    take(iter(ds), 2)
    state = ds.state_dict()
    with pytest.raises(ResumeStateError, match="of table"):
        make(pk_table).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="seed=0"):
        make(append_table, seed=1).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="another selection"):
        make(append_table, filter=FILTER).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="not a raylake position"):
        make(append_table).load_state_dict({"something": 1})
    with pytest.raises(ResumeStateError, match="malformed"):
        make(append_table).load_state_dict({**state, "remaining": "nope"})

    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(rows(np.arange(40)))
    old = make(tbl)
    old_state = old.state_dict()
    tbl.write(rows(np.arange(40, 60)))
    with pytest.raises(ResumeStateError, match="pass snapshot_id=1"):
        make(tbl).load_state_dict(old_state)
    make(tbl, snapshot_id=1).load_state_dict(old_state)


def test_a_position_resumes_through_another_spelling_of_its_table(tmp_path: Any) -> None:
    """A position saved over '/abs/t' was refused by a loader of 'file:///abs/t' (or of
    a link to it) as "of table '/abs/t'": one table, spelled two ways."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(rows(np.arange(40)))
    ds = make(tbl)
    first = take(iter(ds), 2)
    state = ds.state_dict()
    (tmp_path / "link").symlink_to(tmp_path / "t")
    whole = flat(take(iter(make(tbl)), 100))
    for spelling in [f"file://{tmp_path / 't'}", str(tmp_path / "link")]:
        again = make(raylake.open_table(spelling))
        again.load_state_dict(state)
        assert flat(first) + flat(take(iter(again), 100)) == whole
    other = raylake.create_table(str(tmp_path / "u"), SCHEMA)
    other.write(rows(np.arange(40)))
    with pytest.raises(ResumeStateError, match="of table"):
        make(other).load_state_dict(state)


def test_a_position_saved_before_the_first_commit_says_so(tmp_path: Any) -> None:
    """It said "pass snapshot_id=None to resume it", which reads the latest snapshot:
    no snapshot_id reads the table as it was before its first commit."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    ds = make(tbl)
    assert take(iter(ds), 2) == []
    state = ds.state_dict()
    tbl.write(rows(np.arange(40)))
    with pytest.raises(ResumeStateError, match=r"before its first commit \(no rows\): there is"):
        make(tbl).load_state_dict(state)


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    plan=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(0, 12)), min_size=1, max_size=3
    ),
    shuffle=st.booleans(),
)
def test_chains_of_elastic_resumes_read_each_row_once(
    pk_table: raylake.Table, plan: list[tuple[int, int, int]], shuffle: bool
) -> None:
    """Stop and resume again and again, each time with another world size and worker
    count (simulated workers): the epoch is read exactly once (padding aside)."""
    state: Any = None
    seen: list[int] = []
    for world, workers, k in plan:
        for rank in range(world):
            ds = make(pk_table, rank, world, shuffle=shuffle)
            if state is not None:
                ds.load_state_dict(state)
            copies = [ds_copy(ds) for _ in range(workers)]
            streams = [c.iter_shard(w, workers) for w, c in enumerate(copies)]
            # k steps, round-robin over the workers, as DataLoader delivers them.
            for w in itertools.islice(itertools.cycle(range(workers)), k):
                batch = next(streams[w], None)
                if batch is not None:
                    seen += ids_of(batch)
            if rank == 0:  # what StatefulDataLoader saves: the steps and the workers' positions
                snapshots = {
                    f"worker_{w}": {"dataset_state": c.state_dict()} for w, c in enumerate(copies)
                }
                saved = {
                    "_snapshot": {"_snapshot_step": k, "_worker_snapshots": snapshots},
                    "_steps_since_snapshot": 0,
                }
        state = saved
    final = make(pk_table, shuffle=shuffle)
    final.load_state_dict(state)
    seen += [i for b in final for i in ids_of(b)]
    check_exact(seen, expected_ids(pk_table), sum(w for w, _, _ in plan) + 1)
