"""Windows made in another process (docs/training.md, "Windows made in another process").

In-process, the loader's threads read, convert and pack windows in the trainer's own
interpreter, and every bit of Python they run holds the interpreter's lock that the
trainer's loop needs between its steps: on a GPU host a step that launches kernels and
waits for them took several times longer beside the loader's threads, and as long as
alone beside a loader in another process (docs/benchmarks.md, "Feeding a GPU").

With ``window_process=True`` a child process (spawned once per dataset, kept across
passes) does everything up to the packed window: it reads, converts and packs each
window into a slot of shared memory, exactly as the in-process converter packs into a
pinned slot (raylake/train/windows.py, ``Stager``). This process maps each slot once,
registers it as pinned memory with CUDA, and per window does one host-to-device copy
on the side stream and cuts batches: a few calls per window on the trainer's thread,
and no loader thread here at all.

The protocol, over one pipe (messages are small tuples; the bytes go through the slots):

- here -> child: ``("pass", start, consumer)``, ``("ack", token)`` when the copy out of
  a slot is done (the child writes that slot again only after it), ``("stop",)`` to end
  a pass early, ``("exit",)``;
- child -> here: ``("slot", id, path, nbytes)`` (a new slot: here maps the file, then
  removes its name, so nothing is left behind), ``("free", id)``, ``("window", id, end,
  unpack, rows, row_bytes, held, token, counters)``, then ``("done", counters, (seconds,
  seconds waiting for a slot, made ahead))`` or ``("error", exception, its traceback)``.

Before it blocks waiting for a message, this process waits for its copies still in
flight and acknowledges them, so the child, which may be waiting for a slot, is never
waiting for this process while this process waits for it.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import os
import pickle
import tempfile
import weakref
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from raylake.errors import LoaderProcessError
from raylake.train.device import Backend
from raylake.train.stats import FeedRecorder
from raylake.train.windows import Unpack, Window

if TYPE_CHECKING:
    from raylake.train.loader import ShardedLoader
    from raylake.train.positions import Position, Progress
    from raylake.train.tensors import TensorBatches

Counters = tuple[int, int, int, int, float, int]  # what the child's recorder counted

# How much lower the child's threads are scheduled than the trainer's (a nice value, as
# for a background job): where the child's reads and the trainer's thread want more
# cores than the host has, the trainer's thread, whose launches the GPU waits for, runs
# first. Read when a child is spawned.
CHILD_NICENESS = 10


def counters_of(recorder: FeedRecorder) -> Counters:
    r = recorder
    return (r.windows, r.packed_bytes, r.pinned_peak, r.takes, r.in_flight, r.ready)


def absorb(recorder: FeedRecorder, counters: Counters) -> None:
    """The child's counts of the pass into this process's recorder (``stats()``)."""
    r = recorder
    r.windows, r.packed_bytes, r.pinned_peak, r.takes, r.in_flight, r.ready = counters


class MappedSlot:
    """A slot of the child's, mapped here (and pinned, on the way to a CUDA device)."""

    def __init__(self, path: str, nbytes: int, register: bool) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
            os.unlink(path)  # the mapping stays; no name is left behind
        self.tensor = torch.frombuffer(self._map, dtype=torch.uint8)
        self._registered = False
        if register:
            code = torch.cuda.cudart().cudaHostRegister(self.tensor.data_ptr(), nbytes, 0)
            if int(code) != 0:
                raise LoaderProcessError(
                    f"CUDA could not pin a window slot of {nbytes} bytes shared with the "
                    f"window process (cudaHostRegister returned {int(code)})"
                )
            self._registered = True

    def close(self) -> None:
        if self._registered:
            torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())
            self._registered = False
        del self.tensor
        with contextlib.suppress(BufferError):  # a view still exists: it goes with that
            self._map.close()


