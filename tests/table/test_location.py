"""A table owns its directory: creating one where other files are is refused unless asked
for, a path that is a file is a raylake error naming it, and orphan cleanup deletes only
files raylake named, never another tool's files beside a table."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.errors import TableLocationError
from raylake.format.schema import TableSchema
from raylake.table import table_exists
from raylake.table.catalog import open_or_create_table
from raylake.table.maintenance import is_raylake_file
from raylake.table.writer import partition_dir

SCHEMA = pa.schema([("id", pa.int64())])
DAY_AGO = time.time() - 2 * 86400


def _age(path: Path) -> None:
    os.utime(path, (DAY_AGO, DAY_AGO))


def _user_file(root: Path) -> Path:
    path = root / "data" / "part-1.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": [7]}), path)
    return path


def test_a_directory_with_other_files_is_refused_with_nothing_written(tmp_path: Path) -> None:
    user = _user_file(tmp_path)
    with pytest.raises(TableLocationError, match=r"holds data.*allow_other_files=True"):
        raylake.create_table(str(tmp_path), SCHEMA)
    with pytest.raises(TableLocationError, match="allow_other_files"):
        raylake.from_pandas(pd.DataFrame({"id": [1]}), str(tmp_path))
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "data",
        "data/part-1.parquet",
    ]
    assert user.exists()


def test_orphan_cleanup_never_deletes_another_tools_files(tmp_path: Path) -> None:
    user = _user_file(tmp_path)
    (tmp_path / "README.txt").write_text("mine")
    (tmp_path / "manifest").mkdir()
    (tmp_path / "manifest" / "notes.parquet").write_bytes(b"mine")
    tbl = raylake.create_table(str(tmp_path), SCHEMA, allow_other_files=True)
    tbl.write(pa.table({"id": [1]}))
    writer = tbl.new_writer()  # a writer that died before committing: its file is an orphan
    writer.write(pa.table({"id": [2]}))
    writer.prepare_commit()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            _age(path)
    removed = tbl.remove_orphan_files(older_than=timedelta(days=1)).paths
    assert len(removed) == 1 and removed[0].rsplit("/", 1)[-1].startswith("data-")
    assert user.exists() and (tmp_path / "manifest" / "notes.parquet").exists()
    assert (tmp_path / "README.txt").exists()
    assert tbl.to_arrow().to_pydict() == {"id": [1]}


@pytest.mark.parametrize("partition_by", [[], ["p"]])
def test_orphan_cleanup_spares_a_table_kept_inside_the_table(
    tmp_path: Path, partition_by: list[str]
) -> None:
    """Another table in a directory named data/ names its files as raylake does, one
    level deeper than this table's: they were taken for this table's orphans."""
    inner = raylake.create_table(str(tmp_path / "data"), SCHEMA)
    inner.write(pa.table({"id": [1, 2, 3]}))
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    outer = raylake.create_table(
        str(tmp_path), schema, partition_by=partition_by, allow_other_files=True
    )
    outer.write(pa.table({"id": [9], "p": ["x"]}))
    writer = outer.new_writer()  # a writer that died before committing: its file is an orphan
    writer.write(pa.table({"id": [8], "p": ["x"]}))
    writer.prepare_commit()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            _age(path)
    removed = outer.remove_orphan_files(older_than=timedelta(days=1)).paths
    assert len(removed) == 1 and removed[0].startswith("data/p=x/" if partition_by else "data/b")
    assert raylake.open_table(str(tmp_path / "data")).count() == 3
    assert outer.count() == 1


@pytest.mark.parametrize(
    "where", ["data/q=x/bucket-0", "data/p=x/bucket-00", "data/p=x/bucket-x", "data/p=x/b/bucket-0"]
)
def test_orphan_cleanup_spares_raylake_names_where_raylake_never_writes(
    tmp_path: Path, where: str
) -> None:
    """A file named as raylake names its data files, under a directory of a column the
    table is not partitioned by or a bucket raylake never writes so, is a user's (was:
    deleted as an orphan, as long as its depth was right)."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    tbl = raylake.create_table(str(tmp_path), schema, partition_by=["p"])
    tbl.write(pa.table({"id": [9], "p": ["x"]}))
    user = tmp_path / where / f"data-{'0' * 32}.parquet"
    user.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [7]}), user)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            _age(path)
    assert tbl.remove_orphan_files(older_than=timedelta(days=1)).paths == ()
    assert user.exists() and tbl.count() == 1


