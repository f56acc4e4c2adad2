"""``import raylake`` makes pyarrow's default memory pool one a forked DataLoader worker
can use (raylake/memory_pool.py)."""

from __future__ import annotations

import os
import subprocess
import sys

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
