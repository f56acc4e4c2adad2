"""The ``raylake`` command, run in-process through ``raylake.cli.main``."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main, parse_older_than
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("label", pa.int32())])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tbl(tmp_path: Path) -> Table:
    table = raylake.create_table(str(tmp_path / "events"), SCHEMA, partition_by=["dt"])
    for i, day in enumerate(["2024-01-01", "2024-01-02", "2024-01-03"]):
        ids = list(range(i * 10, i * 10 + 10))
        table.write(pa.table({"id": ids, "dt": [day] * 10, "label": [x % 2 for x in ids]}))
    return table


# -- info, snapshots, scan --------------------------------------------------------------


def test_info(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", tbl.uri)
    info = json.loads(out)
    assert code == 0
    assert info["kind"] == "append" and info["partition_keys"] == ["dt"]
    assert info["latest_snapshot"] == 3 and info["total_records"] == 30
    assert info["data_files"] == 3 and info["columns"]["label"] == "int32"


def test_snapshots(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "snapshots", tbl.uri)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:2] == ["id", "kind"]
    assert [line.split()[0] for line in lines[1:]] == ["1", "2", "3"]
    assert lines[-1].split()[-2:] == ["10", "30"]


def test_scan_json_with_columns_filter_limit_and_time_travel(
    tbl: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "scan", tbl.uri, "--columns", "id,label", "--filter", "label = 1", "--format",
        "json", "--limit", "3", "--snapshot", "1",
    )  # fmt: skip
    got = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(got) == 3
    assert all(set(r) == {"id", "label"} and r["label"] == 1 and r["id"] < 10 for r in got)


def test_scan_table_format(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "scan", tbl.uri, "--filter", "id = 25")
    assert code == 0
    assert out.split() == ["id", "dt", "label", "25", "2024-01-03", "1"]


@pytest.mark.parametrize(
    "argv",
    [["info"], ["snapshots"], ["scan"], ["expire"], ["orphans"], ["consumers"], ["compact"]],
)
def test_a_missing_table_is_exit_code_2_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    missing = str(tmp_path / "nope")
    code, out, err = run(capsys, *argv, missing)
    assert code == 2 and out == ""
    assert err.startswith("raylake: error: no raylake table at") and "nope" in err


def test_scan_errors_are_clear(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "scan", tbl.uri, "--columns", "id,nope")
    assert code == 2 and "unknown column 'nope'" in err
    code, _, err = run(capsys, "scan", tbl.uri, "--filter", "id = = 3")
    assert code == 2 and "raylake: error:" in err and "position" in err
    code, _, err = run(capsys, "scan", tbl.uri, "--snapshot", "42")
    assert code == 2 and "snapshot 42 does not exist" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["frobnicate", "x"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# -- expire -----------------------------------------------------------------------------


def test_expire(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "expire", tbl.uri, "--retain-last", "2", "--dry-run")
    assert code == 0 and out.startswith("would expire 1 snapshot(s) (1..1)")
    assert [s.id for s in tbl.snapshots()] == [1, 2, 3]
    code, out, _ = run(capsys, "expire", tbl.uri, "--retain-last", "1", "--older-than", "7d")
    assert code == 0 and out.startswith("expired 0 snapshot(s),")
    code, out, _ = run(capsys, "expire", tbl.uri, "--retain-last", "1", "--older-than", "0s")
    assert code == 0 and out.startswith("expired 2 snapshot(s) (1..2), 0 data file(s)")
    assert [s.id for s in tbl.snapshots()] == [3]


def test_expire_uses_the_table_option_by_default(
    tbl: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "expire", tbl.uri)
    assert code == 0 and "expired 2 snapshot(s)" in out  # snapshot.num-retained.min = 1


def test_expire_with_an_iso_time(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    future = (datetime.now() + timedelta(minutes=5)).isoformat()
    code, out, _ = run(capsys, "expire", tbl.uri, "--retain-last", "2", "--older-than", future)
    assert code == 0 and "expired 1 snapshot(s) (1..1)" in out


def test_expire_bad_arguments(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "expire", tbl.uri, "--retain-last", "0")
    assert code == 2 and "invalid option retain_last=0" in err
    with pytest.raises(SystemExit) as info:
        main(["expire", tbl.uri, "--older-than", "yesterday"])
    assert info.value.code == 2
    assert "'yesterday' is neither an age" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", timedelta(days=7)),
        ("12h", timedelta(hours=12)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("30m", timedelta(minutes=30)),
        ("45s", timedelta(seconds=45)),
        ("250ms", timedelta(milliseconds=250)),
        ("2w", timedelta(weeks=2)),
        (" 1H ", timedelta(hours=1)),
        ("2024-05-01T12:00:00", datetime(2024, 5, 1, 12)),
        ("2024-05-01", datetime(2024, 5, 1)),
    ],
)
def test_parse_older_than(text: str, expected: object) -> None:
    assert parse_older_than(text) == expected


@pytest.mark.parametrize("text", ["", "7", "d", "7x", "-1d", "1d 2h", "soon"])
def test_parse_older_than_rejects(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="neither an age"):
        parse_older_than(text)


# -- orphans ----------------------------------------------------------------------------


def test_orphans(tbl: Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = tbl.new_writer()
    writer.write(pa.table({"id": [99], "dt": ["2024-02-01"], "label": [0]}))
    (orphan,) = [f.path for m in writer.prepare_commit() for f in m.new_files]
    code, out, _ = run(capsys, "orphans", tbl.uri, "--dry-run")
    assert code == 0 and out.splitlines() == ["would remove 0 orphan file(s)"]  # too young
    old = time.time() - 2 * 86400
    os.utime(tmp_path / "events" / orphan, (old, old))
    code, out, _ = run(capsys, "orphans", tbl.uri, "--dry-run")
    assert out.splitlines() == [orphan, "would remove 1 orphan file(s)"]
    code, out, _ = run(capsys, "orphans", tbl.uri, "--older-than", "0s")
    assert code == 0 and out.splitlines() == [orphan, "removed 1 orphan file(s)"]
    assert not (tmp_path / "events" / orphan).exists()


# -- consumers --------------------------------------------------------------------------


def test_consumers_list_reset_delete(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "consumers", tbl.uri)
    assert code == 0 and out.split() == ["consumer", "next", "snapshot", "updated", "(UTC)"]
    code, out, _ = run(capsys, "consumers", tbl.uri, "--reset", "job", "--snapshot", "2")
    assert code == 0 and out.strip() == "consumer job now reads snapshot 2 next"
    tbl.reset_consumer("tail", 4)
    code, out, _ = run(capsys, "consumers", tbl.uri)
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [r[:2] for r in rows] == [["job", "2"], ["tail", "4"]]
    assert datetime.strptime(" ".join(rows[0][2:]), "%Y-%m-%d %H:%M:%S")
    code, out, _ = run(capsys, "consumers", tbl.uri, "--delete", "job")
    assert code == 0 and out.strip() == "deleted consumer job"
    assert [c.consumer_id for c in tbl.consumers()] == ["tail"]


def test_consumers_errors(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "consumers", tbl.uri, "--delete", "ghost")
    assert code == 2 and "no consumer 'ghost'" in err
    code, _, err = run(capsys, "consumers", tbl.uri, "--reset", "job")
    assert code == 2 and "--reset needs --snapshot" in err
    code, _, err = run(capsys, "consumers", tbl.uri, "--reset", "job", "--snapshot", "9")
    assert code == 2 and "snapshot 9 does not exist" in err
    code, _, err = run(capsys, "consumers", tbl.uri, "--reset", "a/b", "--snapshot", "1")
    assert code == 2 and "invalid consumer id 'a/b'" in err
    (Path(tbl.uri) / "consumer").mkdir()
    (Path(tbl.uri) / "consumer" / "consumer-bad").write_text("][")
    code, _, err = run(capsys, "consumers", tbl.uri)
    assert code == 2 and "corrupted metadata file" in err and "consumer-bad" in err
    with pytest.raises(SystemExit):
        main(["consumers", tbl.uri, "--reset", "a", "--delete", "b"])
    assert "not allowed with argument" in capsys.readouterr().err


# -- compact ----------------------------------------------------------------------------


def test_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    pk = raylake.create_table(str(tmp_path / "pk"), schema, primary_key=["k"], buckets=2)
    for i in range(3):
        pk.write(pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": [f"v{i}"] * 3}))
    expected = pk.to_arrow().sort_by("k")
    code, out, err = run(capsys, "compact", pk.uri, "--full")
    assert code == 0, err
    assert out.strip() == "compacted into snapshot 4 (3 rows)"
    assert pk.to_arrow().sort_by("k").equals(expected)
    code, out, _ = run(capsys, "compact", pk.uri, "--full")
    assert code == 0 and out.strip() == "nothing to compact"


def test_compact_an_append_table_is_a_clear_error(
    tbl: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "compact", tbl.uri)
    assert code == 2 and out == ""
    assert "compact() applies to primary-key tables" in err
