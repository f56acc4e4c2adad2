"""Checks of plain public keywords that every layer shares (the table API, Ray Data,
streaming, the training loaders, Spark), made at the call, before anything is written
and before any task or actor starts: a wrong type or value raises
:class:`~raylake.errors.InvalidArgumentError` naming the keyword (both a TypeError and
a ValueError), never a later error from inside Ray or a read. A string such as
``"false"`` is truthy, so a flag taken by truthiness would do the opposite of what it
says (``compact(full="no")`` used to compact fully): flags take True or False only.

Top-level and importing nothing of raylake but its errors, so that every layer, the
format included, may use it; the checks of the table's own argument types (snapshot
ids, column lists, URIs) are in raylake/table/args.py."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

from raylake.errors import InvalidArgumentError, UnknownKeywordError

T = TypeVar("T")
M = TypeVar("M", bound=Mapping[str, Any])
F = TypeVar("F", bound=Callable[..., Any])


def is_number(value: object) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_count(name: str, value: object, minimum: int = 0) -> int:
    """``value`` if it is an int >= ``minimum``; else InvalidArgumentError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(name, value, f"an int >= {minimum}")
    return value


def check_optional_count(name: str, value: object, minimum: int = 1) -> int | None:
    """``value`` if it is None or an int >= ``minimum`` (a cap that None leaves open)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(name, value, f"an int >= {minimum} or None")
    return value


def check_seconds(name: str, value: object) -> float | None:
    """``value`` if it is None or a number of seconds >= 0."""
    if value is not None and (not is_number(value) or not value >= 0):  # type: ignore[operator]
        raise InvalidArgumentError(name, value, "a number of seconds >= 0 or None")
    return value  # type: ignore[return-value]


def check_flag(name: str, value: object) -> bool:
    """``value`` if it is True or False; else InvalidArgumentError naming ``name``."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(name, value, "True or False")
    return value


def check_mapping(name: str, value: M | None, values: str = "") -> M | None:
    """``value`` if it is None or a mapping with string keys (and, with ``values="str"``,
    string values): ``storage_options``, ``ray_remote_args``, ``actor_options``, ..."""
    if value is None:
        return value
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError(name, value, "a dict with string keys, or None")
    if values == "str" and not all(isinstance(v, str) for v in value.values()):
        raise InvalidArgumentError(name, value, "a dict of strings to strings, or None")
    return value


def check_callable(name: str, value: T) -> T:
    """``value`` if it is None or callable (a ``transform``, a hook)."""
    if value is not None and not callable(value):
        raise InvalidArgumentError(name, value, "a callable or None")
    return value


def check_keywords(where: str, given: Iterable[str], valid: Collection[str]) -> None:
    """Refuse the first keyword of ``given`` not in ``valid`` (:class:`UnknownKeywordError`,
    naming the closest valid one): a keyword passed on unchecked would be ignored."""
    for keyword in given:
        if keyword not in valid:
            raise UnknownKeywordError(where, keyword, valid)


def refuse_unknown_keywords(function: F) -> F:
    """``function`` refusing a keyword its signature lacks with :class:`UnknownKeywordError`
    (naming the closest one), where Python would raise a bare TypeError."""
    import functools
    import inspect

    params = inspect.signature(function).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        raise TypeError(f"{function.__name__} takes **kwargs: check them with check_keywords")
    valid = frozenset(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        check_keywords(function.__name__, kwargs, valid - {"self"})
        return function(*args, **kwargs)

    return checked  # type: ignore[return-value]
