"""Seeded random upserts and deletes on a 4-bucket table against a model, under filters.

Level-0 and higher-level files are added to the fixture's buckets from the spec
(paimon_spec.py), each with value statistics for ``x`` that would exclude it from a
filter on ``x``; the reader may prune by key only, so a key's newest version decides,
and no older version reappears whatever the filter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from paimon_spec import commit, data_file, encode_row, live_entries

import raylake


def _model(table: Any) -> dict[int, dict[str, Any]]:
    """Every stored version of every key, newest sequence wins, retracts delete."""
    rows = [
        r
        for e in live_entries(table)
        for r in pq.read_table(next(table.rglob(e["_FILE"]["_FILE_NAME"]))).to_pylist()
    ]
    state: dict[int, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["_SEQUENCE_NUMBER"]):
        if r["_VALUE_KIND"] in (1, 3):
            state.pop(r["id"], None)
        else:
            state[r["id"]] = {k: r[k] for k in ("id", "name", "x", "op")}
    return state


def _with_stats(record: dict[str, Any], names: list[str], x: np.ndarray) -> dict[str, Any]:
    """Value statistics of ``name`` and ``x``, as a writer that keeps them would write."""
    meta = record["_FILE"]
    meta["_VALUE_STATS_COLS"] = ["name", "x"]
    meta["_VALUE_STATS"] = {
        "_MIN_VALUES": encode_row([min(names), float(x.min())], ["STRING", "DOUBLE"]),
        "_MAX_VALUES": encode_row([max(names), float(x.max())], ["STRING", "DOUBLE"]),
        "_NULL_COUNTS": [0, 0],
    }
    return record


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_versions_read_as_the_model(paimon_copy: Any, seed: int) -> None:
    table = paimon_copy("pk_deduplicate")
    rng = np.random.default_rng(seed)
    entries = live_entries(table)
    bucket_of = {}
    for e in entries:
        for k in pq.read_table(next(table.rglob(e["_FILE"]["_FILE_NAME"])), columns=["id"])[
            "id"
        ].to_pylist():
            bucket_of[k] = e["_BUCKET"]
    template = {e["_BUCKET"]: e for e in entries}
    seq = 1_000
    for round_ in range(4):
        added = []
        for bucket, tpl in template.items():
            keys = sorted(k for k in bucket_of if bucket_of[k] == bucket and rng.random() < 0.5)
            if not keys:
                continue
            n = len(keys)
            kinds = rng.choice([0, 2, 3], n, p=[0.3, 0.5, 0.2]).astype(np.int8)
            # Each round's values lie in a narrower, lower band than the round before,
            # so that its statistics exclude filters an older version passes.
            x = np.round((3 - round_) * 30 + rng.random(n) * 5, 1)
            rows = pa.table(
                {
                    "_KEY_id": pa.array(keys, pa.int64()),
                    "_SEQUENCE_NUMBER": pa.array(range(seq, seq + n), pa.int64()),
                    "_VALUE_KIND": pa.array(kinds, pa.int8()),
                    "id": pa.array(keys, pa.int64()),
                    "name": [f"r{round_}-{k}" for k in keys],
                    "x": x,
                    "op": ["+U"] * n,
                }
            )
            seq += n
            level = int(rng.integers(0, 3))
            record = data_file(table, tpl, rows, level=level)
            added.append(_with_stats(record, rows.column("name").to_pylist(), x))
        commit(table, kind="APPEND", added=added)
    model = _model(table)
    tbl = raylake.open_table(str(table))
    got = {r["id"]: r for r in tbl.to_arrow().to_pylist()}
    assert got == model
    conditions = ("x < 5", "x >= 50", "x > 10 and id < 20", "name = 'n39-v0'", "name < 'r1'")
    for condition in (*conditions, "name < 'r2' and id < 30"):
        want = sorted(k for k, r in model.items() if _holds(condition, r))
        assert sorted(tbl.to_arrow(filter=condition).column("id").to_pylist()) == want, condition
        assert tbl.count(filter=condition) == len(want)


def _holds(condition: str, row: dict[str, Any]) -> bool:
    x, key, name = row["x"], row["id"], row["name"]
    return {
        "x < 5": x < 5,
        "x >= 50": x >= 50,
        "x > 10 and id < 20": x > 10 and key < 20,
        "name = 'n39-v0'": name == "n39-v0",
        "name < 'r1'": name < "r1",
        "name < 'r2' and id < 30": name < "r2" and key < 30,
    }[condition]


def test_value_statistics_prune_append_files(paimon_copy: Any) -> None:
    """An append table's files may be pruned by value statistics (and are)."""
    table = paimon_copy("append_unaware")
    added = []
    for e in live_entries(table):
        ids = pq.read_table(next(table.rglob(e["_FILE"]["_FILE_NAME"])), columns=["id"])["id"]
        meta = e["_FILE"]
        meta["_VALUE_STATS_COLS"] = ["id"]
        lo, hi = min(ids.to_pylist()), max(ids.to_pylist())
        meta["_VALUE_STATS"] = {
            "_MIN_VALUES": encode_row([lo], ["BIGINT"]),
            "_MAX_VALUES": encode_row([hi], ["BIGINT"]),
            "_NULL_COUNTS": [0],
        }
        added.append(e)
    commit(table, kind="COMPACT", added=added, deleted=live_entries(table))
    tbl = raylake.open_table(str(table))
    assert len({p for s in tbl.scan().plan() for p in s.paths}) == 3
    assert len({p for s in tbl.scan(filter="id >= 25").plan() for p in s.paths}) == 1
    assert sorted(tbl.to_arrow(filter="id >= 25").column("id").to_pylist()) == list(range(25, 30))
