"""The child side of ``window_process=True`` (raylake/train/window_process.py): the
loader's own pipeline, packing each window into slots of shared memory that the
trainer's process copies from."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from raylake.errors import LoaderProcessError
from raylake.train.device import Backend, Finish, Tensors
from raylake.train.loader import ShardedLoader
from raylake.train.passes import close
from raylake.train.positions import Position, Progress
from raylake.train.sharding import normalize
from raylake.train.tensors import TensorBatches
from raylake.train.window_process import counters_of, picklable, shared_dir
from raylake.train.windows import TorchFeed

# Slots in the child's ring: the trainer's process acknowledges a slot only when it
# takes a window, so a deeper ring than in-process keeps the child running ahead.
PROCESS_RING = 6


class PassStopped(Exception):
    """The trainer's process ended the pass early."""


class SharedSlots(Backend):
    """Slots of shared memory instead of pinned ones; a "copy" is a message saying which
    window lies where, and the host waits for the other process's acknowledgement."""

    def __init__(self, conn: Any, receive: Callable[[], None]) -> None:
        self.device = torch.device("cpu")
        self.conn = conn
        self.receive = receive  # the next message, handled (while waiting for an ack)
        self._serial = 0
        self._maps: dict[int, tuple[int, mmap.mmap, str]] = {}  # data_ptr -> id, map, path
        self._acked: set[int] = set()
        self._tokens = 0
        self.last: tuple[int, int, Finish, int] | None = None  # slot, end, unpack, token
        self._pool: list[torch.Tensor] = []  # slots no pass uses now
        self.held_up = 0.0  # seconds this pass waited for a slot (the trainer is behind)

    def pinned(self, nbytes: int) -> torch.Tensor:
        # A slot the last pass let go, when one is large enough: both processes keep
        # their mappings (and CUDA its registration) across passes.
        fits = [slot for slot in self._pool if slot.numel() >= nbytes]
        if fits:
            slot = min(fits, key=lambda t: t.numel())
            self._unpool(slot)
            return slot
        if self._pool:  # too small for what this pass asks: make room for a larger one
            self._discard(min(self._pool, key=lambda t: t.numel()))
        self._serial += 1
        path = os.path.join(shared_dir(), f"raylake-window-{os.getpid()}-{self._serial}")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, nbytes)
            if hasattr(os, "posix_fallocate"):  # Linux: reserve the memory now, so that a
                # full /dev/shm is an error here, not a bus error when the slot is written
                os.posix_fallocate(fd, 0, nbytes)
            mapped = mmap.mmap(fd, nbytes)
        except OSError as error:
            os.unlink(path)
            if error.errno not in (errno.ENOSPC, errno.ENOMEM):
                raise
            raise LoaderProcessError(no_room(nbytes, self.held_bytes(), error)) from error
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        slot = torch.frombuffer(mapped, dtype=torch.uint8)
        self._maps[slot.data_ptr()] = (self._serial, mapped, path)
        self.conn.send(("slot", self._serial, path, nbytes))
        return slot

    def held_bytes(self) -> int:
        """Bytes of the slots this process has made and not dropped."""
        return sum(mapped.size() for _, mapped, _ in self._maps.values())

    def copy(self, host: torch.Tensor, finish: Finish) -> tuple[Tensors, Any]:
        self._tokens += 1
        slot_id = self._maps[host.data_ptr()][0]
        self.last = (slot_id, host.numel(), finish, self._tokens)
        return {}, self._tokens

    def wait_host(self, marker: Any) -> None:
        if marker not in self._acked:
            start = time.perf_counter()
            while marker not in self._acked:
                self.receive()
            self.held_up += time.perf_counter() - start
        self._acked.discard(marker)

    def acked(self, token: int) -> None:
        self._acked.add(token)

    def take(self, tensors: Tensors, marker: Any) -> None:
        raise AssertionError("windows are taken in the trainer's process")

    def release(self, slot: torch.Tensor) -> None:
        """Kept for the next pass (its copies are done); see ``pinned``."""
        self._pool.append(slot)

    def _unpool(self, slot: torch.Tensor) -> None:
        # By identity: ``list.remove`` compares tensors with ``==``, element by element.
        self._pool = [t for t in self._pool if t is not slot]

    def _discard(self, slot: torch.Tensor) -> None:
        self._unpool(slot)
        slot_id, mapped, path = self._maps.pop(slot.data_ptr())
        self.conn.send(("free", slot_id))
        del slot
        _drop(mapped, path)

    def close(self) -> None:
        self._pool.clear()
        for _, mapped, path in self._maps.values():
            _drop(mapped, path)
        self._maps.clear()


def no_room(nbytes: int, held: int, error: OSError) -> str:
    """What to do when shared memory has no room for the next slot."""
    where = shared_dir()
    return (
        f"window_process=True: {where} has no room for a window slot of {nbytes:,} bytes "
        f"(the slots already made hold {held:,}; {error.strerror}). The slots are up to "
        f"{PROCESS_RING} windows, each at most a seventh of feed_bytes: pass a smaller "
        "feed_bytes, free space there, or, in a container, give it more shared memory "
        "(docker run --shm-size); or leave window_process off"
    )


