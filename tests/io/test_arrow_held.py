"""The objects pyarrow holds of an fsspec store's reads, and the exit that waits for them
(raylake/io/arrow_held.py)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from raylake.io import FileIO
from raylake.io.arrow_held import objects_held


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )


def test_a_read_through_fsspec_is_counted_until_pyarrow_lets_go_of_it() -> None:
    file_io = FileIO(f"memory://held-{uuid.uuid4().hex}")
    with file_io.fs.open(file_io.full_path("f.parquet"), "wb") as out:
        pq.write_table(pa.table({"id": range(100)}), out)
    before = objects_held()
    source = file_io.arrow_filesystem().open_input_file(file_io.full_path("f.parquet"))
    data = source.read_buffer(4)  # pyarrow keeps the bytes read as a buffer of its own
    assert bytes(data) == b"PAR1"
    assert objects_held() == before + 2  # the file and the bytes
    del data
    assert objects_held() == before + 1
    source.close()
    del source
    assert objects_held() == before


def test_the_exit_waits_for_an_object_let_go_after_it_began() -> None:
    # A thread lets go of a counted object only once the exit has begun (an atexit hook
    # registered after raylake's runs first): the exit waits for it. Without the wait
    # the interpreter finalizes meanwhile and the thread never gets the GIL back, which
    # for one of pyarrow's threads aborts the process.
    script = (
        "import atexit, sys, threading, time\n"
        "from raylake.io.arrow_held import held_by_arrow\n"
        "class Held: pass\n"
        "box = [held_by_arrow(Held())]\n"
        "exiting = threading.Event()\n"
        "def let_go():\n"
        "    exiting.wait()\n"
        "    time.sleep(0.2)\n"
        "    box.clear()\n"
        "    sys.stdout.write('let go\\n'); sys.stdout.flush()\n"
        "threading.Thread(target=let_go, daemon=True).start()\n"
        "atexit.register(exiting.set)\n"
    )
    done = _run(script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "let go\n"


def test_an_object_python_code_holds_at_the_exit_is_let_go_by_the_interpreter() -> None:
    # A file held by a global is let go by the interpreter itself, on its own thread.
    script = (
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "from raylake.io import FileIO\n"
        "f = FileIO('memory://held-exit')\n"
        "with f.fs.open(f.full_path('f.parquet'), 'wb') as out:\n"
        "    pq.write_table(pa.table({'id': range(10)}), out)\n"
        "kept = f.arrow_filesystem().open_input_file(f.full_path('f.parquet'))\n"
        "print(bytes(kept.read_buffer(4)).decode())\n"
    )
    done = _run(script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "PAR1\n"
