"""Deletion vectors in the 32- and 64-bit formats.

pypaimon 2.1 does not write deletion vectors: these tables are built from Paimon's spec
(paimon_spec.py) on copies of pypaimon's fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from paimon_spec import commit, data_file, live_entries, write_deletion_vectors
from paimon_util import expected, rows_by_key
from test_compacted import compact

import raylake
from raylake.errors import CorruptMetadataError


def _file_ids(table: Path, entry: dict[str, Any]) -> list[int]:
    path = next(table.rglob(entry["_FILE"]["_FILE_NAME"]))
    return list(pq.read_table(path, columns=["id"]).column("id").to_pylist())


@pytest.mark.parametrize("bits", [32, 64])
def test_deleted_rows_of_an_append_table(paimon_copy: Any, bits: int) -> None:
    table = paimon_copy("append_unaware")
    entry = sorted(live_entries(table), key=lambda e: e["_FILE"]["_FILE_NAME"])[0]
    ids = _file_ids(table, entry)
    positions = [0, 2, 5]
    manifest = write_deletion_vectors(
        table,
        entry["_PARTITION"],
        entry["_BUCKET"],
        {entry["_FILE"]["_FILE_NAME"]: positions},
        bits,
    )
    sid = commit(table, kind="APPEND", index_manifest=manifest)
    gone = {ids[p] for p in positions}
    want = [r for r in rows_by_key(expected("append_unaware", 3), ["id"]) if r["id"] not in gone]
    tbl = raylake.open_table(str(table))
    assert rows_by_key(tbl.to_arrow(), ["id"]) == want
    assert tbl.count() == len(want) == 27
    assert tbl.to_arrow(columns=["id"], filter=f"id = {ids[2]}").num_rows == 0
    assert tbl.to_arrow(snapshot_id=sid - 1).num_rows == 30


def test_a_primary_key_table_with_deletion_vectors_reads_compacted_files_only(
    paimon_copy: Any,
) -> None:
    """With deletion vectors Paimon reads no level-0 file and merges nothing: each key
    lives once in the compacted levels, older copies marked deleted."""
    table = paimon_copy("pk_deduplicate")
    schema = json.loads((table / "schema" / "schema-0").read_text())
    schema.update(id=1, options={**schema["options"], "deletion-vectors.enabled": "true"})
    (table / "schema" / "schema-1").write_text(json.dumps(schema))
    compact(table, lambda e: True, newest=True)
    entry = next(e for e in live_entries(table) if e["_BUCKET"] == 1)
    ids = _file_ids(table, entry)
    manifest = write_deletion_vectors(
        table, entry["_PARTITION"], 1, {entry["_FILE"]["_FILE_NAME"]: [1]}, 32
    )
    commit(table, kind="COMPACT", index_manifest=manifest)
    want = [r for r in rows_by_key(expected("pk_deduplicate", 5), ["id"]) if r["id"] != ids[1]]
    tbl = raylake.open_table(str(table))
    assert rows_by_key(tbl.to_arrow(), ["id"]) == want
    # A new level-0 file waits for the next compaction (and its deletion vectors).
    fresh = pa.table(
        {
            "_KEY_id": pa.array([1000], pa.int64()),
            "_SEQUENCE_NUMBER": pa.array([10_000], pa.int64()),
            "_VALUE_KIND": pa.array([0], pa.int8()),
            "id": pa.array([1000], pa.int64()),
            "name": ["fresh"],
            "x": [1.0],
            "op": ["+I"],
        }
    )
    commit(table, kind="APPEND", added=[data_file(table, entry, fresh, level=0)])
    assert rows_by_key(tbl.to_arrow(), ["id"]) == want


def test_a_corrupt_deletion_vector_is_an_error(paimon_copy: Any) -> None:
    table = paimon_copy("append_unaware")
    entry = live_entries(table)[0]
    name = entry["_FILE"]["_FILE_NAME"]
    manifest = write_deletion_vectors(table, entry["_PARTITION"], 0, {name: [1]}, 32)
    commit(table, kind="APPEND", index_manifest=manifest)
    index = next((table / "index").iterdir())
    data = bytearray(index.read_bytes())
    data[-1] ^= 0xFF  # the CRC
    index.write_bytes(bytes(data))
    with pytest.raises(CorruptMetadataError, match="CRC"):
        raylake.open_table(str(table)).to_arrow()
