"""The ``raylake`` command, run in-process through ``raylake.cli.main``."""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import build_parser, main, parse_older_than
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
    assert info["latest_snapshot"] == 3 and info["rows"] == 30 and "stored_versions" not in info
    assert info["data_files"] == 3 and info["columns"]["label"] == "int32"
    assert info["schema_id"] == 0 and info["format_version"] == 2
    with tbl.update_schema() as u:
        u.rename_column("label", "target")
    code, out, _ = run(capsys, "info", tbl.uri)
    info = json.loads(out)
    assert info["schema_id"] == 1 and info["columns"]["target"] == "int32"


@pytest.fixture
def upserted(tmp_path: Path) -> Table:
    """1,000 keys, then 100 of them written again: 1,100 stored versions of 1,000 rows."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    pk = raylake.create_table(str(tmp_path / "pk"), schema, primary_key=["k"], buckets=2)
    pk.write(pa.table({"k": list(range(1000)), "v": [0] * 1000}, schema=schema))
    pk.write(pa.table({"k": list(range(0, 1000, 10)), "v": [1] * 100}, schema=schema))
    return pk


def test_info_of_a_primary_key_table_shows_live_rows_and_stored_versions(
    upserted: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "info", upserted.uri)
    info = json.loads(out)
    assert code == 0 and info["rows"] == 1000 and info["stored_versions"] == 1100
    upserted.delete("k < 5")
    info = json.loads(run(capsys, "info", upserted.uri)[1])
    assert info["rows"] == 995 and info["stored_versions"] == 1105


def test_snapshots_of_a_primary_key_table_show_live_rows(
    upserted: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "snapshots", upserted.uri)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[-4:] == ["stored", "rows", "live", "rows"]
    assert [line.split()[-3:] for line in lines[1:]] == [
        ["1,000", "1,000", "1,000"],
        ["100", "1,100", "1,000"],
    ]
    code, out, _ = run(capsys, "snapshots", upserted.uri, "--live-rows", "1")
    lines = out.splitlines()
    assert [line.split()[-1] for line in lines[1:3]] == ["-", "1,000"]
    assert lines[3] == "live rows of the newest 1 snapshot(s) only: --live-rows N for more"
    # More than the table has: every snapshot (was: the slice started before the first
    # and wrapped around, counting 2 * 2 - 3 = 1).
    code, out, _ = run(capsys, "snapshots", upserted.uri, "--live-rows", "3")
    assert [line.split()[-1] for line in out.splitlines()[1:]] == ["1,000", "1,000"]


def test_snapshots(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "snapshots", tbl.uri)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:2] == ["id", "kind"]
    assert [line.split()[0] for line in lines[1:]] == ["1", "2", "3"]
    assert lines[-1].split()[-3:] == ["10", "30", "30"]
    assert len({len(line) for line in lines}) == 1  # aligned columns


JAVA_FIXTURES = Path(__file__).parent / "paimon" / "java_fixtures"
JAVA_FULL_READS = {
    name: len(run["rows"])
    for name, case in json.loads((JAVA_FIXTURES / "cases.json").read_text()).items()
    for run in case["expected"][:1]
    if run.get("snapshot") is None and not {"columns", "filter", "buckets"} & set(run)
}


@pytest.mark.parametrize("name", sorted(JAVA_FULL_READS))
def test_rows_of_a_java_written_table_are_the_rows_java_reads(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows a read returns, not the snapshot's record count: data evolution counts a row
    once per file holding some of its columns, and a fallback branch's rows are in no
    snapshot of the table's own (info said 4 for 2 rows, 20 for 10, 2 for 4)."""
    path = str(JAVA_FIXTURES / name)
    code, out, _ = run(capsys, "info", path)
    assert code == 0 and json.loads(out)["rows"] == JAVA_FULL_READS[name]
    code, out, _ = run(capsys, "snapshots", path, "--live-rows", "1")
    newest = [line.split() for line in out.splitlines() if line.split()[0].isdigit()][-1]
    assert code == 0 and newest[-1] == f"{JAVA_FULL_READS[name]:,}"


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


