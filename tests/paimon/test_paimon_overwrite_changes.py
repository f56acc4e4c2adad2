"""``PaimonTable.changes`` over OVERWRITE snapshots: the buckets an overwrite touched
give their net change, the diff of the states at both ends (docs/paimon.md).

Fixtures written by pypaimon (a partition overwrite, a dynamic partition overwrite, a
truncation, an overwrite of an input-changelog table, one of a dynamic-bucket table)
and built from the spec (an overwrite that changes the bucket count). Every range of
every fixture is checked against both ends read by ``to_arrow(snapshot_id=...)``.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from paimon_spec import commit, data_file, live_entries
from paimon_util import FIXTURES, case, rows_by_key
from test_compacted import _merge, _rows

import raylake
from raylake.errors import StreamError

PK_OVERWRITE = ["pk_overwrite", "pk_changelog_overwrite", "pk_dynamic_overwrite"]


def _table(name: str) -> Any:
    return raylake.open_table(str(FIXTURES / name / "table"))


def _state(tbl: Any, snapshot_id: int) -> pa.Table:
    """The table at ``snapshot_id`` (0: empty) under the latest schema."""
    if snapshot_id:
        return tbl.to_arrow(snapshot_id=snapshot_id)
    return tbl.table_schema.arrow_schema.empty_table()


def _overwrite_ranges(name: str) -> list[tuple[str, int, int]]:
    """Every range (start, end] of the fixture with an OVERWRITE snapshot in it."""
    ids = case(name)["snapshots"]
    snaps = FIXTURES / name / "table" / "snapshot"
    kinds = {i: json.loads((snaps / f"snapshot-{i}").read_text())["commitKind"] for i in ids}
    return [
        (name, a, b)
        for b in ids
        for a in [0, *ids]
        if a < b and any(kinds[i] == "OVERWRITE" for i in range(a + 1, b + 1))
    ]


def _keyed(rows: pa.Table, key: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[k] for k in key): r for r in rows.to_pylist()}


def net_diff(before: pa.Table, after: pa.Table, key: list[str]) -> set[tuple[Any, ...]]:
    """The model: (kind, row) of every key whose row differs between two states."""
    old, new = _keyed(before, key), _keyed(after, key)
    out: set[tuple[Any, ...]] = set()
    for k in old.keys() | new.keys():
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if a is None:
            out.add(("+I", *b.values()))  # type: ignore[union-attr]
        elif b is None:
            out.add(("-D", *a.values()))
        else:
            out |= {("-U", *a.values()), ("+U", *b.values())}
    return out


def _as_set(changes: pa.Table) -> set[tuple[Any, ...]]:
    rows = changes.to_pylist()
    found = {(r.pop("_rl_kind"), *r.values()) for r in rows}
    assert len(found) == len(rows)  # no row twice
    return found


def _apply(state: pa.Table, changes: pa.Table, key: list[str]) -> list[dict[str, Any]]:
    rows = _keyed(state, key)
    for row in changes.to_pylist():
        kind = row.pop("_rl_kind")
        k = tuple(row[c] for c in key)
        if kind in ("+I", "+U"):
            rows[k] = row
        else:
            rows.pop(k, None)
    return rows_by_key(pa.Table.from_pylist(list(rows.values()), schema=state.schema), key)


@pytest.mark.parametrize(
    ("name", "start", "end"), [p for n in PK_OVERWRITE for p in _overwrite_ranges(n)]
)
def test_a_range_over_overwrites_takes_one_state_to_the_next(
    name: str, start: int, end: int
) -> None:
    tbl = _table(name)
    key = case(name)["sort"]
    got = tbl.changes(start, end, include_row_kind=True).to_arrow()
    assert _apply(_state(tbl, start), got, key) == rows_by_key(_state(tbl, end), key)
    # Every key that changed is there (a delta bucket may also name a key written again).
    model = net_diff(_state(tbl, start), _state(tbl, end), key)
    assert {r[1:] for r in model if r[0] in ("+I", "+U")} <= {
        r[1:] for r in _as_set(got) if r[0] in ("+I", "+U")
    }


# Ranges of OVERWRITE snapshots only: every changed bucket is compared, so the rows are
# exactly the net change (a key written back as it was gives nothing).
D1 = "dt = '2024-01-01'"


@pytest.mark.parametrize(
    ("name", "start", "end", "where"),
    [
        ("pk_overwrite", 2, 3, None),  # one partition replaced
        ("pk_overwrite", 4, 5, None),  # a dynamic overwrite of the other
        ("pk_overwrite", 4, 6, None),  # ... then a truncation
        ("pk_overwrite", 1, 3, D1),  # an upsert and the overwrite of its partition
        ("pk_changelog_overwrite", 2, 3, None),
        ("pk_dynamic_overwrite", 2, 3, None),  # keys 10 and 11 move bucket, unchanged
        ("pk_dynamic_overwrite", 1, 4, None),
    ],
)
def test_overwritten_buckets_give_the_net_change(
    name: str, start: int, end: int, where: str | None
) -> None:
    tbl = _table(name)
    key = case(name)["sort"]
    got = tbl.changes(start, end, filter=where, include_row_kind=True).to_arrow()
    before, after = _state(tbl, start), _state(tbl, end)
    if where is not None:
        before, after = (t.filter(pc.field("dt") == "2024-01-01") for t in (before, after))
    assert _as_set(got) == net_diff(before, after, key)
    upserts = tbl.changes(start, end, filter=where).to_arrow()
    assert upserts.column_names == tbl.table_schema.column_names
    assert upserts.num_rows == sum(1 for r in _as_set(got) if r[0] in ("+I", "+U"))


@pytest.mark.parametrize("name", [*PK_OVERWRITE, "append_overwrite"])
def test_the_changelog_of_an_overwrite_is_its_net_change(name: str) -> None:
    """changelog(n) of an OVERWRITE gave no row: it read the snapshot as a stream's step,
    which has nothing for it (a stream refreshes or skips), though the snapshot changed
    rows. It gives what changes(n - 1, n) gives."""
    tbl = _table(name)
    overwrites = [s.id for s in tbl.snapshots() if s.commit_kind == "OVERWRITE"]
    assert overwrites
    for sid in overwrites:
        want = _as_set(tbl.changes(sid - 1, sid, include_row_kind=True).to_arrow())
        assert want and _as_set(tbl.changelog(sid)) == want


def test_a_partition_overwrite_leaves_the_other_partition_to_its_deltas() -> None:
    tbl = _table("pk_overwrite")
    splits = tbl.changes(1, 4).plan()
    compared = {(s.partition, s.bucket) for s in splits if type(s).__name__ == "DiffSplit"}
    assert compared == {(("2024-01-01",), 0), (("2024-01-01",), 1)}
    deltas = [s for s in splits if type(s).__name__ == "ChangelogSplit"]
    assert deltas and {s.partition for s in deltas} == {("2024-01-02",)}
    # Splits pickle and read anywhere; a projection applies after the comparison.
    changes = tbl.changes(1, 4, columns=["id", "dt"], include_row_kind=True)
    rows = [
        r
        for split in pickle.loads(pickle.dumps(changes.plan()))
        for batch in changes.read_split(split)
        for r in batch.to_pylist()
    ]
    whole = tbl.changes(1, 4, include_row_kind=True).to_arrow().select(["id", "dt", "_rl_kind"])
    assert rows_by_key(pa.Table.from_pylist(rows), ["id", "dt", "_rl_kind"]) == rows_by_key(
        whole, ["id", "dt", "_rl_kind"]
    )


def test_a_changelog_range_without_the_overwrite_keeps_its_changelog() -> None:
    tbl = _table("pk_changelog_overwrite")
    got = tbl.changes(3, 5, include_row_kind=True).to_arrow()
    assert got.num_rows == sum(tbl.changelog(s).num_rows for s in (4, 5))
    # With the overwrite in the range, its buckets are compared: no before-image of a
    # key the overwrite dropped and rewrote as it was (4, 5).
    rows = tbl.changes(2, 3, include_row_kind=True).to_arrow().to_pylist()
    assert rows and not [r for r in rows if r["id"] in (4, 5)]


@pytest.mark.parametrize(("name", "start", "end"), _overwrite_ranges("append_overwrite"))
def test_an_append_range_over_overwrites_removes_and_adds_rows(
    name: str, start: int, end: int
) -> None:
    tbl = _table(name)
    deleted: Counter[tuple[Any, ...]] = Counter()
    inserted: Counter[tuple[Any, ...]] = Counter()
    for row in tbl.changes(start, end, include_row_kind=True).to_arrow().to_pylist():
        kind = row.pop("_rl_kind")
        assert kind in ("+I", "-D")
        (inserted if kind == "+I" else deleted)[tuple(row.items())] += 1
    before = Counter(tuple(r.items()) for r in _state(tbl, start).to_pylist())
    after = Counter(tuple(r.items()) for r in _state(tbl, end).to_pylist())
    assert not deleted - before  # only rows that were there are deleted
    assert before - deleted + inserted == after
    plain = tbl.changes(start, end).to_arrow()
    assert plain.num_rows == sum(inserted.values())  # without the row kind: inserts only


def test_an_append_partition_overwrite_deletes_the_partition_rows() -> None:
    tbl = _table("append_overwrite")
    got = tbl.changes(2, 3, include_row_kind=True).to_arrow()
    gone = got.filter(pc.equal(got["_rl_kind"], "-D")).drop_columns(["_rl_kind"])
    new = got.filter(pc.equal(got["_rl_kind"], "+I")).drop_columns(["_rl_kind"])
    sort = case("append_overwrite")["sort"]
    assert rows_by_key(gone, sort) == rows_by_key(tbl.to_arrow(snapshot_id=2, filter=D1), sort)
    assert rows_by_key(new, sort) == rows_by_key(tbl.to_arrow(snapshot_id=3, filter=D1), sort)


def _rescale(table: Path) -> int:
    """An OVERWRITE that moves ``pk_deduplicate`` from 4 buckets to 2 (even keys in bucket
    0, odd in 1), every row as it was except key 10 (changed) and key 11 (gone)."""
    schema = json.loads((table / "schema" / "schema-0").read_text())
    schema.update(id=1, options={**schema["options"], "bucket": "2"})
    (table / "schema" / "schema-1").write_text(json.dumps(schema))
    entries = live_entries(table)
    rows = _merge(pa.concat_tables([_rows(table, e) for e in entries]), newest=True)
    rows = rows.filter(pc.not_equal(rows["id"], 11))
    name = pc.if_else(pc.equal(rows["id"], 10), "changed", rows["name"])
    rows = rows.set_column(rows.column_names.index("name"), "name", name)
    added = []
    for bucket in (0, 1):
        part = rows.filter(pc.equal(pc.bit_wise_and(rows["id"], 1), bucket))
        record = data_file(table, entries[0], part, level=5, bucket=bucket)
        record["_TOTAL_BUCKETS"] = 2  # as a writer under schema 1 records it
        record["_FILE"]["_SCHEMA_ID"] = 1
        added.append(record)
    sid = commit(table, kind="OVERWRITE", added=added, deleted=entries)
    path = table / "snapshot" / f"snapshot-{sid}"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schemaId": 1}))
    return sid


def test_a_changed_bucket_count_compares_whole_partitions(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    sid = _rescale(table)
    tbl = raylake.open_table(str(table))
    changes = tbl.changes(sid - 1, sid, include_row_kind=True)
    assert [(s.partition, s.bucket) for s in changes.plan()] == [((), -1)]
    got = changes.to_arrow()
    assert sorted(zip(got["id"].to_pylist(), got["_rl_kind"].to_pylist(), strict=True)) == [
        (10, "+U"),
        (10, "-U"),
        (11, "-D"),
    ]
    assert _as_set(got) == net_diff(_state(tbl, sid - 1), _state(tbl, sid), ["id"])
    whole = tbl.changes(2, sid, include_row_kind=True).to_arrow()
    assert _apply(_state(tbl, 2), whole, ["id"]) == rows_by_key(_state(tbl, sid), ["id"])


def test_a_catch_up_over_a_changed_bucket_count_compares_whole_partitions(
    paimon_copy: Any,
) -> None:
    """A stream far behind reads the rest as one diff of both ends. Compared bucket by
    bucket, a key the rescale moved to a lower bucket came as an insert (its new bucket)
    before its delete (its old one): applied in order, 15 keys were gone."""
    table = paimon_copy("pk_deduplicate")
    sid = _rescale(table)
    tbl = raylake.open_table(str(table))
    reader = tbl.stream(start="earliest", include_row_kind=True, catch_up_after=1)
    full, diff = reader.plans(timeout=0)
    assert (full.kind, diff.kind, diff.snapshot_id) == ("full", "diff", sid)
    assert [(s.partition, s.bucket) for s in diff.splits] == [((), -1)]
    got = _apply(full.to_arrow().drop_columns(["_rl_kind"]), diff.to_arrow(), ["id"])
    assert got == rows_by_key(_state(tbl, sid), ["id"])


def test_a_catch_up_over_overwrites_lets_on_overwrite_decide() -> None:
    """Paimon snapshots do not name their last overwrite: a stream far behind that fails
    on overwrites reads the commit kinds in between, and then the snapshots one by one
    where one overwrote (snapshots 3, 5 and 6 of the fixture); one that skips them
    reads every snapshot on its own, as Paimon's streams do."""
    tbl = _table("pk_overwrite")

    def plans(mode: str) -> Any:
        return tbl.stream(start="earliest", catch_up_after=1, on_overwrite=mode).plans(timeout=0)

    with pytest.raises(StreamError, match=r"snapshot 3 .* on_overwrite='fail'"):
        list(plans("fail"))
    kinds = [(p.snapshot_id, p.kind) for p in plans("skip")]
    assert kinds == [(1, "full"), (2, "delta"), (3, "empty"), (4, "delta"), (5, "empty"),
                     (6, "empty"), (7, "delta")]  # fmt: skip
    assert [p.kind for p in plans("refresh")] == ["full", "diff"]


