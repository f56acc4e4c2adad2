"""The processes of bench/soak.py: writers, a stream copy, maintenance, a trainer.

Each runs as ``python bench/_soak_roles.py ROLE SPEC_JSON`` until the stop file
exists, and records what it did in a journal (JSON lines, flushed and synced one by
one, so a SIGKILL loses at most the line being written): a writer records ``begin``
before each commit and ``ack`` (or ``fail``) after it, so that the checks know which
commits were acknowledged, which were reported failed, and which were in flight when
the process was killed.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

import raylake
from raylake.errors import CommitStateUnknownError
from raylake.table.writer import writing
from raylake.testing import localfaults

localfaults.register()


class Journal:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept for the run

    def record(self, **entry: Any) -> None:
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def _stopped(spec: dict[str, Any]) -> bool:
    return os.path.exists(spec["stop"])


def writer(spec: dict[str, Any]) -> None:
    """Append rows with ids of its own, or upsert keys of its own with rising versions."""
    journal = Journal(spec["journal"])
    tbl = raylake.open_table(spec["uri"], storage_options=spec["options"])
    rng = random.Random(spec["seed"])
    rows, pk = spec["rows"], spec["kind"] == "pk"
    commit = 0
    while not _stopped(spec):
        # Unique over writers, incarnations and commits: no id is ever written twice.
        version = (spec["writer"] * 10_000 + spec["incarnation"]) * 10_000 + commit
        if pk:
            keys = sorted(rng.sample(range(spec["keys"]), rows))
            ids = [spec["writer"] * 1_000_000 + k for k in keys]
        else:
            ids = list(range(version * rows, (version + 1) * rows))
        data = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([version] * rows)})
        journal.record(event="begin", version=version, ids=ids)
        began = time.monotonic()
        try:
            snap = tbl.write(data)
            assert snap is not None
            journal.record(event="ack", version=version, snapshot=snap.id,
                           seconds=round(time.monotonic() - began, 2))  # fmt: skip
        except CommitStateUnknownError as exc:
            journal.record(event="unknown", version=version, error=repr(exc))
        except Exception as exc:
            journal.record(event="fail", version=version, error=repr(exc))
        commit += 1


def stream_copy(spec: dict[str, Any]) -> None:
    """Copy every new row of the source to the sink exactly once: each plan's rows are
    one sink commit whose identifier is the source snapshot it ends at, then the
    consumer checkpoints; a restart finds a commit it already made and moves on."""
    journal = Journal(spec["journal"])
    source = raylake.open_table(spec["uri"], storage_options=spec["options"])
    sink = raylake.open_table(spec["sink"])
    reader = source.stream(consumer_id=spec["consumer"], start="earliest", poll_interval=0.2)
    user = f"soak-copy/{spec['consumer']}"
    while not _stopped(spec):
        try:
            plan = reader.poll()
            if plan is None:
                time.sleep(0.2)
                continue
            with writing(sink.new_writer()) as w:
                w.write(plan.to_arrow())
                messages = w.prepare_commit()
            sink.commit(messages, commit_user=user, commit_identifier=plan.snapshot_id)
            reader.checkpoint()
            journal.record(event="copied", through=plan.snapshot_id)
        except Exception as exc:  # a fault after the bound: a new reader resumes
            journal.record(event="fail", error=repr(exc))
            reader = source.stream(consumer_id=spec["consumer"], poll_interval=0.2)


def _same(batch: pa.Table) -> pa.Table:
    return batch


# A shard actor of the Ray stream is killed every 2 to 6 job steps (seeded).
KILL_EVERY_STEPS = (2, 6)


def ray_stream(spec: dict[str, Any]) -> None:
    """The copy as a Ray StreamingJob (a shard actor per consumer ``<consumer>.shard-i-
    of-n``, the same sink commits, exactly once), on the Ray cluster at ``ray_address``
    or else on a local one of its own. Every few job steps (a seeded count, not a wall
    time, so that a slow machine gets the same kills, only later) it kills a shard actor
    in the middle of a step; Ray restarts it and retries the step, and the shard resumes
    from its checkpoint. It stops at the stop file, but not before one kill and the
    step it hit are done. With ``drain`` (at the end, faults off) it runs the job to the source's
    latest snapshot."""
    import ray

    from raylake.streaming import StreamingJob

    journal = Journal(spec["journal"])
    began = time.monotonic()
    _connect_ray(spec.get("ray_address"))
    job = StreamingJob(
        spec["uri"], _same, consumer_id=spec["consumer"], num_shards=spec["shards"],
        sink_uri=spec["sink"], storage_options=spec["options"], poll_interval=0.2,
    )  # fmt: skip
    rng = random.Random(spec["seed"])
    steps = kills = killed_in = 0
    try:
        if spec.get("drain"):
            source = raylake.open_table(spec["uri"], storage_options=spec["options"])
            latest = source.latest_snapshot()
            job.run(until_snapshot=0 if latest is None else latest.id)
            journal.record(event="drained", through=0 if latest is None else latest.id)
            return
        job.wait_ready()
        journal.record(event="ready", t=round(time.monotonic() - began, 1))
        kill_at = rng.randint(*KILL_EVERY_STEPS)
        # Past the stop file until a kill has happened and the step it hit is done.
        while not (_stopped(spec) and kills and steps >= killed_in):
            refs = [a.step.remote() for a in job.actors]
            if steps + 1 == kill_at:  # while (or just after) it works
                time.sleep(rng.uniform(0, 0.05))
                ray.kill(rng.choice(job.actors), no_restart=False)
                kills, killed_in = kills + 1, kill_at
                journal.record(event="actor killed", step=kill_at,
                               t=round(time.monotonic() - began, 1))  # fmt: skip
                kill_at += rng.randint(*KILL_EVERY_STEPS)
            try:
                statuses = ray.get(refs)
            except Exception as exc:  # a fault past the bound inside a step: step again
                journal.record(event="fail", error=repr(exc))
                continue
            steps += 1
            if any(s.plans for s in statuses):
                through = min(s.next_snapshot_id for s in statuses) - 1
                journal.record(event="copied", through=through, step=steps,
                               t=round(time.monotonic() - began, 1))  # fmt: skip
            else:
                time.sleep(0.2)
        journal.record(event="stopped", steps=steps, kills=kills,
                       t=round(time.monotonic() - began, 1))  # fmt: skip
    finally:
        job.stop()
        ray.shutdown()


def _connect_ray(address: str | None) -> None:
    """Join the cluster at ``address``, or start one of this process's own."""
    import ray

    if address:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        return
    # A cluster of its own even where another one runs on the machine. On a loaded
    # machine this can fail: the raylet waits 15 s for the metrics agent (a Python
    # process) to write its port, then dies ("Timed out waiting for file .../
    # metrics_agent_port_..."). The soak reports the role's early end; --ray-address
    # joins a cluster started beforehand instead.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")  # fmt: skip


