"""Soak: every part at once, with kills and storage faults; nothing lost or doubled.

    python bench/soak.py --minutes 30
    python bench/soak.py --minutes 5 --ray-stream   # the stream as a Ray StreamingJob
    python bench/soak.py --ray-address HOST:PORT    # ... on a running Ray cluster

Against an S3 server in its own process that faults requests by a seeded plan, and a
local table whose filesystem faults too (``faulty://``): processes appending and
upserting, compaction, expiration with registered consumers, orphan cleanup, a stream
copying one table into a sink exactly once, and a trainer that saves and resumes its
loader position; writers, the stream copy and the trainer are SIGKILLed at seeded
random moments and restarted. At the end (faults off): every acknowledged commit's
rows are present exactly once, no commit reported failed is visible, the sink equals
the source, no consumer's snapshot was expired, no orphan is left after cleanup, and
each trainer epoch read every row once. It prints what it did and the rows lost and
duplicated, and exits 1 if any check failed.

With ``--ray-stream`` the copy is a Ray ``StreamingJob`` of two shard actors (on a
local Ray cluster its process starts, or on the cluster at ``--ray-address``), whose
actors are killed every few job steps (a seeded count) and restarted by Ray, instead of
a process that is SIGKILLed. The one-minute run of the test suite joins the test
session's Ray cluster (starting Ray takes much of a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

import raylake
from raylake.testing import localfaults
from raylake.testing.faults import FaultPlan
from raylake.testing.s3server import S3ServerProcess
from raylake.testing.tablecheck import inspect_table

ROLES = str(Path(__file__).with_name("_soak_roles.py"))
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
TRAIN_ROWS = 4000
RAY_SHARDS = 2


@dataclass
class Role:
    name: str
    kind: str
    spec: dict[str, Any]
    killable: bool
    incarnation: int = 0
    child: subprocess.Popen[bytes] | None = None
    journal_size: int = 0
    ended: bool = False

    def made_progress(self) -> bool:
        """Whether it wrote to its journal since it was (re)started: only then is it
        killed again, so that every incarnation gets somewhere on a slow machine."""
        journal = Path(self.spec["journal"])
        return journal.exists() and journal.stat().st_size > self.journal_size

    def start(self) -> None:
        journal = Path(self.spec["journal"])
        self.journal_size = journal.stat().st_size if journal.exists() else 0
        seed = zlib.crc32(f"{self.name}/{self.incarnation}".encode())
        spec = {**self.spec, "incarnation": self.incarnation, "seed": seed}
        self.child = subprocess.Popen([sys.executable, ROLES, self.kind, json.dumps(spec)])


@dataclass
class Soak:
    work: Path
    seed: int
    fault_rate: float
    lost_creates: float
    server: S3ServerProcess
    roles: list[Role] = field(default_factory=list)
    kills: int = 0
    uris: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    train_snapshot: int = 0
    orphan_age_s: float = 60.0
    ray_stream: bool = False
    ray_address: str | None = None
    failures: list[str] = field(default_factory=list)

    def spec(self, name: str, **extra: Any) -> dict[str, Any]:
        return {"journal": str(self.work / f"{name}.jsonl"), "stop": str(self.work / "stop"),
                **extra}  # fmt: skip

    def setup(self) -> None:
        options = self.server.storage_options
        bucket = self.server.create_bucket()
        local_plan = FaultPlan.transient(self.fault_rate, seed=self.seed, local=True)
        self.uris = {
            "events": (f"s3://{bucket}/events", options),
            "users": (f"s3://{bucket}/users", options),
            "local": (f"faulty://{self.work}/local", {"fault_plan": local_plan.to_json()}),
            "train": (f"s3://{bucket}/train", options),
        }
        localfaults.register()
        events = raylake.create_table(self.uris["events"][0], SCHEMA, storage_options=options)
        raylake.create_table(self.uris["users"][0], SCHEMA, primary_key=["id"], buckets=2,
                             storage_options=options)  # fmt: skip
        raylake.create_table(str(self.work / "local"), SCHEMA)
        raylake.create_table(str(self.work / "sink"), SCHEMA)
        train = raylake.create_table(self.uris["train"][0], SCHEMA, storage_options=options)
        ids = pa.array(range(TRAIN_ROWS), pa.int64())
        for part in range(4):  # a few commits, so that a pinned snapshot is not the only one
            snap = train.write(
                pa.table({"id": ids[part::4], "v": pa.array([part] * (TRAIN_ROWS // 4))})
            )
        assert snap is not None
        self.train_snapshot = snap.id
        # Registered before anything can expire: the copy from snapshot 1 (it expires
        # what it has read), the trainer at its pinned snapshot.
        for consumer in self.copy_consumers():
            events.reset_consumer(consumer, 1)
        train.reset_consumer("soak-trainer", snap.id)

    def copy_consumers(self) -> list[str]:
        """The consumers of the copy: one, or one per shard of the StreamingJob."""
        if self.ray_stream:
            return [f"soak-job.shard-{i}-of-{RAY_SHARDS}" for i in range(RAY_SHARDS)]
        return ["soak-copy"]

    def plan_roles(self) -> None:
        uri = {name: {"uri": u, "options": o} for name, (u, o) in self.uris.items()}
        for i, table in enumerate(["events", "events", "users", "local"]):
            kind = "pk" if table == "users" else "append"
            spec = self.spec(f"writer-{i}", **uri[table], writer=i, kind=kind, rows=20,
                             keys=300, table=table)  # fmt: skip
            self.roles.append(Role(f"writer-{i}", "writer", spec, killable=True))
        if self.ray_stream:  # its kills are of actors, by the role itself
            copy = self.spec("copy", **uri["events"], sink=str(self.work / "sink"),
                             consumer="soak-job", shards=RAY_SHARDS,
                             ray_address=self.ray_address)  # fmt: skip
            self.roles.append(Role("copy", "ray_stream", copy, killable=False))
        else:
            copy = self.spec("copy", **uri["events"], sink=str(self.work / "sink"),
                             consumer="soak-copy")  # fmt: skip
            self.roles.append(Role("copy", "stream_copy", copy, killable=True))
        tables = [[name, u, o] for name, (u, o) in self.uris.items()]
        # Orphan cleanup must spare files of commits in flight: older than the longest
        # commit (under faults, the clients' backoff alone can take 20 s a request).
        maint = self.spec("maintenance", tables=tables, retain=3, orphan_age_s=self.orphan_age_s,
                          pause_s=2)  # fmt: skip
        self.roles.append(Role("maintenance", "maintenance", maint, killable=False))
        train = self.spec("trainer", **uri["train"], snapshot=self.train_snapshot, batch=256,
                          save_every=3, checkpoint=str(self.work / "trainer.ckpt"))  # fmt: skip
        self.roles.append(Role("trainer", "trainer", train, killable=True))

    def run(self, seconds: float) -> None:
        plan = FaultPlan.transient(self.fault_rate, seed=self.seed, lost_creates=self.lost_creates)
        self.server.set_faults(plan)
        # The Ray stream's shard actors take long to start on a loaded machine (a
        # minute at load 20): the clock starts once they are up, so that the job runs
        # for the whole soak and not only in its last seconds.
        for role in self.roles:
            if role.kind == "ray_stream":
                role.start()
                self.wait_for(role, "ready")
        for role in self.roles:
            if role.child is None:
                role.start()
        rng = random.Random(self.seed)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(rng.uniform(2.0, 6.0), max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                break
            self.check_alive()
            victims = [r for r in self.roles if r.killable and r.made_progress()]
            if not victims:
                continue
            victim = rng.choice(victims)
            assert victim.child is not None
            if victim.child.poll() is None:
                victim.child.send_signal(signal.SIGKILL)
                victim.child.wait()
                self.kills += 1
            victim.incarnation += 1
            victim.start()
        self.check_alive()
        (self.work / "stop").touch()
        for role in self.roles:
            assert role.child is not None
            rc = role.child.wait(timeout=600)
            if rc and not role.killable and not role.ended:
                self.failures.append(f"{role.name} failed at the stop (exit status {rc})")

    def finish(self) -> dict[str, Any]:
        """Faults off: copy what is left, clean up, and check everything."""
        print("soak: stopped; draining the stream copy and checking", file=sys.stderr)
        stats = self.server.fault_stats()
        self.server.set_faults(None)
        copy = next(r for r in self.roles if r.name == "copy")
        if self.ray_stream:  # the job's shards run to the source's last snapshot
            spec = {**copy.spec, "drain": True, "seed": 0, "incarnation": -1}
            subprocess.run([sys.executable, ROLES, "ray_stream", json.dumps(spec)], check=True)
        else:
            _drain(copy.spec)
        for _name, (uri, options) in self.plain_uris().items():
            tbl = raylake.open_table(uri, storage_options=options)
            tbl.expire_snapshots(retain_last=3)
            tbl.remove_orphan_files(older_than=timedelta(0))
        report: dict[str, Any] = {
            "faults injected (S3)": stats["injected"],
            "requests (S3)": stats["requests"],
            "kills": self.kills,
        }
        if self.ray_stream:
            copy_journal = journal(self, "copy")
            report["actor kills"] = sum(e["event"] == "actor killed" for e in copy_journal)
            report["job steps"] = sum(e.get("steps", 0) for e in copy_journal)
        report.update(check(self))
        report["failures"] = self.failures + report["failures"]
        return report

    def wait_for(self, role: Role, event: str, timeout_s: float = 600.0) -> None:
        """Until ``role`` journals ``event``; a failure if it ends or times out first."""
        deadline = time.monotonic() + timeout_s
        while not any(e["event"] == event for e in journal(self, role.name)):
            assert role.child is not None
            if role.child.poll() is not None or time.monotonic() > deadline:
                self.check_alive()
                self.failures.append(f"{role.name} not {event} after {timeout_s:.0f} s")
                return
            time.sleep(0.5)

    def check_alive(self) -> None:
        """A role that is never killed must not end before the stop (a Ray stream whose
        cluster failed to start once ended at once, and the soak ran on without it)."""
        for role in self.roles:
            assert role.child is not None
            rc = role.child.poll()
            if not role.killable and rc is not None and not role.ended:
                role.ended = True
                self.failures.append(f"{role.name} ended before the stop (exit status {rc})")

    def plain_uris(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """The tables as they are, without the faulty filesystem (for the checks)."""
        out = {name: v for name, v in self.uris.items() if name != "local"}
        out["local"] = (str(self.work / "local"), {})
        out["sink"] = (str(self.work / "sink"), {})
        return out


def _drain(spec: dict[str, Any]) -> None:
    """The stream copy, run to the source's latest snapshot, without faults or kills."""
    tbl = raylake.open_table(spec["uri"], storage_options=spec["options"])
    sink = raylake.open_table(spec["sink"])
    reader = tbl.stream(consumer_id=spec["consumer"], poll_interval=0)
    while (plan := reader.poll()) is not None:
        _copy(sink, plan, spec["consumer"])
        reader.checkpoint()


