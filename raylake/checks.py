"""Checks of plain public arguments (counts and flags) that every layer shares: a wrong
type or value raises :class:`~raylake.errors.InvalidArgumentError` naming the argument
(both a TypeError and a ValueError), before any work starts. A string such as
``"false"`` is truthy, so a flag taken by truthiness would do the opposite of what it
says (``compact(full="no")`` used to compact fully)."""

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
