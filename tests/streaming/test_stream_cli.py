"""``raylake tail``: commits printed as they arrive, with consumer progress."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from committer import SCHEMA, batch

import raylake
from raylake.cli import main


def test_tail_prints_commits_and_checkpoints(
    warehouse: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(batch(0, 3))
    tbl.write(batch(1, 4))
    code = main(["tail", tbl.uri, "--start", "earliest", "--consumer", "cli", "--timeout", "0"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0] == f"following {tbl.uri} from snapshot 1"
    assert [line.split()[1:4] for line in out[1:]] == [
        ["1", "APPEND", "full"],
        ["2", "APPEND", "delta"],
    ]
    assert [line.split()[-2] for line in out[1:]] == ["3", "4"]
    assert tbl.consumer("cli").next_snapshot_id == 3
    tbl.write(batch(2, 5))
    main(["tail", tbl.uri, "--consumer", "cli", "--max-plans", "1"])
    assert capsys.readouterr().out.splitlines()[1].split()[1] == "3"


def test_tail_bad_consumer_id(warehouse: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    with pytest.raises(SystemExit) as info:
        main(["tail", tbl.uri, "--consumer", "a/b", "--timeout", "0"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --consumer: 'a/b' is not a consumer id" in err


def test_tail_counts_deletes_and_updates(
    warehouse: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A delete is a change the commit made: without row kinds the stream carries upserts
    only, and a commit that deleted two rows printed 0 rows."""
    import pyarrow as pa

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    tbl = raylake.create_table(str(warehouse / "pk"), schema, primary_key=["id"], buckets=1)
    tbl.write(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema))
    tbl.write(pa.table({"id": [1], "v": ["z"]}, schema=schema))
    tbl.delete("id >= 2")
    assert main(["tail", tbl.uri, "--start", "earliest", "--timeout", "0"]) == 0
    lines = [line.split(" rows") for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(int(n.split()[-1]), kinds.strip()) for n, kinds in lines] == [
        (3, ""),
        (2, "(-U 1, +U 1)"),
        (2, "(-D 2)"),
    ]


def test_tail_counts_a_commit_batch_by_batch(
    warehouse: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit may not fit in memory: tail read it whole (to_arrow) only to count it."""
    from raylake.streaming.plan import StreamPlan

    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    writers = [tbl.new_writer() for _ in range(3)]
    for i, writer in enumerate(writers):
        writer.write(batch(i, 4))
    tbl.commit([m for w in writers for m in w.prepare_commit()])  # one commit, three files
    read: list[int] = []
    to_batches = StreamPlan.to_batches

    def counted(plan: StreamPlan) -> Iterator[pa.RecordBatch]:
        for b in to_batches(plan):
            read.append(b.num_rows)
            yield b

    def whole(plan: StreamPlan) -> pa.Table:
        raise AssertionError("the whole commit read at once")

    monkeypatch.setattr(StreamPlan, "to_batches", counted)
    monkeypatch.setattr(StreamPlan, "to_arrow", whole)
    assert main(["tail", tbl.uri, "--start", "earliest", "--timeout", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-2] == "12"
    assert len(read) > 1 and sum(read) == 12
