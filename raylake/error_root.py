"""The root of raylake's exceptions, :class:`RaylakeError`, in a module of its own so
that the modules of error classes (raylake/errors.py, raylake/argument_errors.py) build
on it without importing each other. Import it from :mod:`raylake.errors`."""

from __future__ import annotations

from typing import Any


class RaylakeError(Exception):
    """Base class of every error raylake raises on purpose."""

    __module__ = "raylake.errors"  # where users import it: tracebacks and pickles say so

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (Ray tasks, Spark executors). The default pickling
        # calls ``cls(*args)``, which breaks subclasses whose __init__ takes other arguments.
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _rebuild_error(cls: type[RaylakeError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
