"""The read work of a stream plan: the change splits of the table layer.

A stream reads what ``Table.changes`` reads (raylake/table/changes.py): the table kind
plans and reads the splits, so a stream's step, its catch-up and a bounded change read
are one mechanism (issue 17). This module keeps the names the stream API exposes.

- :class:`InsertSplit`: rows that are new as a whole (a full state, an append
  table's added files); every row is an insert.
- :class:`ChangelogSplit`: one bucket's changelog files (primary-key tables with a
  ``changelog-producer``), rows with their recorded row kinds.
- :class:`DiffSplit`: one bucket's files at two snapshots, merged and compared
  (primary-key tables without a changelog, and catch-up across many snapshots).

:class:`StreamReadContext` reads any of them into the stream's output schema: the
projected columns, and ``_rl_kind`` (``+I``/``-U``/``+U``/``-D``) when asked. Without
the row kind a stream carries upserts only: inserts and after-images (``+I``,
``+U``); before-images and deletes need ``include_row_kind=True``.
"""

from __future__ import annotations

from raylake.table.changes import (
    ROW_KIND,
    ChangelogSplit,
    ChangeReadContext,
    ChangeSplit,
    DiffSplit,
    InsertSplit,
    RemovedSplit,
)

StreamSplit = ChangeSplit
StreamReadContext = ChangeReadContext

__all__ = [
    "ROW_KIND",
    "ChangelogSplit",
    "DiffSplit",
    "InsertSplit",
    "RemovedSplit",
    "StreamReadContext",
    "StreamSplit",
]
