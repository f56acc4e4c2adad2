"""Checks of the loaders' public keywords, made before a table is opened or a thread
started: a wrong type or value raises :class:`~raylake.errors.InvalidArgumentError`
naming the keyword (both a TypeError and a ValueError), never a later error from deep
inside the read (a float ``batch_size`` used to fail as "slice indices must be
integers", and ``shuffle="false"`` used to shuffle)."""

from __future__ import annotations

from raylake.errors import InvalidArgumentError


def check_count(name: str, value: object, minimum: int = 0) -> int:
    """``value`` if it is an int >= ``minimum``; else InvalidArgumentError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(name, value, f"an int >= {minimum}")
    return value


def check_flag(name: str, value: object) -> bool:
    """``value`` if it is True or False; else InvalidArgumentError naming ``name``."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(name, value, "True or False")
    return value


def check_loader_threads(value: object) -> int:
    """``loader_threads``: None or 0 for no cap (pyarrow decodes on its process-wide pool),
    else the cap."""
    return 0 if value is None else check_count("loader_threads", value)
