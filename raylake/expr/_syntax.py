"""Lexical rules of the filter syntax, shared by the parser and the renderer.

Keeping them in one place is what makes ``parse_filter(str(e)) == e`` hold: the
renderer quotes exactly the names the tokenizer would not read back as one identifier.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from typing import Any

import pyarrow as pa

KEYWORDS = frozenset({"and", "or", "not", "in", "is", "null", "true", "false", "like", "between"})
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")

# Operators in the tree (canonical spelling) and their mirror image, used when the
# literal is written on the left (``3 < x`` is ``x > 3``).
COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=")
FLIPPED_OP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
NEGATED_OP = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def quote_identifier(name: str) -> str:
    """Render a column name so that the tokenizer reads it back unchanged."""
    if IDENTIFIER_RE.fullmatch(name) and name.lower() not in KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def quote_string(text: str) -> str:
    """Single-quote a string literal, doubling embedded quotes (SQL style)."""
    return "'" + text.replace("'", "''") + "'"


def render_literal(value: Any) -> str:
    """Render a literal value in filter syntax.

    Dates, timestamps and other non-primitive values render as quoted strings, which
    :func:`raylake.expr.bind` converts back to the column's type.
    """
    if isinstance(value, pa.Scalar) and value.is_valid and pa.types.is_time(value.type):
        # Arrow's text keeps every digit; datetime.time would drop nanoseconds
        return quote_string(value.cast(pa.string()).as_py())
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else repr(value).replace("inf", "1e999")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return quote_string(value.isoformat(sep=" "))
    if isinstance(value, datetime.date):
        return quote_string(value.isoformat())
    if isinstance(value, bytes):
        return quote_string(value.decode("utf-8", errors="backslashreplace"))
    return quote_string(str(value))
