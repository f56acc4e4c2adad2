"""SQL ``LIKE`` patterns: ``%`` matches any run of characters, ``_`` one character, and
a backslash makes the next character literal (``'100\\%'``), as in Spark SQL and Arrow.

The helpers here serve every interpretation of a ``Like`` node: the Python oracle (a
regular expression), statistics pruning (the literal prefix, and the smallest string
above every string with that prefix) and ``starts_with`` (escaping a prefix).
"""

from __future__ import annotations

import re
from functools import lru_cache

import pyarrow.compute as pc

from raylake.errors import FilterError

_WILDCARDS = "%_"
_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def escape_like(text: str) -> str:
    """A pattern matching exactly ``text`` (wildcards and backslashes escaped)."""
    return "".join("\\" + ch if ch in "%_\\" else ch for ch in text)


def check_pattern(pattern: object) -> str:
    if not isinstance(pattern, str):
        raise FilterError(f"a LIKE pattern must be a string, got {pattern!r}")
    _tokens(pattern)  # a dangling escape fails here
    return pattern


@lru_cache(maxsize=256)
def _tokens(pattern: str) -> tuple[tuple[str, bool], ...]:
    """``(character, is_wildcard)`` pairs with escapes resolved."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 == len(pattern):
                raise FilterError(f"LIKE pattern {pattern!r} ends with an unfinished escape '\\'")
            out.append((pattern[i + 1], False))
            i += 2
            continue
        out.append((ch, ch in _WILDCARDS))
        i += 1
    return tuple(out)


def like_prefix(pattern: str) -> tuple[str, bool]:
    """The literal text before the first wildcard, and whether the pattern has none."""
    prefix: list[str] = []
    for ch, wild in _tokens(pattern):
        if wild:
            return "".join(prefix), False
        prefix.append(ch)
    return "".join(prefix), True


@lru_cache(maxsize=256)
def like_regex(pattern: str) -> re.Pattern[str]:
    parts = [
        (".*" if ch == "%" else ".") if wild else re.escape(ch) for ch, wild in _tokens(pattern)
    ]
    return re.compile("".join(parts), re.DOTALL)


def match_like(values: pc.Expression, pattern: str) -> pc.Expression:
    """``values like pattern`` in Arrow, with this module's escape rules.

    Arrow's own ``match_like`` reads a backslash differently depending on where it
    stands (``'%\\a'`` does not match ``'a'``, ``'%\\\\'`` does not match a backslash,
    pyarrow 26), so a pattern with an escape runs as the equivalent RE2 expression.
    """
    if "\\" not in pattern:
        return pc.match_like(values, pattern)  # type: ignore[no-any-return]
    return pc.match_substring_regex(values, _re2_full_match(pattern))  # type: ignore[no-any-return]


@lru_cache(maxsize=256)
def _re2_full_match(pattern: str) -> str:
    parts = []
    for ch, wild in _tokens(pattern):
        if wild:
            parts.append(".*" if ch == "%" else ".")
        elif ch.isascii() and not ch.isalnum():
            parts.append(f"\\x{{{ord(ch):x}}}")  # RE2's literal for any punctuation
        else:
            parts.append(ch)
    return "(?s)^" + "".join(parts) + "\\z"


def prefix_successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (code point
    order, which is UTF-8 byte order), or None if there is none."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code in _SURROGATES:
            code = _SURROGATES.stop
        if code <= _MAX_CODE_POINT:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None
