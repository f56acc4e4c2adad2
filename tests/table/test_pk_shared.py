"""Row groups shared by key-range parts are decoded once (table/pk/shared.py, issue 20).

A cut key falls inside row groups of the section's files; the parts on both sides
win rows there. Read as the loaders read (a counting read decides every part
first), such a group is decoded by the first part that needs it and its winners
handed to the others; every part's rows, and their order, are those of a part
read on its own.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.table.pk import group_readers
from raylake.table.pk.late import clear_decision_cache, shared_group_info
from raylake.table.pk.shared import SharedGroups
from raylake.train.source import LakeSource


@pytest.fixture(autouse=True, params=[0, 3], ids=["groups-in-turn", "groups-on-threads"])
def group_threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every read here twice: its row groups decoded one after another, and on three
    threads at once (as on a host of 12 cores or more: group_readers.py)."""
    monkeypatch.setattr(group_readers, "GROUP_THREADS", request.param)
    return int(request.param)


SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("v", pa.int64()),
        ("s", pa.string()),
        ("ts", pa.int64()),
    ]
)


def upserted(
    root: Path,
    *,
    keys: int,
    group_rows: int,
    upserts: list[float],
    seed: int,
    **options: Any,
) -> raylake.Table:
    """``keys`` rows, then one write per fraction of the keys, picked at random."""
    rng = np.random.default_rng(seed)
    options = {"compaction.auto": "false", "write.row-group-rows": str(group_rows), **options}
    tbl = raylake.create_table(
        str(root / uuid.uuid4().hex), SCHEMA, primary_key=["id"], buckets=1, options=options
    )
    ids = np.arange(keys)
    tbl.write(pa.table({"id": ids, "v": ids, "s": ["base"] * keys, "ts": ids}, schema=SCHEMA))
    for k, fraction in enumerate(upserts):
        picked = np.sort(rng.choice(keys, max(int(keys * fraction), 1), replace=False))
        n = len(picked)
        v = rng.integers(0, 1000, n)
        ts = rng.integers(0, 3 * keys, n)  # out of order: sequence.field picks older files
        tbl.write(pa.table({"id": picked, "v": v, "s": [f"u{k}"] * n, "ts": ts}, schema=SCHEMA))
    return tbl


def alone(source: LakeSource) -> list[pa.Table]:
    """Each piece read with nothing cached: no neighbour's decision, nothing shared."""
    found = []
    for i in range(len(source.pieces)):
        clear_decision_cache()
        found.append(source.read_piece(i))
    assert shared_group_info()["shared"] == 0
    return found


def loaded(tbl: raylake.Table) -> LakeSource:
    """A loader's source: the counting read decides every part."""
    clear_decision_cache()
    return LakeSource.open(tbl, columns=None)


@pytest.mark.parametrize(
    "options",
    [{}, {"merge-engine": "first-row"}, {"sequence.field": "ts"}],
    ids=["deduplicate", "first-row", "sequence-field"],
)
def test_a_group_two_parts_win_in_is_decoded_once(tmp_path: Path, options: Any) -> None:
    tbl = upserted(tmp_path, keys=2000, group_rows=128, upserts=[0.3, 0.3], seed=1, **options)
    source = loaded(tbl)
    assert len(source.pieces) > 2 and all(p.ranges for p in source.pieces)
    shared = [source.read_piece(i) for i in range(len(source.pieces))]
    info = shared_group_info()
    assert info["shared"] > 0 and info["shared"] == info["decoded"]
    assert info["entries"] == 0 and info["bytes"] == 0  # every part took its winners
    expected = alone(source)
    assert all(a.equals(b) for a, b in zip(shared, expected, strict=True))
    everything = pa.concat_tables(shared).sort_by("id")
    assert everything.equals(tbl.to_arrow().sort_by("id"))


