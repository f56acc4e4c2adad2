"""create_table / open_table / from_pandas / to_pandas on local paths, file:// and memory://."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.errors import (
    InvalidArgumentError,
    RaylakeError,
    SchemaError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raylake.table import table_exists

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("x", pa.float64())])


def sample(n: int = 6, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "dt": [f"2024-01-0{1 + i % 3}" for i in range(n)],
            "x": [i / 2 for i in range(n)],
        }
    )


@pytest.fixture(params=["local", "file", "memory"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "t")
    if request.param == "file":
        return f"file://{tmp_path}/t"
    return f"memory://{uuid.uuid4().hex}/t"


def test_create_write_open_read(uri: str) -> None:
    tbl = raylake.create_table(uri, SCHEMA, partition_by=["dt"])
    assert tbl.latest_snapshot() is None
    assert tbl.to_arrow().num_rows == 0
    assert tbl.to_arrow().schema == SCHEMA
    tbl.write(sample())
    opened = raylake.open_table(uri)
    assert opened.schema == SCHEMA
    assert opened.table_schema.partition_keys == ("dt",)
    assert opened.to_arrow().sort_by("id").equals(sample())
    assert table_exists(uri)


def test_create_twice_and_exist_ok(uri: str) -> None:
    raylake.create_table(uri, SCHEMA).write(sample())
    with pytest.raises(TableAlreadyExistsError, match="already exists"):
        raylake.create_table(uri, SCHEMA)
    same = raylake.create_table(uri, SCHEMA, exist_ok=True)
    assert same.count() == 6
    other = pa.schema([("id", pa.int32())])
    with pytest.raises(SchemaError, match="another schema"):
        raylake.create_table(uri, other, exist_ok=True)


def test_exist_ok_finds_the_table_asked_for_or_says_how_it_differs(uri: str) -> None:
    """The table found must be the one described: an append table returned for a call
    that asked for a primary key made every later upsert append a duplicate."""
    raylake.create_table(uri, SCHEMA, partition_by=["dt"]).write(sample())
    for kwargs, difference in [
        ({"partition_by": ["dt"], "primary_key": ["id", "dt"]}, "primary_key [] (asked for"),
        ({}, "partition_by ['dt'] (asked for [])"),
        ({"partition_by": ["dt"], "buckets": 4}, "buckets must be 1 or None for an append"),
        ({"partition_by": ["dt"], "options": {"write.compression": "zstd"}}, "write.compression"),
    ]:
        with pytest.raises(SchemaError, match=re.escape(difference)):
            raylake.create_table(uri, SCHEMA, exist_ok=True, **kwargs)  # type: ignore[arg-type]
    same = raylake.create_table(uri, SCHEMA, partition_by=["dt"], exist_ok=True)
    assert same.count() == 6
    # Appending needs no layout restated, but one given must be the table's.
    frame = sample().to_pandas()
    raylake.from_pandas(frame, uri, schema=SCHEMA, mode="append")
    with pytest.raises(SchemaError, match=re.escape("primary_key [] (asked for ['id'])")):
        raylake.from_pandas(frame, uri, schema=SCHEMA, mode="append", primary_key=["id"])
    assert raylake.open_table(uri).count() == 12


def test_open_without_a_table(uri: str) -> None:
    assert not table_exists(uri)
    with pytest.raises(TableNotFoundError) as info:
        raylake.open_table(uri)
    assert "no raylake table" in str(info.value)
    assert isinstance(info.value, RaylakeError)


def test_open_a_directory_that_is_not_a_table(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.parquet").write_bytes(b"PAR1")
    with pytest.raises(TableNotFoundError, match=str(tmp_path)):
        raylake.open_table(str(tmp_path))


def test_leftover_temporary_schema_file_is_ignored(tmp_path: Path) -> None:
    """A crash inside create_table can leave schema-0.json.<hex>.tmp behind."""
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "schema-0.json.1234abcd.tmp").write_text("{")
    assert not table_exists(str(tmp_path))
    with pytest.raises(TableNotFoundError):
        raylake.open_table(str(tmp_path))
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(sample(2))
    assert raylake.open_table(str(tmp_path)).count() == 2


def test_memory_tables_are_per_process() -> None:
    uri = f"memory://{uuid.uuid4().hex}/t"
    raylake.create_table(uri, SCHEMA).write(sample())
    code = f"import raylake; raylake.open_table({uri!r})"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode != 0
    assert "TableNotFoundError" in child.stderr


def test_a_copied_table_reads_the_same(tmp_path: Path) -> None:
    """Metadata stores paths relative to the table root, so a table can move."""
    tbl = raylake.create_table(str(tmp_path / "a"), SCHEMA, partition_by=["dt"])
    tbl.write(sample())
    tbl.write(sample(3, start=100))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    moved = raylake.open_table(str(tmp_path / "b"))
    assert moved.count() == 9
    assert moved.count(snapshot_id=1) == 6


def test_table_repr_and_properties(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    assert "append" in repr(tbl) and str(tmp_path) in repr(tbl)
    assert not tbl.is_primary_key_table
    assert tbl.uri == str(tmp_path)


# -- from_pandas ---------------------------------------------------------------------------

DF = pd.DataFrame({"a": [1, 2, 3], "b": ["x", None, "z"]})


def test_from_pandas_infers_the_schema(tmp_path: Path) -> None:
    tbl = raylake.from_pandas(DF, str(tmp_path))
    assert tbl.schema == pa.schema([("a", pa.int64()), ("b", pa.string())])
    pd.testing.assert_frame_equal(tbl.to_pandas(), DF)


def test_from_pandas_with_an_arrow_schema(tmp_path: Path) -> None:
    schema = pa.schema([("b", pa.large_string()), ("a", pa.int16())])
    tbl = raylake.from_pandas(DF, str(tmp_path), schema)
    assert tbl.schema == schema
    assert tbl.to_arrow().to_pydict() == {"b": ["x", None, "z"], "a": [1, 2, 3]}


def test_from_pandas_with_column_names_renames_by_position(tmp_path: Path) -> None:
    """Like spark.createDataFrame(pdf, ["id", "name"]): names replace the columns in order."""
    tbl = raylake.from_pandas(DF, str(tmp_path), ["id", "name"])
    assert tbl.schema == pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert tbl.to_arrow().to_pydict() == {"id": [1, 2, 3], "name": ["x", None, "z"]}


def test_from_pandas_with_types_keeps_the_names(tmp_path: Path) -> None:
    tbl = raylake.from_pandas(DF, str(tmp_path), [pa.int8(), pa.string()])
    assert tbl.schema == pa.schema([("a", pa.int8()), ("b", pa.string())])
    assert tbl.count() == 3


def test_from_pandas_with_types_and_integer_column_labels(tmp_path: Path) -> None:
    df = pd.DataFrame([[1, "x"], [2, "y"]])
    tbl = raylake.from_pandas(df, str(tmp_path), [pa.int32(), pa.string()])
    assert tbl.schema == pa.schema([("0", pa.int32()), ("1", pa.string())])
    assert tbl.to_arrow().to_pydict() == {"0": [1, 2], "1": ["x", "y"]}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("a", "got str"),
        ({"a": pa.int8()}, "got dict"),
        (["a"], r"a list of 2 entries, one per column \['a', 'b'\], got list \['a'\]"),
        (["a", pa.int8()], "only column names"),
        ([pa.int8(), pa.int8(), pa.int8()], "a list of 2 entries"),
        (pa.schema([("a", pa.int64()), ("zzz", pa.string())]), r"\['zzz'\].*lacks"),
        (pa.schema([("a", pa.int64())]), r"column\(s\) \['b'\] that the schema does not name"),
        ([pa.int8(), pa.int64()], "does not convert"),
        (pa.schema([("a", pa.int64()), pa.field("b", pa.string(), nullable=False)]), "null"),
    ],
)
def test_from_pandas_bad_schema_forms(tmp_path: Path, schema: object, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        raylake.from_pandas(DF, str(tmp_path / "t"), schema)  # type: ignore[arg-type]
    assert not table_exists(str(tmp_path / "t"))


def test_from_pandas_overflowing_type_is_a_schema_error(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="300"):
        raylake.from_pandas(pd.DataFrame({"a": [300]}), str(tmp_path), [pa.int8()])


def test_from_pandas_modes(tmp_path: Path) -> None:
    uri = str(tmp_path)
    raylake.from_pandas(DF, uri)
    with pytest.raises(TableAlreadyExistsError, match="pass mode='append' or mode='overwrite'"):
        raylake.from_pandas(DF, uri)  # from_pandas has no exist_ok= to suggest
    assert raylake.from_pandas(DF, uri, mode="append").count() == 6
    tbl = raylake.from_pandas(DF.head(1), uri, mode="overwrite")
    assert tbl.to_arrow().to_pydict() == {"a": [1], "b": ["x"]}
    assert [s.commit_kind for s in tbl.snapshots()] == ["APPEND", "APPEND", "OVERWRITE"]
    with pytest.raises(InvalidArgumentError, match=r"mode must be one of .* got str 'ignore'"):
        raylake.from_pandas(DF, uri, mode="ignore")  # type: ignore[arg-type]
    assert tbl.count() == 1


def test_from_pandas_adds_new_columns_with_schema_mode_merge(tmp_path: Path) -> None:
    """Table.write, write_lake and raylake.spark.write take schema_mode; from_pandas did
    not (an unknown keyword), so a DataFrame with a new column could not be appended."""
    uri = str(tmp_path)
    raylake.from_pandas(DF, uri)
    more = DF.head(1).assign(t=pd.to_datetime(["2024-01-02"]).astype("datetime64[us]"))
    with pytest.raises(SchemaMismatchError, match=r"column\(s\) \['t'\]"):
        raylake.from_pandas(more, uri, mode="append")
    with pytest.raises(InvalidArgumentError, match="schema_mode must be 'strict' or 'merge'"):
        raylake.from_pandas(more, uri, mode="append", schema_mode="MERGE")
    assert len(raylake.open_table(uri).snapshots()) == 1  # nothing written by either
    tbl = raylake.from_pandas(more, uri, mode="append", schema_mode="merge")
    assert tbl.schema.field("t").type == pa.timestamp("ns")  # as from_pandas types it
    assert tbl.count(filter="t is null") == 3 and tbl.count() == 4


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_from_pandas_into_a_table_another_writer_just_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Parallel jobs appending to a new table: the ones that lost the race to create it
    raised TableAlreadyExistsError (saying to pass exist_ok, which from_pandas does not
    take), and their rows were lost."""
    from raylake.table import catalog

    uri = str(tmp_path / "t")
    raylake.from_pandas(pd.DataFrame({"id": [1], "s": ["a"]}), uri)
    real, looks = catalog.source_for, []

    def seen_before_the_other_writer(file_io: object) -> object:
        source = real(file_io)  # type: ignore[arg-type]
        if not looks:  # the first look, made before the other writer's create
            looks.append(source)
            monkeypatch.setattr(source, "exists", lambda: False)
        return source

    monkeypatch.setattr(catalog, "source_for", seen_before_the_other_writer)
    tbl = raylake.from_pandas(pd.DataFrame({"id": [2], "s": ["b"]}), uri, mode=mode)
    want = [1, 2] if mode == "append" else [2]
    assert sorted(tbl.to_arrow().column("id").to_pylist()) == want
    looks.clear()
    with pytest.raises(TableAlreadyExistsError, match="pass mode='append' or mode='overwrite'"):
        raylake.from_pandas(pd.DataFrame({"id": [3], "s": ["c"]}), uri)  # mode="error"


