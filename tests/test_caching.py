from __future__ import annotations

import threading

import pytest

from raylake.caching import LruCache
from raylake.table import clear_caches


def test_evicts_least_recently_used() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def test_get_or_compute_computes_once_per_key() -> None:
    cache: LruCache[int, int] = LruCache(8)
    calls: list[int] = []

    def compute(k: int) -> int:
        calls.append(k)
        return k * k

    assert [cache.get_or_compute(k % 3, lambda k=k: compute(k % 3)) for k in range(9)] == [
        0, 1, 4, 0, 1, 4, 0, 1, 4,
    ]  # fmt: skip
    assert calls == [0, 1, 2]
    cache.clear()
    assert len(cache) == 0


def test_threads_share_one_bounded_cache() -> None:
    cache: LruCache[int, int] = LruCache(16)

    def work(offset: int) -> None:
        for i in range(2000):
            cache.put((i + offset) % 64, i)
            cache.get(i % 64)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 16


def test_rejects_a_useless_limit() -> None:
    with pytest.raises(ValueError, match="limit >= 1"):
        LruCache(0)


def test_weighted_limit_bounds_the_sum_of_weights() -> None:
    cache: LruCache[str, bytes] = LruCache(10, weigh=len)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # a is now the most recent
    cache.put("c", b"1234")  # 12 > 10: b goes
    assert cache.get("b") is None and len(cache) == 2
    cache.put("a", b"12345678")  # replacing a counts its new weight only: 12 > 10, c goes
    assert cache.get("c") is None and cache.get("a") == b"12345678"
    cache.put("d", b"12345678901")  # heavier than the limit alone: kept, all else goes
    assert len(cache) == 1 and cache.get("d") is not None


def test_peek_does_not_count_as_a_use() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1 and cache.peek("z") is None
    cache.put("c", 3)  # "a" is still the oldest use: it goes
    assert cache.cached_keys() == ["b", "c"]


def test_weight_and_keys_follow_the_entries() -> None:
    cache: LruCache[str, bytes] = LruCache(10, weigh=len)
    cache.put("a", b"xxxx")
    cache.put("b", b"yyyy")
    assert cache.weight == 8 and cache.cached_keys() == ["a", "b"]
    cache.get("a")
    cache.put("c", b"zzzz")  # over 10: the least recently used, "b", goes
    assert cache.cached_keys() == ["a", "c"] and cache.weight == 8
    cache.discard("a")
    cache.discard("never put")
    assert cache.cached_keys() == ["c"] and cache.weight == 4
    cache.clear()
    assert cache.weight == 0 and cache.cached_keys() == []


# -- the per-process caches and pools of the package ----------------------------------


def _unregistered_caches() -> list[str]:
    """Module-level caches made without process_cache (so clear_caches misses them)."""
    import ast
    from pathlib import Path

    import raylake

    package = Path(raylake.__file__).parent
    found = []
    for path in package.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id in ("LruCache", "DecisionCache", "MappedFiles")
            ):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    return sorted(found)


def test_every_process_cache_is_registered() -> None:
    assert _unregistered_caches() == []


def test_clear_caches_reaches_every_cache(tmp_path: object) -> None:
    from pathlib import Path

    import pyarrow as pa

    import raylake
    from raylake.caching import _process_caches

    pk = raylake.create_table(
        str(Path(str(tmp_path)) / "pk"), pa.schema([("id", pa.int64())]), primary_key=["id"]
    )
    for i in range(3):
        pk.write(pa.table({"id": list(range(i, i + 50))}))
    pk.to_arrow()
    fixtures = Path(__file__).parent / "paimon" / "fixtures"
    raylake.open_table(str(fixtures / "pk_deduplicate" / "table")).to_arrow()
    sizes = [len(getattr(c, "_items", c)) for c in _process_caches]  # type: ignore[arg-type]
    assert sum(sizes) > 0 and len(_process_caches) >= 8
    clear_caches()
    assert [len(getattr(c, "_items", c)) for c in _process_caches] == [0] * len(sizes)  # type: ignore[arg-type]


def _read_in_child(uri: str, queue: object) -> None:
    import raylake

    clear_caches()
    queue.put(raylake.open_table(uri).to_arrow().num_rows)  # type: ignore[attr-defined]


def test_a_forked_child_gets_its_own_pools(tmp_path: object) -> None:
    """The manifest readers' pool of a parent that used it has no threads in a forked
    child: the child makes its own, rather than waiting on threads that are not there."""
    import multiprocessing
    from pathlib import Path

    import pyarrow as pa

    import raylake

    uri = str(Path(str(tmp_path)) / "t")
    tbl = raylake.create_table(uri, pa.schema([("id", pa.int64())]))
    for i in range(40):  # 40 manifests: the parent's pool starts all its 8 threads
        tbl.write(pa.table({"id": [i]}))
    clear_caches()
    assert tbl.to_arrow().num_rows == 40
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(uri, queue))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=1) == 40


def _use_cache_in_child(cache: LruCache[str, int], queue: object) -> None:
    cache.put("b", 2)
    queue.put((cache.get("a"), cache.get("b")))  # type: ignore[attr-defined]


def test_a_forked_child_can_use_a_cache_whose_lock_was_held_at_the_fork() -> None:
    """A thread of the parent may hold a cache's lock at the fork (pyarrow's threads open
    files through the mapped files' cache); the child makes the lock anew instead of
    waiting for a thread that does not exist there."""
    import multiprocessing

    cache: LruCache[str, int] = LruCache(4)
    cache.put("a", 1)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    with cache._lock:  # as if another thread were inside the cache
        child = ctx.Process(target=_use_cache_in_child, args=(cache, queue))
        child.start()
    child.join(120)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=5) == (1, 2)


def _take_lock_in_child(lock: object, queue: object) -> None:
    with lock:  # type: ignore[attr-defined]
        queue.put("taken")  # type: ignore[attr-defined]


def test_a_module_lock_held_at_a_fork_is_made_anew_in_the_child() -> None:
    """The modules' locks (the merge pool's, create-if-absent's, the credentials') are
    ProcessLocks: a child forked while a parent's thread held one takes its own."""
    import multiprocessing

    from raylake.caching import ProcessLock
    from raylake.io import credentials, fileio
    from raylake.table.pk import read

    for lock in (read._pool_lock, fileio._CREATE_LOCK, credentials._lock):
        assert isinstance(lock, ProcessLock)
    lock = ProcessLock()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    with lock:  # as if another thread were inside it
        child = ctx.Process(target=_take_lock_in_child, args=(lock, queue))
        child.start()
    child.join(120)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=5) == "taken"
    with lock:  # the parent's own lock was released as usual
        pass