class WindowProcess:
    """The child that makes one dataset's windows, started at its first pass."""

    def __init__(self, loader: ShardedLoader, output: TensorBatches) -> None:
        self._loader = loader
        self._output = output
        self._conn: Any = None
        self._process: Any = None
        self._active: WindowsFromProcess | None = None
        self._finalizer: Any = None
        # The pieces the child was started with: it reads its own copy of the loader,
        # so a loader that took other pieces since (a position saved in an older plan
        # order) needs a new child.
        self._source: Any = None
        self.slots: dict[int, MappedSlot] = {}  # the child's slots, mapped here
        # The child's last pass: its seconds, those it waited for a free slot, and
        # whether it was made ahead (the guess of the pass asked for next).
        self.last_pass: tuple[float, float, bool] = (0.0, 0.0, False)

    def __getstate__(self) -> dict[str, Any]:
        # A pickled dataset (DataLoader workers) gets a handle of its own, not started.
        return {**self.__dict__, "_conn": None, "_process": None, "_active": None,
                "_finalizer": None, "_source": None, "slots": {}}  # fmt: skip

    def windows(self, start: Position, here: Progress, feed: Any, rows: int) -> Iterator[Window]:
        """The pass's windows (``rows`` in all), copied to ``feed``'s device here (or to
        the host)."""
        if self._active is not None:  # one pass at a time: an older iterator ends here
            self._active.superseded = True
            self._active.close()
        conn = self._connection()
        try:
            conn.send(("pass", start, here))
        except OSError:  # the child ended between passes: a new one
            self.shutdown()
            conn = self._connection()
            conn.send(("pass", start, here))
        made = WindowsFromProcess(self, conn, feed.backend, feed.recorder, rows)
        self._active = made
        return made

    def _connection(self) -> Any:
        if self._process is not None and (
            not self._process.is_alive() or self._source is not self._loader.source
        ):
            self.shutdown()
        if self._conn is None:
            spawn = multiprocessing.get_context("spawn")  # never fork a CUDA process
            ours, theirs = spawn.Pipe()
            maker = self._output.maker_args()
            process = spawn.Process(
                target=serve, args=(theirs, self._loader, maker, CHILD_NICENESS),
                name="raylake-windows",
                daemon=True,
            )  # fmt: skip
            process.start()
            theirs.close()
            self._source = self._loader.source
            self._conn, self._process = ours, process
            self._finalizer = weakref.finalize(
                self, _stop_child, ours, process, self.slots, os.getpid()
            )
        return self._conn

    def shutdown(self) -> None:
        """Stop the child (the dataset's next pass starts a new one)."""
        if self._active is not None:
            self._active.close()
        if self._finalizer is not None:
            self._finalizer()  # also lets the slots go, once the child has ended
        self._conn = self._process = self._finalizer = None

    def died(self) -> LoaderProcessError:
        process = self._process
        if process is not None:
            process.join(timeout=10)  # its pipe closed as it ended: reap it for its code
        code = None if process is None else process.exitcode
        self.shutdown()
        return LoaderProcessError(
            f"the process making this dataset's windows (window_process=True) ended "
            f"(exit code {code}); a signal's exit code is negative (-9: killed, for "
            "instance for lack of memory; -7: bus error, shared memory in /dev/shm full). "
            "It is spawned: a script that makes and iterates the dataset at import time "
            "needs its work under `if __name__ == '__main__':`"
        )


def _stop_child(conn: Any, process: Any, slots: dict[int, MappedSlot], parent: int) -> None:
    if os.getpid() != parent:  # a forked copy of the parent (a DataLoader worker, say)
        return  # whose copy of the dataset ends: the child is not its to stop
    with contextlib.suppress(OSError, ValueError):
        conn.send(("exit",))
    process.join(timeout=10)
    if process.is_alive():
        process.kill()
        process.join()
    conn.close()
    for slot in slots.values():
        slot.close()
    slots.clear()


