"""``raylake write``: files into a table as one commit."""

from __future__ import annotations

import json
import os
from datetime import date, time, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import raylake
from raylake import cli_write
from raylake.cli import main
from raylake.table import table_exists

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


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_mode_the_new_table_refuses_fails_before_it_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, day1 = str(tmp_path / "t"), files(tmp_path)[0]
    monkeypatch.setattr(cli_write, "drop_new_table", lambda tbl: None)  # no cleanup to rely on
    code, _, err = _run(capsys, "write", uri, day1, "--create", "--primary-key", "id",
                        "--mode", "append")  # fmt: skip
    assert code == 2 and "mode 'append' is not supported for a primary-key table" in err
    assert not (tmp_path / "t").exists()
    code, out, _ = _run(capsys, "write", uri, day1, "--create", "--primary-key", "id")
    assert code == 0 and "wrote 1 row(s) from 1 file(s): snapshot 1" in out


def test_a_failed_first_write_removes_the_table_it_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, day1 = str(tmp_path / "t"), files(tmp_path)[0]
    pcsv.write_csv(pa.table({"id": ["x"], "name": ["d"]}), tmp_path / "bad.csv")
    bad = str(tmp_path / "bad.csv")
    code, _, err = _run(capsys, "write", uri, day1, bad, "--create", "--primary-key", "id")
    assert code == 2 and "cannot read" in err and "bad.csv" in err
    assert not (tmp_path / "t").exists()
    code, out, _ = _run(capsys, "write", uri, day1, "--create", "--primary-key", "id")
    assert code == 0 and "snapshot 1" in out
    code, _, err = _run(capsys, "write", uri, bad)  # a table it did not create stays
    assert code == 2 and [s.id for s in raylake.open_table(uri).snapshots()] == [1]


