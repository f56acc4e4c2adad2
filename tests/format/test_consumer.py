"""The consumer registry: consumer/consumer-<id> files, their validation, and Table's methods."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from property_depth import examples

import raylake
from raylake.errors import (
    ConsumerError,
    CorruptMetadataError,
    SnapshotExpiredError,
    SnapshotNotFoundError,
    StreamPositionExpiredError,
)
from raylake.format.consumer import CONSUMER_DIR, ConsumerManager, ConsumerProgress
from raylake.io import FileIO
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture
def manager(tmp_path: Path) -> ConsumerManager:
    return ConsumerManager(FileIO(str(tmp_path / "t")))


def make_table(path: Path, commits: int) -> Table:
    tbl = raylake.create_table(str(path), SCHEMA)
    for i in range(commits):
        tbl.write(pa.table({"id": [i]}))
    return tbl


def test_commit_get_list_delete_round_trip(manager: ConsumerManager) -> None:
    assert manager.list() == [] and manager.get("job") is None
    saved = manager.commit("job", 3, {"shard": "0/2"})
    assert manager.get("job") == saved
    assert saved.next_snapshot_id == 3 and saved.properties == {"shard": "0/2"}
    manager.commit("other", 7)
    assert [p.consumer_id for p in manager.list()] == ["job", "other"]
    assert manager.min_next_snapshot() == 3
    assert manager.delete("job") is True
    assert manager.delete("job") is False
    assert manager.get("job") is None and manager.min_next_snapshot() == 7


def test_file_is_json_at_the_documented_path(manager: ConsumerManager, tmp_path: Path) -> None:
    manager.commit("job-1", 5)
    data = json.loads((tmp_path / "t" / "consumer" / "consumer-job-1").read_text())
    assert data["consumer_id"] == "job-1" and data["next_snapshot_id"] == 5
    assert isinstance(data["updated_millis"], int)


def test_commit_keeps_properties_and_only_moves_forward(manager: ConsumerManager) -> None:
    manager.commit("job", 4, {"k": "v"})
    assert manager.commit("job", 4).properties == {"k": "v"}
    assert manager.commit("job", 6).next_snapshot_id == 6
    with pytest.raises(ConsumerError, match=r"'job' is at snapshot 6.*backwards") as info:
        manager.commit("job", 5)
    assert info.value.consumer_id == "job"
    assert manager.get("job").next_snapshot_id == 6  # type: ignore[union-attr]


def test_reset_moves_either_way_and_creates(manager: ConsumerManager) -> None:
    manager.commit("job", 9)
    assert manager.reset("job", 2).next_snapshot_id == 2
    assert manager.reset("new", 4).next_snapshot_id == 4
    assert manager.min_next_snapshot() == 2


@pytest.mark.parametrize(
    "bad_id",
    ["", "a/b", "../up", ".hidden", "-x", "with space", "x.tmp", "é", "x" * 129, "a\\b"],
)
def test_bad_consumer_ids_are_rejected_and_nothing_is_written(
    manager: ConsumerManager, tmp_path: Path, bad_id: str
) -> None:
    with pytest.raises(ConsumerError, match="valid consumer id"):
        manager.commit(bad_id, 1)
    with pytest.raises(ConsumerError, match="valid consumer id"):
        manager.get(bad_id)
    assert not (tmp_path / "t").exists()


def test_non_string_id_is_rejected(manager: ConsumerManager) -> None:
    with pytest.raises(ConsumerError, match="must be a string, got int"):
        manager.commit(7, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -3, True, "4", 2.0, None])
def test_bad_next_snapshot_ids_are_rejected(manager: ConsumerManager, bad: object) -> None:
    with pytest.raises(ConsumerError, match="next_snapshot_id of consumer"):
        manager.commit("job", bad)  # type: ignore[arg-type]
    assert manager.get("job") is None


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"consumer_id": "job", "updated_millis": 1}', "next_snapshot_id"),
        (b'{"consumer_id": "job", "next_snapshot_id": 0, "updated_millis": 1}', ">= 1"),
        (b'{"consumer_id": "job", "next_snapshot_id": "x", "updated_millis": 1}', "must be an int"),
        (b'{"consumer_id": "job", "next_snapshot_id": 2, "updated_millis": "soon"}', "soon"),
        (b'{"consumer_id": "other", "next_snapshot_id": 2, "updated_millis": 1}', "'other'"),
        (
            b'{"consumer_id": "job", "next_snapshot_id": 2, "updated_millis": 1, "properties": 3}',
            "consumer file",
        ),
    ],
)
def test_corrupt_consumer_file_is_a_clear_error(
    manager: ConsumerManager, tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "t" / "consumer" / "consumer-job"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    for call in (lambda: manager.get("job"), manager.list, manager.min_next_snapshot):
        with pytest.raises(CorruptMetadataError, match="corrupted metadata file") as info:
            call()
        assert info.value.path.endswith("consumer/consumer-job")
        assert reason in info.value.reason


def test_list_ignores_temporary_and_foreign_files(manager: ConsumerManager, tmp_path: Path) -> None:
    manager.commit("job", 2)
    directory = tmp_path / "t" / CONSUMER_DIR
    (directory / f"consumer-job.{uuid.uuid4().hex}.tmp").write_text("half")
    (directory / "README").write_text("not a consumer")
    (directory / "consumer-bad name").write_text("{}")
    assert [p.consumer_id for p in manager.list()] == ["job"]


def test_works_on_a_non_local_filesystem() -> None:
    file_io = FileIO(f"memory://raylake-consumer-{uuid.uuid4().hex}/t")
    try:
        manager = ConsumerManager(file_io)
        manager.commit("job", 3)
        assert manager.reset("job", 1).next_snapshot_id == 1
        assert [p.next_snapshot_id for p in manager.list()] == [1]
        assert manager.delete("job") and manager.list() == []
    finally:
        file_io.fs.rm(file_io.root, recursive=True)


def test_progress_validates_itself() -> None:
    with pytest.raises(ConsumerError):
        ConsumerProgress("a/b", 1, 0)
    with pytest.raises(ConsumerError):
        ConsumerProgress("ok", 0, 0)


# -- Table methods ----------------------------------------------------------------------


def test_table_consumer_methods(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", 3)
    assert tbl.consumers() == [] and tbl.consumer("job") is None
    assert tbl.reset_consumer("job", 2).next_snapshot_id == 2
    assert tbl.reset_consumer("tail", 4).next_snapshot_id == 4  # only new commits
    assert [p.consumer_id for p in tbl.consumers()] == ["job", "tail"]
    assert tbl.consumer("job") == tbl.consumers()[0]
    assert tbl.delete_consumer("job") and not tbl.delete_consumer("job")


def test_table_reset_refuses_snapshots_that_do_not_exist(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", 3)
    with pytest.raises(SnapshotNotFoundError, match="snapshot 9 does not exist"):
        tbl.reset_consumer("job", 9)
    tbl.expire_snapshots(retain_last=1)
    with pytest.raises(
        SnapshotExpiredError, match=r"snapshot 1 of .* expired: the earliest snapshot is 3"
    ):
        tbl.reset_consumer("job", 1)
    with pytest.raises(ConsumerError, match="valid consumer id"):
        tbl.reset_consumer("a/b", 3)
    with pytest.raises(ConsumerError, match="must be an int"):
        tbl.reset_consumer("job", "3")  # type: ignore[arg-type]
    assert tbl.consumers() == []


def test_a_reset_that_loses_the_race_with_an_expiration_keeps_the_consumer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expiration read the consumers before the reset wrote its file, so it kept what
    the consumer needed before: the consumer stays as it was, not deleted."""
    tbl = make_table(tmp_path / "t", 5)
    tbl.reset_consumer("job", 4)

    def expired_meanwhile(self: ConsumerManager) -> None:  # snapshot 2 went while it waited
        for snapshot_id in (1, 2):
            self.file_io.delete(f"snapshot/snapshot-{snapshot_id}.json")

    monkeypatch.setattr(ConsumerManager, "wait_for_expirations", expired_meanwhile)
    with pytest.raises(StreamPositionExpiredError, match="earliest snapshot is 3"):
        tbl.reset_consumer("job", 2)
    progress = tbl.consumer("job")
    assert progress is not None and progress.next_snapshot_id == 4


