"""``PaimonTable.changes(filter=...)`` prunes partitions and files from the manifests, as
a scan does, before any data file is read: the tests delete the data files a filter
rules out (a file that is not there cannot be opened) and compare with the unpruned
changes of the untouched fixture, filtered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from paimon_util import FIXTURES, rows_by_key

import raylake

D1, D2 = "2024-01-01", "2024-01-02"


def _changes(table: Path, start: int, end: int | None, **kwargs: Any) -> Any:
    return raylake.open_table(str(table)).changes(start, end, include_row_kind=True, **kwargs)


def _drop_partition(table: Path, value: str) -> int:
    """Delete every data file of partition ``dt=value``; how many there were."""
    files = list((table / f"dt={value}").rglob("*.parquet"))
    for f in files:
        f.unlink()
    return len(files)


@pytest.mark.parametrize(
    ("name", "start", "end", "sort"),
    [
        ("pk_partitioned", 0, None, ["id", "dt"]),  # merged delta files
        ("pk_partitioned", 2, 5, ["id", "dt"]),
        ("append_partitioned", 0, None, ["id"]),  # appended files
        ("pk_overwrite", 1, 7, ["id", "dt"]),  # deltas and overwritten buckets
        ("pk_overwrite", 1, 4, ["id", "dt"]),
        ("append_overwrite", 1, 5, ["id", "name"]),
    ],
)
def test_a_partition_filter_reads_no_file_of_another_partition(
    paimon_copy: Any, name: str, start: int, end: int | None, sort: list[str]
) -> None:
    whole = _changes(FIXTURES / name / "table", start, end).to_arrow()
    want = whole.filter(pc.field("dt") == D1)
    assert 0 < want.num_rows < whole.num_rows
    table = paimon_copy(name)
    assert _drop_partition(table, D2)
    changes = _changes(table, start, end, filter=f"dt = '{D1}'")
    splits = changes.plan()
    assert splits and {s.partition for s in splits} == {(D1,)}
    got = changes.to_arrow()
    assert rows_by_key(got, [*sort, "_rl_kind"]) == rows_by_key(want, [*sort, "_rl_kind"])
    # Unpruned, the same range opens the files that are gone.
    with pytest.raises(FileNotFoundError):
        _changes(table, start, end).to_arrow()


def _files(changes: Any) -> set[str]:
    found = set()
    for split in changes.plan():
        if hasattr(split, "files"):
            found |= {f.path for f in split.files}
        else:
            found |= {f.path for s in (*split.before, *split.after) for f in s.files}
    return found


@pytest.mark.parametrize(
    ("name", "start"), [("pk_deduplicate", 1), ("pk_changelog_input", 1), ("pk_overwrite", 2)]
)
def test_a_key_filter_prunes_files_by_their_key_range(name: str, start: int) -> None:
    table = FIXTURES / name / "table"
    key = "id = 1" if name != "pk_overwrite" else f"id = 1 and dt = '{D1}'"
    pruned, whole = _changes(table, start, None, filter=key), _changes(table, start, None)
    assert _files(pruned) < _files(whole)
    want = whole.to_arrow().filter(pc.field("id") == 1)
    if name == "pk_overwrite":
        want = want.filter(pc.field("dt") == D1)
    assert rows_by_key(pruned.to_arrow(), ["id", "_rl_kind"]) == rows_by_key(
        want, ["id", "_rl_kind"]
    )


def test_a_value_filter_prunes_no_primary_key_file(paimon_copy: Any) -> None:
    """Beside a partition filter, a value predicate prunes no primary-key file (an old
    version would resurface) and filters the change rows after the diff."""
    table = paimon_copy("pk_overwrite")
    _drop_partition(table, D2)
    partition = _changes(table, 1, 4, filter=f"dt = '{D1}'")
    valued = _changes(table, 1, 4, filter=f"dt = '{D1}' and x > 6")
    assert _files(valued) == _files(partition)
    want = partition.to_arrow().filter(pc.field("x") > 6)
    assert want.num_rows
    assert rows_by_key(valued.to_arrow(), ["id", "_rl_kind"]) == rows_by_key(
        want, ["id", "_rl_kind"]
    )
