"""StreamingJob: one Ray actor per shard applies a function to each new plan, exactly once.

    job = StreamingJob(src, enrich, consumer_id="enrich", num_shards=4, sink_uri=dst)
    job.run(until_snapshot=source.latest_snapshot().id)     # or job.run(duration=60)

Each shard follows the buckets ``b % num_shards == shard`` of the source (files, for an
unbucketed append table) as consumer ``<consumer_id>.shard-<i>-of-<n>``. For each plan
it applies ``fn`` to every batch; the output of the plans one step processed (up to
``max_plans_per_step``) goes to the sink as one commit with commit user
``raylake-stream/<consumer>`` and commit identifier = the source snapshot the last plan
ends at; then it checkpoints the consumer (with the sink snapshot it saw).

Exactly once end to end: a shard killed between its sink commit and its checkpoint
restarts (``max_restarts``) from the checkpoint, finds its own commits in the sink
snapshots made since the checkpointed sink snapshot, and moves past them; a shard
killed before the commit reprocesses the plan. Output files of a killed attempt are
orphans until ``remove_orphan_files``. Without a sink, ``fn`` runs for its side
effects, at least once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from raylake.arguments import (
    check_callable,
    check_count,
    check_instance,
    check_mapping,
    check_seconds,
    refuse_unknown_keywords,
)
from raylake.errors import (
    ConsumerArgumentError,
    MissingDependencyError,
    StreamArgumentError,
    StreamError,
)
from raylake.expr import Expr
from raylake.format.consumer import validate_consumer_id
from raylake.io import absolute_uri
from raylake.io.credentials import StorageOptions
from raylake.streaming.job_check import check_job, check_on_overwrite, check_sink_not_source
from raylake.streaming.options import (
    JOB_DEFAULTS,
    BatchFn,
    JobSpec,
    OnOverwrite,
    StartPosition,
)
from raylake.streaming.shard_worker import ShardActor, ShardStatus
from raylake.streaming.shard_worker import ShardWorker as ShardWorker  # its home before
from raylake.table.args import uri_arg
from raylake.table.evolve import schema_mode_arg
from raylake.table.visible import refuse_process_local

logger = logging.getLogger(__name__)

# While shard actors are not up, wait_ready() logs a warning this often (seconds).
READY_WARN_EVERY_S = 30.0
# While a step waits, how often the states of its shards' actors are looked at (seconds).
RESTART_CHECK_EVERY_S = 1.0
_DOWN_STATES = frozenset({"RESTARTING", "PENDING_CREATION", "DEPENDENCIES_UNREADY"})
_RESOURCE_NAMES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


def _resources_asked(actor_options: Mapping[str, Any]) -> dict[str, float]:
    """The Ray resources one actor of these options asks for, by Ray's names."""
    asks = {
        name: float(actor_options[option])
        for option, name in _RESOURCE_NAMES.items()
        if actor_options.get(option)
    }
    asks.update({k: float(v) for k, v in (actor_options.get("resources") or {}).items()})
    return asks