def test_a_reset_whose_previous_snapshot_expires_meanwhile_reads_its_snapshot_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expiration read the consumers before the reset wrote its file and removed
    snapshot 2, not 3: a reset to 3 is then past a gap, and its stream reads 3 whole."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=["id"])
    for i in range(5):
        tbl.write(pa.table({"id": [i % 2]}))

    def expired_meanwhile(self: ConsumerManager) -> None:
        for snapshot_id in (1, 2):
            self.file_io.delete(f"snapshot/snapshot-{snapshot_id}.json")

    monkeypatch.setattr(ConsumerManager, "wait_for_expirations", expired_meanwhile)
    assert tbl.reset_consumer("job", 3).properties["stream.mode"] == "full"
    monkeypatch.undo()
    with tbl.stream(consumer_id="job") as reader:
        plan = reader.poll()  # a change against snapshot 2 would say it expired
    assert plan is not None and plan.kind == "full" and plan.to_arrow().num_rows == 2


def test_empty_table_accepts_a_consumer_of_its_first_snapshot(tmp_path: Path) -> None:
    tbl = make_table(tmp_path / "t", 0)
    assert tbl.reset_consumer("job", 1).next_snapshot_id == 1


# -- the registry against a dict model --------------------------------------------------

IDS = st.sampled_from(["a", "b", "job-1", "x.y_z"])
SNAPSHOT_IDS = st.integers(min_value=1, max_value=20)


class ConsumerRegistryMachine(RuleBasedStateMachine):
    """Random commits, resets and deletes: the files always read back as the dict model."""

    def __init__(self) -> None:
        super().__init__()
        self.file_io = FileIO(f"memory://raylake-consumer-model-{uuid.uuid4().hex}")
        self.manager = ConsumerManager(self.file_io)
        self.model: dict[str, int] = {}

    @rule(consumer_id=IDS, next_id=SNAPSHOT_IDS)
    def commit(self, consumer_id: str, next_id: int) -> None:
        current = self.model.get(consumer_id)
        if current is not None and next_id < current:
            with pytest.raises(ConsumerError):
                self.manager.commit(consumer_id, next_id)
            return
        self.manager.commit(consumer_id, next_id)
        self.model[consumer_id] = next_id

    @rule(consumer_id=IDS, next_id=SNAPSHOT_IDS)
    def reset(self, consumer_id: str, next_id: int) -> None:
        self.manager.reset(consumer_id, next_id)
        self.model[consumer_id] = next_id

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        consumer_id = data.draw(st.sampled_from(sorted(self.model)))
        assert self.manager.delete(consumer_id)
        del self.model[consumer_id]

    @invariant()
    def files_match_model(self) -> None:
        listed = {p.consumer_id: p.next_snapshot_id for p in self.manager.list()}
        assert listed == self.model
        assert self.manager.min_next_snapshot() == min(self.model.values(), default=None)

    def teardown(self) -> None:
        if self.file_io.fs.exists(self.file_io.root):
            self.file_io.fs.rm(self.file_io.root, recursive=True)


ConsumerRegistryMachine.TestCase.settings = settings(
    max_examples=examples(40),
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_consumer_registry_matches_model = ConsumerRegistryMachine.TestCase