def test_parts_read_at_once_on_threads_get_their_own_rows(tmp_path: Path) -> None:
    tbl = upserted(tmp_path, keys=3000, group_rows=100, upserts=[0.25, 0.25, 0.25], seed=2)
    source = loaded(tbl)
    expected = alone(source)
    for _ in range(3):
        source = loaded(tbl)
        order = list(range(len(source.pieces)))[::-1]  # later parts first: they decode
        with ThreadPoolExecutor(4) as pool:
            found = dict(zip(order, pool.map(source.read_piece, order)))
        assert all(found[i].equals(expected[i]) for i in range(len(expected)))
        assert shared_group_info()["shared"] > 0


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    keys=st.integers(200, 1500),
    group_rows=st.sampled_from([16, 50, 64, 200]),
    upserts=st.lists(st.floats(0.01, 0.9), min_size=1, max_size=3),
    engine=st.sampled_from(["deduplicate", "first-row", "sequence-field"]),
    seed=st.integers(0, 1000),
)
def test_shared_reads_equal_reads_alone(
    tmp_path: Path, keys: int, group_rows: int, upserts: list[float], engine: str, seed: int
) -> None:
    options = {"sequence.field": "ts"} if engine == "sequence-field" else {"merge-engine": engine}
    tbl = upserted(
        tmp_path, keys=keys, group_rows=group_rows, upserts=upserts, seed=seed, **options
    )
    source = loaded(tbl)
    shared = [source.read_piece(i) for i in range(len(source.pieces))]
    assert shared_group_info()["entries"] == 0
    assert all(a.equals(b) for a, b in zip(shared, alone(source), strict=True))
    assert sum(t.num_rows for t in shared) == keys


def table_of(n: int) -> pa.Table:
    return pa.table({"x": np.arange(n)})


def test_a_waiter_takes_what_the_decoding_part_left() -> None:
    groups = SharedGroups(1 << 20)
    started, release = threading.Event(), threading.Event()
    calls = []

    def compute() -> dict[int, pa.Table]:
        calls.append(1)
        started.set()
        release.wait(5)
        return {0: table_of(1), 1: table_of(2)}

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(groups.take, "g", 0, compute)
        started.wait(5)
        waiter = threading.Thread(target=lambda: found.append(groups.take("g", 1, compute)))
        found: list[pa.Table] = []
        waiter.start()
        release.set()
        waiter.join(5)
        assert first.result().num_rows == 1
    assert found[0].num_rows == 2 and len(calls) == 1
    assert groups.info() == {"decoded": 1, "shared": 1, "entries": 0, "bytes": 0}


def test_a_part_decodes_itself_when_its_winners_were_evicted_or_the_decoding_failed() -> None:
    groups = SharedGroups(0)  # nothing is kept
    assert groups.take("g", 0, lambda: {0: table_of(1), 1: table_of(2)}).num_rows == 1
    assert groups.info()["entries"] == 0
    assert groups.take("g", 1, lambda: {0: table_of(1), 1: table_of(3)}).num_rows == 3

    groups = SharedGroups(1 << 20)

    def broken() -> dict[int, pa.Table]:
        raise OSError("unreadable")

    with pytest.raises(OSError, match="unreadable"):
        groups.take("h", 0, broken)
    assert groups.info()["entries"] == 0
    assert groups.take("h", 1, lambda: {0: table_of(1), 1: table_of(4)}).num_rows == 4


def test_the_oldest_leftovers_go_first_over_the_budget() -> None:
    one = table_of(1000).nbytes
    groups = SharedGroups(int(one * 1.5))
    groups.take("a", 0, lambda: {0: table_of(1), 1: table_of(1000)})
    groups.take("b", 0, lambda: {0: table_of(1), 1: table_of(1000)})
    assert groups.info()["entries"] == 1 and groups.info()["bytes"] == one
    fresh = table_of(7)
    assert groups.take("a", 1, lambda: {1: fresh}) is fresh  # evicted: decoded again
    assert groups.take("b", 1, lambda: {0: table_of(1), 1: fresh}).num_rows == 1000
    assert groups.info()["bytes"] == 0
