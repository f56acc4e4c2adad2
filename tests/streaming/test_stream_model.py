"""Property test: a consumer that polls, checkpoints and restarts at random, while the
table is appended to, upserted, deleted from, compacted, overwritten and expired,
ends with exactly the table's rows, having seen each change exactly once; a consumer
that skips overwrites (``on_overwrite="skip"``) ends with every change but theirs,
whether it read the overwrites one by one or caught up across them; one that fails on
them (``"fail"``) fails at the first it meets, never catching up past it.

The consumer keeps the state it rebuilt from the stream, and the copy of that state
at its last checkpoint; a restart goes back to the checkpointed copy, as a job that
commits its output with its checkpoint would. An append table's consumer must never
see a row twice; a primary-key table's consumer replays the changelog.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from changing_source import SCHEMA, ChangingSource, keys
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule
from property_depth import examples

import raylake
from raylake.errors import StreamError
from raylake.streaming import ROW_KIND, StreamPlan


class StreamModel(ChangingSource):
    @initialize(
        primary_key=st.booleans(),
        producer=st.sampled_from(["none", "input", "lookup"]),
        catch_up_after=st.integers(1, 4),
        on_overwrite=st.sampled_from(["refresh", "skip", "fail"]),
    )
    def setup(
        self, primary_key: bool, producer: str, catch_up_after: int, on_overwrite: str
    ) -> None:
        self.dir = Path(tempfile.mkdtemp())
        self.pk = primary_key
        if primary_key:
            self.source = raylake.create_table(
                str(self.dir / "t"), SCHEMA, primary_key=["id"], buckets=2,
                options={"changelog-producer": producer},
            )  # fmt: skip
        else:
            self.source = raylake.create_table(str(self.dir / "t"), SCHEMA)
        self.catch_up_after = catch_up_after
        self.on_overwrite = on_overwrite
        self.start_model()
        self.seen: dict[int, int] = {}
        self.checkpointed: dict[int, int] = {}
        # The snapshot of the last whole state the consumer read (0: none), and at its
        # checkpoint: what a consumer that skips overwrites holds starts there.
        self.base = self.checkpointed_base = 0
        self.reader = self.open_reader()

    def open_reader(self) -> raylake.streaming.StreamReader:
        return self.source.stream(
            consumer_id="model", start="earliest", include_row_kind=self.pk,
            catch_up_after=self.catch_up_after, prefetch=False,
            on_overwrite=self.on_overwrite,
        )  # fmt: skip

    def teardown(self) -> None:
        if hasattr(self, "reader"):
            self.reader.close()
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(ks=keys)
    def overwrite(self, ks: list[int]) -> None:
        self.overwrite_source(ks)

    # -- the consumer ------------------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def poll(self, n: int) -> None:
        for _ in range(n):
            if not self.poll_one():
                return

    def poll_one(self) -> bool:
        """Whether a plan was applied. A stream that fails on overwrites fails exactly
        at the first one it meets, holding the table as it was just before."""
        try:
            plan = self.reader.poll()
        except StreamError:
            at = self.reader.next_snapshot_id
            assert self.on_overwrite == "fail" and self.states[at][1], f"failed at {at}"
            assert self.seen == self.states[at - 1][0]
            return False
        if plan is None:
            return False
        if self.on_overwrite == "fail" and plan.kind != "full":
            passed = range(plan.first_snapshot_id, plan.snapshot_id + 1)
            assert not any(self.states[i][1] for i in passed), f"went past an overwrite: {plan}"
        self.apply(plan)
        return True

    def apply(self, plan: StreamPlan) -> None:
        out = plan.to_arrow()
        if plan.kind in ("full", "refresh"):
            self.seen = {}
            self.base = plan.snapshot_id
        if not self.pk:
            for key, value in zip(out.column("id").to_pylist(), out.column("v").to_pylist()):
                assert key not in self.seen, f"row {key} delivered twice ({plan})"
                self.seen[key] = value
            return
        for key, value, kind in zip(*out.select(["id", "v", ROW_KIND]).to_pydict().values()):
            if kind in ("+I", "+U"):
                self.seen[key] = value
            else:
                self.seen.pop(key, None)

    @rule()
    def checkpoint(self) -> None:
        self.reader.checkpoint()
        self.checkpointed = dict(self.seen)
        self.checkpointed_base = self.base

    @rule()
    def restart(self) -> None:
        self.reader.close()
        self.reader = self.open_reader()
        self.seen = dict(self.checkpointed)
        self.base = self.checkpointed_base

    def expected(self) -> dict[int, int]:
        """The table's rows, or where the stream skips overwrites, every change but
        theirs since the last whole state read (a catch-up across an overwrite must
        not deliver it either). A stream that fails on them is caught up only where it
        met none."""
        return self.skipping(self.base) if self.on_overwrite == "skip" else self.model

    @invariant()
    def caught_up_consumer_holds_the_table(self) -> None:
        latest = self.source.latest_snapshot()
        if latest is not None and self.reader.next_snapshot_id > latest.id:
            assert self.seen == self.expected()

    def drain(self) -> bool:
        """Whether the consumer read up to the latest snapshot."""
        while self.poll_one():
            pass
        latest = self.source.latest_snapshot()
        return latest is None or self.reader.next_snapshot_id > latest.id

    @rule()
    def drain_and_check(self) -> None:
        if self.drain():
            assert self.seen == self.expected()


StreamModel.TestCase.settings = settings(
    max_examples=examples(100),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStreamModel = StreamModel.TestCase
