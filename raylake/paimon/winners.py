"""The rows that win a Paimon section's merge, for engines that pick whole rows.

A ``deduplicate`` or ``first-row`` merge keeps whole rows, chosen from the key,
``_SEQUENCE_NUMBER``, ``_VALUE_KIND`` and the sequence field only. The winners are
taken in **file order** (ascending positions), which gathers about twice as fast as
taking them in key order across the section's files, and the decision is kept per
process under the section's files: data files never change, so a second read of the
same snapshot (a loader's counting read and its training read, a benchmark's repeats)
does not sort the keys again. raylake's own tables do the same (raylake/table/pk/late.py).

Output order: the files' order in the section, each file's winners in file order (key
order): a function of the files, so every read of a snapshot returns the same order.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from raylake.paimon.meta import PaimonFileSlice
from raylake.table.pk.engines import merge_positions
from raylake.table.pk.schema import MergeSpec

# Bytes of winner positions kept per process (8 bytes a winner: 64 MiB hold 8M).
CACHE_BYTES = 64 * 1024 * 1024

_lock = threading.Lock()
_cache: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
_cached_bytes = 0


def picks_rows(spec: MergeSpec | None) -> bool:
    return spec is not None and spec.engine in ("deduplicate", "first-row")


def take_winners(rows: pa.Table, spec: MergeSpec, cache_key: tuple[object, ...] | None) -> pa.Table:
    """``rows`` (a section's rows, retracts prepared) reduced to each key's winner.

    ``cache_key``: what identifies ``rows`` (table, schema, files), or None when the
    rows depend on more than the files (a key filter), so that nothing is kept."""
    if rows.num_rows == 0:
        return rows
    positions = None if cache_key is None else _get(cache_key)
    if positions is None:
        picked = merge_positions(rows, spec)
        assert picked is not None
        keep = np.zeros(rows.num_rows, dtype=bool)
        keep[picked] = True
        positions = np.flatnonzero(keep)  # file order, without a sort
        if cache_key is not None:
            _put(cache_key, positions)
    return rows.take(pa.array(positions))


def section_key(
    uri: str, schema_id: int, spec: MergeSpec, files: Sequence[PaimonFileSlice]
) -> tuple[object, ...]:
    return (
        uri,
        schema_id,
        spec.engine,
        spec.key,
        spec.sequence_field,
        tuple((f.path, f.deletion) for f in files),
    )


def clear_cache() -> None:
    global _cached_bytes
    with _lock:
        _cache.clear()
        _cached_bytes = 0


def cached_sections() -> int:
    with _lock:
        return len(_cache)


def _get(key: tuple[object, ...]) -> np.ndarray | None:
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
        return found


def _put(key: tuple[object, ...], positions: np.ndarray) -> None:
    global _cached_bytes
    with _lock:
        if key in _cache or positions.nbytes > CACHE_BYTES:
            return
        _cache[key] = positions
        _cached_bytes += positions.nbytes
        while _cached_bytes > CACHE_BYTES:
            _, old = _cache.popitem(last=False)
            _cached_bytes -= old.nbytes
