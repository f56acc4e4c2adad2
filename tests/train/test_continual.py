"""Continual training: LakeStreamDataset over new commits, sharded, resumable."""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import raylake  # noqa: E402
from raylake.errors import ResumeStateError  # noqa: E402
from raylake.train.torch import LakeStreamDataset  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float32())])


def commit(tbl: raylake.Table, start: int, n: int) -> None:
    ids = np.arange(start, start + n, dtype=np.int64)
    tbl.write(pa.table({"id": ids, "x": ids.astype(np.float32)}, schema=SCHEMA))


def ids_of(batches: list[dict[str, torch.Tensor]]) -> list[int]:
    return [int(i) for b in batches for i in b["id"]]


@pytest.fixture
def tbl(warehouse: Path) -> raylake.Table:
    t = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for c in range(5):
        commit(t, c * 37, 37)  # 37 rows: not a multiple of any world size or batch
    return t


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_read_every_row_once_with_equal_steps(tbl: raylake.Table, world: int) -> None:
    per_rank = [
        list(
            LakeStreamDataset(
                tbl,
                start="earliest",
                batch_size=8,
                rank=r,
                world_size=world,
                until_snapshot=5,
                columns=["id", "x"],
            )
        )
        for r in range(world)
    ]
    assert len({len(batches) for batches in per_rank}) == 1  # equal steps per rank
    seen = Counter(i for batches in per_rank for i in ids_of(batches))
    assert set(seen) == set(range(5 * 37))
    assert sum(seen.values()) - 5 * 37 <= 5 * (world - 1)  # padding: < world repeats a commit


def test_follows_commits_as_they_happen(tbl: raylake.Table) -> None:
    def writer() -> None:
        for c in range(5, 9):
            time.sleep(0.05)
            commit(tbl, c * 37, 37)

    thread = threading.Thread(target=writer)
    thread.start()
    ds = LakeStreamDataset(tbl, start="latest-new", batch_size=16, poll_interval=0.01,
                           until_snapshot=9, columns=["id"], shuffle=False)  # fmt: skip
    seen = ids_of(list(ds))
    thread.join()
    assert seen == list(range(5 * 37, 9 * 37))  # in commit order without shuffle


def test_resume_from_the_trainers_checkpoint(tbl: raylake.Table) -> None:
    def make() -> LakeStreamDataset:
        return LakeStreamDataset(tbl, start="earliest", batch_size=10, until_snapshot=5, seed=3)

    whole = ids_of(list(make()))
    first = make()
    it = iter(first)
    head = ids_of([next(it) for _ in range(7)])
    state = first.state_dict()
    assert state["position"]["next_snapshot_id"] >= 1 and state["batches_done"] >= 1
    resumed = make()
    resumed.load_state_dict(state)
    assert head + ids_of(list(resumed)) == whole


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"sharding": None}, "batches_done' to 0"),  # rule 1 saved no rule
        ({"sharding": 2}, "batches_done' to 0"),  # rule 2 dealt files in name order
        ({"shuffle_stream": "0" * 16, "numpy": "0.0"}, r"numpy 0\.0 draws other permutations"),
    ],
)
def test_a_mid_plan_position_saved_under_other_rules_is_refused(
    tbl: raylake.Table, changed: dict[str, Any], named: str
) -> None:
    """A position saved inside a snapshot by a version that shared rows out by another
    rule, or where numpy drew other permutations, cannot resume there without repeating
    or skipping rows: refused, naming the way out; at a snapshot's start it is the same
    under any rule, and resumes."""

    def make() -> LakeStreamDataset:
        return LakeStreamDataset(tbl, start="earliest", batch_size=10, until_snapshot=5, seed=3)

    first = make()
    it = iter(first)
    for _ in range(5):
        next(it)
    old = {k: v for k, v in {**first.state_dict(), **changed}.items() if v is not None}
    assert old["batches_done"] >= 1
    with pytest.raises(ResumeStateError, match=named):
        make().load_state_dict(old)

    at_start = make()
    at_start.load_state_dict({**old, "batches_done": 0})
    snapshot = old["position"]["next_snapshot_id"]
    whole = make()
    whole.load_state_dict({**first.state_dict(), "batches_done": 0})
    assert ids_of(list(at_start)) == ids_of(list(whole))
    assert snapshot >= 1


