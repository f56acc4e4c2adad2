"""The source side of the stream property tests: a table appended to, upserted,
deleted from, compacted, overwritten and expired at random, and the model of its rows
(key -> value; an append table's ids are never reused)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

import raylake

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
keys = st.lists(st.integers(0, 15), min_size=1, max_size=6, unique=True)


class ChangingSource(RuleBasedStateMachine):
    """Rules that change ``self.source``; a subclass's ``setup`` sets ``source`` and
    ``pk`` and calls :meth:`start_model`, and adds an ``overwrite`` rule of its own
    (with the precondition it needs) that calls :meth:`overwrite_source`."""

    source: raylake.Table
    pk: bool

    def start_model(self) -> None:
        self.model: dict[int, int] = {}
        self.next_id = 1000  # append tables: ids are never reused
        self.version = 0
        # Snapshot id -> the model after it, and whether it overwrote the table.
        self.states: dict[int, tuple[dict[int, int], bool]] = {0: ({}, False)}

    def record(self) -> None:
        """The model after each snapshot a change made (a write may be followed by a
        compaction the table chose: the same rows)."""
        latest = self.source.latest_snapshot()
        if latest is None:
            return
        for sid in range(max(self.states) + 1, latest.id + 1):
            kind = self.source.snapshot(sid).commit_kind
            self.states[sid] = (dict(self.model), kind == "OVERWRITE")

    def skipping(self, base: int) -> dict[int, int]:
        """What a stream that skips overwrites holds, having read the whole state at
        snapshot ``base`` and every snapshot after it: each later snapshot's changes to
        the model, except an overwrite's."""
        state = dict(self.states[base][0])
        for sid in sorted(s for s in self.states if s > base):
            before, (after, overwrote) = self.states[sid - 1][0], self.states[sid]
            if overwrote:
                continue
            state.update((k, v) for k, v in after.items() if before.get(k) != v)
            for k in before.keys() - after.keys():
                state.pop(k, None)
        return state

    def rows(self, ks: list[int]) -> pa.Table:
        self.version += 1
        return pa.table({"id": ks, "v": [self.version] * len(ks)}, schema=SCHEMA)

    @rule(ks=keys)
    def write(self, ks: list[int]) -> None:
        if not self.pk:
            ks = [self.next_id + k for k in range(len(ks))]
            self.next_id += len(ks)
        data = self.rows(ks)
        self.source.write(data)
        self.model.update(zip(ks, data.column("v").to_pylist()))
        self.record()

    @precondition(lambda self: self.pk)
    @rule(ks=keys)
    def delete(self, ks: list[int]) -> None:
        self.source.delete(pa.table({"id": ks}))
        for k in ks:
            self.model.pop(k, None)
        self.record()

    @precondition(lambda self: self.pk)
    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        self.source.compact(full=full)
        self.record()

    @rule(retain=st.integers(1, 3))
    def expire(self, retain: int) -> None:
        self.source.expire_snapshots(retain_last=retain)

    def overwrite_source(self, ks: list[int]) -> None:
        if not self.pk:
            ks = [self.next_id + k for k in ks]
            self.next_id += 100
        data = self.rows(ks)
        self.source.write(data, mode="overwrite")
        self.model = dict(zip(ks, data.column("v").to_pylist()))
        self.record()
