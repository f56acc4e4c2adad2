"""``raylake write``: files into a table as one commit."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import raylake
from raylake.cli import main

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})


def files(tmp_path: Path) -> list[str]:
    pq.write_table(ROWS.slice(0, 1), tmp_path / "one.parquet")
    pcsv.write_csv(ROWS.slice(1, 1), tmp_path / "two.csv")
    (tmp_path / "three.jsonl").write_text(json.dumps({"id": 3, "name": "c"}) + "\n")
    return [str(tmp_path / n) for n in ("one.parquet", "two.csv", "three.jsonl")]


def test_write_creates_and_appends_in_one_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    assert main(["write", uri, *files(tmp_path), "--create", "--primary-key", "id"]) == 0
    assert "wrote 3 row(s) from 3 file(s): snapshot 1" in capsys.readouterr().out
    tbl = raylake.open_table(uri)
    assert tbl.table_schema.primary_key == ("id",)
    assert tbl.to_arrow().sort_by("id").to_pylist() == ROWS.to_pylist()
    assert len(tbl.snapshots()) == 1


def test_write_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    assert main(["write", uri, str(tmp_path / "missing.parquet"), "--create"]) == 2
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "t").exists()
    raylake.create_table(uri, ROWS.schema)
    (tmp_path / "x.txt").write_text("?")
    assert main(["write", uri, str(tmp_path / "x.txt")]) == 2
    assert "cannot tell the format" in capsys.readouterr().err
    assert raylake.open_table(uri).snapshots() == []  # nothing committed