@pytest.mark.parametrize(
    "where",
    [
        "data/p=abc/bucket-0/data-",
        "data/p=01/bucket-0/data-",
        "data/p=1.0/bucket-0/data-",
        "data/p=/bucket-0/data-",
        "data/p=1/bucket-0/.data-",
        "data/p=%31/bucket-0/data-",
    ],
)
def test_orphan_cleanup_spares_values_no_value_of_the_column_prints_as(
    tmp_path: Path, where: str
) -> None:
    """Under an int32 partition column: no value prints as abc, 01, 1.0 or nothing (a
    null is __NULL__), raylake quotes no digit, and no file_prefix starts with a dot
    (was: all deleted, as the directory only had to start with p=)."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32())])
    tbl = raylake.create_table(str(tmp_path), schema, partition_by=["p"])
    tbl.write(pa.table({"id": [9, 8], "p": pa.array([1, None], pa.int32())}))
    user = tmp_path / f"{where}{'0' * 32}.parquet"
    user.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [7]}), user)
    orphan = tmp_path / f"data/p=-12/bucket-3/data-{'1' * 32}.parquet"  # a failed write's
    orphan.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": [7]}), orphan)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            _age(path)
    assert tbl.remove_orphan_files(older_than=timedelta(days=1)).paths == (
        orphan.relative_to(tmp_path).as_posix(),
    )
    assert user.exists() and tbl.count() == 2


@settings(max_examples=examples(80), deadline=None)
@given(
    st.one_of(
        st.tuples(st.just(pa.int64()), st.integers(-(2**63), 2**63 - 1)),
        st.tuples(st.just(pa.bool_()), st.booleans()),
        st.tuples(st.just(pa.date32()), st.dates()),
        st.tuples(st.just(pa.string()), st.text(max_size=120)),
        st.tuples(st.just(pa.int8()), st.none()),
    ),
    st.sampled_from(["p", "k" * 56, "k" * 120, "é" * 40, "k" * 250]),
)
@example((pa.string(), "日" * 60), "k" * 56)  # the start ends inside 日's three bytes
def test_every_directory_raylake_writes_is_one_its_cleanup_knows(
    case: tuple[Any, Any], key: str
) -> None:
    """The other side: a failed write's files in any partition stay orphans to clean,
    also where a long name was shortened to its start and a digest (its start may end
    inside an accented letter's bytes)."""
    dtype, value = case
    ts = TableSchema(pa.schema([("id", pa.int64()), (key, dtype)]), partition_keys=(key,))
    directory = partition_dir(ts, (value,), 0)
    field = [ts.arrow_schema.field(key)]
    assert is_raylake_file(f"{directory}/data-{'0' * 32}.parquet", field)


def test_an_empty_directory_or_a_table_being_made_is_fine(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    raylake.create_table(str(tmp_path / "empty"), SCHEMA)
    again = raylake.create_table(str(tmp_path / "empty"), SCHEMA, exist_ok=True)
    assert again.schema == SCHEMA


def test_a_path_that_is_a_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "file.parquet"
    pq.write_table(pa.table({"id": [1]}), path)
    for call in (
        lambda: raylake.open_table(str(path)),
        lambda: raylake.create_table(str(path), SCHEMA),
        lambda: raylake.from_pandas(pd.DataFrame({"id": [1]}), str(path)),
        lambda: table_exists(str(path)),
    ):
        with pytest.raises(TableLocationError, match=r"file\.parquet.*it is a file") as info:
            call()
        assert info.value.path.endswith("file.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.parquet"]


def test_a_sink_refusing_other_files_says_to_create_the_table_first(tmp_path: Path) -> None:
    """The Ray and Spark sinks take no allow_other_files: the refusal said to pass it."""
    _user_file(tmp_path)
    with pytest.raises(TableLocationError) as info:
        open_or_create_table(str(tmp_path), SCHEMA)
    assert "pass allow_other_files" not in str(info.value)
    assert "create the table first with create_table(..., allow_other_files=True)" in str(
        info.value
    )
    assert info.value.found == ("data",)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "data",
        "data/part-1.parquet",
    ]
