"""Without Ray installed, the Ray parts of streaming name the extra to install
(MissingDependencyError), as ``read_lake`` does, rather than ``No module named 'ray'``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_WITHOUT_RAY = """
import sys
sys.modules["ray"] = None  # as if ray were not installed
import pyarrow as pa
import raylake
try:
    raylake.read_lake_stream
except raylake.MissingDependencyError as exc:
    print(exc)
tbl = raylake.create_table(sys.argv[1], pa.schema([("id", pa.int64())]))
job = raylake.StreamingJob(tbl.uri, lambda rows: rows, consumer_id="job")
for call in (lambda: job.run(until_snapshot=0), job.start, job.stop):
    try:
        call()
    except raylake.MissingDependencyError as exc:
        print(exc)
"""


def test_the_ray_parts_name_the_extra_without_ray(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_RAY, str(tmp_path / "t")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        out.stdout.splitlines()
        == ["ray is required for this feature: pip install 'raylake[ray]'"] * 4
    )