def test_from_pandas_whose_rows_the_new_table_refuses_leaves_no_table(tmp_path: Path) -> None:
    """A date beyond year 9999 cannot partition, which the write found after the table
    was created: the empty table stayed, and the corrected call failed 'already
    exists'. Beside other files (allow_other_files=True), only the table goes."""
    far = pa.array([3_000_000], pa.date32())  # beyond Python's year 9999
    df = pd.DataFrame({"d": pd.array(far, dtype=pd.ArrowDtype(pa.date32())), "v": [1]})
    uri = tmp_path / "t"
    with pytest.raises(SchemaMismatchError, match="'d'"):
        raylake.from_pandas(df, str(uri), partition_by=["d"])
    assert not uri.exists()
    beside = tmp_path / "shared"
    beside.mkdir()
    (beside / "notes.txt").write_text("mine")
    with pytest.raises(SchemaMismatchError, match="'d'"):
        raylake.from_pandas(df, str(beside), partition_by=["d"], allow_other_files=True)
    assert [p.name for p in beside.iterdir()] == ["notes.txt"]
    assert raylake.from_pandas(df.head(0), str(uri), partition_by=["d"]).count() == 0


def test_a_failed_write_keeps_the_new_table_another_writer_is_writing_into(
    tmp_path: Path,
) -> None:
    """Two jobs append to a table that did not exist: the one that created it fails
    before the other commits. Its cleanup removed the whole directory, the other job's
    files with it (a Ray read then said the table was not there "though it was")."""
    from raylake.table.new_tables import drop_new_table

    uri = str(tmp_path / "t")
    created = raylake.create_table(uri, SCHEMA)
    writer = raylake.open_table(uri).new_writer()  # the other job, under way
    writer.write(pa.table({"id": [1], "dt": ["d"], "x": [1.0]}, schema=SCHEMA))
    messages = writer.prepare_commit()
    drop_new_table(created)  # the creator's write failed
    assert table_exists(uri)
    raylake.open_table(uri).commit(messages)
    assert raylake.open_table(uri).to_arrow()["id"].to_pylist() == [1]
    alone = str(tmp_path / "alone")
    drop_new_table(raylake.create_table(alone, SCHEMA))  # no one else there: it goes
    assert not Path(alone).exists()


