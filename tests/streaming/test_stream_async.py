"""The async reader under asyncio while another process commits."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from committer import SCHEMA, batch, start

import raylake
from raylake.errors import ConsumerError


def test_async_reader_follows_another_process(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    commits, rows = 8, 50
    reader = tbl.stream(start="latest", poll_interval=0.02)
    child = start(tbl.uri, commits, rows, 0.05)

    async def consume() -> tuple[list[int], int]:
        seen: list[int] = []
        ticks = 0

        async def heartbeat() -> None:  # runs only if polling never blocks the loop
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        beat = asyncio.create_task(heartbeat())
        async for plan in reader:
            table = await asyncio.to_thread(plan.to_arrow)
            seen += table.column("id").to_pylist()
            if plan.snapshot_id == commits:
                break
        beat.cancel()
        return seen, ticks

    seen, ticks = asyncio.run(asyncio.wait_for(consume(), timeout=120))
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert sorted(seen) == list(range(commits * rows))
    assert ticks > 10  # the event loop kept running while the reader waited
    reader.close()


def test_async_iteration_ends_when_closed(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    reader = tbl.stream(start="latest", poll_interval=0.01)

    async def consume() -> int:
        n = 0
        async for _plan in reader:
            n += 1
            reader.close()
        return n

    assert asyncio.run(consume()) == 1


def test_a_cancelled_poll_loses_no_plan(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    tbl.write(pa.table({"id": [2], "v": [2]}, schema=SCHEMA))
    reader = tbl.stream(start="earliest", poll_interval=0.01)

    async def consume() -> list[int]:
        # Cancelled at once: the poll's thread runs on and reads snapshot 1.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(reader.__anext__(), timeout=0)
        return [(await reader.__anext__()).snapshot_id for _ in range(2)]

    assert asyncio.run(consume()) == [1, 2]
    reader.close()


def test_a_checkpoint_is_not_past_a_plan_a_cancelled_poll_read(warehouse: Path) -> None:
    """The plan a cancelled poll read is delivered by the next call, so a checkpoint
    taken meanwhile must stay before it: else a restart would never deliver it."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    reader = tbl.stream(consumer_id="c", start="earliest", poll_interval=0.01, prefetch=False)
    gate, polled = threading.Event(), threading.Event()
    step = reader.planner.step

    def gated_step(snap: Any) -> Any:
        gate.wait()
        try:
            return step(snap)
        finally:
            polled.set()

    reader.planner.step = gated_step  # type: ignore[method-assign]

    async def consume() -> list[int]:
        assert (await reader.__anext__()).snapshot_id == 1
        reader.checkpoint()
        tbl.write(pa.table({"id": [2], "v": [2]}, schema=SCHEMA))
        with contextlib.suppress(asyncio.TimeoutError):  # waits at the gate: times out
            await asyncio.wait_for(reader.__anext__(), timeout=0.05)
        gate.set()
        await asyncio.to_thread(polled.wait)  # the poll's thread has read snapshot 2
        assert reader.checkpoint().next_snapshot_id == 2  # 2 is not delivered yet
        with pytest.raises(ConsumerError, match="at most 2"):
            reader.notify_checkpoint_complete(3)
        plan = await reader.__anext__()
        return [plan.snapshot_id, reader.checkpoint().next_snapshot_id]

    assert asyncio.run(consume()) == [2, 3]
    reader.close()


def test_a_failed_poll_is_polled_again(warehouse: Path) -> None:
    """A transient error reaches the caller once; the next call polls again rather than
    raise the same error for ever."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    reader = tbl.stream(start="earliest", poll_interval=0.01, prefetch=False)
    full, failures = reader.planner.full, [OSError("the store hiccupped")]

    def flaky_full(snap: Any) -> Any:
        if failures:
            raise failures.pop()
        return full(snap)

    reader.planner.full = flaky_full  # type: ignore[method-assign]

    async def consume() -> int:
        with pytest.raises(OSError, match="hiccupped"):
            await reader.__anext__()
        return (await reader.__anext__()).snapshot_id

    assert asyncio.run(consume()) == 1
    reader.close()


def test_a_poll_that_runs_on_past_close_starts_no_prefetch_thread(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async poll whose wait was cancelled, or a poll on another thread, runs on after
    close(): its plan started a prefetch thread nobody would shut down."""
    before = set(threading.enumerate())  # another test's reader, not yet collected
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(batch(0, 3))
    reader = tbl.stream(start="earliest")
    entered, release = threading.Event(), threading.Event()
    read = reader._snapshots.read_if_present

    def held(snapshot_id: int) -> Any:
        entered.set()
        release.wait(10)
        return read(snapshot_id)

    monkeypatch.setattr(reader._snapshots, "read_if_present", held)
    poll = threading.Thread(target=reader.poll)
    poll.start()
    assert entered.wait(10)
    reader.close()
    release.set()
    poll.join(10)
    assert reader._prefetcher is None
    started = set(threading.enumerate()) - before
    assert not [t for t in started if t.name.startswith("raylake-stream")]
