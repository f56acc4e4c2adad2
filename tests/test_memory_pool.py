"""``import raylake`` makes pyarrow's default memory pool one a forked DataLoader worker
can use (raylake/memory_pool.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

SCRIPT = (
    "import pyarrow as pa\n"
    "before = pa.default_memory_pool().backend_name\n"
    "import raylake\n"
    "print(before, pa.default_memory_pool().backend_name)\n"
)


def _pools(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
        check=True,
    )
    return done.stdout.split()


@pytest.mark.skipif(
    "jemalloc" not in pa.supported_memory_backends(), reason="pyarrow built without jemalloc"
)
def test_mimalloc_gives_way_to_jemalloc_which_takes_its_locks_around_fork() -> None:
    before, after = _pools()
    assert after == ("jemalloc" if before == "mimalloc" else before)


def test_a_pool_the_user_chose_is_kept() -> None:
    assert _pools(ARROW_DEFAULT_MEMORY_POOL="mimalloc") == ["mimalloc", "mimalloc"]
    assert _pools(ARROW_DEFAULT_MEMORY_POOL="system") == ["system", "system"]


SCAN = (
    "import raylake\n"
    "import numpy as np, pyarrow as pa, pyarrow.dataset as ds, pyarrow.parquet as pq, sys\n"
    "pq.write_table(pa.table({'x': np.arange(100_000)}), sys.argv[1])\n"
    "kept = ds.dataset(sys.argv[1]).to_table(filter=ds.field('x') > 5)\n"
    "print(pa.mimalloc_memory_pool().bytes_allocated() > 0)\n"
)


@pytest.mark.skipif(
    sys.platform != "linux" or "jemalloc" not in pa.supported_memory_backends(),
    reason="DataLoader forks its workers on Linux; pyarrow built without jemalloc",
)
@pytest.mark.parametrize(("chosen", "on_mimalloc"), [(None, "False"), ("mimalloc", "True")])
def test_imported_first_raylake_keeps_pyarrows_internals_off_mimalloc(
    tmp_path: Path, chosen: str | None, on_mimalloc: str
) -> None:
    """A dataset scan allocates from pyarrow's C++ default pool, which the pool set from
    Python does not change (was: a forked DataLoader worker hung in mimalloc's thread
    setup inside a scan's filter simplification); a pool the user named is kept."""
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env = clean if chosen is None else {**clean, "ARROW_DEFAULT_MEMORY_POOL": chosen}
    done = subprocess.run(
        [sys.executable, "-c", SCAN, str(tmp_path / "f.parquet")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    assert done.stdout.split() == [on_mimalloc]