def test_dataloader_workers_share_the_rows(tbl: raylake.Table) -> None:
    ds = LakeStreamDataset(tbl, start="earliest", batch_size=8, until_snapshot=5)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    seen = Counter(ids_of(list(loader)))
    assert set(seen) == set(range(5 * 37))
    assert sum(seen.values()) - 5 * 37 <= 5  # at most one repeat per commit (2 consumers)


# torchdata 0.11 calls torch.set_vital, which torch 2.13 deprecates.
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_stateful_dataloader_resumes(tbl: raylake.Table) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader() -> StatefulDataLoader:
        ds = LakeStreamDataset(tbl, start="earliest", batch_size=8, until_snapshot=5)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2)

    whole = ids_of(list(loader()))
    first = loader()
    it = iter(first)
    head = ids_of([next(it) for _ in range(5)])
    state = first.state_dict()
    del it
    again = loader()
    again.load_state_dict(state)
    assert Counter(head + ids_of(list(again))) == Counter(whole)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_a_state_saved_after_the_end_continues_with_a_later_until(tbl: raylake.Table) -> None:
    """StatefulDataLoader (no workers) loads a finished state into the dataset, makes an
    iterator from it and drops it unread for a new one: that one must start at the
    position too, not at ``start`` (which read snapshots 1..3 again)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader(until: int) -> StatefulDataLoader:
        ds = LakeStreamDataset(tbl, start="earliest", batch_size=8, until_snapshot=until)
        return StatefulDataLoader(ds, batch_size=None, num_workers=0)

    first = loader(3)
    head = ids_of(list(first))
    assert sorted(head) == list(range(3 * 37))
    again = loader(5)
    again.load_state_dict(first.state_dict())
    assert sorted(ids_of(list(again))) == list(range(3 * 37, 5 * 37))


def test_a_position_of_another_table_or_seed_is_refused(
    tbl: raylake.Table, warehouse: Path
) -> None:
    ds = LakeStreamDataset(tbl, start="earliest", until_snapshot=1)
    list(ds)
    state = ds.state_dict()
    with pytest.raises(ResumeStateError, match="another seed"):
        LakeStreamDataset(tbl, seed=9).load_state_dict(state)
    other = raylake.create_table(str(warehouse / "other"), SCHEMA)
    with pytest.raises(ResumeStateError, match="another uri"):
        LakeStreamDataset(other).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="not a continual-training position"):
        LakeStreamDataset(tbl).load_state_dict({"epoch": 1})
    with pytest.raises(ResumeStateError, match="not been iterated"):
        LakeStreamDataset(tbl).state_dict()


def test_consumers_read_no_latest_hint_per_plan(tbl: raylake.Table) -> None:
    """Catch-up is off, so a poll does not ask the ``LATEST`` hint how far behind it is:
    the hint reads do not grow with the number of plans (counted on the real files)."""
    from raylake.testing.counting_fs import PROTOCOL, register

    fs = register()
    counted = raylake.open_table(f"{PROTOCOL}://{tbl.uri}")
    hint_reads = []
    for until in (1, 5):
        ds = LakeStreamDataset(counted, start="earliest", batch_size=8, until_snapshot=until)
        fs.reads.clear()
        assert len(ids_of(list(ds))) == 37 * until
        hint_reads.append(fs.count("snapshot/LATEST"))
    assert hint_reads[0] == hint_reads[1]


def test_each_consumer_reads_only_the_files_of_its_share(warehouse: Path) -> None:
    """A plan of many files is dealt by exact row counts: consumer g of G reads the data
    files of its share, not the whole plan (issue 17). Here the state at snapshot 8 is
    8 files of 37 rows, one split each, so consumer g of 4 takes splits 2g and 2g + 1
    (unshuffled); it reads from a copy of the table holding only those two files."""
    one_split_per_file = {"read.split.target-size": "1"}
    tbl = raylake.create_table(str(warehouse / "many"), SCHEMA, options=one_split_per_file)
    for c in range(8):
        commit(tbl, c * 37, 37)
    files = [f.path for s in tbl.scan().plan() for f in s.files]
    assert len(files) == 8
    for g in range(4):
        copy = warehouse / f"copy-{g}"
        shutil.copytree(warehouse / "many", copy)
        mine = files[2 * g : 2 * g + 2]
        for path in set(files) - set(mine):
            (copy / path).unlink()  # a read of another consumer's file would fail
        ds = LakeStreamDataset(str(copy), start=8, batch_size=8, rank=g, world_size=4,
                               until_snapshot=8, columns=["id", "x"], shuffle=False)  # fmt: skip
        expected = raylake.open_table(str(warehouse / "many")).scan().plan()[2 * g : 2 * g + 2]
        rows = [r for s in expected for b in tbl.read_split(s) for r in b.column("id").to_pylist()]
        assert ids_of(list(ds)) == rows


@pytest.mark.parametrize("world", [3, 4])
def test_dealt_shares_deliver_every_row_once_with_equal_steps(warehouse: Path, world: int) -> None:
    tbl = raylake.create_table(
        str(warehouse / "many"), SCHEMA, options={"read.split.target-size": "1"}
    )
    for c in range(8):
        commit(tbl, c * 50, 37 + c)  # splits of unequal rows
    per_rank = [
        ids_of(list(LakeStreamDataset(tbl, start=8, batch_size=8, rank=r, world_size=world,
                                      until_snapshot=8, columns=["id", "x"])))
        for r in range(world)
    ]  # fmt: skip
    assert len({len(ids) for ids in per_rank}) == 1
    seen = Counter(i for ids in per_rank for i in ids)
    expected = {c * 50 + i for c in range(8) for i in range(37 + c)}
    assert set(seen) == expected and sum(seen.values()) - len(expected) <= world - 1


def test_primary_key_plans_are_shared_out_once_with_equal_steps(warehouse: Path) -> None:
    """The full state of a primary-key table (merged, counted before reading) and its
    later bucket diffs (read whole, then shared out) reach every key once per plan."""
    tbl = raylake.create_table(
        str(warehouse / "pk"), SCHEMA, primary_key=["id"], buckets=2,
        options={"read.split.target-size": "1"},
    )  # fmt: skip
    commit(tbl, 0, 100)
    commit(tbl, 50, 100)  # overlaps: the state at snapshot 2 is merged
    updated = np.arange(20, dtype=np.int64)
    tbl.write(pa.table({"id": updated, "x": -updated.astype(np.float32) - 1}, schema=SCHEMA))
    world = 3
    per_rank = [
        ids_of(list(LakeStreamDataset(tbl, start=2, batch_size=7, rank=r, world_size=world,
                                      until_snapshot=3, columns=["id", "x"])))
        for r in range(world)
    ]  # fmt: skip
    assert len({len(ids) for ids in per_rank}) == 1  # equal steps and rows per rank
    seen = Counter(i for ids in per_rank for i in ids)
    expected = Counter([*range(150), *range(20)])
    assert set(seen) == set(expected)
    assert all(seen[k] >= n for k, n in expected.items())
    assert sum(seen.values()) - sum(expected.values()) <= 2 * (world - 1)


def test_stats_count_the_batches_of_the_stream(tbl: raylake.Table) -> None:
    ds = LakeStreamDataset(tbl, start="earliest", batch_size=10, until_snapshot=5, columns=["id"])
    batches = list(ds)
    stats = ds.stats()
    assert stats.batches == len(batches) and stats.rows == sum(len(b["id"]) for b in batches)
    assert stats.bytes == 8 * stats.rows and stats.wait_s <= stats.elapsed_s


def test_batches_keep_their_columns_while_another_writer_changes_the_schema(
    tbl: raylake.Table,
) -> None:
    """Another writer renames x and widens it to float64 while the dataset follows the
    table: batches keep the keys and dtypes the dataset was made with, in the pass that
    was running and in one started after the change (a DataLoader worker, a resume)."""
    ds = LakeStreamDataset(
        tbl, start="earliest", batch_size=37, until_snapshot=6, columns=["id", "x"], shuffle=False,
        filter="x >= 0",
    )  # fmt: skip
    batches = iter(ds)
    head = [next(batches) for _ in range(5)]
    writer = raylake.open_table(tbl.uri)
    with writer.update_schema() as u:
        u.rename_column("x", "x2")
        u.update_column("x2", pa.float64())
    ids = np.arange(5 * 37, 6 * 37, dtype=np.int64)
    writer.write(pa.table({"id": ids, "x2": ids.astype(np.float64)}))
    running = list(batches)
    tbl.refresh()  # the dataset's Table: a pass started now plans under the new schema
    for rest in (running, list(ds)[5:]):
        assert [sorted(b) for b in rest] == [["id", "x"]]
        assert rest[0]["x"].dtype == torch.float32 and rest[0]["x"].tolist() == ids.tolist()
    assert ids_of(head + rest) == list(range(6 * 37))


def test_a_column_deleted_under_the_stream_is_named(tbl: raylake.Table) -> None:
    ds = LakeStreamDataset(
        tbl, start="earliest", batch_size=37, until_snapshot=6, columns=["id", "x"]
    )
    batches = iter(ds)
    [next(batches) for _ in range(5)]
    writer = raylake.open_table(tbl.uri)
    with writer.update_schema() as u:
        u.delete_column("x")
    writer.write(pa.table({"id": np.arange(5 * 37, 6 * 37, dtype=np.int64)}))
    with pytest.raises(
        raylake.SchemaError, match="column 'x', which this LakeStreamDataset reads, was deleted"
    ):
        next(batches)


@pytest.mark.parametrize("batch_size", [7, 25])
def test_a_resume_under_another_batch_size_reads_the_rest_of_the_snapshot(
    tbl: raylake.Table, batch_size: int
) -> None:
    """A position three batches of 10 into a snapshot resumes in batches of another size
    with the rows after those 30, as LakeIterableDataset's does (it skipped three
    batches of the new size); under another shuffle it is refused."""

    def make(size: int, shuffle: bool = True) -> LakeStreamDataset:
        return LakeStreamDataset(tbl, start="earliest", batch_size=size, until_snapshot=5,
                                 seed=3, columns=["id"], shuffle=shuffle)  # fmt: skip

    first = make(10)
    batches = iter(first)
    head = ids_of([next(batches) for _ in range(3)])
    state = first.state_dict()
    resumed = make(batch_size)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert sorted(head + ids_of(rest)) == list(range(5 * 37))
    assert max(len(b["id"]) for b in rest) == batch_size
    with pytest.raises(ResumeStateError, match="with shuffle=True, and this dataset has"):
        make(10, shuffle=False).load_state_dict(state)


def test_a_position_inside_a_snapshot_is_refused_under_another_filter(tbl: raylake.Table) -> None:
    """The rows a position had delivered are the first of its filter's share: under another
    filter the rest would be other rows (some lost, some twice)."""
    first = LakeStreamDataset(tbl, start="earliest", batch_size=5, until_snapshot=5,
                              columns=["id"], filter="id < 150")  # fmt: skip
    batches = iter(first)
    [next(batches) for _ in range(2)]
    state = first.state_dict()
    other = LakeStreamDataset(tbl, start="earliest", batch_size=5, until_snapshot=5, columns=["id"])
    with pytest.raises(ResumeStateError, match=r"with filter=.*and this dataset has filter=''"):
        other.load_state_dict(state)
    other.load_state_dict({**state, "batches_done": 0})  # the way out: the snapshot again
