"""The ``raylake`` command as a shell runs it: its stdout a pipe (in a child process),
stopped by Ctrl-C."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.table import Table

ROOT = str(Path(raylake.__file__).parent.parent)


def _into_a_closed_pipe(*argv: str, buffered: bool) -> subprocess.CompletedProcess[bytes]:
    """``raylake ARGV | true``, with the reader gone before anything is written."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    try:
        command = [sys.executable, "-m", "raylake", *argv]
        return subprocess.run(command, stdout=write, stderr=subprocess.PIPE, env=env, timeout=60)
    finally:
        os.close(write)


@pytest.mark.slow  # a child process each, about 5 s to import raylake on 2 busy cores
@pytest.mark.parametrize(
    ("command", "buffered"),
    # Buffered, stdout fails as Python flushes it at exit ("Exception ignored ... Broken
    # pipe" and status 120 before); unbuffered, in the command ("error: Broken pipe").
    [("scan", True), ("snapshots", False), ("--help", True)],
)
def test_a_reader_that_leaves_early_gets_no_error_message(
    tmp_path: Path, command: str, buffered: bool
) -> None:
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1, 2]}))
    argv = [command] if command == "--help" else [command, uri]
    done = _into_a_closed_pipe(*argv, buffered=buffered)
    assert done.stderr.decode() == ""  # neither "error: Broken pipe" nor "Exception ignored"
    assert done.returncode == 141  # as a shell reports `yes | head`: 128 + SIGPIPE


def test_ctrl_c_stops_with_status_130_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))

    def interrupted(self: Table, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Table, "scan", interrupted)
    try:
        code = main(["scan", uri])
    except KeyboardInterrupt:  # to the shell, with its traceback
        pytest.fail("KeyboardInterrupt came out of main")
    assert code == 130
    assert capsys.readouterr().err == "raylake: interrupted\n"


@pytest.mark.slow  # a child process, about 5 s to import raylake on 2 busy cores
def test_a_command_started_without_stdout_runs(tmp_path: Path) -> None:
    """`raylake info URI >&-`: Python makes sys.stdout None, and its flush failed."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())]))
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(
        [sys.executable, "-m", "raylake", "info", uri],
        preexec_fn=lambda: os.close(1),
        stderr=subprocess.PIPE,
        env=env,
        timeout=60,
    )
    assert (done.returncode, done.stderr.decode()) == (0, "")


# Sends SIGINT to its own process as the first heavy import starts, in the child's
# startup (sitecustomize runs before the command): Ctrl-C while the command imports,
# deterministically.
_CTRL_C_AT_IMPORT = """
import os, signal, sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "pyarrow"):
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
"""

# What pip writes for the console script raylake = "raylake.cli:main".
_CONSOLE_SCRIPT = """import sys
from raylake.cli import main
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(main())
"""


# Runs the command with SIGINT at its default, as a terminal's foreground command has
# it: a shell starts a background job (`make test-lowest &` in .ci/run) with SIGINT
# ignored, which its children inherit, and an ignored Ctrl-C stops nothing.
_WITH_DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def _interrupted_at_import(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(_CTRL_C_AT_IMPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "hook"), ROOT])}
    argv = [sys.executable, "-S", "-c", _WITH_DEFAULT_SIGINT, *command]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("how", ["module", "console script"])
def test_ctrl_c_while_the_command_imports_stops_with_status_130_and_no_traceback(
    tmp_path: Path, how: str
) -> None:
    """main() catches KeyboardInterrupt only once it runs; before, while the command's
    imports took a second or two, Ctrl-C printed KeyboardInterrupt's traceback."""
    script = tmp_path / "raylake"
    script.write_text(_CONSOLE_SCRIPT)
    argv = ["-m", "raylake"] if how == "module" else [str(script)]
    done = _interrupted_at_import(tmp_path, *argv, "info", str(tmp_path / "t"))
    assert (done.returncode, done.stderr) == (130, "raylake: interrupted\n")


def test_ctrl_c_while_a_program_imports_raylake_is_its_own(tmp_path: Path) -> None:
    """Only the command stops so: a program importing raylake gets its KeyboardInterrupt."""
    done = _interrupted_at_import(tmp_path, "-c", "import raylake")
    assert "KeyboardInterrupt" in done.stderr and "raylake: interrupted" not in done.stderr