class WindowsFromProcess(Iterator[Window]):
    """One pass's windows from the child, on the trainer's thread (module docstring).

    The copy of the next window is queued as soon as its message is here, so it
    overlaps the trainer's work on the window before it."""

    def __init__(
        self,
        owner: WindowProcess,
        conn: Any,
        backend: Backend | None,
        recorder: FeedRecorder,
        rows: int,
    ) -> None:
        self._owner = owner
        self._rows_left = rows  # a pass whose rows all came here ended by itself
        self.superseded = False  # ended by a newer pass of the same dataset
        self._conn = conn
        self._backend = backend
        self._register = backend is not None and backend.device.type == "cuda"
        self._recorder = recorder
        self._copies: deque[tuple[int, Any]] = deque()  # (token, marker) not yet acked
        self._ready: deque[Window] = deque()
        self._ended = False
        self._dead = False  # the child is gone: nothing more is sent to it

    def __next__(self) -> Window:
        self._ack(wait=False)  # the slots of copies done: the child may run ahead into them
        if self._ready:
            window = self._ready.popleft()
        else:
            while not self._ready:
                if self.superseded:
                    raise LoaderProcessError(
                        "this iterator's pass was ended by a newer iterator of the same "
                        "dataset: with window_process=True a dataset makes one pass at a "
                        "time (finish or close one iterator before starting the next)"
                    )
                if self._ended:
                    raise StopIteration
                self._handle(self._receive(block=True))
            window = self._ready.popleft()
        while not self._ready and not self._ended and self._conn.poll():
            self._handle(self._receive(block=False))  # the next window's copy, queued now
        return window

    def _receive(self, block: bool) -> Any:
        self._ack(wait=block)
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            raise self._died() from None

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._conn.send(message)
        except OSError:  # the child is gone (a broken pipe)
            raise self._died() from None

    def _died(self) -> LoaderProcessError:
        self._ended = self._dead = True
        return self._owner.died()

    def _ack(self, wait: bool) -> None:
        """Tell the child which slots it may write again."""
        backend = self._backend
        while self._copies and not self._dead:
            token, marker = self._copies[0]
            if backend is not None and marker is not None:
                if wait:
                    backend.wait_host(marker)
                elif not backend.finished(marker):
                    return
            self._copies.popleft()
            self._send(("ack", token))

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "window":
            self._window(*message[1:])
        elif kind == "slot":
            _, slot_id, path, nbytes = message
            self._owner.slots[slot_id] = MappedSlot(path, nbytes, self._register)
        elif kind == "free":
            slot = self._owner.slots.pop(message[1], None)
            if slot is not None:
                slot.close()
        elif kind == "done":
            absorb(self._recorder, message[1])
            self._owner.last_pass = message[2]
            self._finish()
        elif kind == "error":
            self._finish()
            where = LoaderProcessError(f"raised in the window process:\n{message[2]}")
            raise message[1] from where

    def _window(
        self, slot_id: int, end: int, unpack: Unpack, rows: int, row_bytes: int, held: int,
        token: int, counters: Counters,
    ) -> None:  # fmt: skip
        host = self._owner.slots[slot_id].tensor[:end]
        backend = self._backend
        try:
            if backend is None:  # host batches: the window's own memory, the slot is reused
                tensors, marker, held = unpack(host.clone()), None, 0
            else:
                tensors, marker = backend.copy(host, unpack)
                self._recorder.copied()
                self._recorder.hold_device(held)
        except BaseException:
            # The slot is still the child's to write again: unacknowledged, it would wait
            # for it forever, and close() for the child (was: a hang after the error).
            self._copies.append((token, None))
            self._rows_left -= rows
            raise
        self._copies.append((token, marker))
        self._rows_left -= rows
        absorb(self._recorder, counters)
        self._ready.append(Window(tensors, rows, row_bytes, held, marker))

    def _finish(self) -> None:
        self._ended = True
        self._ack(wait=True)
        if self._owner._active is self:
            self._owner._active = None

    def close(self) -> None:
        """End the pass: stop the child's and wait for it to say so."""
        if self._ended:
            return
        try:
            if self._rows_left > 0:  # stopped early; otherwise only its "done" is to come
                self._send(("stop",))
            while not self._ended:
                message = self._receive(block=True)
                if message[0] == "window":  # made before the stop: not copied
                    self._copies.append((message[7], None))
                elif message[0] != "error":
                    self._handle(message)
                else:
                    self._finish()
        except LoaderProcessError:
            pass
        finally:
            self._ready.clear()
            self._finish()


def serve(conn: Any, loader: ShardedLoader, maker: TensorBatches, niceness: int = 0) -> None:
    """The child: make the windows of each pass asked for (module docstring), at
    ``niceness`` below the trainer's priority."""
    from raylake.train.window_child import serve_passes

    lower_priority(niceness)
    serve_passes(conn, loader, maker)


def lower_priority(by: int) -> None:
    """Lower every thread of this process by ``by`` nice steps. On Linux a nice value
    belongs to a thread, and threads started later take their starter's: the threads
    the imports started are lowered too, and pyarrow's pool, started later, inherits."""
    if by <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        threads = [int(task) for task in os.listdir("/proc/self/task")]
    except OSError:  # not Linux: the call below is the whole process's
        threads = [0]
    for thread in threads:
        with contextlib.suppress(OSError):  # (a thread that ended since the listing)
            now = os.getpriority(os.PRIO_PROCESS, thread)
            os.setpriority(os.PRIO_PROCESS, thread, min(now + by, 19))


def picklable(error: BaseException) -> BaseException:
    """``error``, or a LoaderProcessError naming it where it does not pickle."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return LoaderProcessError(f"the window process failed: {error!r}")
    return error


def shared_dir() -> str:
    """Where slots are made: memory-backed /dev/shm where there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else (
        tempfile.gettempdir()
    )  # fmt: skip
