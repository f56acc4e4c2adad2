"""raylake reads every fixture table, at every snapshot, as pypaimon reads it."""

from __future__ import annotations

import pytest
from paimon_util import FIXTURES, NAMES, case, expected, rows_by_key

import raylake

CASES = [(name, sid) for name in NAMES for sid in case(name)["snapshots"]]


@pytest.mark.parametrize(("name", "snapshot_id"), CASES, ids=[f"{n}@{s}" for n, s in CASES])
def test_read_equals_pypaimon(name: str, snapshot_id: int) -> None:
    tbl = raylake.open_table(str(FIXTURES / name / "table"))
    want = expected(name, snapshot_id)
    got = tbl.to_arrow(snapshot_id=snapshot_id)
    assert got.schema.names == want.schema.names
    sort = case(name)["sort"]
    assert rows_by_key(got, sort) == rows_by_key(want, sort)


@pytest.mark.parametrize("name", NAMES)
def test_latest_snapshot_and_count(name: str) -> None:
    tbl = raylake.open_table(str(FIXTURES / name / "table"))
    latest = case(name)["snapshots"][-1]
    want = expected(name, latest)
    sort = case(name)["sort"]
    assert tbl.format == "paimon"
    assert tbl.latest_snapshot().id == latest
    assert [s.id for s in tbl.snapshots()] == case(name)["snapshots"]
    assert rows_by_key(tbl.to_arrow(), sort) == rows_by_key(want, sort)
    assert tbl.count() == want.num_rows
    assert sum(b.num_rows for b in tbl.to_batches()) == want.num_rows


@pytest.mark.parametrize("name", NAMES)
def test_splits_read_one_by_one(name: str) -> None:
    """A plan's splits, each read on its own (as a worker does), give the whole table."""
    tbl = raylake.open_table(str(FIXTURES / name / "table"))
    scan = tbl.scan()
    splits = scan.plan()
    rows = [r for split in splits for b in tbl.read_split(split) for r in b.to_pylist()]
    sort = case(name)["sort"]
    want = rows_by_key(expected(name, case(name)["snapshots"][-1]), sort)
    assert sorted(rows, key=lambda r: [r[c] for c in sort]) == want


@pytest.mark.parametrize("name", [n for n in NAMES if case(n)["kind"] == "append"])
def test_append_tables_read_each_bucket_in_write_order(name: str) -> None:
    """The fixtures write ascending ids, commit after commit: each bucket's files come
    in the order they were written (by sequence number, then as the manifests list
    them, as Paimon's own split generator orders them), not in the order of their
    random names (docs/decisions.md, "Reads follow the order rows were written")."""
    tbl = raylake.open_table(str(FIXTURES / name / "table"))
    for split in tbl.scan(columns=["id"]).plan():
        ids = [i for batch in tbl.read_split(split) for i in batch.column("id").to_pylist()]
        assert ids == sorted(ids), (split.partition, split.bucket)