def maintenance(spec: dict[str, Any]) -> None:
    """Compact the primary-key table, expire snapshots, remove orphans, in a loop."""
    journal = Journal(spec["journal"])
    tables = {name: (uri, opts) for name, uri, opts in spec["tables"]}
    # Older than any commit in flight takes: younger files may be about to be committed.
    orphan_age = timedelta(seconds=spec["orphan_age_s"])
    while not _stopped(spec):
        for name, (uri, options) in tables.items():
            tbl = raylake.open_table(uri, storage_options=options)
            steps: list[tuple[str, Any]] = [
                ("expire", lambda t=tbl: t.expire_snapshots(retain_last=spec["retain"])),
                ("orphans", lambda t=tbl: t.remove_orphan_files(older_than=orphan_age)),
            ]
            if tbl.is_primary_key_table:
                steps.insert(0, ("compact", lambda t=tbl: t.compact()))
            for step, run in steps:
                try:
                    result = run()
                    removed = list(getattr(result, "paths", ()) or ())
                    journal.record(event=step, table=name, removed=removed)
                except Exception as exc:
                    journal.record(event="fail", step=step, table=name, error=repr(exc))
        time.sleep(spec["pause_s"])


def trainer(spec: dict[str, Any]) -> None:
    """Epochs over a pinned snapshot; the loader's position and the ids read so far are
    saved together every few batches, and a restart resumes from them."""
    from raylake.train import LakeIterableDataset

    journal = Journal(spec["journal"])
    ckpt = Path(spec["checkpoint"])
    tbl = raylake.open_table(spec["uri"], storage_options=spec["options"])
    dataset = LakeIterableDataset(
        tbl, columns=["id"], snapshot_id=spec["snapshot"], batch_size=spec["batch"], seed=7
    )
    saved = json.loads(ckpt.read_text()) if ckpt.exists() else {"epoch": 0, "ids": []}
    epoch, seen = saved["epoch"], saved["ids"]
    if "state" in saved:
        dataset.load_state_dict(saved["state"])
        journal.record(event="resumed", epoch=epoch, rows=len(seen))
    else:
        dataset.set_epoch(epoch)
    while not _stopped(spec):
        for n, batch in enumerate(dataset, 1):
            seen += batch["id"].tolist()
            if n % spec["save_every"] == 0:
                _save(ckpt, {"epoch": epoch, "ids": seen, "state": dataset.state_dict()})
                journal.record(event="saved", epoch=epoch, rows=len(seen))
        journal.record(event="epoch", epoch=epoch, ids=seen)
        epoch, seen = epoch + 1, []
        dataset.set_epoch(epoch)
        _save(ckpt, {"epoch": epoch, "ids": seen})


def _save(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


ROLES = {"writer": writer, "stream_copy": stream_copy, "ray_stream": ray_stream,
         "maintenance": maintenance, "trainer": trainer}  # fmt: skip

if __name__ == "__main__":
    ROLES[sys.argv[1]](json.loads(sys.argv[2]))
