"""pyarrow's default memory pool, made one that a forked process can use.

PyTorch's DataLoader forks its workers (Linux's default start method), from a process
whose threads read with pyarrow. pyarrow 26 allocates from its bundled mimalloc by
default, whose per-thread heaps are set up and torn down under a lock that ``fork`` does
not reset: a worker forked while another thread held it (a read-ahead thread of the last
epoch exiting, or one allocating for the first time) hung at its own first allocation on
a new thread, forever (seen in a test of DataLoader workers, the read-ahead thread of a
worker stuck in ``_mi_theap_init``). jemalloc, pyarrow's default on Linux before, takes
its locks around ``fork`` (``pthread_atfork``), and reads as fast here (docs/decisions.md).

So ``import raylake`` makes jemalloc the default pool where pyarrow's default is mimalloc
and jemalloc is built in, unless the user chose a pool (``ARROW_DEFAULT_MEMORY_POOL``).
Buffers allocated before keep their own pool. That is the pool of calls made from
Python only; pyarrow's C++ internals (a dataset scan) allocate from the C++ default,
chosen from ``ARROW_DEFAULT_MEMORY_POOL`` at pyarrow's import, which ``raylake/__init__.py``
sets to jemalloc on Linux when it is imported first (docs/decisions.md).
"""

from __future__ import annotations

import os

import pyarrow as pa

# pyarrow's own setting: a user who named a pool keeps it.
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def use_fork_safe_pool() -> str:
    """Make jemalloc pyarrow's default pool where the default is mimalloc (module
    docstring); the default pool's backend after it."""
    if os.environ.get(POOL_VARIABLE):
        return pa.default_memory_pool().backend_name
    mimalloc = pa.default_memory_pool().backend_name == "mimalloc"
    if mimalloc and "jemalloc" in pa.supported_memory_backends():
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    return pa.default_memory_pool().backend_name
