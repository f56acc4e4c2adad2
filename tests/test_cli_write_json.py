"""``raylake write`` takes back what ``raylake scan --format json`` writes."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: pa.Table
) -> tuple[pa.Table, str]:
    src = raylake.create_table(str(tmp_path / "src"), rows.schema)
    src.write(rows)
    code, out, _ = _run(capsys, "scan", src.uri, "--format", "json")
    assert code == 0
    (tmp_path / "rows.jsonl").write_text(out)
    dst = raylake.create_table(str(tmp_path / "dst"), src.schema)
    code, _, err = _run(capsys, "write", dst.uri, str(tmp_path / "rows.jsonl"))
    assert (code, err) == (0, "")
    return dst.to_arrow(), out


def test_floats_that_are_not_finite_and_maps_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scan wrote "NaN", "Infinity" and "-Infinity" and maps as [key, value] pairs; write
    refused both (pyarrow's reader takes no text among numbers, and no map)."""
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64()), ("g", pa.float32()),
                        ("m", pa.map_(pa.string(), pa.int64()))])  # fmt: skip
    rows = pa.table(
        {"id": [1, 2, 3, 4], "f": [math.nan, math.inf, -math.inf, None],
         "g": [1.5, None, math.nan, 2.0], "m": [[("k", 1), ("j", None)], None, [], [("x", 2)]]},
        schema=schema,
    )  # fmt: skip
    back, _ = _round_trip(tmp_path, capsys, rows)
    got = back.sort_by("id").to_pylist()
    assert math.isnan(got[0]["f"]) and [r["f"] for r in got[1:]] == [math.inf, -math.inf, None]
    assert math.isnan(got[2]["g"]) and [got[i]["g"] for i in (0, 1, 3)] == [1.5, None, 2.0]
    assert [r["m"] for r in got] == [[("k", 1), ("j", None)], None, [], [("x", 2)]]
    # a map as an object, as Spark writes it, is read too
    (tmp_path / "spark.jsonl").write_text('{"id": 5, "f": 1, "g": 2, "m": {"a": 7}}\n')
    code, _, err = _run(capsys, "write", str(tmp_path / "dst"), str(tmp_path / "spark.jsonl"))
    assert (code, err) == (0, "")
    got = raylake.open_table(str(tmp_path / "dst")).to_arrow().sort_by("id").to_pylist()[-1]
    assert got == {"id": 5, "f": 1.0, "g": 2.0, "m": [("a", 7)]}
    # text that is no number stays refused, naming the file
    (tmp_path / "bad.jsonl").write_text(
        '{"id": 6, "f": 1.0, "g": 1, "m": null}\n{"id": 7, "f": "many", "g": 1, "m": null}\n'
    )
    code, _, err = _run(capsys, "write", str(tmp_path / "dst"), str(tmp_path / "bad.jsonl"))
    assert code == 2 and "bad.jsonl" in err and "many" in err


def test_a_timestamp_whose_offset_had_seconds_is_written_in_utc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Paris was at +00:09:21 in 1900: str() wrote the offset's seconds, which no ISO
    8601 offset has and write could not parse. (Where pyarrow hands out pytz's zones,
    as pyarrow 16 with pandas 2.0 does, pytz gives the offset in whole minutes.)"""
    ty = pa.timestamp("us", tz="Europe/Paris")
    moment = datetime(1900, 1, 1, tzinfo=timezone.utc)
    back, out = _round_trip(tmp_path, capsys, pa.table({"ts": pa.array([moment], ty)}))
    assert out in (
        '{"ts": "1900-01-01 00:00:00+00:00"}\n',  # zoneinfo's +00:09:21, written in UTC
        '{"ts": "1900-01-01 00:09:00+00:09"}\n',  # pytz's +00:09
    )
    assert back.column("ts").cast(pa.timestamp("us", tz="UTC")).to_pylist() == [moment]