def test_a_job_that_joins_a_new_table_keeps_it_before_its_files_show(tmp_path: Path) -> None:
    """The Ray Data and Spark sinks: a job that finds a table with no snapshot marks it
    before its tasks flush a file (was: the creator's failure dropped it under the job)."""
    from raylake.table.catalog import open_or_join_table
    from raylake.table.new_tables import drop_new_table

    uri = str(tmp_path / "t")
    creator, created, marker = open_or_join_table(uri, SCHEMA, job_prefix="spark-0")
    assert created and marker == ""
    _, created, marker = open_or_join_table(uri, SCHEMA, job_prefix="spark-1")
    assert not created and re.fullmatch(r"data/spark-1-writing\.[0-9a-f]{32}\.tmp", marker)
    drop_new_table(creator)  # the creator's job failed
    assert table_exists(uri)
    creator.file_io.delete(marker)  # the joining job ended: a failure now drops the table
    drop_new_table(creator)
    assert not table_exists(uri)


@pytest.mark.parametrize("partition_by", [[], ["dt"]])
def test_a_marker_its_job_left_is_an_orphan(tmp_path: Path, partition_by: list[str]) -> None:
    """A job that died without deleting its marker (was: never removed, since raylake
    writes data files only under bucket directories)."""
    from datetime import timedelta

    from raylake.table.catalog import open_or_join_table

    uri = str(tmp_path / "t")
    raylake.create_table(uri, SCHEMA, partition_by=partition_by)
    tbl, _, marker = open_or_join_table(uri, SCHEMA, job_prefix="spark-1")
    assert marker
    assert tbl.remove_orphan_files(older_than=timedelta(0)).paths == (marker,)
    assert not (tmp_path / "t" / marker).exists()


