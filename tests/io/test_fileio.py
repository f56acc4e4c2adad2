"""FileIO over real filesystems: local paths, file:// URLs and fsspec's memory://."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import raylake
from raylake.errors import (
    InvalidArgumentError,
    InvalidOptionError,
    StorageRetriesExhaustedError,
)
from raylake.io import FileIO
from raylake.io.atomic_create import release_at_least, version_release
from raylake.io.mapped import MappedLocalFiles


@pytest.fixture(params=["local", "file", "memory"])
def file_io(request: pytest.FixtureRequest, tmp_path: Path) -> FileIO:
    if request.param == "local":
        return FileIO(str(tmp_path / "root"))
    if request.param == "file":
        return FileIO(f"file://{tmp_path}/root")
    return FileIO(f"memory://{uuid.uuid4().hex}/root")


def test_write_read_exists_delete(file_io: FileIO) -> None:
    assert not file_io.exists("a/b.txt")
    file_io.write_bytes("a/b.txt", b"one")
    assert file_io.exists("a/b.txt")
    assert file_io.read_bytes("a/b.txt") == b"one"
    file_io.write_bytes("a/b.txt", b"two")  # replaces
    assert file_io.read_bytes("a/b.txt") == b"two"
    file_io.delete("a/b.txt")
    assert not file_io.exists("a/b.txt")
    file_io.delete("a/b.txt")  # deleting a missing file is not an error
    with pytest.raises(FileNotFoundError):
        file_io.read_bytes("a/b.txt")


def test_listing(file_io: FileIO) -> None:
    assert file_io.list_names("nothing") == []
    assert file_io.list_files("nothing") == []
    for rel in ("d/x.json", "d/y.json", "d/sub/z.parquet"):
        file_io.write_bytes(rel, b"1")
    assert file_io.list_names("d") == ["sub", "x.json", "y.json"]
    found = file_io.list_files("d")
    assert [rel for rel, _ in found] == ["d/sub/z.parquet", "d/x.json", "d/y.json"]


def test_local_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    file_io = FileIO(str(tmp_path))
    file_io.write_bytes("snapshot/LATEST", b"1")
    assert file_io.create_if_absent("snapshot/snapshot-1.json", b"{}")
    assert not file_io.create_if_absent("snapshot/snapshot-1.json", b"[]")
    assert sorted(p.name for p in (tmp_path / "snapshot").iterdir()) == [
        "LATEST",
        "snapshot-1.json",
    ]


def test_create_if_absent_keeps_the_first_file(file_io: FileIO) -> None:
    assert file_io.create_if_absent("s/snapshot-1.json", b"first")
    assert not file_io.create_if_absent("s/snapshot-1.json", b"second")
    assert file_io.read_bytes("s/snapshot-1.json") == b"first"


def test_create_if_absent_has_one_winner_among_threads(file_io: FileIO) -> None:
    # Switch threads as often as possible, so that a check-then-write race shows up.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _race_for_files(file_io)
    finally:
        sys.setswitchinterval(previous)


def _race_for_files(file_io: FileIO) -> None:
    for attempt in range(30):
        rel = f"s/snapshot-{attempt}.json"
        winners = _race(8, lambda i, rel=rel: file_io.create_if_absent(rel, str(i).encode() * 500))
        assert len(winners) == 1
        assert file_io.read_bytes(rel) == str(winners[0]).encode() * 500


def _race(n: int, fn: Callable[[int], bool]) -> list[int]:
    barrier = threading.Barrier(n)
    winners: list[int] = []
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            if fn(i):
                winners.append(i)
        except BaseException as exc:  # surfaced below; a thread must not swallow it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return winners


def test_fresh_file_io_is_safe_to_share_between_threads() -> None:
    """The lazily built filesystem must be complete before another thread can see it."""
    for _ in range(50):
        file_io = FileIO(f"memory://{uuid.uuid4().hex}")
        assert len(_race(4, lambda i, f=file_io: f.exists(f"x{i}") or True)) == 4


_CHILD_CREATE = """
import sys
from raylake.io import FileIO
created = FileIO(sys.argv[1]).create_if_absent("s/snapshot-1.json", sys.argv[2].encode())
print("won" if created else "lost")
"""


def test_create_if_absent_has_one_winner_among_processes(tmp_path: Path) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD_CREATE, str(tmp_path), str(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    outputs = [c.communicate(timeout=60)[0].strip() for c in children]
    assert sorted(outputs) == ["lost", "lost", "lost", "won"]
    winner = outputs.index("won")
    assert FileIO(str(tmp_path)).read_bytes("s/snapshot-1.json") == str(winner).encode()


def test_memory_tables_are_per_process() -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    FileIO(uri).write_bytes("x", b"1")
    code = f"from raylake.io import FileIO; print(FileIO({uri!r}).exists('x'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pickles_without_filesystem_objects(file_io: FileIO) -> None:
    file_io.write_bytes("k", b"v")
    data = pickle.dumps(file_io)
    assert len(data) < 300
    clone = pickle.loads(data)
    assert clone.uri == file_io.uri
    assert clone._fs is None  # rebuilt lazily on the other side
    assert clone.read_bytes("k") == b"v"


def test_relative_path_is_fixed_where_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray tasks and Spark executors run elsewhere: "warehouse/t" means the driver's."""
    (tmp_path / "driver").mkdir()
    (tmp_path / "worker").mkdir()
    monkeypatch.chdir(tmp_path / "driver")
    file_io = FileIO("warehouse/t")
    file_io.write_bytes("k", b"v")
    assert file_io.uri == f"{tmp_path}/driver/warehouse/t"
    monkeypatch.chdir(tmp_path / "worker")
    assert pickle.loads(pickle.dumps(file_io)).read_bytes("k") == b"v"


