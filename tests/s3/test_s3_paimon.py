"""Paimon tables on a real S3-compatible server: listing, Avro manifests, merged reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pyarrow.parquet as pq

import raylake

FIXTURES = Path(__file__).resolve().parent.parent / "paimon" / "fixtures"


def _upload(name: str, uri: str, storage_options: dict[str, Any]) -> None:
    fs = fsspec.filesystem("s3", **storage_options)
    root = FIXTURES / name / "table"
    for path in root.rglob("*"):
        if path.is_file():
            fs.put_file(str(path), f"{uri[len('s3://') :]}/{path.relative_to(root).as_posix()}")


def test_a_paimon_table_on_s3(s3_bucket: str, storage_options: dict[str, Any]) -> None:
    for name, sort in (("pk_partitioned", ["id", "dt"]), ("append_partitioned", ["id"])):
        uri = f"s3://{s3_bucket}/{name}"
        _upload(name, uri, storage_options)
        tbl = raylake.open_table(uri, storage_options=storage_options)
        assert tbl.format == "paimon"
        want = pq.read_table(
            FIXTURES / name / "expected" / f"snapshot-{tbl.latest_snapshot().id}.parquet"
        )
        got = tbl.to_arrow().sort_by([(c, "ascending") for c in sort])
        assert got.to_pylist() == want.sort_by([(c, "ascending") for c in sort]).to_pylist()
    assert (
        raylake.open_table(
            f"s3://{s3_bucket}/append_partitioned", storage_options=storage_options
        ).count(filter="dt is null")
        == 5
    )
