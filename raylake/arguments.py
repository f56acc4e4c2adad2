"""Checks of plain public keywords that every layer shares (the table API, Ray Data,
streaming, the training loaders, Spark), made at the call, before anything is written
and before any task or actor starts: a wrong type or value raises
:class:`~raylake.errors.InvalidArgumentError` naming the keyword (both a TypeError and
a ValueError), never a later error from inside Ray or a read. A string such as
``"false"`` is truthy, so a flag taken by truthiness would do the opposite of what it
says (``compact(full="no")`` used to compact fully): flags take True or False only
(numpy's too).

Every refusal of an argument is an :class:`InvalidArgumentError`, whichever layer
makes it. Where a layer raised its own error for argument mistakes before (streams a
StreamError, consumers a ConsumerError, schemas a SchemaError, table options an
InvalidOptionError), a check passes ``error=`` one of the subclasses of both
(:class:`~raylake.errors.StreamArgumentError`, ...), so that code catching the old class
still works (docs/decisions.md, "Argument errors").

Top-level and importing nothing of raylake but its errors, so that every layer, the
format included, may use it; the checks of the table's own argument types (snapshot
ids, column lists, URIs) are in raylake/table/args.py."""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Set
from datetime import datetime
from typing import Any, TypeVar

import numpy as np

from raylake.errors import InvalidArgumentError, UnknownKeywordError

# What a check raises: InvalidArgumentError, one of its subclasses, or a function making
# one (name, value, what is expected).
Refusal = Callable[[str, Any, str], InvalidArgumentError]
T = TypeVar("T")
M = TypeVar("M", bound=Mapping[str, Any])
F = TypeVar("F", bound=Callable[..., Any])


def is_number(value: object) -> bool:
    """A real number that is not a bool: an int or a float, numpy's too."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def integer(value: object) -> int | None:
    """``value`` as a Python int if it is an integer that is not a bool: an int, or a
    numpy integer (``numbers.Integral``: what ``for epoch in np.arange(n)`` or a config
    read with numpy gives); else None."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None


def as_int(value: object) -> object:
    """``value`` as a Python int where it is a numpy integer (:func:`integer`); anything
    else as it is, for a check that then names it."""
    number = integer(value)
    return value if number is None else number


def check_integer(
    name: str, value: object, minimum: int | None = 0, error: Refusal = InvalidArgumentError
) -> int:
    """``value`` as a Python int if it is an integer (:func:`integer`) >= ``minimum``
    (None: any); else InvalidArgumentError naming ``name``. The training loaders' keywords
    take numpy integers as torch and TensorFlow do; the int returned keeps them out of
    saved states (``json``, ``torch.load(weights_only=True)`` refuse numpy scalars)."""
    number = integer(value)
    if number is None or (minimum is not None and number < minimum):
        raise error(name, value, "an int" if minimum is None else f"an int >= {minimum}")
    return number


# An offset without its colon (+0900) after a time of day.
_OFFSET_WITHOUT_COLON = re.compile(r"^(.*[T ]\d\d[\d:.]*)([+-]\d\d)(\d\d)$")


def iso_time(text: str) -> datetime:
    """``datetime.fromisoformat``, the same on every Python raylake supports: a trailing Z
    is UTC and an offset may leave out its colon (+0900), which Python 3.10's refuses and
    3.11's reads (the CLI's times and filter literals)."""
    value = text.strip()
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    return datetime.fromisoformat(_OFFSET_WITHOUT_COLON.sub(r"\1\2:\3", value))


def check_count(
    name: str, value: object, minimum: int = 0, error: Refusal = InvalidArgumentError
) -> int:
    """``value`` as a Python int if it is an integer (:func:`integer`: numpy's too, as the
    table API takes them) >= ``minimum``; else InvalidArgumentError naming ``name``. Use
    the int returned: a numpy one would reach Ray, JSON and saved states as it is."""
    number = integer(value)
    if number is None or number < minimum:
        raise error(name, value, f"an int >= {minimum}")
    return number