def _copy(sink: raylake.Table, plan: Any, consumer: str) -> None:
    from raylake.table.writer import writing

    with writing(sink.new_writer()) as w:
        w.write(plan.to_arrow())
        messages = w.prepare_commit()
    sink.commit(messages, commit_user=f"soak-copy/{consumer}", commit_identifier=plan.snapshot_id)


def journal(soak: Soak, name: str) -> list[dict[str, Any]]:
    path = soak.work / f"{name}.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def check(soak: Soak) -> dict[str, Any]:
    tables = soak.plain_uris()
    out: dict[str, Any] = {"rows lost": 0, "rows duplicated": 0, "failures": []}
    broken = _unreadable(soak, tables, out)
    if broken:
        return out
    current = {name: raylake.open_table(u, storage_options=o).to_arrow()
               for name, (u, o) in tables.items()}  # fmt: skip
    acks: Counter[str] = Counter()
    for table in ("events", "local", "users"):
        begun, done, snapshots = {}, {}, Counter[int]()
        for role in soak.roles:
            if role.kind == "writer" and role.spec["table"] == table:
                for e in journal(soak, role.name):
                    if e["event"] == "begin":
                        begun[e["version"]] = e["ids"]
                    else:
                        done[e["version"]] = e["event"]
                        snapshots.update([e["snapshot"]] if e["event"] == "ack" else [])
        acks[table] = sum(v == "ack" for v in done.values())
        # One snapshot, one commit: two commits told they made the same snapshot means the
        # store let two creates of one snapshot file both succeed (the later overwrote).
        for snapshot_id, n in sorted(snapshots.items()):
            if n > 1:
                out["failures"].append(
                    f"{table}: snapshot {snapshot_id} acknowledged to {n} commits"
                )
        _check_writes(table, current[table], begun, done, out)
    source = Counter(current["events"]["id"].to_pylist())
    sink = Counter(current["sink"]["id"].to_pylist())
    if source != sink:
        out["failures"].append(f"sink differs from source: {len(source - sink)} rows missing, "
                               f"{len(sink - source)} extra")  # fmt: skip
    _check_consumers(tables, out)
    for name, (uri, options) in tables.items():
        state = inspect_table(uri, options)
        if state.missing or state.unreferenced:
            out["failures"].append(f"{name}: {len(state.missing)} files missing, "
                                   f"{len(state.unreferenced)} orphans left")  # fmt: skip
    epochs = _check_trainer(soak, out)
    maintenance = Counter(e["event"] for e in journal(soak, "maintenance"))
    out["operations"] = {"commits acknowledged": dict(acks), "epochs": epochs,
                         "trainer resumes": sum(e["event"] == "resumed" for e in journal(soak, "trainer")),
                         "stream copies": sum(e["event"] == "copied" for e in journal(soak, "copy")),
                         **{f"maintenance {k}": v for k, v in maintenance.items()}}  # fmt: skip
    reported: Counter[str] = Counter()
    for role in soak.roles:
        if role.kind == "writer":
            for e in journal(soak, role.name):
                if e["event"] in ("fail", "unknown"):
                    error = e["error"].split("(", 1)[0]
                    reported[f"{role.spec['table']}: {e['event']} {error}"] += 1
    out["commits reported failed or unknown"] = dict(reported)
    return out


