"""Deduplicate sections decided newest file first (the merge-on-read kernel, raylake/table/pk/kernel.py), and the
sections that still need a sort by sequence: a key twice in one file, files whose
sequence ranges interleave."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from paimon_spec import commit, data_file, live_entries
from paimon_util import FIXTURES, expected, rows_by_key

import raylake
from raylake.format.schema import TableSchema
from raylake.table.pk import kernel
from raylake.table.pk.late import dictionary_columns
from raylake.table.pk.schema import DELETE, KIND, SEQ, UPDATE_BEFORE, MergeSpec
from raylake.table.split import FileSlice

PK = str(FIXTURES / "pk_deduplicate" / "table")


def _slice(max_sequence: int) -> FileSlice:
    return FileSlice(
        path=f"f{max_sequence}", row_groups=None, row_count=0, size_bytes=0, file_size=0,
        min_sequence=max_sequence - 5, max_sequence=max_sequence,
    )  # fmt: skip


def _masks(keys: list[list[int]], kinds: list[list[int] | None]) -> list[list[bool]]:
    """The kernel's decision over three files (the second is the newest) whose rows
    are ``keys`` of ``kinds`` (None: all +I), in the kernel's row kinds; the reader
    gives the kinds unasked, as Paimon's does (its manifests count no deletes)."""
    tables = [
        pa.table({"id": pa.array(k, pa.int64()), KIND: pa.array(r or [0] * len(k), pa.int8())})
        for k, r in zip(keys, kinds)
    ]
    seqs = [pa.array(np.arange(len(k)) + 100 * i, pa.int64()) for i, k in enumerate(keys)]
    ts = TableSchema(pa.schema([("id", pa.int64())]), primary_key=("id",))
    decision = kernel.decide(
        None,
        MergeSpec(key=("id",)),
        [_slice(10), _slice(30), _slice(20)],
        ts,
        lambda columns: [
            (t.append_column(SEQ, s).select([*dict.fromkeys([*columns, KIND])]), 0)
            for t, s in zip(tables, seqs)
        ],
    )
    return [decision.mask(i).tolist() for i in range(len(keys))]


def test_a_row_wins_unless_a_newer_file_holds_its_key() -> None:
    keys = [[1, 2, 3, 4], [2, 5], [3, 4, 6]]
    assert _masks(keys, [None, None, None]) == [
        [True, False, False, False],
        [True, True],
        [True, True, True],
    ]


def test_a_delete_is_the_newest_version_and_a_before_image_no_version() -> None:
    keys = [[1, 2, 3], [2], [3]]
    # Paimon's retracts: -D under deduplicate, -U (no version) with ignore-delete.
    assert _masks(keys, [None, [DELETE], None]) == [[True, False, False], [False], [True]]
    assert _masks(keys, [None, [UPDATE_BEFORE], None]) == [
        [True, True, False],
        [False],
        [True],
    ]


def test_a_key_twice_in_one_file_needs_a_sort() -> None:
    # Sorted by key and sequence: file 0's second version of key 2 (sequence 2) is
    # older than file 1's (sequence 100), which wins.
    assert _masks([[1, 2, 2], [2], [3]], [None, None, None]) == [
        [True, False, False],
        [True],
        [True],
    ]


def test_deduplicate_sections_are_decided_newest_first() -> None:
    kernel.clear_decisions()
    tbl = raylake.open_table(PK)
    got = tbl.to_arrow()
    merged = sum(len(s) > 1 for split in tbl.scan().plan() for s in split.merge_sections())
    assert _decided(newest_first=True) >= merged > 1
    assert _decided(newest_first=False) == 0
    assert rows_by_key(got, ["id"]) == rows_by_key(expected("pk_deduplicate", 5), ["id"])
    assert got.schema == tbl.schema  # strings read as dictionaries come back as strings
    assert tbl.to_arrow().equals(got)  # the kept decision: the same rows in the same order


def _decided(*, newest_first: bool) -> int:
    info = kernel.decision_cache_info()
    return info["newest_first"] if newest_first else info["entries"] - info["newest_first"]


