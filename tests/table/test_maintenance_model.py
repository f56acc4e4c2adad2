"""Maintenance against a model: a primary-key table (partitioned or not, with each
changelog producer) under upserts, deletes, compactions, expirations, orphan removal and
consumers. Every retained snapshot reads what it read when committed, the changes between
any retained snapshot and the latest are the model's net change of every key, and orphan
removal never finds a file that a snapshot names or misses one that none does."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from property_depth import examples

import raylake
from raylake.format.snapshot import Snapshot

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
KEYS = st.integers(0, 8)
CONSUMERS = st.sampled_from(["c1", "c2"])
Key = tuple[int, str]


def part(key: int) -> str:
    return "ab"[key % 2]


def net_change(before: dict[Key, int], after: dict[Key, int]) -> dict[Key, list[tuple[str, int]]]:
    out: dict[Key, list[tuple[str, int]]] = {}
    for key in before.keys() | after.keys():
        if key not in after:
            out[key] = [("-D", before[key])]
        elif key not in before:
            out[key] = [("+I", after[key])]
        elif before[key] != after[key]:
            out[key] = sorted([("-U", before[key]), ("+U", after[key])])
    return out


class MaintenanceMachine(RuleBasedStateMachine):
    root: Path

    @initialize(
        producer=st.sampled_from(["none", "input", "lookup"]),
        partitioned=st.booleans(),
        buckets=st.integers(1, 2),
    )
    def create(self, producer: str, partitioned: bool, buckets: int) -> None:
        options = {
            "changelog-producer": producer,
            "compaction.auto": "false",
            "manifest.merge-min-count": "3",
        }
        self.tbl = raylake.create_table(
            str(self.root / uuid.uuid4().hex), SCHEMA,
            primary_key=["id", "p"] if partitioned else ["id"],
            partition_by=["p"] if partitioned else [], buckets=buckets, options=options,
        )  # fmt: skip
        self.state: dict[Key, int] = {}
        self.history: dict[int, dict[Key, int]] = {}  # what each snapshot reads
        self.existing: list[int] = []
        self.version = 0

    def record(self, snap: Snapshot | None) -> None:
        if snap is not None and snap.id not in self.history:
            self.history[snap.id] = dict(self.state)
            self.existing.append(snap.id)

    @rule(keys=st.lists(KEYS, min_size=1, max_size=5, unique=True))
    def upsert(self, keys: list[int]) -> None:
        self.version += 1
        for k in keys:
            self.state[(k, part(k))] = self.version
        data = {"id": keys, "p": [part(k) for k in keys], "v": [self.version] * len(keys)}
        self.record(self.tbl.write(pa.table(data, schema=SCHEMA)))

    @rule(keys=st.lists(KEYS, min_size=1, max_size=3, unique=True))
    def delete(self, keys: list[int]) -> None:
        for k in keys:
            self.state.pop((k, part(k)), None)
        by_key: dict[str, Any] = {"id": keys}
        if self.tbl.table_schema.partition_keys:
            by_key["p"] = [part(k) for k in keys]
        self.record(self.tbl.delete(by_key))

    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        self.record(self.tbl.compact(full=full))

    @rule(retain_last=st.integers(1, 3))
    def expire(self, retain_last: int) -> None:
        expired = self.tbl.expire_snapshots(retain_last=retain_last).expired_snapshot_ids
        self.existing = [i for i in self.existing if i not in expired]

    @rule(consumer=CONSUMERS, pick=st.integers(0, 10))
    def consume(self, consumer: str, pick: int) -> None:
        choices = [*self.existing, (self.existing[-1] if self.existing else 0) + 1]
        self.tbl.reset_consumer(consumer, choices[pick % len(choices)])

    @rule(consumer=CONSUMERS)
    def drop_consumer(self, consumer: str) -> None:
        self.tbl.delete_consumer(consumer)

    @invariant()
    def retained_snapshots_read_as_committed(self) -> None:
        assert [s.id for s in self.tbl.snapshots()] == self.existing
        for snapshot_id in self.existing:
            rows = self.tbl.to_arrow(snapshot_id=snapshot_id).to_pylist()
            assert {(r["id"], r["p"]): r["v"] for r in rows} == self.history[snapshot_id]
        last = self.existing[-1] if self.existing else 0
        for progress in self.tbl.consumers():  # what a consumer reads next is kept
            assert progress.next_snapshot_id in {*self.existing, last + 1}

    @invariant()
    def changes_are_the_net_change(self) -> None:
        if len(self.existing) < 2:
            return
        latest = self.existing[-1]
        for start in self.existing[:-1]:
            got: dict[Key, list[tuple[str, int]]] = {}
            for r in self.tbl.changes(start, latest, include_row_kind=True).to_arrow().to_pylist():
                got.setdefault((r["id"], r["p"]), []).append((r["_rl_kind"], r["v"]))
            got = {k: sorted(v) for k, v in got.items()}
            assert got == net_change(self.history[start], self.history[latest])

    @invariant()
    def nothing_named_is_an_orphan_and_nothing_else_stays(self) -> None:
        if hasattr(self, "tbl"):
            assert self.tbl.remove_orphan_files(older_than=timedelta(0)).paths == ()


@pytest.mark.slow
def test_maintenance_matches_the_model(tmp_path: Path) -> None:
    machine = type("Machine", (MaintenanceMachine,), {"root": tmp_path})
    test = machine.TestCase
    test.settings = settings(
        max_examples=examples(15),
        stateful_step_count=20,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    test().runTest()