def test_an_overwrite_that_drops_one_file_brings_older_versions_back(paimon_copy: Any) -> None:
    """A spec-built OVERWRITE deleting the newest level-0 file of a bucket (deletes of
    keys 0..2 there): what the bucket's older files hold comes back."""
    table = paimon_copy("pk_deduplicate")
    newest = max(live_entries(table), key=lambda e: e["_FILE"]["_MAX_SEQUENCE_NUMBER"])
    sid = commit(table, kind="OVERWRITE", deleted=[newest])
    tbl = raylake.open_table(str(table))
    before, after = _state(tbl, sid - 1), _state(tbl, sid)
    got = tbl.changes(sid - 1, sid, include_row_kind=True).to_arrow()
    assert _as_set(got) == net_diff(before, after, ["id"])
    assert got.num_rows and set(got["_rl_kind"].to_pylist()) == {"+I"}
    got = tbl.changes(1, sid, include_row_kind=True).to_arrow()
    assert _apply(_state(tbl, 1), got, ["id"]) == rows_by_key(after, ["id"])


def test_the_start_of_a_range_is_compared_under_the_latest_schema(paimon_copy: Any) -> None:
    """Both ends are read under the range's last schema: a column renamed since the
    start keeps its values, one added since reads as nulls."""
    table = paimon_copy("schema_evolution")
    first_schema = [e for e in live_entries(table) if e["_FILE"]["_SCHEMA_ID"] == 0]
    sid = commit(table, kind="OVERWRITE", deleted=first_schema[:1])
    tbl = raylake.open_table(str(table))
    start = tbl.to_arrow(snapshot_id=1)
    assert start.column_names == ["id", "a"]
    start = start.rename_columns(["id", "a2"]).append_column("b", pa.nulls(len(start), pa.string()))
    got = tbl.changes(1, sid, include_row_kind=True).to_arrow()
    assert got.column_names == ["id", "a2", "b", "_rl_kind"]
    assert "-D" in got["_rl_kind"].to_pylist()
    assert _apply(start, got, ["id"]) == rows_by_key(tbl.to_arrow(), ["id"])


def test_a_deletion_vector_tables_level_0_is_compared_as_a_stream_reads_it(
    paimon_copy: Any,
) -> None:
    """With deletion vectors, a batch read leaves level 0 out until a COMPACT (which gives
    no changes) lifts it: the ends of an overwritten bucket are compared with level 0,
    as the delta files of the other buckets and a stream give it. pypaimon writes level
    0 only, so the table's states are those of the same table without the option."""
    table = paimon_copy("pk_overwrite")
    for path in (table / "schema").iterdir():
        schema = json.loads(path.read_text())
        schema["options"]["deletion-vectors.enabled"] = "true"
        path.write_text(json.dumps(schema))
    plain, dv = _table("pk_overwrite"), raylake.open_table(str(table))
    key = case("pk_overwrite")["sort"]
    assert dv.count() == 0  # a batch read: nothing compacted yet
    for _, start, end in _overwrite_ranges("pk_overwrite"):
        got = dv.changes(start, end, include_row_kind=True).to_arrow()
        want = rows_by_key(_state(plain, end), key)
        assert _apply(_state(plain, start), got, key) == want, (start, end)