def test_a_job_whose_table_was_dropped_before_its_marker_makes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The creator's failure drops the table between the job's open and its marker
    (was: the marker made the location hold a file, and the job was refused)."""
    from raylake.io import FileIO
    from raylake.table.catalog import open_or_join_table
    from raylake.table.new_tables import drop_new_table

    uri = str(tmp_path / "t")
    creator, _, _ = open_or_join_table(uri, SCHEMA, job_prefix="spark-0")
    write_bytes = FileIO.write_bytes

    def dropped_first(self: FileIO, rel: str, *args: object, **kwargs: object) -> object:
        if "-writing." in rel and table_exists(uri):
            drop_new_table(creator)
        return write_bytes(self, rel, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(FileIO, "write_bytes", dropped_first)
    _, created, marker = open_or_join_table(uri, SCHEMA, job_prefix="spark-1")
    assert created and marker == ""
    assert sorted(p.name for p in (tmp_path / "t").rglob("*") if p.is_file()) == ["schema-0.json"]


def test_from_pandas_with_partitions_and_options(tmp_path: Path) -> None:
    df = sample(9).to_pandas()
    tbl = raylake.from_pandas(
        df, str(tmp_path), partition_by=["dt"], options={"write.compression": "zstd"}
    )
    assert tbl.table_schema.partition_keys == ("dt",)
    assert tbl.table_schema.table_options.compression == "zstd"
    assert len(tbl.scan().plan()) == 3


def test_to_pandas_round_trip(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "i": np.arange(5, dtype=np.int64),
            "i32": np.arange(5, dtype=np.int32),
            "f": [0.5, None, 2.5, np.inf, -1.0],
            "s": ["a", None, "c", "", "e"],
            "b": [True, False, True, False, True],
            "t": pd.date_range("2024-01-01", periods=5, freq="h"),
            "tz": pd.date_range("2024-01-01", periods=5, freq="D", tz="UTC"),
            "cat": pd.Categorical(["u", "v", "u", "v", "u"]),
        }
    )
    tbl = raylake.from_pandas(df, str(tmp_path))
    assert tbl.schema.field("cat").type == pa.string()  # dictionary encoding is not stored
    back = tbl.to_pandas().sort_values("i").reset_index(drop=True)
    expected = df.assign(cat=df["cat"].astype(object))
    pd.testing.assert_frame_equal(back, expected, check_dtype=False)
    # Stored in nanoseconds whatever unit the pandas made them in (pandas 3: microseconds).
    assert tbl.schema.field("t").type == pa.timestamp("ns")
    assert back["t"].dtype == "datetime64[ns]" and back["tz"].dtype == "datetime64[ns, UTC]"
    assert back["i32"].dtype == np.int32
    subset = tbl.to_pandas(columns=["s", "i"], filter="i >= 3")
    assert subset.to_dict("list") == {"s": ["", "e"], "i": [3, 4]}


def test_from_pandas_keeps_a_named_index_as_columns(tmp_path: Path) -> None:
    """pyarrow's preserve_index convention for named indexes: a groupby's key is kept."""
    df = pd.DataFrame({"user": ["a", "b", "a"], "amount": [1, 2, 3]})
    tbl = raylake.from_pandas(df.groupby("user").sum(), str(tmp_path / "g"))
    assert tbl.schema.names == ["user", "amount"]
    assert tbl.to_pandas().to_dict("list") == {"user": ["a", "b"], "amount": [4, 2]}
    two = df.assign(day=[1, 1, 2]).groupby(["user", "day"]).sum()
    multi = raylake.from_pandas(two, str(tmp_path / "m"))
    assert multi.schema.names == ["user", "day", "amount"]


def test_from_pandas_drops_an_unnamed_index(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": [1, 2, 3]})
    filtered = df[df["a"] > 1]  # an unnamed, non-range index: row numbers, not data
    tbl = raylake.from_pandas(filtered, str(tmp_path))
    assert tbl.schema.names == ["a"]
    assert tbl.to_pandas().index.tolist() == [0, 1]


def test_a_named_index_is_written_as_a_column(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), pa.schema([("key", pa.int64()), ("a", pa.int64())]))
    tbl.write(pd.DataFrame({"a": [1, 2]}, index=pd.Index([10, 20], name="key")))
    assert tbl.to_arrow().to_pydict() == {"key": [10, 20], "a": [1, 2]}
    with pytest.raises(SchemaMismatchError, match="'other'"):
        tbl.write(pd.DataFrame({"a": [1]}, index=pd.Index([30], name="other")))
    assert tbl.count() == 2


def test_an_index_named_as_a_column_is_refused(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": [1, 2]}, index=pd.Index([10, 20], name="a"))
    with pytest.raises(SchemaError, match=r"index level\(s\) \['a'\]"):
        raylake.from_pandas(df, str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_a_partly_named_multiindex_is_refused(tmp_path: Path) -> None:
    df = pd.DataFrame({"k": [1, 1, 2], "v": [1, 2, 3]})
    partly = df.groupby(["k", pd.Index([7, 8, 7])]).sum()  # levels ['k', None]
    with pytest.raises(SchemaError, match=r"index level\(s\) \[1\] have no name"):
        raylake.from_pandas(partly, str(tmp_path / "t"))
    assert not list(tmp_path.iterdir())
    tbl = raylake.create_table(
        str(tmp_path / "t"), pa.schema([("k", pa.int64()), ("v", pa.int64())])
    )
    with pytest.raises(SchemaError, match="reset_index"):
        tbl.write(partly)
    assert tbl.latest_snapshot() is None


# -- open or create: the one function both sinks (Ray Data, Spark) use ----------------------


@pytest.mark.parametrize("primary_key", [(), ("id",)])
def test_open_or_create_drops_system_columns_whatever_the_kind(
    tmp_path: Path, primary_key: tuple[str, ...]
) -> None:
    from raylake.format.table_spec import TableSpec
    from raylake.table.catalog import open_or_create_table

    uri = str(tmp_path / "t")
    data = SCHEMA.append(pa.field("_rl_kind", pa.string())).with_metadata({b"pandas": b"{}"})
    spec = TableSpec.of(primary_key=primary_key, buckets=2 if primary_key else None)
    tbl, created = open_or_create_table(uri, data, spec=spec)
    assert created and tbl.schema.names == ["id", "dt", "x"] and not tbl.schema.metadata
    again, created = open_or_create_table(uri, None, spec=TableSpec.of(primary_key=primary_key))
    assert not created and again.schema == tbl.schema


def test_the_loser_of_a_race_to_create_a_table_did_not_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sinks that both found no table: the second to create it opens the first's.
    It said it had created it, so a failure of its job dropped the table (drop_new_table)
    that the other job was writing into."""
    from raylake.table import catalog

    uri = str(tmp_path / "t")
    winner, created = catalog.open_or_create_table(uri, SCHEMA)
    assert created
    monkeypatch.setattr(catalog, "table_exists", lambda *a, **k: False)  # the race's window
    loser, created = catalog.open_or_create_table(uri, SCHEMA)
    assert not created and loser.schema == winner.schema