def _unreadable(soak: Soak, tables: dict[str, tuple[str, dict[str, Any]]],
                out: dict[str, Any]) -> bool:  # fmt: skip
    """Tables whose snapshots name missing files, and who removed those files."""
    removed = {p: e for e in journal(soak, "maintenance") for p in e.get("removed", ())}
    broken = False
    for name, (uri, options) in tables.items():
        try:
            state = inspect_table(uri, options)
        except Exception as exc:
            out["failures"].append(f"{name}: unreadable: {exc!r}")
            broken = True
            continue
        if state.errors and not state.missing:
            out["failures"].append(f"{name}: {state.errors[0]}")
            broken = True
        for path in sorted(state.missing):
            why = removed.get(path)
            out["failures"].append(
                f"{name}: {path} missing" + (f", removed by {why}" if why else "")
            )
            broken = True
    return broken


def _check_writes(table: str, rows: pa.Table, begun: dict[int, list[int]],
                  done: dict[int, str], out: dict[str, Any]) -> None:  # fmt: skip
    ids = Counter(rows["id"].to_pylist())
    values = dict(zip(rows["id"].to_pylist(), rows["v"].to_pylist(), strict=True))
    out["rows duplicated"] += sum(n - 1 for n in ids.values() if n > 1)
    if table == "users":  # upserts: a key holds the version of the last commit that landed
        latest: dict[int, int] = {}
        for version in sorted(begun):
            if done.get(version) == "ack":
                latest.update(dict.fromkeys(begun[version], version))
        for key, version in latest.items():
            if key not in ids:
                out["rows lost"] += 1
                out.setdefault("lost", []).append(f"users: key {key} of commit {version}")
            elif values[key] < version or done.get(values[key]) == "fail":
                out["failures"].append(f"users: key {key} holds version {values[key]}, "
                                       f"acknowledged {version}")  # fmt: skip
        return
    for version, version_ids in begun.items():
        present = sum(1 for i in version_ids if i in ids)
        outcome = done.get(version, "in flight")
        if outcome == "ack":
            out["rows lost"] += len(version_ids) - present
            if present < len(version_ids):  # which commit: the first thing to look at
                out.setdefault("lost", []).append(
                    f"{table}: commit {version} lost {len(version_ids) - present} rows"
                )
        elif outcome == "fail" and present:
            out["failures"].append(f"{table}: commit {version} reported failed is visible")
        elif present not in (0, len(version_ids)):
            out["failures"].append(f"{table}: commit {version} ({outcome}) is half there")


