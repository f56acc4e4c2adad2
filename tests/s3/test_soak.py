"""The soak (bench/soak.py) for a minute: writers, compaction, expiration with
consumers, orphan cleanup, a stream copy and a resuming trainer, with SIGKILLs and
storage faults from seeded plans; nothing lost, nothing doubled, nothing broken."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SOAK = Path(__file__).parents[2] / "bench" / "soak.py"


@pytest.mark.slow
def test_a_minute_of_everything_with_kills_and_faults_loses_nothing(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SOAK), "--minutes", "1", "--seed", "26"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    report = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert report["rows lost"] == "0" and report["rows duplicated"] == "0"
    assert report["failures"] == "[]"
    # How much gets done depends on the machine: only that something was, is asserted.
    operations = ast.literal_eval(report["operations"])
    assert sum(operations["commits acknowledged"].values()) > 0
    assert sum(ast.literal_eval(report["faults injected (S3)"]).values()) > 0
