"""Progress bars for long maintenance work, shown only when a terminal is watching.

Library calls stay silent: a bar appears only inside :func:`progress_enabled` (the
``raylake`` CLI turns it on) and only when stderr is a terminal, so jobs, logs and
pipes never get bar output. tqdm draws the bars.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_enabled: ContextVar[bool] = ContextVar("raylake_progress", default=False)


@contextmanager
def progress_enabled(enabled: bool = True) -> Iterator[None]:
    """Show progress bars for work started in this context (if stderr is a terminal)."""
    token = _enabled.set(enabled)
    try:
        yield
    finally:
        _enabled.reset(token)


def showing() -> bool:
    return _enabled.get() and sys.stderr.isatty()


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """``items``, with a progress bar when :func:`showing`."""
    if not showing():
        yield from items
        return
    from tqdm import tqdm

    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with tqdm(
        items, desc=description, total=total, unit="file", leave=False, file=sys.stderr
    ) as bar:
        yield from bar
