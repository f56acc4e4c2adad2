"""The argument types of the ``raylake`` command: each value checked as it is parsed,
so a bad one is a usage error naming its flag (exit code 2), before any work."""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta
from typing import Any

from raylake.arguments import iso_time
from raylake.errors import InvalidArgumentError
from raylake.format.consumer import is_consumer_id
from raylake.streaming.options import START_NAMES
from raylake.table.args import datetime_millis

_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_COLUMN = re.compile(r'\s*(?:"((?:[^"]|"")*)"|`((?:[^`]|``)*)`|([^,]*))\s*(,|$)')
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, reading an argument that starts with a minus and a digit as a
    value: ``--older-than -1d`` was "expected one argument", as argparse takes only a
    plain negative number (``--timeout -1``) for a value, anything else starting with a
    minus for an option. Its type then says what is wrong with the value. No raylake
    option starts with a digit. Subparsers are made of this class too (argparse's
    default ``parser_class`` is the class of the parser they are added to)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Private, but there since Python 2.7; Python 3.14 itself reads '-.5' and '-1e5'.
        self._negative_number_matcher = re.compile(r"^-\.?\d")


def parse_older_than(text: str) -> datetime | timedelta:
    """An age like ``7d``, ``12h``, ``1d12h``, ``90m``, or an ISO time like ``2024-05-01T12:00``."""
    value = text.strip().lower()
    if value.startswith("-") and value[1:] and _DURATION_PART.sub("", value[1:]) == "":
        raise argparse.ArgumentTypeError(
            f"{text!r} is a negative age: give how long ago, e.g. {value[1:]}"
        )
    if value and _DURATION_PART.sub("", value) == "":
        parts = _DURATION_PART.findall(value)
        try:
            return sum((int(n) * _UNITS[unit] for n, unit in parts), timedelta())
        except OverflowError:  # a timedelta holds under a billion days
            raise argparse.ArgumentTypeError(
                f"{text!r} is too long an age: at most {timedelta.max.days:,} days"
            ) from None
    return iso_time_arg(text, "neither an age (e.g. 7d, 12h, 1d12h, 30m, 45s) nor")


def iso_time_arg(text: str, what_else: str) -> datetime:
    """``text`` as an ISO time, or argparse's error saying it is ``what_else`` an ISO time."""
    try:
        value = iso_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {what_else} an ISO time (e.g. 2024-05-01T12:00:00+00:00)"
        ) from None
    try:  # as the table will read it: refused naming the flag, not the keyword it goes to
        datetime_millis(value, "time")
    except InvalidArgumentError:
        raise argparse.ArgumentTypeError(
            f"{text!r} cannot be read in the local time zone, where a time without an "
            "offset is read (not within a day of year 1 or 9999); give its offset, e.g. "
            "0001-01-01T00:00:00+00:00"
        ) from None
    return value


def count_arg(text: str) -> int:
    """A count >= 0 (argparse type): a negative one would be silently read as none."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return value


def columns_arg(text: str) -> list[str]:
    """Comma-separated column names (argparse type); a name with a comma or spaces at
    its ends is quoted as in a filter: ``"a,b"`` or `` `a,b` `` (a doubled quote inside)."""
    names, pos = [], 0
    while True:
        found = _COLUMN.match(text, pos)
        if found is None:
            raise argparse.ArgumentTypeError(f"{text!r}: a quoted name must end at a comma")
        double, back, plain, comma = found.groups()
        if double is not None:
            names.append(double.replace('""', '"'))
        else:
            names.append(back.replace("``", "`") if back is not None else plain.strip())
        pos = found.end()
        if not comma:
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:  # refused naming the flag, not the keyword of the method it goes to
                raise argparse.ArgumentTypeError(f"{text!r} names {twice[0]!r} twice")
            return names


def key_columns_arg(text: str) -> list[str]:
    """Partition or key columns (argparse type), as ``columns_arg``; an empty name is
    refused: ``--primary-key "$KEY"`` with KEY unset made a table without a key."""
    names = columns_arg(text)
    if "" in names:
        raise argparse.ArgumentTypeError(f"{text!r} has an empty column name")
    return names


def positive_arg(text: str) -> int:
    """A snapshot id, bucket count or snapshot count: >= 1 (argparse type), refused
    naming the flag, not the keyword of the method it goes to."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def start_arg(text: str) -> str | int | datetime:
    """Where ``tail`` starts (argparse type): a name, a snapshot id, or an ISO time (the
    snapshot current then, read whole; naive is local time, as in ``scan(as_of=)``)."""
    value = text.strip()
    if value in START_NAMES:
        return value
    if value.isdigit() and int(value) >= 1:
        return int(value)
    return iso_time_arg(text, f"none of {', '.join(START_NAMES)}, a snapshot id (>= 1) or")


def as_of_arg(text: str) -> datetime:
    """An ISO time to read the table as of (argparse type; naive is local time, as in
    ``scan(as_of=)``)."""
    return iso_time_arg(text, "not")


def seconds_arg(text: str) -> float:
    """Seconds >= 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def consumer_id_arg(text: str) -> str:
    """A consumer id (argparse type), refused naming the flag."""
    if not is_consumer_id(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a consumer id: 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit and not ending in '.tmp'"
        )
    return text
