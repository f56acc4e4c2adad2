"""The rows that win a Paimon section's merge, for engines that pick whole rows.

A ``deduplicate`` or ``first-row`` merge keeps whole rows, chosen from the key,
``_SEQUENCE_NUMBER``, ``_VALUE_KIND`` and the sequence field only. Two ways to decide:

- **Newest file first, no sort** (:func:`newest_first_masks`): a deduplicate section of
  one integer key whose files' sequence ranges do not interleave (each commit's files
  get their own range; a compaction's output precedes later commits) and whose files
  hold each key once, in order (Paimon sorts a data file by key and its writer merges a
  key's versions before writing). Then the file with the higher sequences holds the
  newer version of every key two files share, so a row wins unless a newer file of its
  section holds its key: a bitmap test over the keys, as raylake's own tables decide
  (raylake/table/pk/dedupe.py). ``_SEQUENCE_NUMBER`` is never decoded (``_VALUE_KIND``
  is: pypaimon 2.1 counts no delete rows in the manifests of files that hold them).
- **By sort** (:func:`take_winners`): every other section; the winners are taken in
  **file order** (ascending positions), which gathers about twice as fast as taking them
  in key order across the section's files.

Either decision is kept per process under the section's files: data files never
change, so a second read of the same snapshot (a loader's counting read and its
training read, a benchmark's repeats) does not decide again.

Output order: the files' order in the section, each file's winners in file order (key
order): a function of the files, so every read of a snapshot returns the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa

from raylake.caching import LruCache, process_cache
from raylake.paimon.meta import PaimonFileSlice
from raylake.table.pk.dedupe import unseen_in_newer
from raylake.table.pk.engines import merge_positions
from raylake.table.pk.schema import MergeSpec

# Bytes of decisions kept per process (packed masks: one bit per stored row, 64 MiB
# cover 512M rows; positions of the sorted path: 8 bytes a winner).
CACHE_BYTES = 64 * 1024 * 1024

_cache: LruCache[tuple[object, ...], tuple[np.ndarray, ...]] = process_cache(
    LruCache(CACHE_BYTES, weigh=lambda arrays: sum(a.nbytes for a in arrays))
)


def picks_rows(spec: MergeSpec | None) -> bool:
    return spec is not None and spec.engine in ("deduplicate", "first-row")


def take_winners(rows: pa.Table, spec: MergeSpec, cache_key: tuple[object, ...] | None) -> pa.Table:
    """``rows`` (a section's rows, retracts prepared) reduced to each key's winner.

    ``cache_key``: what identifies ``rows`` (table, schema, files), or None when the
    rows depend on more than the files (a key filter), so that nothing is kept."""
    if rows.num_rows == 0:
        return rows
    found = None if cache_key is None else _get(("sorted", *cache_key))
    if found is None:
        picked = merge_positions(rows, spec)
        assert picked is not None
        keep = np.zeros(rows.num_rows, dtype=bool)
        keep[picked] = True
        found = (np.flatnonzero(keep),)  # file order, without a sort
        if cache_key is not None:
            _put(("sorted", *cache_key), found)
    return rows.take(pa.array(found[0]))


def newest_first_masks(
    keys: Sequence[np.ndarray],
    retracts: Sequence[np.ndarray | None],
    files: Sequence[PaimonFileSlice],
    *,
    ignore_delete: bool,
    cache_key: tuple[object, ...] | None,
) -> list[np.ndarray] | None:
    """Which rows of each file win a deduplicate section decided newest file first.

    ``keys``: each file's key values (its rows after its deletion vector, section
    order); ``retracts``: where each file holds -U/-D rows (None: none). None when a
    file's keys are not strictly increasing (a key twice in one file: only a sort by
    sequence decides). A retract is the newest version of its key and removes it, or
    with ``ignore_delete`` is no version at all.
    """
    found = None if cache_key is None else _get(("newest", *cache_key))
    if found is not None:
        return [np.unpackbits(m, count=len(k)).view(bool) for m, k in zip(found, keys)]
    if not all(bool(np.all(k[1:] > k[:-1])) for k in keys):
        return None
    versions = list(keys)
    if ignore_delete:
        versions = [k if r is None else k[~r] for k, r in zip(keys, retracts)]
    order = sorted(range(len(files)), key=lambda i: files[i].max_sequence, reverse=True)
    unseen = unseen_in_newer([versions[i] for i in order])
    masks: list[np.ndarray] = [np.zeros(0, bool)] * len(files)
    for i, keep in zip(order, unseen):
        r = retracts[i]
        if r is not None:
            if ignore_delete:
                full = np.zeros(len(keys[i]), dtype=bool)
                full[~r] = keep
                keep = full
            else:
                keep &= ~r
        masks[i] = keep
    if cache_key is not None:
        _put(("newest", *cache_key), tuple(np.packbits(m) for m in masks))
    return masks


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
    _cache.clear()


def cached_sections(how: Literal["newest", "sorted"] | None = None) -> int:
    """Sections whose decision this process keeps (``how``: those decided that way)."""
    return sum(1 for key in _cache.cached_keys() if how is None or key[0] == how)


def _get(key: tuple[object, ...]) -> tuple[np.ndarray, ...] | None:
    return _cache.get(key)


def _put(key: tuple[object, ...], arrays: tuple[np.ndarray, ...]) -> None:
    """Keep a decision, unless it alone is larger than the whole budget."""
    if sum(a.nbytes for a in arrays) <= CACHE_BYTES:
        _cache.put(key, arrays)
