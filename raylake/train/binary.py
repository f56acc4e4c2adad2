"""Binary and string columns handed to a torch transform (docs/training.md, "Binary and
string columns").

A tensor cannot hold bytes, so ``LakeIterableDataset(..., transform=...)`` hands such a
column to the transform as a ``list`` per batch: ``bytes`` for a binary column (a
Paimon BLOB included), ``str`` for a string one, None for a null. The transform decodes
it (images, tokens) into tensors.

How, without a per-row step in Python or a copy of the window's bytes: the converter
puts each window's Arrow column beside int64 row positions into it
(raylake/train/convert.py, ``ARROW``). The positions travel through every stage as a
column of the window does: the shuffled window's gather, the cut into batches as views,
the copy of a batch that straddles two windows, the DataLoader worker's pass. Here, per
pass, on the converting thread each window's Arrow columns are kept under a serial
number, which goes into the positions' high 32 bits; on the batch thread each batch's
positions become values with one slice (rows in order) or one ``take`` of the Arrow
column and one ``to_pylist``. A window's column is let go once a batch that starts in
a later window is made: batches are cut in order, so no later batch needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from raylake.train.convert import ARROW

_SHIFT = 32  # a window's serial above its row positions (a window has < 2**32 rows)
_ROWS = (1 << _SHIFT) - 1


class BinaryColumns:
    """One pass's windows' binary and string columns, by serial (module docstring)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._columns: dict[int, dict[str, pa.ChunkedArray]] = {}
        self._next = 0
        # The converting thread adds windows while the batch thread reads and drops them.
        self._lock = threading.Lock()

    def window(self, block: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A converted window, its Arrow columns kept here and its positions made unique
        to it (on the converting thread)."""
        out = dict(block)
        columns = {name: out.pop(ARROW + name)[()] for name in self.names}
        with self._lock:
            serial = self._next
            self._next += 1
            self._columns[serial] = columns
        base = np.int64(serial << _SHIFT)
        for name in self.names:
            out[name] = out[name] + base  # one vectorized add per window
        return out

    def values(self, runs: Mapping[str, Sequence[Any]]) -> dict[str, Sequence[Any]]:
        """A run of batches (each column group's batches) with every binary column's
        positions replaced by its values, a list per batch (on the batch thread)."""
        out = dict(runs)
        for name in self.names:
            out[name] = [self._values(name, positions.numpy()) for positions in runs[name]]
        if self.names and runs[self.names[0]]:
            last = runs[self.names[0]][-1]
            if len(last):
                self._release(int(last[0]) >> _SHIFT)
        return out

    def _values(self, name: str, ids: np.ndarray) -> list[Any]:
        if not len(ids):
            return []
        serials = ids >> _SHIFT
        rows = ids & _ROWS
        if serials[0] == serials[-1]:
            return self._take(int(serials[0]), name, rows)
        # A batch that straddles windows: each window's rows, in order.
        cuts = np.flatnonzero(np.diff(serials)) + 1
        out: list[Any] = []
        for part_serials, part_rows in zip(np.split(serials, cuts), np.split(rows, cuts)):
            out.extend(self._take(int(part_serials[0]), name, part_rows))
        return out

    def _take(self, serial: int, name: str, rows: np.ndarray) -> list[Any]:
        with self._lock:
            column = self._columns[serial][name]
        n = len(rows)
        if int(rows[-1]) - int(rows[0]) == n - 1 and (n == 1 or bool((np.diff(rows) == 1).all())):
            picked = column.slice(int(rows[0]), n)  # rows in order: no copy before the list
        else:
            picked = column.take(pa.array(rows))
        return picked.to_pylist()  # type: ignore[no-any-return]

    def _release(self, serial: int) -> None:
        """Let go of the windows before ``serial`` (no batch made later reads them)."""
        with self._lock:
            for old in [s for s in self._columns if s < serial]:
                del self._columns[old]