def _check_consumers(tables: dict[str, tuple[str, dict[str, Any]]], out: dict[str, Any]) -> None:
    for name, (uri, options) in tables.items():
        tbl = raylake.open_table(uri, storage_options=options)
        latest = tbl.latest_snapshot()
        ids = {s.id for s in tbl.snapshots()}
        for consumer in tbl.consumers():
            wanted = consumer.next_snapshot_id
            # The next snapshot is not expired, it is yet to come (the first, if none).
            if wanted not in ids and wanted != (latest.id if latest else 0) + 1:
                out["failures"].append(f"{name}: consumer {consumer.consumer_id}'s "
                                       f"snapshot {wanted} was expired")  # fmt: skip


def _check_trainer(soak: Soak, out: dict[str, Any]) -> int:
    expected = list(range(TRAIN_ROWS))
    epochs = {e["epoch"]: e["ids"] for e in journal(soak, "trainer") if e["event"] == "epoch"}
    for epoch, ids in epochs.items():
        if sorted(ids) != expected:
            out["failures"].append(f"trainer epoch {epoch}: {len(ids)} rows read, "
                                   f"{len(set(ids))} distinct, of {TRAIN_ROWS}")  # fmt: skip
    return len(epochs)


def run_soak(seconds: float, seed: int = 0, fault_rate: float = 0.05,
             lost_creates: float = 0.3, work: Path | None = None,
             ray_stream: bool = False, ray_address: str | None = None) -> dict[str, Any]:  # fmt: skip
    work = Path(work or tempfile.mkdtemp(prefix="raylake-soak-"))
    with S3ServerProcess() as server:
        soak = Soak(work, seed, fault_rate, lost_creates, server,
                    ray_stream=ray_stream or bool(ray_address), ray_address=ray_address)  # fmt: skip
        soak.setup()
        soak.plan_roles()
        started = time.monotonic()
        soak.run(seconds)
        report = soak.finish()
        report["seconds"] = round(time.monotonic() - started, 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--lost-creates", type=float, default=0.3)
    parser.add_argument("--ray-stream", action="store_true",
                        help="the copy as a Ray StreamingJob whose actors are killed")  # fmt: skip
    parser.add_argument("--ray-address", default=None,
                        help="run the --ray-stream job on the Ray cluster at this address "
                             "(implies --ray-stream) instead of starting one")  # fmt: skip
    args = parser.parse_args()
    report = run_soak(args.minutes * 60, args.seed, args.fault_rate, args.lost_creates,
                      ray_stream=args.ray_stream, ray_address=args.ray_address)  # fmt: skip
    for key, value in report.items():
        print(f"{key}: {value}")
    sys.exit(1 if report["failures"] or report["rows lost"] or report["rows duplicated"] else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