def test_scan_travels_in_time_as_of_an_iso_time(
    tbl: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    """Table.to_arrow, read_lake and raylake.spark.read take as_of beside snapshot_id;
    raylake scan took --snapshot alone."""
    first = tbl.snapshot(1)
    at = first.time.isoformat()
    code, out, _ = run(capsys, "scan", tbl.uri, "--as-of", at, "--format", "json", "--limit", "99")
    # The newest snapshot then (commits in the same millisecond as the first included).
    then = max(s.id for s in tbl.snapshots() if s.time_millis <= first.time_millis)
    expected = sorted(tbl.to_arrow(snapshot_id=then).column("id").to_pylist())
    assert code == 0 and sorted(json.loads(line)["id"] for line in out.splitlines()) == expected
    with pytest.raises(SystemExit):  # argparse: one or the other
        main(["scan", tbl.uri, "--as-of", at, "--snapshot", "1"])
    with pytest.raises(SystemExit):
        main(["scan", tbl.uri, "--as-of", "yesterday"])
    assert "'yesterday' is not an ISO time" in capsys.readouterr().err


def test_scan_table_format(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "scan", tbl.uri, "--filter", "id = 25")
    assert code == 0 and err == ""
    assert out.split() == ["id", "dt", "label", "25", "2024-01-03", "1"]


def test_scan_table_format_prints_integers_with_nulls_as_integers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    table.write(pa.table({"id": pa.array([2**53 + 1, None], pa.int64())}))
    code, out, _ = run(capsys, "scan", table.uri)
    assert code == 0 and out.split() == ["id", str(2**53 + 1), "<NA>"]


def test_scan_says_when_it_truncated(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "scan", tbl.uri, "--limit", "12", "--format", "json")
    assert code == 0 and len(out.splitlines()) == 12
    assert err == "showing 12 of 30 rows: use --limit N to see more\n"
    code, out, err = run(capsys, "scan", tbl.uri, "--filter", "label = 1", "--limit", "3")
    assert code == 0 and len(out.splitlines()) == 1 + 3
    assert err == "showing 3 rows; more match: use --limit N to see more\n"
    for limit in ("10", "30"):  # the first file exactly, and every row: nothing left out
        code, out, err = run(capsys, "scan", tbl.uri, "--limit", limit, "--format", "json")
        assert code == 0 and len(out.splitlines()) == int(limit)
        assert err == (
            "" if limit == "30" else "showing 10 of 30 rows: use --limit N to see more\n"
        )


def test_scan_of_a_primary_key_table_counts_live_rows(
    upserted: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "scan", upserted.uri, "--format", "json")
    assert code == 0 and err == "showing 20 of 1,000 rows: use --limit N to see more\n"


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


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_scan_of_a_damaged_data_file_is_exit_code_2_naming_it(
    tbl: Table, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    path = Path(tbl.uri) / tbl.scan(filter="id = 25").plan()[0].paths[0]
    if damage == "missing":
        path.unlink()
    else:
        with open(path, "r+b") as f:
            f.truncate(10)
    code, out, err = run(capsys, "scan", tbl.uri, "--filter", "id = 25")
    assert code == 2 and out == ""
    assert err.startswith("raylake: error: ") and err.count("\n") == 1 and path.name in err


def test_a_bug_keeps_its_traceback(
    tbl: Table, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Table) -> None:
        raise AttributeError("a bug")

    monkeypatch.setattr(Table, "latest_snapshot", broken)
    with pytest.raises(AttributeError, match="a bug"):
        main(["info", tbl.uri])


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"raylake {raylake.__version__}\n"


def _all_help(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_help(sub)


def test_help_is_plain_text() -> None:
    texts = list(_all_help(build_parser()))
    assert len(texts) > 5
    for text in texts:
        assert "``" not in text and not re.search(r":[a-z]+:`", text), text


def test_tail_columns_stay_aligned_at_two_digit_snapshot_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(11):
        t.write(pa.table({"id": [i] * (i + 1), "dt": ["d"] * (i + 1), "label": [0] * (i + 1)}))
    code, out, _ = run(capsys, "tail", t.uri, "--start", "1", "--timeout", "0")
    lines = out.splitlines()[1:]
    assert code == 0 and len(lines) == 11
    assert lines[8].split()[1] == "9" and lines[9].split()[1] == "10"
    assert len({line.index("APPEND") for line in lines}) == 1
    assert len({len(line) for line in lines}) == 1


def test_tail_starts_at_an_iso_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    rows = pa.table({"id": [1], "dt": ["d"], "label": [0]})
    t.write(rows)
    t.write(rows)
    time.sleep(0.02)
    between = datetime.now(timezone.utc)
    time.sleep(0.02)
    t.write(rows)
    code, out, _ = run(capsys, "tail", t.uri, "--start", between.isoformat(), "--timeout", "0")
    assert code == 0 and out.splitlines()[0].endswith("from snapshot 2")
    assert [line.split()[1:4] for line in out.splitlines()[1:]] == [
        ["2", "APPEND", "full"],
        ["3", "APPEND", "delta"],
    ]
    with pytest.raises(SystemExit) as info:
        main(["tail", t.uri, "--start", "yesterday"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "'yesterday' is none of latest, earliest, latest-new" in err
    assert "a snapshot id (>= 1) or an ISO time" in err


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
    with pytest.raises(SystemExit) as info:
        main(["expire", tbl.uri, "--retain-last", "0"])
    assert info.value.code == 2 and "argument --retain-last: '0'" in capsys.readouterr().err
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


@pytest.mark.parametrize("text", ["", "7", "d", "7x", "-d", "1d 2h", "soon"])
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
    for other in ([], ["--delete", "job"]):  # --snapshot would be ignored
        code, out, err = run(capsys, "consumers", tbl.uri, *other, "--snapshot", "2")
        assert code == 2 and out == ""
        assert "--snapshot must be given only with --reset ID, got int 2" in err
    code, _, err = run(capsys, "consumers", tbl.uri, "--reset", "job", "--snapshot", "9")
    assert code == 2 and "snapshot 9 does not exist" in err
    (Path(tbl.uri) / "consumer").mkdir()
    (Path(tbl.uri) / "consumer" / "consumer-bad").write_text("][")
    code, out, err = run(capsys, "consumers", tbl.uri)
    assert code == 2 and "corrupted metadata file" in err and "consumer-bad" in err
    assert out == ""  # no table header above the error
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


def test_compact_an_append_table(tbl: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compact", tbl.uri)  # one file in each partition
    assert code == 0 and out.strip() == "nothing to compact"
    tbl.write(pa.table({"id": [99], "dt": ["2024-01-01"], "label": [1]}))
    before = tbl.to_arrow()
    code, out, _ = run(capsys, "compact", tbl.uri, "--full")
    assert code == 0 and out.strip() == "compacted into snapshot 5 (31 rows)"
    assert tbl.to_arrow().equals(before)
    code, out, _ = run(capsys, "compact", tbl.uri)
    assert code == 0 and out.strip() == "nothing to compact"


def test_scan_shows_nanosecond_times_and_far_dates_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python's time holds microseconds and its date years up to 9999."""
    data = pa.table({"t": pa.array([1], pa.time64("ns")), "d": pa.array([3_000_000], pa.date32())})
    far = raylake.create_table(str(tmp_path / "far"), data.schema)
    far.write(data)
    code, out, _ = run(capsys, "scan", far.uri, "--format", "json")
    assert code == 0 and json.loads(out) == {"t": "00:00:00.000000001", "d": "10183-09-21"}
    code, out, _ = run(capsys, "scan", far.uri)
    assert code == 0 and out.split() == ["t", "d", "00:00:00.000000001", "10183-09-21"]


def test_scan_json_is_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NaN and the infinities are strings, binary values base64: Python wrote bare NaN,
    Infinity and b'...'."""
    nan, inf = float("nan"), float("inf")
    data = pa.table(
        {
            "f": [nan, inf, -inf, None],
            "b": [b"\x00\xff", b"", None, b"ab"],
            "l": [[nan], None, [], [1.0]],
            "s": [{"x": -inf}, None, {"x": None}, {"x": 2.0}],
        }
    )
    odd = raylake.create_table(str(tmp_path / "odd"), data.schema)
    odd.write(data)
    code, out, _ = run(capsys, "scan", odd.uri, "--format", "json")

    def refuse(word: str) -> None:
        raise AssertionError(f"{word} is not JSON")

    rows = [json.loads(line, parse_constant=refuse) for line in out.splitlines()]
    assert code == 0 and rows == [
        {"f": "NaN", "b": "AP8=", "l": ["NaN"], "s": {"x": "-Infinity"}},
        {"f": "Infinity", "b": "", "l": None, "s": None},
        {"f": "-Infinity", "b": None, "l": [], "s": {"x": None}},
        {"f": None, "b": "YWI=", "l": [1.0], "s": {"x": 2.0}},
    ]
