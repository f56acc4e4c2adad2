"""ORC data files (pypaimon 2.1 writes Parquet: the ORC table is built from the spec by
rewriting a fixture's files as ORC in a COMPACT snapshot, paimon_spec.py)."""

from __future__ import annotations

import copy
from typing import Any

import pyarrow.orc as orc
import pyarrow.parquet as pq
from paimon_spec import commit, live_entries
from paimon_util import expected, rows_by_key

import raylake


def _as_orc(table: Any) -> int:
    added, deleted = [], []
    for entry in live_entries(table):
        name = entry["_FILE"]["_FILE_NAME"]
        source = next(table.rglob(name))
        target = source.with_name(name.replace(".parquet", ".orc"))
        orc.write_table(pq.read_table(source), target)
        record = copy.deepcopy(entry)
        record["_FILE"].update(_FILE_NAME=target.name, _FILE_SIZE=target.stat().st_size)
        added.append(record)
        deleted.append(entry)
    return commit(table, kind="COMPACT", added=added, deleted=deleted)


def test_orc_append_table(paimon_copy: Any) -> None:
    table = paimon_copy("append_partitioned")
    _as_orc(table)
    tbl = raylake.open_table(str(table))
    assert {p.rsplit(".", 1)[1] for s in tbl.scan().plan() for p in s.paths} == {"orc"}
    assert rows_by_key(tbl.to_arrow(), ["id"]) == rows_by_key(
        expected("append_partitioned", 3), ["id"]
    )
    assert tbl.to_arrow(columns=["id"], filter="dt = '2024-01-02'").num_rows == 5


def test_orc_primary_key_table(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    _as_orc(table)
    tbl = raylake.open_table(str(table))
    assert rows_by_key(tbl.to_arrow(), ["id"]) == rows_by_key(expected("pk_deduplicate", 5), ["id"])
