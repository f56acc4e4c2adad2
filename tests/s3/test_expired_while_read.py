"""Operations whose data files a concurrent overwrite replaced and an expiration deleted
while they read them, on S3: pyarrow's S3 client says a missing object with a bare
OSError ("AWS Error NO_SUCH_KEY") or a FileNotFoundError naming no file, and neither was
taken for the concurrent change it is (a delete runs again on the new state, a
compaction loses with CommitConflictError), as on local files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitConflictError
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _replace_and_expire(tbl: Table, options: dict[str, Any]) -> None:
    other = raylake.open_table(tbl.uri, storage_options=options)
    for v in (3, 4):  # the second overwrite lets expiration delete the first's files
        other.write(pa.table({"id": [v], "v": [v]}), mode="overwrite")
    assert other.expire_snapshots(retain_last=1).deleted_data_files


def _before_first(module: Any, name: str, hook: Callable[[], None], mp: pytest.MonkeyPatch) -> None:
    original = getattr(module, name)
    done: list[bool] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            hook()
        return original(*args, **kwargs)

    mp.setattr(module, name, wrapped)


def test_an_append_delete_runs_again_on_the_new_state(
    s3_bucket: str, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from raylake.table import append_delete

    tbl = raylake.create_table(f"s3://{s3_bucket}/t", SCHEMA, storage_options=storage_options)
    tbl.write(pa.table({"id": [1, 2, 3], "v": [0, 0, 0]}))
    hook = lambda: _replace_and_expire(tbl, storage_options)  # noqa: E731
    _before_first(append_delete, "_read_files", hook, monkeypatch)
    tbl.delete("v >= 0")  # the file it planned to read is gone: it reads the new one
    assert tbl.to_arrow().column("id").to_pylist() == []


def test_a_primary_key_compaction_loses_as_to_a_concurrent_change(
    s3_bucket: str, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from raylake.table.pk import compaction

    tbl = raylake.create_table(
        f"s3://{s3_bucket}/t", SCHEMA, primary_key=["id"], buckets=1,
        storage_options=storage_options, options={"compaction.auto": "false"},
    )  # fmt: skip
    for v in (1, 2):
        tbl.write(pa.table({"id": [1, 2], "v": [v, v]}))
    hook = lambda: _replace_and_expire(tbl, storage_options)  # noqa: E731
    _before_first(compaction, "read_file", hook, monkeypatch)
    with pytest.raises(CommitConflictError, match="replaced by a concurrent commit"):
        tbl.compact(full=True)
    assert tbl.to_arrow().to_pylist() == [{"id": 4, "v": 4}]
    assert tbl.remove_orphan_files(older_than=timedelta(0), dry_run=True).paths == ()