class StreamingJob:
    """Runs ``fn`` over a table's new snapshots in ``num_shards`` Ray actors.

    ``output_schema`` declares the schema of ``fn``'s output: :meth:`start` checks it
    against the sink's, with the tables and consumers, before any actor starts.
    ``schema_mode="merge"`` adds the columns of ``fn``'s output that the sink lacks
    with each commit, so a sink follows a source that gained columns (the stream's
    plans carry the source's new schema from the snapshot that first has it).
    """

    @refuse_unknown_keywords
    def __init__(
        self,
        uri: str | os.PathLike[str],
        fn: BatchFn,
        *,
        consumer_id: str,
        num_shards: int = 1,
        sink_uri: str | os.PathLike[str] | None = None,
        start: StartPosition = JOB_DEFAULTS.start,
        poll_interval: float = JOB_DEFAULTS.poll_interval,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        include_row_kind: bool = False,
        on_overwrite: OnOverwrite = JOB_DEFAULTS.on_overwrite,
        storage_options: Mapping[str, Any] | None = None,
        sink_storage_options: Mapping[str, Any] | None = None,
        catch_up_after: int | None = JOB_DEFAULTS.catch_up_after,
        max_plans_per_step: int = JobSpec.max_plans_per_step,
        max_restarts: int = -1,
        actor_options: Mapping[str, Any] | None = None,
        output_schema: pa.Schema | None = None,
        schema_mode: str = JobSpec.schema_mode,
        ready_timeout: float | None = None,
    ) -> None:
        check_callable("fn", fn, StreamArgumentError, optional=False)
        ready_timeout = check_seconds(
            "ready_timeout", ready_timeout, StreamArgumentError, positive=True
        )
        num_shards = check_count("num_shards", num_shards, 1, StreamArgumentError)
        validate_consumer_id(consumer_id)
        stream = JOB_DEFAULTS.replace(
            start=start, poll_interval=poll_interval, columns=columns, filter=filter,
            include_row_kind=include_row_kind, on_overwrite=on_overwrite,
            catch_up_after=catch_up_after,
        )  # fmt: skip
        # As open_table takes them (a pathlib.Path too), before the checks that read them.
        source = uri_arg(uri)
        sink = None if sink_uri is None else uri_arg(sink_uri, "sink_uri")
        check_on_overwrite(on_overwrite, num_shards, sink)
        check_mapping("sink_storage_options", sink_storage_options)
        # Its shards run in actors of their own.
        refuse_process_local(source, "StreamingJob")
        if sink is not None:
            refuse_process_local(sink, "StreamingJob", "sink_uri")
        check_sink_not_source(source, sink)
        # The pickled spec carries secrets by reference only (docs/object-stores.md): the
        # actors, on any node, fetch them from the Ray object store.
        self.spec = JobSpec(
            # Actors run in working directories of their own: relative paths are the driver's.
            uri=absolute_uri(source), fn=fn, consumer_id=consumer_id, num_shards=num_shards,
            sink_uri=None if sink is None else absolute_uri(sink),
            stream=stream,
            storage_options=StorageOptions.of(storage_options),
            sink_storage_options=StorageOptions.of(sink_storage_options),
            max_plans_per_step=check_count("max_plans_per_step", max_plans_per_step, 1),
            schema_mode=schema_mode_arg(schema_mode),
        )  # fmt: skip
        _check_shard_consumers(self.spec)
        if output_schema is not None:
            check_instance(
                "output_schema", output_schema, pa.Schema, "a pyarrow.Schema or None",
                StreamArgumentError,
            )  # fmt: skip
        self.output_schema = output_schema
        # The caller's options, secrets included: the driver checks the tables with them
        # (job_check.py); they are never part of what the actors get.
        self._driver_options = (storage_options, sink_storage_options)
        self.max_restarts = check_count("max_restarts", max_restarts, -1)
        self.actor_options = dict(
            check_mapping("actor_options", actor_options) or {"num_cpus": 0.25}
        )
        self.ready_timeout = ready_timeout
        self.actors: list[Any] = []
        self._ready = False

    def __repr__(self) -> str:
        spec, state = self.spec, "started" if self.actors else "not started"
        sink = "" if spec.sink_uri is None else f" -> {spec.sink_uri!r}"
        return (
            f"StreamingJob({spec.uri!r}{sink}, consumer {spec.consumer_id!r}, "
            f"{spec.num_shards} shard(s), {state})"
        )

    def start(self) -> StreamingJob:
        """Check the job on the driver (:func:`check_job`: the tables, ``output_schema``
        against the sink, the consumers), then start the shard actors (each resumes
        from its consumer's checkpoint)."""
        ray = ray_module()
        if self.actors:
            return self
        try:  # Ray checks the options here: before the tables, in raylake's words
            remote = ray.remote(ShardActor).options(
                max_restarts=self.max_restarts, max_task_retries=-1, **self.actor_options
            )
        except (TypeError, ValueError) as exc:
            raise StreamArgumentError(
                "actor_options", self.actor_options, f"Ray actor options ({exc})"
            ) from exc
        try:  # as Ray will for each actor, whose TypeError named the job's spec, not fn
            ray.cloudpickle.dumps(self.spec.fn)
        except Exception as exc:
            raise StreamArgumentError(
                "fn", self.spec.fn, f"a function Ray can pickle for the shard actors ({exc})"
            ) from exc
        schema_id = check_job(
            self.spec,
            output_schema=self.output_schema,
            storage_options=self._driver_options[0],
            sink_storage_options=self._driver_options[1],
        )
        self.spec = dataclasses.replace(self.spec, source_schema_id=schema_id)
        self.actors = [remote.remote(self.spec, i) for i in range(self.spec.num_shards)]
        return self

    @refuse_unknown_keywords
    def wait_ready(self, timeout: float | None = None) -> list[int]:
        """Start the actors and wait until each has resumed; their positions.

        Ray waits without end for an actor it cannot place (the cluster lacks the
        resources of ``actor_options``), so this
        logs a warning every ``READY_WARN_EVERY_S`` seconds naming what the waiting
        shards ask for and what the cluster has free, and after ``timeout`` seconds
        (default: the job's ``ready_timeout``; None waits on) stops the actors and
        raises StreamError with the same facts."""
        # Checked before the actors start.
        timeout = check_seconds("timeout", timeout, StreamArgumentError, positive=True)
        ray = ray_module()
        timeout = self.ready_timeout if timeout is None else timeout
        self.start()
        refs = [a.position.remote() for a in self.actors]
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        while True:
            left = READY_WARN_EVERY_S if deadline is None else deadline - time.monotonic()
            pending = ray.wait(
                refs, num_returns=len(refs), timeout=max(0.0, min(left, READY_WARN_EVERY_S))
            )[1]
            if not pending:
                self._ready = True
                return list(ray.get(refs))
            shards = [i for i, ref in enumerate(refs) if ref in pending]
            waited = time.monotonic() - started
            message = self._not_ready(shards, f"not started after {waited:.0f} s")
            if deadline is not None and time.monotonic() >= deadline:
                self.stop()
                raise StreamError(message)
            logger.warning("%s", message)

    def _not_ready(self, shards: list[int], state: str) -> str:
        ray = ray_module()
        asks = _resources_asked(self.actor_options)
        total, free = ray.cluster_resources(), ray.available_resources()
        have = {k: f"{free.get(k, 0):g} of {total.get(k, 0):g}" for k in asks}
        return (
            f"StreamingJob {self.spec.consumer_id!r}: shard actors {shards} of "
            f"{self.spec.num_shards} {state}; each asks for {asks} "
            f"(actor_options); free in the cluster: {have}. Ray waits for resources that "
            "are taken or that no node has"
        )

    def _wait_for_restarts(self, refs: list[Any]) -> None:
        """Wait for a step's results. A shard whose actor is down while its step waits
        (lost with its node or process, and not placed again) is what wait_ready()
        reports, and as there: a warning every READY_WARN_EVERY_S seconds, and after
        ``ready_timeout`` seconds down the actors are stopped and StreamError raised.
        A shard whose actor is up is not hurried, however long its step takes."""
        ray = ray_module()
        down_since: float | None = None
        warned = time.monotonic()
        while True:
            pending = ray.wait(refs, num_returns=len(refs), timeout=RESTART_CHECK_EVERY_S)[1]
            if not pending:
                return
            down = [i for i, ref in enumerate(refs) if ref in pending and _down(self.actors[i])]
            now = time.monotonic()
            if not down:
                down_since = None
                continue
            down_since = now if down_since is None else down_since
            message = self._not_ready(
                down, f"lost and not running again after {now - down_since:.0f} s"
            )
            if self.ready_timeout is not None and now - down_since >= self.ready_timeout:
                self.stop()
                raise StreamError(message)
            if now - warned >= READY_WARN_EVERY_S:
                logger.warning("%s", message)
                warned = now

    def step(self) -> list[ShardStatus]:
        """One round: every shard processes the plans available now (the first waits
        for the actors as :meth:`wait_ready` does)."""
        ray = ray_module()
        if not self._ready:
            self.wait_ready()
        refs = [a.step.remote() for a in self.actors]
        # An actor lost with its node waits for a node to take it, as at start: not silently.
        self._wait_for_restarts(refs)
        return list(ray.get(refs))

    @refuse_unknown_keywords
    def run(
        self, *, until_snapshot: int | None = None, duration: float | None = None
    ) -> list[ShardStatus]:
        """Process new snapshots until every shard is past ``until_snapshot``, or for
        ``duration`` seconds (one of them, or both: whichever comes first)."""
        if until_snapshot is None and duration is None:
            raise StreamArgumentError(
                "until_snapshot", None, "a snapshot id, or duration= given (run() needs either)"
            )
        if until_snapshot is not None:  # 0: a table without snapshots yet
            until_snapshot = check_count("until_snapshot", until_snapshot)
        duration = check_seconds("duration", duration)
        deadline = None if duration is None else time.monotonic() + duration
        while True:
            statuses = self.step()
            if until_snapshot is not None and all(
                s.next_snapshot_id > until_snapshot for s in statuses
            ):
                return statuses
            if deadline is not None and time.monotonic() >= deadline:
                return statuses
            if not any(s.plans for s in statuses):  # and never past the duration
                wait = self.spec.stream.poll_interval
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                time.sleep(max(0.0, wait))

    def stop(self) -> None:
        """Kill the actors; progress is in the consumers and the sink, not in them."""
        ray = ray_module()
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        self._ready = False

    def __enter__(self) -> StreamingJob:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _down(actor: Any) -> bool:
    """Whether Ray is restarting the actor, or has yet to place it again. Asked of Ray's
    control service through its internal state module (the public ``ray.util.state``
    needs the dashboard); where that fails, the actor is taken as up."""
    try:
        from ray._private import state

        info = state.actors(actor_id=actor._actor_id.hex())
    except Exception:
        return False
    return info.get("State") in _DOWN_STATES


def ray_module() -> Any:
    """Ray, which runs the job's actors; without it, the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError("ray", "ray") from exc
    return ray


def _check_shard_consumers(spec: JobSpec) -> None:
    """The shards' consumer ids (the job's, with a suffix) must be valid ids as well."""
    last = spec.shard_consumer(spec.num_shards - 1)
    try:
        validate_consumer_id(last)
    except ConsumerArgumentError:
        suffix = last[len(spec.consumer_id) :]
        raise ConsumerArgumentError(
            "consumer_id",
            spec.consumer_id,
            f"an id that stays a valid consumer id with the shard suffix {suffix!r} (at most "
            f"{128 - len(suffix)} characters here)",
            consumer_id=spec.consumer_id,
        ) from None
