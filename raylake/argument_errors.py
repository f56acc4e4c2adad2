"""The errors of a public argument with the wrong type or value: :class:`InvalidArgumentError`,
an unknown or invalid option, an unknown keyword. Raised by the checks in
raylake/arguments.py; import them from :mod:`raylake.errors`, which also holds the
subclasses that are as well a stream's, consumer's, schema's or merge's error
(``StreamArgumentError``, ...). Nothing here imports raylake/errors.py, so that it can
re-export these without an import cycle."""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import Any

from raylake.error_root import RaylakeError


class InvalidArgumentError(RaylakeError, TypeError, ValueError):
    """A public argument has the wrong type or value; the message names the argument and
    what it expects. Both a TypeError and a ValueError, as either would be idiomatic."""

    __module__ = "raylake.errors"  # where users import it: tracebacks and pickles say so

    def __init__(self, name: str, value: Any, expected: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{name} must be {expected}, got {type(value).__name__} {shown}")
        self.name = name
        self.value = value


class InvalidOptionError(InvalidArgumentError):
    """An unknown table option, or an option with an invalid value (an argument mistake:
    the options of ``create_table`` and the sinks, a store's retry settings)."""

    __module__ = "raylake.errors"

    def __init__(self, key: str, value: Any, reason: str) -> None:
        Exception.__init__(self, f"invalid option {key}={value!r}: {reason}")
        self.key = key
        self.name = key
        self.value = value


class UnknownKeywordError(InvalidArgumentError):
    """A call got a keyword it does not take (a typo, ``colums=``): refused rather than
    ignored or passed on, with the closest keyword it does take."""

    __module__ = "raylake.errors"
    closest: str | None = None  # also where the error is rebuilt from its message alone

    def __init__(
        self, where: str, keyword: str, valid: Collection[str], renamed: str | None = None
    ) -> None:
        # ``renamed``: the keyword's new name, where it is a known old one (not a typo).
        close = [renamed] if renamed else difflib.get_close_matches(keyword, list(valid), 1, 0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        Exception.__init__(
            self,
            f"{where}() got an unknown keyword {keyword!r}{hint} "
            f"(it takes {', '.join(sorted(valid)) or 'no keywords'})",
        )
        self.name = keyword
        self.value = keyword
        self.closest = close[0] if close else None