def test_open_or_create_refuses_before_writing_anything(tmp_path: Path) -> None:
    from raylake.table.catalog import open_or_create_table

    with pytest.raises(TableNotFoundError):
        open_or_create_table(str(tmp_path / "a"), SCHEMA, create_if_missing=False)
    with pytest.raises(SchemaError, match=r"no schema is known\. Pass one"):
        open_or_create_table(str(tmp_path / "b"), None, schema_hint="Pass one.")
    assert not table_exists(str(tmp_path / "a")) and not table_exists(str(tmp_path / "b"))


def test_from_pandas_onto_a_paimon_table_names_the_format(tmp_path: Path) -> None:
    fixture = Path(__file__).parents[1] / "paimon" / "fixtures" / "pk_deduplicate" / "table"
    uri = str(tmp_path / "paimon")
    shutil.copytree(fixture, uri)
    with pytest.raises(TableAlreadyExistsError, match="an Apache Paimon table already exists"):
        raylake.from_pandas(DF, uri)


def test_a_failed_from_pandas_beside_other_files_keeps_the_users_schema_directory(
    tmp_path: Path,
) -> None:
    """A directory made a table with allow_other_files=True held a schema/ directory of
    the user's: when the write failed, dropping the new table removed the whole of
    schema/, the user's files in it too."""
    far = pa.array([3_000_000], pa.date32())  # beyond Python's year 9999: cannot partition
    df = pd.DataFrame({"d": pd.array(far, dtype=pd.ArrowDtype(pa.date32())), "v": [1]})
    beside = tmp_path / "project"
    (beside / "schema").mkdir(parents=True)
    (beside / "schema" / "events.avsc").write_text("{}")
    (beside / "notes.txt").write_text("mine")
    with pytest.raises(SchemaMismatchError, match="'d'"):
        raylake.from_pandas(df, str(beside), partition_by=["d"], allow_other_files=True)
    assert sorted(p.name for p in beside.iterdir()) == ["notes.txt", "schema"]
    assert [p.name for p in (beside / "schema").iterdir()] == ["events.avsc"]
    assert not table_exists(str(beside))
    tbl = raylake.from_pandas(df.head(0), str(beside), partition_by=["d"], allow_other_files=True)
    assert tbl.count() == 0


def test_a_failed_from_pandas_through_a_symbolic_link_keeps_the_link(tmp_path: Path) -> None:
    """A new table's directory given as a symbolic link (to another disk, say) whose
    first write failed: the drop of the table removed the user's link and left the
    table's schema in the directory it pointed to."""
    far = pa.array([3_000_000], pa.date32())  # beyond Python's year 9999: cannot partition
    df = pd.DataFrame({"d": pd.array(far, dtype=pd.ArrowDtype(pa.date32())), "v": [1]})
    target = tmp_path / "big" / "out"
    target.mkdir(parents=True)
    link = tmp_path / "out"
    link.symlink_to(target)
    with pytest.raises(SchemaMismatchError, match="'d'"):
        raylake.from_pandas(df, str(link), partition_by=["d"])
    assert link.is_symlink() and list(target.iterdir()) == []
    assert raylake.from_pandas(df.head(0), str(link), partition_by=["d"]).count() == 0
    assert (target / "schema").is_dir()
