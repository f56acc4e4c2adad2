"""The ``raylake`` command's flags refuse bad values naming the flag, before any work."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.cli_args import parse_older_than, start_arg


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["scan", "{t}", "--snapshot", "0"], "--snapshot"),
        (["expire", "{t}", "--retain-last", "0"], "--retain-last"),
        (["consumers", "{t}", "--reset", "c", "--snapshot", "-1"], "--snapshot"),
        (["write", "{t}", "{t}/x.csv", "--create", "--buckets", "0"], "--buckets"),
    ],
)
def test_counts_below_one_are_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    """They were refused by the method they went to, naming its keyword (snapshot_id,
    retain_last, next_snapshot_id, buckets), which no shell user typed."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))
    with pytest.raises(SystemExit) as info:
        main([a.format(t=uri) for a in argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {flag}: " in err and "a whole number >= 1" in err
    assert len(raylake.open_table(uri).snapshots()) == 1


def test_columns_takes_quoted_names_with_commas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--columns split every name at its commas: a column "a,b" could not be selected."""
    uri = str(tmp_path / "t")
    data = pa.table({"a,b": [1], "id": [2], ' say "hi"': [3], "x`y": [4]})
    raylake.create_table(uri, data.schema).write(data)
    assert main(["scan", uri, "--columns", '"a,b", id', "--format", "json"]) == 0
    assert capsys.readouterr().out == '{"a,b": 1, "id": 2}\n'
    assert main(["scan", uri, "--columns", '" say ""hi""",`x``y`', "--format", "json"]) == 0
    assert capsys.readouterr().out == '{" say \\"hi\\"": 3, "x`y": 4}\n'
    assert main(["scan", uri, "--columns", ""]) == 2  # not every column
    assert "unknown column ''" in capsys.readouterr().err


@pytest.mark.parametrize("keys", ["", "id,,name", " , "])
@pytest.mark.parametrize("flag", ["--primary-key", "--partition-by"])
def test_an_empty_key_or_partition_column_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, keys: str
) -> None:
    """--primary-key "$KEY" with KEY unset made a table without a key, silently."""
    (tmp_path / "rows.csv").write_text("id,name\n1,a\n")
    with pytest.raises(SystemExit) as info:
        main(["write", str(tmp_path / "t"), str(tmp_path / "rows.csv"), "--create", flag, keys])
    assert info.value.code == 2 and f"argument {flag}: " in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("argv", "flag", "says"),
    [
        (["scan", "{t}", "--columns", "id,id"], "--columns", "'id,id' names 'id' twice"),
        (["write", "{t}", "{t}/x.csv", "--create", "--primary-key", "id, id"], "--primary-key",
         "'id, id' names 'id' twice"),
        (["consumers", "{t}", "--reset", "bad/id", "--snapshot", "1"], "--reset",
         "'bad/id' is not a consumer id"),
        (["consumers", "{t}", "--delete", "c.tmp"], "--delete", "'c.tmp' is not a consumer id"),
        (["tail", "{t}", "--consumer", ""], "--consumer", "'' is not a consumer id"),
    ],
)  # fmt: skip
def test_a_repeated_column_or_a_bad_consumer_id_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, says: str
) -> None:
    """They were refused by the method they went to, naming its keyword (columns,
    consumer_id) and a Python tuple ("got tuple ('id', 'id')")."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))
    with pytest.raises(SystemExit) as info:
        main([a.format(t=uri) for a in argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {flag}: {says}" in err


@pytest.mark.parametrize("text", ["2024-05-01T12:00:00Z", "2024-05-01 12:00:00z"])
def test_an_iso_time_in_utc_with_a_z_is_read_on_every_python(text: str) -> None:
    """Python 3.10's datetime.fromisoformat refuses the Z that 3.11's reads."""
    utc = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert parse_older_than(text) == utc
    assert start_arg(text) == utc


@pytest.mark.parametrize(
    "argv",
    [
        ["expire", "{t}", "--older-than", "99999999999d", "--dry-run"],
        ["expire", "{t}", "--consumers-older-than", "1000000000w", "--dry-run"],
        ["orphans", "{t}", "--older-than", "1000000000d", "--dry-run"],
    ],
)
def test_an_age_too_long_for_a_timedelta_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """It was an OverflowError's traceback, exit code 1."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))
    with pytest.raises(SystemExit) as info:
        main([a.format(t=uri) for a in argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {argv[2]}: {argv[3]!r} is too long an age" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["expire", "{t}", "--older-than", "-1d"], "'-1d' is a negative age: give how long ago, e.g. 1d"),
        (["expire", "{t}", "--consumers-older-than", "-2h30m"], "'-2h30m' is a negative age"),
        (["orphans", "{t}", "--older-than", "-1d"], "'-1d' is a negative age"),
        (["tail", "{t}", "--timeout", "-.5"], "'-.5' is not a number of seconds >= 0"),
        (["tail", "{t}", "--poll", "-1e3"], "'-1e3' is not a number of seconds >= 0"),
    ],
)  # fmt: skip
def test_a_negative_age_or_time_is_refused_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    """argparse took a value starting with a minus and not a plain number for an option:
    "argument --older-than: expected one argument", not what was wrong with it."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))
    with pytest.raises(SystemExit) as info:
        main([a.format(t=uri) for a in argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {argv[2]}: {says}" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["expire", "{t}", "--older-than", "0001-01-01", "--dry-run"],
        ["orphans", "{t}", "--older-than", "0001-01-01", "--dry-run"],
        ["scan", "{t}", "--as-of", "0001-01-01T00:00:00"],
        ["tail", "{t}", "--start", "0001-01-01T00:00:00", "--timeout", "0"],
    ],
)
def test_a_time_that_cannot_be_read_as_local_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A time without an offset is local; in datetime's first day Python cannot read it
    so: it was a ValueError's traceback ("year 0 is out of range"), exit code 1."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))
    with pytest.raises(SystemExit) as info:
        main([a.format(t=uri) for a in argv])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"argument {argv[2]}: {argv[3]!r} cannot be read in the local time zone" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["scan", "{t}", "--as-of", "0001-01-01T00:00:00+05:00"],
        ["tail", "{t}", "--start", "0001-01-01T00:00:00+05:00", "--timeout", "0"],
    ],
)
def test_no_snapshot_before_year_1_in_utc_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """It was a ValueError's traceback, exit code 1, from formatting the time in UTC."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))
    assert main([a.format(t=uri) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"raylake: error: {uri} has no snapshot at or before -62135614800000 ms from the "
        "epoch (outside years 1 to 9999 in UTC)\n"
    )


@pytest.mark.parametrize("uri", ["s3://", "gs://", "s3:///x"])
def test_a_url_naming_no_bucket_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, uri: str
) -> None:
    """It was read as a local path: "no raylake table at '/cwd/s3:'"."""
    monkeypatch.chdir(tmp_path)
    assert main(["scan", uri]) == 2
    scheme = uri.split(":")[0]
    assert capsys.readouterr().err == (
        f"raylake: error: uri must be a URL naming its bucket: {scheme}://BUCKET/PATH, "
        f"got str {uri!r}\n"
    )
