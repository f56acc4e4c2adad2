"""Late materialization and key-range parts of primary-key reads (issue 20).

Each engine's winners are built from rows of different files; a section cut into
key ranges reads back exactly what the whole section does, with exact counts; and
the loader's counting read and its training read share one decision per part.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylake
from raylake.table.pk import group_readers
from raylake.table.pk.dedupe import unseen_in_newer
from raylake.table.pk.kernel import decision_cache_info
from raylake.table.pk.late import clear_decision_cache
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
ENGINES = ["deduplicate", "first-row", "partial-update", "aggregation"]


def make(tmp_path: Path, **options: Any) -> raylake.Table:
    options.setdefault("compaction.auto", "false")
    return raylake.create_table(
        str(tmp_path / uuid.uuid4().hex), SCHEMA, primary_key=["id"], buckets=1, options=options
    )


def put(tbl: raylake.Table, items: list[tuple[Any, ...]]) -> None:
    tbl.write(pa.Table.from_pylist([dict(zip(SCHEMA.names, i)) for i in items], schema=SCHEMA))


def by_id(pa_table: pa.Table) -> dict[int, tuple[Any, ...]]:
    return {r["id"]: (r["v"], r["s"], r["ts"]) for r in pa_table.to_pylist()}


# Three files, one commit each. Key 1's newest version is in the first file, key 2's
# in the second, key 3's in the third; key 4 is deleted in the third and key 5 only
# exists in the middle one.
FILES = [
    [(1, 10, "a", 1), (2, 20, None, 1), (3, 30, "c", 1), (4, 40, "d", 1)],
    [(2, 21, "b2", 2), (3, None, "c2", 2), (5, 50, "e", 2)],
    [(3, 32, None, 3)],
]
EXPECTED = {
    "deduplicate": {1: (10, "a", 1), 2: (21, "b2", 2), 3: (32, None, 3), 5: (50, "e", 2)},
    "first-row": {1: (10, "a", 1), 2: (20, None, 1), 3: (30, "c", 1), 5: (50, "e", 2)},
    # Per column, the last non-null value: key 3 takes v from file 3, s from file 2.
    "partial-update": {1: (10, "a", 1), 2: (21, "b2", 2), 3: (32, "c2", 3), 5: (50, "e", 2)},
    # sum of v, last-non-null of s (the default), max of ts.
    "aggregation": {1: (10, "a", 1), 2: (41, "b2", 2), 3: (62, "c2", 3), 5: (50, "e", 2)},
}


@pytest.mark.parametrize("engine", ENGINES)
def test_winners_take_their_values_from_different_files(tmp_path: Path, engine: str) -> None:
    options = {"merge-engine": engine}
    if engine == "aggregation":
        options |= {"fields.v.aggregate-function": "sum", "fields.ts.aggregate-function": "max"}
    tbl = make(tmp_path, **options)
    for items in FILES:
        put(tbl, items)
    tbl.delete({"id": [4]})
    assert max(len(s.files) for s in tbl.scan().plan()) == 4  # one section, nothing compacted
    assert by_id(tbl.to_arrow()) == EXPECTED[engine]
    assert tbl.count() == 4
    only_s = tbl.to_arrow(columns=["s"], filter="v > 25")
    assert sorted(only_s.column("s").to_pylist(), key=str) == sorted(
        (s for v, s, _ in EXPECTED[engine].values() if v is not None and v > 25), key=str
    )
    assert tbl.to_arrow().schema == SCHEMA  # dictionary-read strings come back as strings


def test_sequence_field_winner_from_an_older_file(tmp_path: Path) -> None:
    tbl = make(tmp_path, **{"sequence.field": "ts"})
    put(tbl, [(1, 10, "new", 9), (2, 20, "old", 1)])
    put(tbl, [(1, 11, "late", 5), (2, 21, "newer", 2)])  # key 1's late row is older
    assert by_id(tbl.to_arrow()) == {1: (10, "new", 9), 2: (21, "newer", 2)}


def random_table(tmp_path: Path, engine: str, seed: int = 7) -> raylake.Table:
    """1,000 keys, three upserts of random keys, a delete; row groups of 64 rows."""
    rng = np.random.default_rng(seed)
    tbl = make(tmp_path, **{"merge-engine": engine, "write.row-group-rows": "64"})
    n = 1_000
    tbl.write(
        pa.table(
            {"id": np.arange(n), "v": np.zeros(n, np.int64), "s": ["a"] * n, "ts": np.zeros(n)},
            schema=SCHEMA,
        )
    )
    for k in range(3):
        ids = rng.choice(n, 300, replace=False)
        v = np.full(300, k + 1, np.int64)
        tbl.write(pa.table({"id": ids, "v": v, "s": [f"s{k}"] * 300, "ts": v}, schema=SCHEMA))
    tbl.delete({"id": [5, 6, 7]})
    return tbl


def read_splits(tbl: raylake.Table, splits: list[Any]) -> pa.Table:
    batches = [b for s in splits for b in tbl.read_split(s)]
    return pa.Table.from_batches(batches, schema=tbl.schema).sort_by("id")


@pytest.mark.parametrize("engine", ENGINES)
def test_key_range_parts_read_what_the_whole_section_reads(tmp_path: Path, engine: str) -> None:
    tbl = random_table(tmp_path, engine)
    whole = tbl.scan().plan()
    parts = tbl.scan().with_split_size(1).plan()
    assert len(whole) == 1 and not whole[0].ranges
    assert len(parts) >= 4 and all(s.ranges for s in parts)
    expected = read_splits(tbl, whole)
    clear_decision_cache()
    assert read_splits(tbl, parts).equals(expected)
    # A part holds a few row groups of each file, never the whole bucket.
    sizes = [sum(b.num_rows for b in tbl.read_split(s)) for s in parts]
    assert max(sizes) < expected.num_rows / 4
    source = LakeSource.open(tbl, columns=None)
    assert source.total == expected.num_rows == tbl.count()
    assert list(source.counts) == [source.read_piece(i).num_rows for i in range(len(parts))]


def test_key_range_parts_of_a_composite_string_key(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("g", pa.string(), nullable=False), *SCHEMA])
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        schema,
        primary_key=["g", "id"],
        buckets=1,
        options={"compaction.auto": "false", "write.row-group-rows": "50"},
    )
    n = 600
    ids = np.arange(n)
    base = {"g": [f"k{i % 3}" for i in ids], "id": ids, "v": ids, "s": ["a"] * n, "ts": ids}
    tbl.write(pa.table(base, schema=schema))
    picked = np.arange(0, n, 7)
    update = {k: [v[i] for i in picked] for k, v in base.items()}
    update["v"] = [-1] * len(picked)
    tbl.write(pa.table(update, schema=schema))
    parts = tbl.scan().with_split_size(1).plan()
    assert all(s.ranges for s in parts)
    rows = pa.Table.from_batches([b for s in parts for b in tbl.read_split(s)], schema=schema)
    assert rows.num_rows == n
    assert sorted(rows.filter(pa.compute.equal(rows.column("v"), -1)).column("id").to_pylist()) == (
        picked.tolist()
    )


def test_counting_and_training_reads_share_one_decision(tmp_path: Path) -> None:
    tbl = random_table(tmp_path, "deduplicate")
    clear_decision_cache()
    source = LakeSource.open(tbl, columns=["v"])  # counts: one decision per part
    counted = decision_cache_info()
    assert counted["misses"] == len(source.pieces) and counted["hits"] == 0
    for i in range(len(source.pieces)):
        source.read_piece(i)
    read = decision_cache_info()
    assert read["misses"] == counted["misses"]  # not merged again
    assert read["hits"] == len(source.pieces)


@pytest.mark.parametrize(
    "writes",
    [
        [(0, 128), (100, 300)],  # the cut falls after the last row group's first key
        [(0, 10), (5, 500)],
        [(0, 1000), (990, 1001)],
        [(0, 65), (0, 65), (64, 65)],
    ],
)
def test_parts_of_uneven_files_cover_every_key_once(
    tmp_path: Path, writes: list[tuple[int, int]]
) -> None:
    tbl = make(tmp_path, **{"write.row-group-rows": "64"})
    for version, (lo, hi) in enumerate(writes):
        ids = np.arange(lo, hi)
        v = np.full(len(ids), version, np.int64)
        tbl.write(pa.table({"id": ids, "v": v, "s": ["x"] * len(ids), "ts": v}, schema=SCHEMA))
    expected = read_splits(tbl, tbl.scan().plan())
    parts = tbl.scan().with_split_size(1).plan()
    assert read_splits(tbl, parts).equals(expected)
    assert LakeSource.open(tbl, columns=["v"]).total == expected.num_rows


def test_a_section_of_many_small_files_is_cut_too(tmp_path: Path) -> None:
    """No file holds a tenth of the section: parts still follow the row groups."""
    tbl = make(tmp_path, **{"write.row-group-rows": "8"})
    for version in range(12):
        ids = np.arange(version, 400, 12)  # every write spans the whole key range
        v = np.full(len(ids), version, np.int64)
        tbl.write(pa.table({"id": ids, "v": v, "s": ["x"] * len(ids), "ts": v}, schema=SCHEMA))
    expected = read_splits(tbl, tbl.scan().plan())
    parts = tbl.scan().with_split_size(1).plan()
    assert len(parts) > 1
    assert read_splits(tbl, parts).equals(expected)


@pytest.mark.parametrize("key_type", [pa.int32(), pa.int64(), pa.uint64()])
def test_integer_keys_and_sequences_are_stored_delta_encoded(
    tmp_path: Path, key_type: pa.DataType
) -> None:
    """Every merged read decodes the key of each row version: delta-encoded sorted keys
    decode at about a tenth of the cost of a dictionary or plain Snappy column."""
    schema = pa.schema([pa.field("id", key_type, nullable=False), ("v", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["id"], buckets=1)
    tbl.write(pa.table({"id": pa.array(range(1000), key_type), "v": range(1000)}, schema=schema))
    (data_file,) = [e.path for e in tbl.scan().plan()[0].files]
    metadata = pq.ParquetFile(tmp_path / "t" / data_file).metadata.row_group(0)
    encodings = {
        metadata.column(j).path_in_schema: metadata.column(j).encodings
        for j in range(metadata.num_columns)
    }
    assert "DELTA_BINARY_PACKED" in encodings["id"]
    assert "DELTA_BINARY_PACKED" in encodings["_rl_seq"]
    assert "DELTA_BINARY_PACKED" not in encodings["v"]
    assert tbl.to_arrow().column("id").to_pylist() == list(range(1000))


@pytest.mark.parametrize("spread", [1, 1 << 40])  # dense keys: a bitmap; sparse: a search
@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint64])
@pytest.mark.parametrize("start", [-50, 0, 1000])  # from 0: keys index the bitmap directly
@pytest.mark.parametrize("sizes", [(20, 0, 40, 60), (30, 40, 60, 0)])  # the oldest empty
def test_newest_first_decision_matches_a_model(
    spread: int, dtype: type, start: int, sizes: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(7)
    if dtype is np.int8:  # a narrow type spanning most of its range
        pool = np.arange(-120, 120, 2).astype(dtype)
    elif dtype is np.uint64:  # above the int64 range
        pool = np.uint64(1 << 63) + np.arange(100, dtype=np.uint64) * np.uint64(spread)
    else:
        pool = np.arange(start, start + 100, dtype=dtype) * dtype(spread)
    arrays = [np.sort(rng.choice(pool, size, replace=False)) for size in sizes]
    arrays[2] = np.concatenate([arrays[2][:1], arrays[2]])  # a key twice in one file
    seen: set[int] = set()
    expected = []
    for keys in arrays:
        expected.append(np.array([int(k) not in seen for k in keys], dtype=bool))
        seen |= {int(k) for k in keys}
    for got, want in zip(unseen_in_newer(arrays), expected):
        assert got.tolist() == want.tolist()


def test_row_groups_on_threads_give_the_rows_in_turn_in_the_same_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    tbl = make(tmp_path, **{"write.row-group-rows": 100})
    rng = np.random.default_rng(5)
    for version in range(4):
        ids = rng.choice(2000, 600 if version else 2000, replace=False)
        put(tbl, [(int(i), version, f"s{i}", version) for i in ids])
    reads = {}
    for threads in (0, 3):
        monkeypatch.setattr(group_readers, "GROUP_THREADS", threads)
        clear_decision_cache()
        reads[threads] = tbl.to_arrow()
    assert reads[3].num_rows == 2000
    assert reads[3].equals(reads[0])  # the same rows in the same order
    assert not [t for t in threading.enumerate() if t.name.startswith("raylake-merge-groups")]
