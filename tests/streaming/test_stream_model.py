"""Property test: a consumer that polls, checkpoints and restarts at random, while the
table is appended to, upserted, deleted from, compacted, overwritten and expired,
ends with exactly the table's rows, having seen each change exactly once; a consumer
that skips overwrites (``on_overwrite="skip"``) ends with every change but theirs,
whether it read the overwrites one by one or caught up across them.

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

import raylake
from raylake.streaming import ROW_KIND, StreamPlan


class StreamModel(ChangingSource):
    @initialize(
        primary_key=st.booleans(),
        producer=st.sampled_from(["none", "input", "lookup"]),
        catch_up_after=st.integers(1, 4),
        on_overwrite=st.sampled_from(["refresh", "skip"]),
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
            plan = self.reader.poll()
            if plan is None:
                return
            self.apply(plan)

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
        not deliver it either)."""
        return self.model if self.on_overwrite == "refresh" else self.skipping(self.base)

    @invariant()
    def caught_up_consumer_holds_the_table(self) -> None:
        latest = self.source.latest_snapshot()
        if latest is not None and self.reader.next_snapshot_id > latest.id:
            assert self.seen == self.expected()

    def drain(self) -> None:
        for plan in self.reader.plans(timeout=0):
            self.apply(plan)

    @rule()
    def drain_and_check(self) -> None:
        self.drain()
        assert self.seen == self.expected()


StreamModel.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStreamModel = StreamModel.TestCase
