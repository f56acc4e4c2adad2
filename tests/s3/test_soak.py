"""The soak (bench/soak.py) for a minute: writers, compaction, expiration with
consumers, orphan cleanup, a Ray StreamingJob copying a table into a sink (on the test
session's Ray cluster) and a resuming trainer, with SIGKILLs of processes, kills of the
job's shard actors and storage faults, all from seeded plans; nothing lost, nothing
doubled, nothing broken."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

SOAK = Path(__file__).parents[2] / "bench" / "soak.py"


@pytest.mark.slow
@pytest.mark.ray
def test_a_minute_of_everything_with_kills_and_faults_loses_nothing(
    tmp_path: Path, ray_cluster: Any
) -> None:
    address = ray_cluster.get_runtime_context().gcs_address
    run = subprocess.run(
        [sys.executable, str(SOAK), "--minutes", "1", "--seed", "26", "--ray-address", address],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    print(run.stdout)  # the report: operations, faults, kills, job steps (pytest -s shows it)
    report = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert report["rows lost"] == "0" and report["rows duplicated"] == "0"
    assert report["failures"] == "[]"
    # How much gets done depends on the machine: only that something was, is asserted.
    # The job's kills are by its step count, and it stops only after one kill and the
    # step it hit: on any machine, at least one actor was killed mid-step and recovered.
    operations = ast.literal_eval(report["operations"])
    assert sum(operations["commits acknowledged"].values()) > 0
    assert sum(ast.literal_eval(report["faults injected (S3)"]).values()) > 0
    assert int(report["actor kills"]) >= 1
    assert int(report["job steps"]) >= 1
