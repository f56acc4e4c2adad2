"""tests/run_suite.py, which `make test` runs: two pytest sessions that between them run
every test once, and a run that is only as green as both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import run_suite

HERE = Path(__file__).resolve().parent
# tests/test_docs.py imports without Ray or Spark (the fast legs have neither), and its
# blocks are marked by the words on the page: those marked ray or spark go to the
# cluster session, this other test of the module to the other session.
PATHS = [str(HERE / "test_docs.py")]
BLOCKS = "test_block_runs"
LOCAL = "test_blocks_are_read_with_their_comments"


def test_each_session_collects_its_own_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    status = run_suite.main(["--collect-only", "-q", "-k", f"{BLOCKS} or {LOCAL}"], PATHS)
    out = capfd.readouterr().out
    assert status == 0
    log = (tmp_path / run_suite.LOG).read_text()
    assert BLOCKS in log and LOCAL not in log  # the cluster session
    assert LOCAL in out.split("=== the tests that need Ray or Spark")[0]  # the other one


def test_a_session_that_collects_nothing_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    status = run_suite.main(["--collect-only", "-q", "-k", LOCAL], PATHS)
    assert status == 1
    assert "pytest ran no tests (Ray and Spark)" in capfd.readouterr().err


PROBE = """
import os
from pathlib import Path

import pytest


@pytest.mark.ray
def test_on_the_cluster(tmp_path):
    Path(os.environ["PROBE_OUT"], "cluster").write_text(str(tmp_path))


def test_elsewhere(tmp_path):
    Path(os.environ["PROBE_OUT"], "rest").write_text(str(tmp_path))
"""


def test_each_session_keeps_its_temporary_directories_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two sessions under one temporary root both remove its old numbered directories
    # as they end, and the one that comes second to a directory fails the run.
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROBE_OUT", str(out))
    status = run_suite.main(["-q", "-p", "no:cacheprovider"], [str(tmp_path / "test_probe.py")])
    assert status == 0
    for session in ("cluster", "rest"):
        used = Path((out / session).read_text()).resolve()
        assert run_suite.temp_root(session).resolve() in used.parents
    assert run_suite.temp_root("cluster") != run_suite.temp_root("rest")


@dataclass
class _Item:
    nodeid: str
    fixturenames: tuple[str, ...]
    marks: tuple[str, ...] = ()

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.marks else None


def test_a_test_on_the_cluster_without_a_mark_is_named() -> None:
    items = [
        _Item("a", ("ray_cluster", "tmp_path")),  # would start a second cluster
        _Item("b", ("ray_cluster",), ("spark",)),
        _Item("c", ("tmp_path",)),
        _Item("d", ("ray_cluster",), ("multinode", "slow")),
    ]
    assert run_suite.unmarked_on_cluster(items) == ["a"]
