"""The messages of a failed commit stay refused in every process (raylake/table/aborted.py).

A failed commit deletes the files its messages add; committing the messages again, from
this process or another one that holds a pickled copy, must not make a snapshot of the
missing files. The refusal rests on the files' absence, not on a record in memory.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitConflictError, CommitFailedError
from raylake.table import clear_caches

SCHEMA = pa.schema([("id", pa.int64())])


def _ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def _failed_messages(tmp_path: Path, primary_key: bool) -> tuple[raylake.Table, Path]:
    """A table of snapshots 1-2 and the pickled messages of a commit that failed (an
    overwrite that lost to snapshot 2), whose files that failure deleted."""
    key = ["id"] if primary_key else ()
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=key)
    tbl.write(_ids(1))
    writer = tbl.new_writer()
    writer.write(_ids(7, 8))
    messages = writer.prepare_commit()
    tbl.write(_ids(2))
    with pytest.raises(CommitConflictError):
        tbl.commit(messages, mode="overwrite", base_snapshot_id=1)
    pickled = tmp_path / "messages.pickle"
    pickled.write_bytes(pickle.dumps(messages))
    return tbl, pickled


@pytest.mark.parametrize("primary_key", [False, True], ids=["append", "pk"])
def test_another_process_cannot_commit_the_messages_of_a_failed_commit(
    tmp_path: Path, primary_key: bool
) -> None:
    tbl, pickled = _failed_messages(tmp_path, primary_key)
    script = textwrap.dedent(
        f"""
        import pickle, sys
        import raylake
        from raylake.errors import CommitFailedError
        messages = pickle.loads(open({str(pickled)!r}, "rb").read())
        try:
            raylake.open_table({tbl.uri!r}).commit(messages)
        except CommitFailedError as exc:
            print("refused:", exc)
            sys.exit(0)
        sys.exit("committed the messages of a failed commit")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "refused:" in done.stdout and "do not exist" in done.stdout
    reopened = raylake.open_table(tbl.uri)
    assert [s.id for s in reopened.snapshots()] == [1, 2]
    assert sorted(reopened.to_arrow()["id"].to_pylist()) == [1, 2]


def test_the_refusal_survives_clearing_every_cache(tmp_path: Path) -> None:
    tbl, pickled = _failed_messages(tmp_path, primary_key=False)
    clear_caches()
    with pytest.raises(CommitFailedError, match="do not exist"):
        tbl.commit(pickle.loads(pickled.read_bytes()))
    assert tbl.latest_snapshot() is not None and tbl.latest_snapshot().id == 2  # type: ignore[union-attr]


def test_messages_of_an_aborted_writer_are_refused(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    writer = tbl.new_writer()
    writer.write(_ids(1, 2))
    messages = writer.prepare_commit()
    writer.abort()
    with pytest.raises(CommitFailedError, match="abort"):
        tbl.commit(messages)
    assert tbl.latest_snapshot() is None


def test_messages_whose_files_exist_commit_after_a_refused_call(tmp_path: Path) -> None:
    """The check reads the store: messages refused for their arguments still commit."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    writer = tbl.new_writer()
    writer.write(_ids(1, 2))
    messages = writer.prepare_commit()
    with pytest.raises(raylake.errors.InvalidArgumentError):
        tbl.commit(messages, mode="sideways")  # type: ignore[arg-type]
    snap = tbl.commit(messages)
    assert snap is not None and sorted(tbl.to_arrow()["id"].to_pylist()) == [1, 2]


def test_a_refusal_deletes_nothing_of_the_messages_and_no_manifest_stays(
    tmp_path: Path,
) -> None:
    """The existence checks run while the commit writes its manifest: a refusal deletes
    that manifest, and leaves the files of the whole messages, which commit alone."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    aborted = tbl.new_writer()
    aborted.write(_ids(1, 2))
    gone = aborted.prepare_commit()
    aborted.abort()
    writer = tbl.new_writer()
    writer.write(_ids(3, 4))
    whole = writer.prepare_commit()
    with pytest.raises(CommitFailedError, match="1 data file"):
        tbl.commit([*gone, *whole])
    assert list((tmp_path / "t" / "manifest").glob("*")) == []
    snap = tbl.commit(whole)
    assert snap is not None and snap.id == 1
    assert sorted(tbl.to_arrow()["id"].to_pylist()) == [3, 4]