def _file(
    table: Path, template: dict[str, Any], keys: list[int], seqs: list[int], names: list[str]
) -> dict[str, Any]:
    rows = pa.table(
        {
            "_KEY_id": pa.array(keys, pa.int64()),
            "_SEQUENCE_NUMBER": pa.array(seqs, pa.int64()),
            "_VALUE_KIND": pa.array([2] * len(keys), pa.int8()),
            "id": pa.array(keys, pa.int64()),
            "name": names,
            "x": [1.0] * len(keys),
            "op": ["+U"] * len(keys),
        }
    )
    return data_file(table, template, rows, level=0)


def _bucket_keys(table: Path, bucket: int) -> list[int]:
    return sorted(
        {
            k
            for e in live_entries(table)
            if e["_BUCKET"] == bucket
            for k in pq.read_table(next(table.rglob(e["_FILE"]["_FILE_NAME"])))["id"].to_pylist()
        }
    )


@pytest.mark.parametrize("case", ["key twice in a file", "interleaved sequences"])
def test_sections_newest_first_cannot_decide_are_sorted(paimon_copy: Any, case: str) -> None:
    table = paimon_copy("pk_deduplicate")
    template = next(e for e in live_entries(table) if e["_BUCKET"] == 0)
    a, b = _bucket_keys(table, 0)[:2]
    if case == "key twice in a file":
        # Sorted by key, then sequence: the later version of ``a`` wins.
        added = [_file(table, template, [a, a, b], [1000, 1001, 1002], ["old", "new", "b"])]
    else:
        # The file with the highest sequence (1003) holds the older version of ``a``.
        added = [
            _file(table, template, [a, b], [1000, 1003], ["old", "b"]),
            _file(table, template, [a], [1001], ["new"]),
        ]
    commit(table, kind="APPEND", added=added)
    kernel.clear_decisions()
    got = {r["id"]: r["name"] for r in raylake.open_table(str(table)).to_arrow().to_pylist()}
    assert (got[a], got[b]) == ("new", "b")
    assert _decided(newest_first=False) == 1  # bucket 0's section
    assert _decided(newest_first=True) >= 1  # the other buckets'


def test_ignore_delete_keeps_the_version_before_a_retract(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    schema_file = table / "schema" / "schema-0"
    schema = json.loads(schema_file.read_text())
    schema["options"]["ignore-delete"] = "true"
    schema_file.write_text(json.dumps(schema))
    stored = pa.concat_tables(
        [pq.read_table(next(table.rglob(e["_FILE"]["_FILE_NAME"]))) for e in live_entries(table)]
    )
    model: dict[int, str] = {}
    for r in stored.sort_by("_SEQUENCE_NUMBER").to_pylist():
        if r["_VALUE_KIND"] not in (1, 3):
            model[r["id"]] = r["name"]
    assert len(model) > len(expected("pk_deduplicate", 5))  # deleted keys come back
    kernel.clear_decisions()
    got = raylake.open_table(str(table)).to_arrow()
    assert {r["id"]: r["name"] for r in got.to_pylist()} == model
    assert _decided(newest_first=True) > 1 and _decided(newest_first=False) == 0


def test_only_wholly_dictionary_encoded_strings_are_read_as_dictionaries(tmp_path: Path) -> None:
    data = pa.table(
        {
            "k": pa.array(range(20_000), pa.int64()),
            "few": [f"v{i % 3}" for i in range(20_000)],
            "plain": [f"v{i % 3}" for i in range(20_000)],
            "unique": [f"value-{i:06d}" * 4 for i in range(20_000)],
        }
    )
    path = tmp_path / "f.parquet"
    pq.write_table(
        data, path, use_dictionary=["k", "few", "unique"], dictionary_pagesize_limit=4096
    )
    metadata = pq.ParquetFile(path).metadata
    # ``unique`` outgrew its dictionary page: its later pages are plain strings.
    assert dictionary_columns(metadata, ["k", "few", "plain", "unique", "gone"]) == ["few"]
