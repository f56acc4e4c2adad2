"""The fixture Paimon tables written by pypaimon (fixtures/generate.py), and pypaimon's reads
stored beside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "case.json").exists())


def case(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name / "case.json").read_text()))


def expected(name: str, snapshot_id: int) -> pa.Table:
    return pq.read_table(FIXTURES / name / "expected" / f"snapshot-{snapshot_id}.parquet")


def rows_by_key(rows: pa.Table, sort: list[str]) -> list[dict[str, Any]]:
    """Rows in key order: reads are compared order-insensitively."""
    return rows.sort_by([(c, "ascending") for c in sort]).to_pylist()