def test_write_reports_the_rows_written_and_those_an_overwrite_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    pq.write_table(pa.table({"id": list(range(10))}), tmp_path / "big.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3]}), tmp_path / "small.parquet")
    big, small = str(tmp_path / "big.parquet"), str(tmp_path / "small.parquet")
    assert _run(capsys, "write", uri, big, "--create")[1] == (
        "wrote 10 row(s) from 1 file(s): snapshot 1\n"
    )
    code, out, _ = _run(capsys, "write", uri, small, "--mode", "overwrite")
    assert code == 0 and out == "wrote 3 row(s) from 1 file(s): snapshot 2 (replaced 10 row(s))\n"
    code, out, _ = _run(capsys, "write", uri, small, small)
    assert code == 0 and out == "wrote 6 row(s) from 2 file(s): snapshot 3\n"


def test_a_directory_is_refused_with_how_to_give_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adir").mkdir()
    code, _, err = _run(capsys, "write", str(tmp_path / "t"), str(tmp_path / "adir"), "--create")
    assert code == 2 and "is a directory; give its files (e.g. " in err
    assert os.path.join(str(tmp_path / "adir"), "*.parquet") in err
    assert not (tmp_path / "t").exists()


def test_format_names_the_format_of_files_without_a_known_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    pcsv.write_csv(ROWS, tmp_path / "export.txt")
    pq.write_table(ROWS, tmp_path / "dump.bin")
    code, out, _ = _run(
        capsys, "write", uri, str(tmp_path / "export.txt"), "--format", "csv", "--create"
    )
    assert code == 0 and "wrote 3 row(s)" in out
    code, out, _ = _run(capsys, "write", uri, str(tmp_path / "dump.bin"), "--format", "parquet")
    assert code == 0 and "wrote 3 row(s)" in out
    assert raylake.open_table(uri).count() == 6


def test_a_directory_with_other_files_names_the_flag_that_allows_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, day1 = str(tmp_path / "t"), files(tmp_path)[0]
    os.mkdir(uri)
    (tmp_path / "t" / "README").write_text("notes")
    code, _, err = _run(capsys, "write", uri, day1, "--create")
    assert code == 2 and "it already holds README" in err
    assert "pass --allow-other-files" in err and "raylake orphans never deletes" in err
    assert "allow_other_files=True" not in err and os.listdir(uri) == ["README"]
    code, out, _ = _run(capsys, "write", uri, day1, "--create", "--allow-other-files")
    assert code == 0 and "snapshot 1" in out and (tmp_path / "t" / "README").exists()
    code, _, err = _run(capsys, "write", uri, day1, "--allow-other-files")
    assert code == 2 and "--allow-other-files must be given only with --create" in err


def test_a_failed_create_among_other_files_removes_only_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cleanup of the new table removed the whole directory, the user's README too."""
    uri = str(tmp_path / "t")
    os.mkdir(uri)
    (tmp_path / "t" / "README").write_text("notes")
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("id,s\n1,a\n")
    bad.write_text("id,s\nnot-a-number,b\n")
    code, _, _ = _run(capsys, "write", uri, str(good), str(bad), "--create", "--allow-other-files")
    assert code == 2
    assert (tmp_path / "t" / "README").read_text() == "notes"
    assert not table_exists(uri)


def test_csv_nan_is_a_float_not_a_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pyarrow's default null texts include NaN: a float NaN was stored as null."""
    (tmp_path / "in.csv").write_text("id,f,s\n1,NaN,NaN\n2,nan,x\n3,inf,y\n4,,z\n5,NA,NA\n")
    uri = str(tmp_path / "t")
    assert _run(capsys, "write", uri, str(tmp_path / "in.csv"), "--create")[0] == 0
    rows = raylake.open_table(uri).to_arrow().sort_by("id").to_pylist()
    assert [str(r["f"]) for r in rows] == ["nan", "nan", "inf", "None", "None"]
    assert [r["s"] for r in rows] == ["NaN", "x", "y", "z", "NA"]  # text stays text


def test_json_binary_columns_round_trip_as_base64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scan --format json writes bytes as base64; write stored the base64 text itself."""
    schema = pa.schema(
        [("id", pa.int64()), ("b", pa.binary()), ("f", pa.binary(2)), ("l", pa.large_binary())]
    )
    data = pa.table(
        {"id": [1, 2], "b": [b"\x00\x01", None], "f": [b"\xff\x00", b"ab"], "l": [b"", b"xyz"]},
        schema=schema,
    )
    src = str(tmp_path / "src")
    raylake.create_table(src, schema).write(data)
    code, out, _ = _run(capsys, "scan", src, "--format", "json")
    assert code == 0
    (tmp_path / "rows.jsonl").write_text(out)
    dst = str(tmp_path / "dst")
    raylake.create_table(dst, schema)
    assert _run(capsys, "write", dst, str(tmp_path / "rows.jsonl"))[0] == 0
    assert raylake.open_table(dst).to_arrow().sort_by("id").equals(data)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": 3, "b": "not base64!"}) + "\n")
    code, _, err = _run(capsys, "write", dst, str(tmp_path / "bad.jsonl"))
    assert code == 2 and "binary column 'b' holds text that is not base64" in err


def test_json_lines_write_text_dates_and_times_and_the_types_json_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyarrow's JSON reader reads a date or time only from a number and converts to no
    duration, float16, dictionary or fixed-size binary: the write failed."""
    uri = str(tmp_path / "t")
    (tmp_path / "day.csv").write_text("id,day\n1,2024-01-31\n")  # day: date32 inferred
    assert _run(capsys, "write", uri, str(tmp_path / "day.csv"), "--create")[0] == 0
    (tmp_path / "more.jsonl").write_text('{"id": 2, "day": "2024-02-01"}\n{"id": 3}\n')
    code, out, err = _run(capsys, "write", uri, str(tmp_path / "more.jsonl"))
    assert (code, err) == (0, "") and "wrote 2 row(s)" in out
    assert raylake.open_table(uri).to_arrow().sort_by("id").column("day").to_pylist() == [
        date(2024, 1, 31), date(2024, 2, 1), None
    ]  # fmt: skip
    types = {"t": pa.time64("us"), "d": pa.duration("s"), "h": pa.float16(),
             "c": pa.dictionary(pa.int32(), pa.string()), "b": pa.binary(2),
             "l": pa.list_(pa.date32())}  # fmt: skip
    other = raylake.create_table(str(tmp_path / "u"), pa.schema(types))
    row = {"t": "10:00:00.5", "d": 5, "h": 1.5, "c": "x", "b": "YWI=", "l": ["2024-01-01"]}
    (tmp_path / "all.jsonl").write_text(json.dumps(row) + "\n")
    assert _run(capsys, "write", other.uri, str(tmp_path / "all.jsonl"))[0] == 0
    assert other.to_arrow().to_pylist() == [
        {"t": time(10, 0, 0, 500000), "d": timedelta(seconds=5), "h": 1.5, "c": "x",
         "b": b"ab", "l": [date(2024, 1, 1)]}
    ]  # fmt: skip
    (tmp_path / "bad.jsonl").write_text('{"id": 4, "day": "soon"}\n')
    code, _, err = _run(capsys, "write", uri, str(tmp_path / "bad.jsonl"))
    assert code == 2 and "cannot read" in err and "bad.jsonl" in err and "'soon'" in err


def test_create_refuses_columns_without_a_type_before_it_creates_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header-only CSV made every column Arrow's null type: the table was created, and
    no later file's values could be written into it (no command retypes a column)."""
    uri = str(tmp_path / "t")
    (tmp_path / "header.csv").write_text("id,name\n")
    (tmp_path / "rows.csv").write_text("id,name\n1,a\n")
    code, _, err = _run(
        capsys, "write", uri, str(tmp_path / "header.csv"), str(tmp_path / "rows.csv"), "--create"
    )
    assert code == 2 and "column(s) ['id', 'name'] of " in err and "header.csv" in err
    assert not (tmp_path / "t").exists()
    (tmp_path / "some.jsonl").write_text('{"id": 1, "note": null}\n')
    code, _, err = _run(capsys, "write", uri, str(tmp_path / "some.jsonl"), "--create")
    assert code == 2 and "column(s) ['note']" in err and not (tmp_path / "t").exists()
    code, out, _ = _run(capsys, "write", uri, str(tmp_path / "rows.csv"), "--create")
    assert code == 0 and "wrote 1 row(s)" in out


def test_create_from_a_file_pandas_wrote_takes_the_types_from_pandas_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """df.to_parquet() under pandas 3 writes large_string and timestamp[us] (was: the
    table took them, and then refused a nanosecond that pandas 2 writes)."""
    import pandas as pd

    df = pd.DataFrame({"s": ["a"], "ts": pd.to_datetime(["2024-01-01"]).astype("datetime64[us]")})
    written = pa.Table.from_pandas(df, preserve_index=False)  # with pandas' metadata
    as_pandas_3 = pa.schema(
        [("s", pa.large_string()), ("ts", pa.timestamp("us"))], metadata=written.schema.metadata
    )
    pq.write_table(written.cast(as_pandas_3), tmp_path / "pd3.parquet")
    code, _, _ = _run(
        capsys, "write", str(tmp_path / "t"), str(tmp_path / "pd3.parquet"), "--create"
    )
    assert code == 0
    tbl = raylake.open_table(str(tmp_path / "t"))
    assert tbl.schema == pa.schema([("s", pa.string()), ("ts", pa.timestamp("ns"))])
    assert tbl.schema == raylake.from_pandas(df, str(tmp_path / "fresh")).schema


def test_a_json_array_is_refused_saying_json_files_are_read_as_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyarrow's 'Column() changed from object to array in row 0' came out."""
    (tmp_path / "rows.json").write_text('[{"id": 1, "name": "a"},\n {"id": 2, "name": "b"}]\n')
    code, _, err = _run(
        capsys, "write", str(tmp_path / "t"), str(tmp_path / "rows.json"), "--create"
    )
    assert code == 2 and "rows.json': it holds a JSON array" in err and "JSON lines" in err
    assert not (tmp_path / "t").exists()


def test_rows_the_table_refuses_are_named_by_their_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Of several files, the refusal did not say which one held the rows."""
    uri, (one, two, three) = str(tmp_path / "t"), files(tmp_path)
    raylake.create_table(uri, ROWS.schema)
    pq.write_table(pa.table({"id": ["x"], "name": ["d"]}), tmp_path / "text_ids.parquet")
    pq.write_table(pa.table({"name": ["e"]}), tmp_path / "no_ids.parquet")
    for bad in ("text_ids.parquet", "no_ids.parquet"):
        code, _, err = _run(capsys, "write", uri, one, str(tmp_path / bad), two, three)
        assert code == 2 and f"error: in {str(tmp_path / bad)!r}: " in err
        assert "'id'" in err and raylake.open_table(uri).snapshots() == []


def test_an_error_quoting_a_files_bytes_sends_no_control_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Parquet file read as CSV: pyarrow's message quotes its bytes, NULs included."""
    uri, day1 = str(tmp_path / "t"), files(tmp_path)[0]
    raylake.create_table(uri, ROWS.schema)
    code, _, err = _run(capsys, "write", uri, day1, "--format", "csv")
    assert code == 2 and "cannot read" in err and "\\x00" in err
    assert err.endswith("\n") and err[:-1].isprintable()


def test_a_pipe_is_refused_as_no_regular_file_not_as_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`... | raylake write URI /dev/stdin` said "no such file(s): ['/dev/stdin']"."""
    os.mkfifo(tmp_path / "pipe.csv")
    code, _, err = _run(
        capsys, "write", str(tmp_path / "t"), str(tmp_path / "pipe.csv"), "--create"
    )
    assert code == 2 and "pipe.csv' is not a regular file (a pipe" in err
    assert "no such file" not in err and not (tmp_path / "t").exists()


def test_csv_writes_float16_and_duration_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyarrow's CSV reader parses no float16 (nor a duration before pyarrow 17)."""
    schema = pa.schema([("h", pa.float16()), ("d", pa.duration("ms")), ("s", pa.string())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    (tmp_path / "rows.csv").write_text("h,d,s\n1.5,250,x\n,,\n")
    code, out, err = _run(capsys, "write", tbl.uri, str(tmp_path / "rows.csv"))
    assert (code, err) == (0, "") and "wrote 2 row(s)" in out
    assert tbl.to_arrow().to_pylist() == [
        {"h": 1.5, "d": timedelta(milliseconds=250), "s": "x"},
        {"h": None, "d": None, "s": ""},
    ]


def test_delete_removes_the_rows_a_filter_selects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    raylake.from_pandas(ROWS.to_pandas(), uri)
    assert _run(capsys, "delete", uri, "id >= 2") == (0, "deleted 2 row(s): snapshot 2\n", "")
    assert _run(capsys, "delete", uri, "id = 9")[1] == "no row matched: nothing to delete\n"
    code, _, err = _run(capsys, "delete", uri, "nope = 1")
    assert code == 2 and "unknown column 'nope'" in err
    pk = str(tmp_path / "pk")
    raylake.from_pandas(ROWS.to_pandas(), pk, primary_key=["id"])
    assert _run(capsys, "delete", pk, "name = 'a'")[1] == "deleted the matching rows: snapshot 2\n"
    assert raylake.open_table(pk).to_arrow().column("id").to_pylist() == [2, 3]
    assert raylake.open_table(uri).to_arrow().column("id").to_pylist() == [1]


@pytest.mark.parametrize("suffix", ["parquet", "csv", "jsonl"])
def test_schema_mode_merge_adds_the_columns_the_files_bring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    """raylake write had no --schema-mode: a file with a new column could not be written
    from the shell, where Table.write(schema_mode="merge") adds it."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, ROWS.schema).write(ROWS)
    wider = pa.table({"id": pa.array([4], pa.int64()), "name": ["d"], "score": [0.5]})
    path = tmp_path / f"wider.{suffix}"
    if suffix == "parquet":
        pq.write_table(wider, path)
    elif suffix == "csv":
        pcsv.write_csv(wider, path)
    else:
        path.write_text(json.dumps(wider.to_pylist()[0]) + "\n")
    code, _, err = _run(capsys, "write", uri, str(path))
    assert code == 2 and "score" in err  # strict, the default: refused, nothing written
    assert len(raylake.open_table(uri).snapshots()) == 1
    code, out, _ = _run(capsys, "write", uri, str(path), "--schema-mode", "merge")
    assert code == 0 and "wrote 1 row(s)" in out
    tbl = raylake.open_table(uri)
    assert tbl.schema.field("score").type == pa.float64()
    assert tbl.to_arrow().sort_by("id").column("score").to_pylist() == [None] * 3 + [0.5]


def test_a_dataframes_row_numbers_are_not_written_its_named_index_is(tmp_path: Path) -> None:
    """pandas stores an unnamed index other than a range (what a filter leaves) as
    ``__index_level_0__``; like ``from_pandas``, the command leaves it out (was: a
    column of the new table, and refused as an extra one by an existing table)."""
    import pandas as pd

    df = pd.DataFrame({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0]})
    df[df.id > 1].to_parquet(tmp_path / "filtered.parquet")
    # ids out of order: pandas 3 stores a named index of 1, 2, 3 as a range, not a column
    df.iloc[[2, 0, 1]].set_index("id").to_parquet(tmp_path / "named.parquet")
    uri = str(tmp_path / "t")
    assert main(["write", uri, str(tmp_path / "filtered.parquet"), "--create"]) == 0
    assert main(["write", uri, str(tmp_path / "named.parquet")]) == 0
    tbl = raylake.open_table(uri)
    assert tbl.schema.names == ["id", "v"]
    assert sorted(tbl.to_arrow()["id"].to_pylist()) == [1, 2, 2, 3, 3]


@pytest.mark.parametrize("suffix", ["parquet", "csv", "jsonl"])
def test_a_file_without_a_table_column_is_refused_in_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    """pyarrow's JSON reader, given the table's schema, adds the fields no line has as
    nulls: a JSON-lines file without a column was written with it null (in a primary-key
    table over the stored values), where Parquet and CSV are refused."""
    tbl = raylake.create_table(str(tmp_path / "t"), ROWS.schema, primary_key=["id"])
    tbl.write(ROWS)
    path = tmp_path / f"ids.{suffix}"
    ids = pa.table({"id": pa.array([1], pa.int64())})
    if suffix == "parquet":
        pq.write_table(ids, path)
    elif suffix == "csv":
        pcsv.write_csv(ids, path)
    else:
        path.write_text('{"id": 1}\n')
    code, _, err = _run(capsys, "write", tbl.uri, str(path))
    assert code == 2 and "data is missing column(s) ['name']" in err
    assert raylake.open_table(tbl.uri).to_arrow().sort_by("id").to_pylist() == ROWS.to_pylist()
    # merge adds no column here and fills the missing one with nulls, for every format
    code, out, _ = _run(capsys, "write", tbl.uri, str(path), "--schema-mode", "merge")
    assert code == 0 and "wrote 1 row(s)" in out
    assert raylake.open_table(tbl.uri).to_arrow().sort_by("id").column("name")[0].as_py() is None


def test_a_json_field_some_lines_have_or_that_is_null_is_a_column_of_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a field no line has is missing: one absent from some lines, or null in all
    that have it, is written (null where a line lacks it)."""
    tbl = raylake.create_table(str(tmp_path / "t"), ROWS.schema)
    (tmp_path / "some.jsonl").write_text('{"id": 1}\n{"id": 2, "name": "b"}\n')
    (tmp_path / "nulls.jsonl").write_text('{"id": 3}\n{"id": 4, "name": null}\n')
    paths = [str(tmp_path / "some.jsonl"), str(tmp_path / "nulls.jsonl")]
    code, out, err = _run(capsys, "write", tbl.uri, *paths)
    assert (code, err) == (0, "") and "wrote 4 row(s)" in out
    assert tbl.to_arrow().sort_by("id").column("name").to_pylist() == [None, "b", None, None]


def test_an_empty_json_lines_file_is_nothing_to_write_as_a_header_only_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyarrow refuses a 0-byte JSON file ("Empty JSON file", exit 2), alone or beside a
    header-only CSV, where an empty Parquet file or a header-only CSV is nothing to write."""
    tbl = raylake.create_table(str(tmp_path / "t"), ROWS.schema)
    tbl.write(ROWS)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "header.csv").write_text("id,name\n")
    for paths in (["empty.jsonl"], ["header.csv", "empty.jsonl"]):
        code, out, err = _run(capsys, "write", tbl.uri, *(str(tmp_path / p) for p in paths))
        assert (code, out, err) == (0, "nothing to write\n", "")
    assert len(raylake.open_table(tbl.uri).snapshots()) == 1


def test_a_failed_create_in_a_directory_made_for_it_keeps_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleanup of the new table removed the directory the user had made for it; in
    the working directory (``raylake write . ...``) it failed ("Cannot delete current
    working directory") and left the table's schema, which the corrected call then met."""
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("id,s\n1,a\n")
    bad.write_text("id,s\nnot-a-number,b\n")
    made = tmp_path / "made"
    made.mkdir()
    code, _, _ = _run(capsys, "write", str(made), str(good), str(bad), "--create")
    assert code == 2 and made.is_dir() and list(made.iterdir()) == []
    monkeypatch.chdir(made)
    code, _, err = _run(capsys, "write", ".", str(good), str(bad), "--create")
    assert code == 2 and "could not remove" not in err
    assert list(made.iterdir()) == [] and not table_exists(str(made))
    (tmp_path / "fixed.csv").write_text("id,s\nx,b\n")  # the corrected call: id is text
    code, out, _ = _run(capsys, "write", ".", str(tmp_path / "fixed.csv"), "--create")
    assert code == 0 and "snapshot 1" in out