def _drop(mapped: mmap.mmap, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # the trainer's process removed it
        os.unlink(path)
    with contextlib.suppress(BufferError):  # a tensor still views it: it goes with that
        mapped.close()


def serve_passes(conn: Any, loader: ShardedLoader, output: TensorBatches) -> None:
    """Answer ``("pass", ...)`` requests until ``("exit",)`` or the pipe closes."""
    # Ctrl-C reaches the whole process group: the trainer's process handles it and
    # ends this one (as it does when it exits).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    passes = Passes(conn, loader, output)
    try:
        passes.serve()
    finally:
        passes.slots.close()


Request = tuple[Position, Progress]


class Passes:
    """The child's passes, one at a time. After a pass that ran to its end, the child
    makes the pass a training loop asks for next (an epoch from its start: the next one,
    or the same again for a loop that never calls ``set_epoch``) and holds its windows'
    messages: when that pass is asked for, its first windows are already in their
    slots; when another is, the guess is dropped (docs/training.md, "Windows made in
    another process")."""

    def __init__(self, conn: Any, loader: ShardedLoader, output: TensorBatches) -> None:
        self.conn = conn
        self.loader = loader
        self.output = output
        self.slots = SharedSlots(conn, self.receive)
        self.request: Request | None = None  # asked for, not started
        self.guess: Request | None = None  # being made ahead, not asked for (yet)
        self.held: list[tuple[Any, ...]] = []  # the guess's messages
        self.issued: list[int] = []  # the tokens of this pass's windows
        self.stopping = False  # the pass is ending early
        self.closing = False  # its stages are closing (waiting for acknowledgements)
        # The epoch the guess is of: the last pass's plus the step between the last two
        # asked for (a loop that calls ``set_epoch`` each epoch steps by one; one that
        # never does asks for the same epoch again).
        self.epoch_step = 1
        self.last_epoch: int | None = None

    def serve(self) -> None:
        finished: Request | None = None  # the last pass asked for, if it ran to its end
        while True:
            if self.request is not None:
                start, here = self.request
                self.request = None
                finished = (start, here) if self.one_pass(start, here) else None
            elif finished is not None:  # guess the next: the following epoch, from its start
                start, here = finished
                total = self.loader.source.total
                guess = (Position(start.epoch + self.epoch_step, normalize([(0, total)])),
                         replace(here, batches=0))  # fmt: skip
                self.guess = guess
                finished = guess if self.one_pass(*guess) else None  # asked for, and ran
            else:
                self.receive()

    def receive(self) -> None:
        """Handle the next message; end this process when told to, or when the trainer's
        process is gone (its end of the pipe closed)."""
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            message = ("exit",)
        self.handle(message)

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ack":
            self.slots.acked(message[1])
        elif kind == "pass":
            asked = (message[1], message[2])
            self.follow(asked[0].epoch)
            if self.guess is None:
                self.request = asked
            elif self.same_windows(asked, self.guess):  # right: its windows go out now
                self.guess, held, self.held = None, self.held, []
                for made in held:
                    self.conn.send(made)
            else:  # another pass: the guess's windows were never seen, its slots are free
                self.request = asked
                for token in self.issued:
                    self.slots.acked(token)
                self._stop()
        elif kind == "stop" and self.guess is None:  # (a stop never names a guess)
            self._stop()
        elif kind == "exit":  # at once: no pass of this process is waited for any more
            self.slots.close()  # a slot never mapped there still has a name: removed
            os._exit(0)

    def follow(self, epoch: int) -> None:
        """Learn the loop's step between epochs from the passes it asks for."""
        if self.last_epoch is not None:
            step = epoch - self.last_epoch
            self.epoch_step = step if step in (0, 1) else 1
        self.last_epoch = epoch

    def same_windows(self, asked: Request, guess: Request) -> bool:
        """Whether the pass asked for makes the guess's windows: the same request, or,
        unshuffled (every epoch has the same order), the same but for the epoch."""
        if asked == guess:
            return True
        if self.loader.epochs.shuffle:
            return False
        return replace(asked[0], epoch=guess[0].epoch) == guess[0] and asked[1] == guess[1]

    def _stop(self) -> None:
        """End the pass: at once, or (while its stages close) once they have closed."""
        if not self.stopping:
            self.stopping = True
            if not self.closing:
                raise PassStopped

    def send(self, message: tuple[Any, ...]) -> None:
        if self.guess is None:
            self.conn.send(message)
        else:
            self.held.append(message)

    def one_pass(self, start: Position, here: Progress) -> bool:
        """Make one pass's windows; whether it ran to its end and was asked for."""
        conn, slots = self.conn, self.slots
        self.stopping = self.closing = False
        slots.held_up = 0.0
        feed = TorchFeed(
            self.output.tensor_dict, list, None, slots, False, self.output.feed_bytes, 0,
            ring=PROCESS_RING,
        )  # fmt: skip
        started = time.perf_counter()
        ahead = self.guess is not None
        self.issued = []
        chunks: Any = None
        windows: Any = None
        try:
            try:
                chunks, windows = self.loader.made_windows(start, here, feed)
                for window in windows:
                    assert slots.last is not None
                    slot_id, end, unpack, token = slots.last
                    self.issued.append(token)
                    self.send(("window", slot_id, end, unpack, window.rows, window.row_bytes,
                               window.held, token, counters_of(feed.recorder)))  # fmt: skip
                    while conn.poll():
                        self.receive()
            finally:
                self.closing = True
                try:
                    close(windows)  # waits for the acknowledgements of the slots' windows
                finally:
                    close(chunks)
        except PassStopped:
            pass
        except Exception as error:
            if self.guess is None:  # handed to the trainer's process, with where it rose
                conn.send(("error", picklable(error), traceback.format_exc()))
                return False
            # a guess that failed: the pass asked for will fail there, and say so
        if self.guess is not None:  # made ahead and never asked for
            self.guess, self.held = None, []
            return False
        took = time.perf_counter() - started
        conn.send(("done", counters_of(feed.recorder), (took, slots.held_up, ahead)))
        return not self.stopping
