"""Property test: a StreamingJob's shards (ShardWorker, without Ray) killed at seeded
points of a step, restarted and reset, while the source is appended to, upserted,
deleted from, compacted, overwritten and expired, and the sink compacted and expired
(the snapshots of commits a kill left unchecked too). The sink ends with exactly the
source's rows: an append sink holds each row once, a primary-key sink the same state.

A kill is an exception that skips the rest of the step and drops the worker, as a
killed actor does: before the sink commit, between the commit and the checkpoint, or
at the checkpoint; the next step starts a new worker, which resumes from its consumer.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from changing_source import SCHEMA, ChangingSource, keys
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from property_depth import examples

import raylake
from raylake.streaming.job import JobSpec, ShardWorker
from raylake.streaming.options import JOB_DEFAULTS


class Killed(BaseException):
    """The actor died: nothing after this point of the step ran."""


def identity(table: pa.Table) -> pa.Table:
    return table


class JobModel(ChangingSource):
    @initialize(
        primary_key=st.booleans(),
        shards=st.integers(1, 3),
        producer=st.sampled_from(["none", "lookup"]),
        per_step=st.integers(1, 3),
        catch_up_after=st.sampled_from([None, 1, 3]),
    )
    def setup(
        self, primary_key: bool, shards: int, producer: str, per_step: int,
        catch_up_after: int | None,
    ) -> None:  # fmt: skip
        self.dir = Path(tempfile.mkdtemp())
        self.pk = primary_key
        if primary_key:
            self.source = raylake.create_table(
                str(self.dir / "src"), SCHEMA, primary_key=["id"], buckets=4,
                options={"changelog-producer": producer},
            )  # fmt: skip
            sink = raylake.create_table(str(self.dir / "dst"), SCHEMA, primary_key=["id"])
        else:
            self.source = raylake.create_table(str(self.dir / "src"), SCHEMA)
            sink = raylake.create_table(str(self.dir / "dst"), SCHEMA)
        self.sink = sink
        # One shard may refresh the sink after an overwrite; several skip it (the model
        # then overwrites only a one-shard job's source).
        stream = JOB_DEFAULTS.replace(
            include_row_kind=primary_key, catch_up_after=catch_up_after,
            on_overwrite="refresh" if shards == 1 else "skip",
        )  # fmt: skip
        self.spec = JobSpec(
            self.source.uri, identity, "job", shards, sink_uri=sink.uri, stream=stream,
            max_plans_per_step=per_step,
        )  # fmt: skip
        self.workers: dict[int, ShardWorker] = {}
        self.start_model()

    def teardown(self) -> None:
        if hasattr(self, "spec"):
            self.drain_and_check()  # every run ends with the sink checked
        for worker in getattr(self, "workers", {}).values():
            worker.reader.close()
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def worker(self, shard: int) -> ShardWorker:
        shard %= self.spec.num_shards
        if shard not in self.workers:
            self.workers[shard] = ShardWorker(self.spec, shard)
        return self.workers[shard]

    def drop(self, shard: int) -> None:
        self.workers.pop(shard % self.spec.num_shards).reader.close()

    @precondition(lambda self: self.spec.num_shards == 1)
    @rule(ks=keys)
    def overwrite(self, ks: list[int]) -> None:
        self.overwrite_source(ks)

    # -- the job -----------------------------------------------------------------------

    @rule(shard=st.integers(0, 2))
    def step(self, shard: int) -> None:
        self.worker(shard).step()

    @rule(shard=st.integers(0, 2), at=st.sampled_from(["commit", "after-commit", "checkpoint"]))
    def kill(self, shard: int, at: str) -> None:
        worker = self.worker(shard)
        commit, checkpoint = worker._commit, worker.reader.notify_checkpoint_complete

        def dying_commit(*args: Any) -> Any:
            if at == "commit":
                raise Killed
            snap = commit(*args)
            if at == "after-commit":
                raise Killed
            return snap

        def dying_checkpoint(*args: Any) -> Any:
            if at == "checkpoint":
                raise Killed
            return checkpoint(*args)

        worker._commit = dying_commit  # type: ignore[method-assign]
        worker.reader.notify_checkpoint_complete = dying_checkpoint  # type: ignore[method-assign]
        with contextlib.suppress(Killed):
            worker._step()  # a dead actor does not go back to its checkpoint itself
        self.drop(shard)

    @rule(compact_first=st.booleans())
    def expire_sink(self, compact_first: bool) -> None:
        """Another job's maintenance: the sink snapshots of commits whose checkpoint a
        kill skipped go too (a compaction leaves the rows as they are)."""
        sink = raylake.open_table(self.sink.uri)
        if compact_first:
            sink.compact(full=True)
        sink.expire_snapshots(retain_last=1)

    @precondition(lambda self: self.pk)
    @rule(shard=st.integers(0, 2), back=st.integers(1, 4))
    def reset(self, shard: int, back: int) -> None:
        """Process again from an earlier snapshot: replayed changes leave a primary-key
        sink as it was."""
        shard %= self.spec.num_shards
        if shard in self.workers:
            self.drop(shard)
        consumer = self.spec.shard_consumer(shard)
        progress = self.source.consumer(consumer)
        earliest = self.source.snapshots()[0].id if self.source.snapshots() else None
        if progress is None or earliest is None:
            return
        self.source.reset_consumer(consumer, max(earliest, progress.next_snapshot_id - back))

    @rule()
    def drain_and_check(self) -> None:
        for _ in range(100):
            statuses = [self.worker(s).step() for s in range(self.spec.num_shards)]
            if not any(s.plans for s in statuses):
                break
        out = self.sink.to_arrow()
        ids = out.column("id").to_pylist()
        assert len(ids) == len(set(ids)), "a row reached the sink twice"
        assert dict(zip(ids, out.column("v").to_pylist())) == self.model


JobModel.TestCase.settings = settings(
    max_examples=examples(30),
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestJobModel = JobModel.TestCase
