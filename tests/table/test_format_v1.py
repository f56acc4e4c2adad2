"""Tables of format version 1 (written by raylake before issue 18, checked in under
fixtures/) still read, write and evolve; the first schema change upgrades them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.table import Table

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "v1_expected.json").read_text())


def copy(name: str, tmp_path: Path) -> Table:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return raylake.open_table(str(target))


def rows(tbl: Table, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    return sorted(tbl.to_arrow(**kwargs).to_pylist(), key=lambda r: r[key])


def schema_file(tbl: Table, schema_id: int) -> dict[str, Any]:
    return json.loads((Path(tbl.uri) / "schema" / f"schema-{schema_id}.json").read_text())


def test_v1_tables_read_in_place() -> None:
    for name, key in (("v1_append", "id"), ("v1_pk", "k")):
        tbl = raylake.open_table(str(FIXTURES / name))
        assert tbl.table_schema.format_version == 1
        assert rows(tbl, key) == EXPECTED[name]
    append = raylake.open_table(str(FIXTURES / "v1_append"))
    assert append.count(filter="x > 15") == 2
    assert sum(len(s.files) for s in append.scan(filter="x > 25").plan()) == 1  # v1 stats prune
    assert rows(append, "id", filter="x is null") == [EXPECTED["v1_append"][3]]


def test_writing_a_v1_table_keeps_it_version_1(tmp_path: Path) -> None:
    tbl = copy("v1_append", tmp_path)
    tbl.write(pa.table({"id": [5], "dt": ["c"], "x": [50], "label": [4.5]}, schema=tbl.schema))
    assert [p.name for p in (Path(tbl.uri) / "schema").iterdir()] == ["schema-0.json"]
    assert schema_file(tbl, 0)["format_version"] == 1
    assert sum(len(s.files) for s in tbl.scan(filter="x >= 50").plan()) == 1
    assert len(rows(tbl, "id")) == 5


def test_the_first_schema_change_upgrades_a_v1_append_table(tmp_path: Path) -> None:
    tbl = copy("v1_append", tmp_path)
    with tbl.update_schema() as u:
        u.rename_column("x", "x2")
        u.update_column("x2", pa.int64())
        u.add_column("z", pa.string())
        u.delete_column("label")
    upgraded = schema_file(tbl, 1)
    assert upgraded["format_version"] == 2 and upgraded["highest_field_id"] == 4
    assert [f["id"] for f in upgraded["fields"]] == [0, 1, 2, 4]
    assert schema_file(tbl, 0)["format_version"] == 1  # history is never rewritten
    tbl.write(pa.table({"id": [5], "dt": ["c"], "x2": [50], "z": ["new"]}))
    expected = [
        {"id": r["id"], "dt": r["dt"], "x2": r["x"], "z": None} for r in EXPECTED["v1_append"]
    ]
    assert rows(tbl, "id") == [*expected, {"id": 5, "dt": "c", "x2": 50, "z": "new"}]
    # Version-1 manifests (statistics by name) prune under the upgraded schema by id.
    assert sum(len(s.files) for s in tbl.scan(filter="x2 > 25").plan()) == 2
    assert rows(tbl, "id", filter="x2 > 25") == [expected[2], rows(tbl, "id")[-1]]
    assert [r["id"] for r in rows(tbl, "id", filter="z is null")] == [1, 2, 3, 4]
    assert rows(tbl, "id", snapshot_id=2) == EXPECTED["v1_append"]
    assert raylake.open_table(tbl.uri).schema == tbl.schema


def test_the_first_schema_change_upgrades_a_v1_primary_key_table(tmp_path: Path) -> None:
    tbl = copy("v1_pk", tmp_path)
    with tbl.update_schema() as u:
        u.rename_column("s", "s2")
        u.update_column("v", pa.int64())
        u.add_column("w", pa.float64())
    tbl.write(pa.table({"k": [1, 5], "v": [100, 500], "s2": ["A", "E"], "w": [0.5, 1.5]}))
    expected = {r["k"]: {"k": r["k"], "v": r["v"], "s2": r["s"], "w": None}
                for r in EXPECTED["v1_pk"]}  # fmt: skip
    expected[1] = {"k": 1, "v": 100, "s2": "A", "w": 0.5}
    expected[5] = {"k": 5, "v": 500, "s2": "E", "w": 1.5}
    assert rows(tbl, "k") == [expected[k] for k in sorted(expected)]
    tbl.compact(full=True)
    assert rows(tbl, "k") == [expected[k] for k in sorted(expected)]
    assert rows(tbl, "k", snapshot_id=2) == EXPECTED["v1_pk"]


@pytest.mark.parametrize("name", ["v1_append", "v1_pk"])
def test_fixture_is_version_1(name: str) -> None:
    """Guards the fixture itself: written by the format-1 code, not regenerated."""
    data = json.loads((FIXTURES / name / "schema" / "schema-0.json").read_text())
    assert data["format_version"] == 1 and "highest_field_id" not in data
