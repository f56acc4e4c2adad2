"""``raylake scan`` shows every value as stored, in both formats."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.cli_show import printable, table_text

BIG = 2**60 + 1  # a float rounds it


def _scan(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: pa.Table, *argv: str) -> str:
    tbl = raylake.create_table(str(tmp_path / "t"), data.schema)
    tbl.write(data)
    assert main(["scan", tbl.uri, *argv]) == 0
    return capsys.readouterr().out


def test_the_table_format_tells_a_null_float_from_nan_and_keeps_nested_integers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = pa.table(
        {
            "f": [float("nan"), None],
            "l": pa.array([[BIG, None], None], pa.list_(pa.int64())),
            "s": pa.array([{"x": BIG}, {"x": None}], pa.struct([("x", pa.int64())])),
        }
    )
    out = _scan(tmp_path, capsys, data)
    assert out.split("\n")[1].split() == ["nan", f"[{BIG},", "None]", "{'x':", f"{BIG}}}"]
    assert out.split("\n")[2].split() == ["None", "None", "{'x':", "None}"]


def test_timestamps_and_durations_beyond_pythons_are_shown_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python's datetime stops at year 9999 and its timedelta at a billion days: the
    JSON format failed with OverflowError's traceback."""
    year_20000 = 568971820800  # seconds since 1970
    data = pa.table(
        {
            "ts": pa.array([year_20000, None], pa.timestamp("s", tz="UTC")),
            "d": pa.array([10**15, 1], pa.duration("s")),
            "l": pa.array([[year_20000], []], pa.list_(pa.timestamp("s"))),
        }
    )
    out = _scan(tmp_path, capsys, data, "--format", "json")
    assert [json.loads(line) for line in out.splitlines()] == [
        {"ts": "20000-01-01T00:00:00Z", "d": "1000000000000000 s", "l": ["20000-01-01T00:00:00"]},
        {"ts": None, "d": "1 s", "l": []},
    ]
    assert main(["scan", str(tmp_path / "t")]) == 0
    assert "20000-01-01T00:00:00Z" in capsys.readouterr().out


def test_dates_and_nested_timestamps_past_arrows_text_are_shown_as_top_level_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Arrow's text stops at year 32767: a date32, and a timestamp or date inside a list
    or struct, printed "<value out of range: N>" where a date64 or a top-level timestamp
    of the same value printed its ISO text."""
    days = [2_932_897, 11_248_737, 2**31 - 1, -(2**31), None]
    ts = pa.timestamp("s")
    data = pa.table(
        {
            "d32": pa.array(days, pa.date32()),
            "d64": pa.array([d and d * 86_400_000 for d in days], pa.date64()),
            "ts": pa.array([10**12, None, 0, 1, 2], ts),
            "l": pa.array([[10**12], None, [], [None], [0]], pa.list_(ts)),
            "st": pa.array(
                [{"d": 2**31 - 1}, None, {"d": None}, {"d": 0}, {"d": 1}],
                pa.struct([("d", pa.date32())]),
            ),
        }
    )
    out = _scan(tmp_path, capsys, data, "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["d32"] for r in rows] == [r["d64"] for r in rows]
    assert [r["d32"] for r in rows] == [
        "10000-01-01", "32767-12-31", "5881580-07-11", "-5877641-06-23", None
    ]  # fmt: skip
    assert rows[0]["l"] == [rows[0]["ts"]] == ["33658-09-27T01:46:40"]
    assert [r["l"] for r in rows[1:]] == [None, [], [None], ["1970-01-01T00:00:00"]]
    assert [r["st"] for r in rows] == [
        {"d": "5881580-07-11"}, None, {"d": None}, {"d": "1970-01-01"}, {"d": "1970-01-02"}
    ]  # fmt: skip
    assert main(["scan", str(tmp_path / "t")]) == 0
    table = capsys.readouterr().out
    assert "out of range" not in table and table.count("5881580-07-11") == 3


def test_no_rows_print_the_header_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = pa.table({"id": pa.array([1], pa.int64()), "naïve name": ["a"]})
    assert _scan(tmp_path, capsys, data, "--filter", "id > 5") == "id  naïve name\n"
    assert main(["scan", str(tmp_path / "t"), "--filter", "id > 5", "--format", "json"]) == 0
    assert capsys.readouterr().out == ""


def test_a_null_string_is_told_from_the_string_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pandas 3 printed both as NaN."""
    out = _scan(tmp_path, capsys, pa.table({"s": ["NaN", None], "id": [1, 2]}))
    assert [line.split() for line in out.splitlines()] == [["s", "id"], ["NaN", "1"], ["None", "2"]]


def test_info_shows_column_names_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They came out as \\u escapes ("na\\u00efve"), which --columns does not take."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("naïve", pa.int64())]))
    assert main(["info", tbl.uri]) == 0
    out = capsys.readouterr().out
    assert '"naïve": "int64"' in out and json.loads(out)["columns"] == {"naïve": "int64"}


def test_strings_inside_lists_and_maps_are_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pandas printed ['a, b'] and ['a', 'b'] both as [a, b], ['None'] as [None], and a
    map entry ('k', 'v, w') as (k, v, w)."""
    data = pa.table(
        {
            "l": pa.array([["a, b"], ["a", "b"], ["None"], [None], None], pa.list_(pa.string())),
            "m": pa.array(
                [[("k", "v, w")], [("k", "v")], [], [("n", None)], None],
                pa.map_(pa.string(), pa.string()),
            ),
        }
    )
    _scan(tmp_path, capsys, data)
    shown = {}
    for column in ("l", "m"):
        assert main(["scan", str(tmp_path / "t"), "--columns", column]) == 0
        shown[column] = [line.strip() for line in capsys.readouterr().out.splitlines()[1:]]
    assert shown == {
        "l": ["['a, b']", "['a', 'b']", "['None']", "[None]", "None"],
        "m": ["[('k', 'v, w')]", "[('k', 'v')]", "[]", "[('n', None)]", "None"],
    }


def test_control_characters_are_escaped_in_the_table_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ESC and NUL went to the terminal as they are (pandas escapes only \\n, \\r, \\t)."""
    data = pa.table(
        {
            "s\x1b": ["a\x1b[31mRED", "nul\x00end", "cr\rX\u202e"],
            "l": pa.array([["\x1b"], [], None], pa.list_(pa.string())),
        }
    )
    out = _scan(tmp_path, capsys, data)
    assert "\x1b" not in out and "\x00" not in out
    assert [line.split() for line in out.splitlines()] == [
        ["s\\x1b", "l"],
        ["a\\x1b[31mRED", "['\\x1b']"],
        ["nul\\x00end", "[]"],
        ["cr\\rX\\u202e", "None"],
    ]
    assert main(["scan", str(tmp_path / "t"), "--filter", "l is null and l is not null"]) == 0
    assert capsys.readouterr().out == "s\\x1b  l\n"


def test_a_dictionary_column_of_numbers_is_shown_beside_escaped_text() -> None:
    """Only text is escaped: a dictionary column (text to pandas' eye) may hold numbers."""
    data = pa.table(
        {
            "d": pa.array([1, None]).dictionary_encode(),
            "s": pa.array(["a\x1b", None]).dictionary_encode(),
        }
    )
    lines = [line.split() for line in table_text(printable(data)).splitlines()]
    assert lines == [["d", "s"], ["1", "a\\x1b"], ["None", "None"]]
