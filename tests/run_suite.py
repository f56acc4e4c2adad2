"""`make test`'s pytest: the whole suite as two sessions run side by side.

One session runs the tests that need a Ray cluster or Spark (marks ``ray``, ``spark``,
``multinode``), in file order, exactly as a plain ``pytest tests`` runs them: one local
Ray cluster for the session, and Spark's last test (tests/spark/test_z_stop_spark.py)
after the other Spark tests. The other session runs everything else at the same time.
Both wait on subprocesses, files and the local S3 server much of the time, so on a
2-core machine the pair takes little longer than the longer of the two (about 60% of one
session running everything; docs/decisions.md says why not pytest-xdist).

The second session prints as it goes; the cluster session writes to a log that is
printed when both have ended. Each session keeps its ``tmp_path`` directories under a
temporary root of its own (``temp_root``): pytest removes old numbered directories as a
session ends, and two sessions that share a root can remove the same one at once, which
fails the later one (a warning that the suite makes an error). Arguments are passed to
both sessions. The exit status is 1 when either session collected nothing (pytest's 5:
an empty run is not a green run), else the first non-zero status of the two.

    python tests/run_suite.py [PYTEST_ARGS...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CLUSTER_MARKS = ("ray", "spark", "multinode")
CLUSTER = " or ".join(CLUSTER_MARKS)
LOG = Path(".pytest-cluster.log")
NO_TESTS = 5  # pytest's exit status when it collected nothing


def unmarked_on_cluster(items: Iterable[Any]) -> list[str]:
    """The tests that use the session's Ray cluster (the ``ray_cluster`` fixture) without
    a mark that puts them in the cluster session: in the other session they would start
    a second cluster (tests/conftest.py refuses them at collection)."""
    return [
        item.nodeid
        for item in items
        if "ray_cluster" in getattr(item, "fixturenames", ())
        and not any(item.get_closest_marker(mark) for mark in CLUSTER_MARKS)
    ]


def temp_root(session: str) -> Path:
    """The directory under which the pytest session named ``session`` keeps its
    ``tmp_path`` directories, made if absent (pytest's ``PYTEST_DEBUG_TEMPROOT``; under
    the caller's own root when it has one, so that a nested run shares nothing either)."""
    parent = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    root = Path(parent) / "raylake-pytest" / session
    root.mkdir(parents=True, exist_ok=True)
    return root


def _pytest_env(session: str) -> dict[str, str]:
    return {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(temp_root(session))}


def _pytest(marks: str, args: list[str], paths: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *paths, "-m", marks, *args]


def main(args: list[str], paths: list[str] | None = None) -> int:
    """Runs both sessions over ``paths`` (the tests directory) with ``args``."""
    paths = paths or [str(Path(__file__).resolve().parent)]
    with LOG.open("w") as log:
        cluster = subprocess.Popen(
            _pytest(CLUSTER, args, paths),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_pytest_env("cluster"),
        )
        try:
            rest = subprocess.call(
                _pytest(f"not ({CLUSTER})", args, paths), env=_pytest_env("rest")
            )
            cluster_status = cluster.wait()
        finally:  # Ctrl-C, say: the background session does not outlive this one
            if cluster.poll() is None:
                cluster.terminate()
                cluster.wait()
    print(f"\n=== the tests that need Ray or Spark ({LOG}) ===", flush=True)
    sys.stdout.write(LOG.read_text())
    statuses = {"the rest": rest, "Ray and Spark": cluster_status}
    for name, status in statuses.items():
        if status == NO_TESTS:
            print(f"pytest ran no tests ({name})", file=sys.stderr)
            return 1
    print(", ".join(f"{name}: exit {status}" for name, status in statuses.items()))
    return next((status for status in statuses.values() if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
