"""One stream reader for both table formats: the same plans, shards, defaults and options.

Each test runs on a Paimon fixture table (tests/paimon/fixtures) and on a raylake table
holding the same rows, committed snapshot by snapshot as the Paimon table was.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import raylake
from raylake.streaming.reader import DEFAULT_CATCH_UP_AFTER, StreamReader
from raylake.table import Table

FIXTURES = Path(__file__).resolve().parent.parent / "paimon" / "fixtures"
FORMATS = ["raylake", "paimon"]


def _expected(name: str, snapshot_id: int) -> pa.Table:
    return pq.read_table(FIXTURES / name / "expected" / f"snapshot-{snapshot_id}.parquet")


def _table(fmt: str, name: str, tmp_path: Path) -> Table:
    """The Paimon fixture ``name``, or a raylake table with one commit per Paimon
    snapshot holding the rows that snapshot added (an append table) or the state it
    left (a primary-key table: upserts, then the deletes of keys it removed)."""
    paimon_dir = tmp_path / "paimon"
    shutil.copytree(FIXTURES / name / "table", paimon_dir)
    paimon = raylake.open_table(str(paimon_dir))
    if fmt == "paimon":
        return paimon
    keys = list(paimon.table_schema.primary_key)
    buckets = paimon.table_schema.buckets if keys else None
    tbl = raylake.create_table(
        str(tmp_path / "raylake"), paimon.schema, primary_key=keys, buckets=buckets
    )
    previous = paimon.schema.empty_table()
    for snap in paimon.snapshots():
        state = _expected(name, snap.id).select(paimon.schema.names).cast(paimon.schema)
        if keys:
            gone = pc.invert(pc.is_in(previous.column("id"), state.column("id")))
            tbl.write(state)
            if pc.any(gone).as_py():
                tbl.delete(previous.filter(gone).select(keys))
        else:
            tbl.write(state.filter(pc.invert(pc.is_in(state.column("id"), previous.column("id")))))
        previous = state
    return tbl


def _ids(reader: StreamReader) -> list[int]:
    return [i for plan in reader.plans(timeout=0) for i in plan.to_arrow().column("id").to_pylist()]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unbucketed_append_table_is_sharded_by_file(fmt: str, tmp_path: Path) -> None:
    """Shards of an unbucketed append table split its files: disjoint, together every
    row, and none empty (a Paimon table used to stream every row to shard 0)."""
    tbl = _table(fmt, "append_unaware", tmp_path)
    everything = sorted(_ids(tbl.stream(start="earliest")))
    assert everything == sorted(_expected("append_unaware", 3).column("id").to_pylist())
    shares = [_ids(tbl.stream(start="earliest", shard=(i, 2))) for i in range(2)]
    assert not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == everything
    if fmt == "paimon":
        # A file's shard comes from its path. The fixture's names are fixed, so its two
        # shares are both non-empty; a raylake table's file names are random, so which
        # shard its three files land on is not (disjoint and complete still hold).
        assert all(shares), [len(s) for s in shares]


@pytest.mark.parametrize("fmt", FORMATS)
def test_primary_key_shards_split_the_buckets(fmt: str, tmp_path: Path) -> None:
    tbl = _table(fmt, "pk_deduplicate", tmp_path)
    shares = [
        {i for p in tbl.stream(start="earliest", shard=(s, 2)).plans(timeout=0) if p.kind == "full"
         for i in p.to_arrow().column("id").to_pylist()}
        for s in range(2)
    ]  # fmt: skip
    assert not shares[0] & shares[1] and all(shares)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_same_defaults_and_options(fmt: str, tmp_path: Path) -> None:
    tbl = _table(fmt, "append_unaware", tmp_path)
    reader = tbl.stream()
    assert type(reader) is StreamReader
    assert reader.planner.on_overwrite == "refresh"
    assert reader.catch_up_after == DEFAULT_CATCH_UP_AFTER and reader._prefetch is True
    tuned = tbl.stream(on_overwrite="skip", catch_up_after=None, prefetch=False)
    assert tuned.planner.on_overwrite == "skip" and tuned.catch_up_after is None
    assert tuned._prefetch is False


def _fold(state: dict[int, dict[str, Any]], rows: pa.Table) -> None:
    for row in rows.to_pylist():
        kind = row.pop("_rl_kind")
        if kind in ("+I", "+U"):
            state[row["id"]] = row
        elif kind == "-D":
            state.pop(row["id"], None)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["append_unaware", "pk_deduplicate"])
def test_a_reader_far_behind_catches_up_in_one_plan(fmt: str, name: str, tmp_path: Path) -> None:
    """With catch_up_after=1 the snapshots after the start are read as one plan, whose
    changes bring the start's state to the latest one."""
    tbl = _table(fmt, name, tmp_path)
    plans = list(
        tbl.stream(start="earliest", include_row_kind=True, catch_up_after=1).plans(timeout=0)
    )
    assert [p.kind for p in plans] == ["full", "diff"]
    state: dict[int, dict[str, Any]] = {}
    for plan in plans:
        _fold(state, plan.to_arrow())
    latest = max(s.id for s in raylake.open_table(str(tmp_path / "paimon")).snapshots())
    want = _expected(name, latest).select(tbl.schema.names).to_pylist()
    assert sorted(state.values(), key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_consumer_resumes_where_it_checkpointed(fmt: str, tmp_path: Path) -> None:
    tbl = _table(fmt, "pk_deduplicate", tmp_path)
    reader = tbl.stream(consumer_id="c", start="earliest")
    first = list(reader.plans(max_plans=2))
    reader.checkpoint()
    resumed = tbl.stream(consumer_id="c", start="earliest")
    assert resumed.next_snapshot_id == first[-1].next_snapshot_id
    assert tbl.consumer("c").next_snapshot_id == first[-1].next_snapshot_id


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["append_unaware", "pk_deduplicate", "pk_changelog_input"])
def test_changes_bring_one_state_to_the_other(fmt: str, name: str, tmp_path: Path) -> None:
    """The change model, on both formats: ``changes(start, end)`` applied to the state
    at ``start`` gives the state at ``end``, for every pair of snapshots."""
    tbl = _table(fmt, name, tmp_path)
    ids = [0, *(s.id for s in tbl.snapshots())]
    for i, start in enumerate(ids):
        state = (
            {} if start == 0 else {r["id"]: r for r in tbl.to_arrow(snapshot_id=start).to_pylist()}
        )
        for end in ids[i + 1 :]:
            got = dict(state)
            _fold(got, tbl.changes(start, end, include_row_kind=True).to_arrow())
            want = tbl.to_arrow(snapshot_id=end).to_pylist()
            assert sorted(got.values(), key=lambda r: r["id"]) == sorted(
                want, key=lambda r: r["id"]
            )