@pytest.mark.parametrize("scheme", ["file://", "local://"])
def test_a_relative_path_in_a_local_url_is_fixed_where_it_is_given(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsspec reads ``file://warehouse/t`` as the relative path ``warehouse/t``: a worker
    in another directory must still find the driver's table."""
    (tmp_path / "driver").mkdir()
    (tmp_path / "worker").mkdir()
    monkeypatch.chdir(tmp_path / "driver")
    tbl = raylake.create_table(f"{scheme}warehouse/t", pa.schema([("a", pa.int64())]))
    tbl.write(pa.table({"a": [1]}))
    assert tbl.uri == f"{scheme}{tmp_path}/driver/warehouse/t"
    monkeypatch.chdir(tmp_path / "worker")
    assert pickle.loads(pickle.dumps(tbl)).count() == 1
    assert not (tmp_path / "worker" / "warehouse").exists()


@pytest.mark.parametrize("uri", ["foo://bucket/t", "S3://bucket/t"])
def test_a_url_of_an_unknown_filesystem_is_named(uri: str) -> None:
    for call in (
        lambda: raylake.open_table(uri),
        lambda: raylake.create_table(uri, pa.schema([("a", pa.int64())])),
    ):
        with pytest.raises(InvalidArgumentError, match=f"uri must be .* got str '{uri}'"):
            call()


def test_a_path_from_home_is_in_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``~`` is the home directory, as pandas and fsspec read it (not a directory named
    ``~`` in the working directory)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    tbl = raylake.create_table("~/tables/t", pa.schema([("a", pa.int64())]))
    tbl.write(pa.table({"a": [1]}))
    assert tbl.uri == f"{tmp_path}/home/tables/t"
    assert not (tmp_path / "~").exists()
    assert raylake.open_table("~/tables/t").count() == 1


def test_paths_and_arrow_filesystem(tmp_path: Path) -> None:
    local = FileIO(f"{tmp_path}/t/")
    assert local.uri == f"{tmp_path}/t"
    assert local.full_path("data/x.parquet") == f"{tmp_path}/t/data/x.parquet"
    assert local.full_path("") == local.root
    assert local.is_local
    # Local data files are read over memory maps kept between reads (raylake/io/mapped.py).
    assert isinstance(local.arrow_filesystem(), pafs.PyFileSystem)
    assert isinstance(local.arrow_filesystem().handler, MappedLocalFiles)
    url = FileIO(f"file://{tmp_path}/t")
    assert url.is_local and url.root == f"{tmp_path}/t"
    memory = FileIO("memory://bucket/t")
    assert not memory.is_local
    assert memory.root == "/bucket/t"
    assert isinstance(memory.arrow_filesystem(), pafs.PyFileSystem)


def test_delete_quietly_ignores_missing_files(file_io: FileIO) -> None:
    file_io.write_bytes("a", b"1")
    file_io.delete_quietly(["a", "never-written"])
    assert not file_io.exists("a")


class _FlakyMemoryFileSystem(MemoryFileSystem):
    """A memory filesystem whose reads fail transiently a given number of times."""

    protocol = "flakymem"
    failures = 0
    calls = 0

    def cat_file(self, path: str, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        if type(self).failures > 0:
            type(self).failures -= 1
            raise ConnectionError("transient")
        return super().cat_file(path, *args, **kwargs)


class _NoExclusiveCreateFileSystem(MemoryFileSystem):
    """A filesystem without an exclusive-create mode, like some object stores."""

    protocol = "noexcl"

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "x" in mode:
            raise NotImplementedError("no exclusive create")
        return super()._open(path, mode, *args, **kwargs)


@pytest.fixture
def flaky() -> type[_FlakyMemoryFileSystem]:
    fsspec.register_implementation("flakymem", _FlakyMemoryFileSystem, clobber=True)
    _FlakyMemoryFileSystem.failures = _FlakyMemoryFileSystem.calls = 0
    return _FlakyMemoryFileSystem


def test_transient_read_errors_are_retried(flaky: type[_FlakyMemoryFileSystem]) -> None:
    file_io = FileIO(f"flakymem://{uuid.uuid4().hex}")
    file_io.write_bytes("x", b"payload")
    flaky.failures = 2
    assert file_io.read_bytes("x") == b"payload"
    assert flaky.calls == 3


def test_persistent_read_errors_surface(flaky: type[_FlakyMemoryFileSystem]) -> None:
    file_io = FileIO(f"flakymem://{uuid.uuid4().hex}")
    file_io.write_bytes("x", b"payload")
    flaky.failures = 10
    with pytest.raises(StorageRetriesExhaustedError) as caught:
        file_io.read_bytes("x")
    # After the bound, the error names the operation, the object and the number of tries.
    assert (caught.value.operation, caught.value.attempts) == ("read", 5)
    assert caught.value.path.endswith("/x") and "after 5 tries" in str(caught.value)
    assert isinstance(caught.value.__cause__, ConnectionError)
    assert flaky.calls == 5


def test_retry_bound_is_an_option(flaky: type[_FlakyMemoryFileSystem]) -> None:
    retry = {"max_attempts": 2, "backoff_s": 0.0}
    file_io = FileIO(f"flakymem://{uuid.uuid4().hex}", {"raylake_retry": retry})
    file_io.write_bytes("x", b"payload")
    flaky.failures = 10
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries"):
        file_io.read_bytes("x")
    assert flaky.calls == 2
    with pytest.raises(InvalidOptionError, match="max_attempts"):
        FileIO("memory://x", {"raylake_retry": {"max_attempts": 0}})


@pytest.mark.parametrize(
    "retry",
    [
        {"max_attempts": True},
        {"max_attempts": 2.0},
        {"backoff_s": True},
        {"backoff_s": float("nan")},
        {"max_backoff_s": float("nan")},
        {"max_backoff_s": float("inf")},
    ],
)
def test_a_retry_setting_of_the_wrong_kind_is_refused(retry: dict[str, Any]) -> None:
    # True was taken for one try; a NaN wait failed the first retry with time.sleep's
    # bare ValueError, an infinite one slept forever.
    name = next(iter(retry))
    with pytest.raises(InvalidOptionError, match=f"raylake_retry.{name}="):
        FileIO("memory://x", {"raylake_retry": retry})


def test_missing_file_is_not_retried(flaky: type[_FlakyMemoryFileSystem]) -> None:
    file_io = FileIO(f"flakymem://{uuid.uuid4().hex}")
    with pytest.raises(FileNotFoundError):
        file_io.read_bytes("missing")
    assert flaky.calls == 1


def test_create_if_absent_falls_back_without_exclusive_create() -> None:
    fsspec.register_implementation("noexcl", _NoExclusiveCreateFileSystem, clobber=True)
    file_io = FileIO(f"noexcl://{uuid.uuid4().hex}")
    assert not file_io.atomic_create
    assert file_io.create_if_absent("s/1", b"a")
    assert not file_io.create_if_absent("s/1", b"b")
    assert file_io.read_bytes("s/1") == b"a"
    winners = _race(6, lambda i: file_io.create_if_absent("s/2", b"x"))
    assert len(winners) == 1


def test_a_store_without_atomic_create_refuses_commits_unless_single_writer() -> None:
    import pyarrow as pa

    from raylake import UnsafeCommitError, create_table

    fsspec.register_implementation("noexcl", _NoExclusiveCreateFileSystem, clobber=True)
    schema = pa.schema([("a", pa.int64())])
    uri = f"noexcl://{uuid.uuid4().hex}/t"
    with pytest.raises(UnsafeCommitError, match=r"commit\.single-writer") as info:
        create_table(uri, schema)
    assert info.value.uri == uri
    assert not FileIO(uri).exists("schema")  # refused before writing anything
    tbl = create_table(uri, schema, options={"commit.single-writer": "true"})
    tbl.write(pa.table({"a": [1, 2]}))
    assert tbl.to_arrow()["a"].to_pylist() == [1, 2]


@pytest.mark.parametrize(
    ("uri", "atomic"),
    [("/tmp/x", True), ("file:///tmp/x", True), ("memory://x", True)],
)
def test_atomic_create_stores(uri: str, atomic: bool) -> None:
    assert FileIO(uri).atomic_create is atomic


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("2025.7.0", (2025, 7, 0)),
        ("2025.10.0.post1", (2025, 10, 0)),
        ("2.13.0+cpu", (2, 13, 0)),
        ("1.0rc1", (1, 0)),
        ("dev", ()),
    ],
)
def test_version_release_keeps_the_leading_numbers(version: str, release: tuple[int, ...]) -> None:
    assert version_release(version) == release


def test_a_release_check_of_a_package_not_installed_is_false() -> None:
    assert not release_at_least("no-such-package-raylake-test", (0,))
    assert release_at_least("fsspec", (2024, 6))