def check_optional_count(
    name: str,
    value: object,
    minimum: int = 1,
    error: Refusal = InvalidArgumentError,
    none: str = "None",
) -> int | None:
    """``value`` as a Python int (:func:`check_count`) or None, a cap that None leaves
    open (``none`` says what None means)."""
    if value is None:
        return None
    number = integer(value)
    if number is None or number < minimum:
        raise error(name, value, f"an int >= {minimum} or {none}")
    return number


def check_seconds(
    name: str,
    value: object,
    error: Refusal = InvalidArgumentError,
    optional: bool = True,
    positive: bool = False,
) -> float | None:
    """``value`` if it is a number of seconds >= 0 (> 0 with ``positive``), numpy's as a
    Python float, or None where ``optional``."""
    if value is None and optional:
        return None
    if not is_number(value) or not (value > 0 if positive else value >= 0):  # type: ignore[operator]
        bound = "> 0" if positive else ">= 0"
        raise error(name, value, f"a number of seconds {bound}{' or None' if optional else ''}")
    return value if type(value) in (int, float) else float(value)  # type: ignore[arg-type,return-value]


def check_choice(
    name: str, value: T, choices: Collection[Any], error: Refusal = InvalidArgumentError
) -> T:
    """``value`` if it is one of ``choices`` (a mode, a start name, ...)."""
    if isinstance(value, bool) or not _is_hashable(value) or value not in choices:
        raise error(name, value, f"one of {list(choices)}")
    return value


def _is_hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def check_names(name: str, value: object, error: Refusal = InvalidArgumentError) -> tuple[str, ...]:
    """``value`` as a tuple if it is a list (tuple, set) of column names; one string is
    refused, with the list it may have meant: is ``"a,b"`` one column or two?"""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | Set):
        hint = f" (for one column: [{value!r}])" if isinstance(value, str) else ""
        raise error(name, value, f"a list of column names{hint}")
    names = tuple(value)
    if not all(isinstance(c, str) for c in names):
        raise error(name, value, "a list of column names (strings)")
    return names


def check_exclusive(given: Mapping[str, object], error: Refusal = InvalidArgumentError) -> None:
    """Refuse more than one of ``given`` (keyword: value) other than None: which one
    should win would be a guess."""
    named = [k for k, v in given.items() if v is not None]
    if len(named) > 1:
        raise error(
            " and ".join(named), tuple(given[k] for k in named), f"one of {list(given)}, not both"
        )


def check_instance(
    name: str,
    value: T,
    kind: type | tuple[type, ...],
    what: str,
    error: Refusal = InvalidArgumentError,
) -> T:
    """``value`` if it is an instance of ``kind`` (described as ``what``)."""
    if not isinstance(value, kind):
        raise error(name, value, what)
    return value


def check_flag(name: str, value: object, error: Refusal = InvalidArgumentError) -> bool:
    """``value`` as a bool if it is True or False, a numpy bool too (what ``arr.any()``
    or a config read with numpy gives); else InvalidArgumentError naming ``name``."""
    if not isinstance(value, bool | np.bool_):
        raise error(name, value, "True or False")
    return bool(value)


def check_mapping(
    name: str, value: M | None, values: str = "", error: Refusal = InvalidArgumentError
) -> M | None:
    """``value`` if it is None or a mapping with string keys (and, with ``values="str"``,
    string values): ``storage_options``, ``ray_remote_args``, ``actor_options``, ..."""
    if value is None:
        return value
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise error(name, value, "a dict with string keys, or None")
    if values == "str" and not all(isinstance(v, str) for v in value.values()):
        raise error(name, value, "a dict of strings to strings, or None")
    return value


def check_callable(
    name: str, value: T, error: Refusal = InvalidArgumentError, optional: bool = True
) -> T:
    """``value`` if it is callable (a ``transform``, a hook), or None where ``optional``."""
    if not (value is None and optional) and not callable(value):
        raise error(name, value, "a callable or None" if optional else "a callable")
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
    # A class is called by its name: ``LakeDatasink()``, never ``__init__()``.
    name = function.__name__
    if name == "__init__":
        name = function.__qualname__.rsplit(".", 2)[-2]

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        check_keywords(name, kwargs, valid - {"self"})
        return function(*args, **kwargs)

    return checked  # type: ignore[return-value]
