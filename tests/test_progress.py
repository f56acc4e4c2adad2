"""Progress bars: shown by the CLI on a terminal, never in pipes, logs or library calls."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.progress import progress_enabled, showing, track

SCHEMA = pa.schema([("id", pa.int64())])


def many_commits(path: Path, n: int) -> raylake.Table:
    tbl = raylake.create_table(str(path), SCHEMA)
    for i in range(n):
        tbl.write(pa.table({"id": [i]}, schema=SCHEMA), mode="overwrite")
    return tbl


def test_library_calls_and_pipes_stay_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert not showing()
    assert list(track(range(3), "x")) == [0, 1, 2]
    with progress_enabled():
        assert not showing()  # stderr is not a terminal under pytest
        assert list(track(range(3), "x")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_cli_without_a_terminal_prints_no_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tbl = many_commits(tmp_path / "t", 6)
    assert main(["expire", tbl.uri, "--retain-last", "1"]) == 0
    err = capsys.readouterr().err
    assert "expire:" not in err and "%|" not in err


def test_cli_on_a_terminal_shows_a_bar(tmp_path: Path) -> None:
    tbl = many_commits(tmp_path / "t", 6)
    master, slave = pty.openpty()
    # A real terminal has a size; tqdm draws nothing on a 0-column one.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    code = f"from raylake.cli import main; main(['expire', {tbl.uri!r}, '--retain-last', '1'])"
    child = subprocess.Popen([sys.executable, "-c", code], stderr=slave, stdout=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    child.wait(timeout=60)
    os.close(master)
    shown = b"".join(chunks).decode(errors="replace")
    assert child.returncode == 0
    assert "expire: data files" in shown and "%|" in shown
