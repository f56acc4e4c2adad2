"""The root of raylake's exceptions, :class:`RaylakeError`, in a module of its own so
that the modules of error classes (raylake/errors.py, raylake/argument_errors.py) build
on it without importing each other. Import it from :mod:`raylake.errors`.

Every error crosses process boundaries keeping its type: pickled (Ray tasks, Spark
executors, multiprocessing) with its message and attributes, and rebuilt from its
message alone where that is all that crossed. torch's DataLoader re-raises a worker's
exception as ``cls(message=text)`` when the class has a ``message`` attribute (else as
``cls(text)``) and turns it into a bare RuntimeError when that call fails; so every
class takes its message alone, as ``message=`` or as one string its own arguments cannot
bind, and the attributes it would have set are then None."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

# The parameters of a subclass's own __init__ (what it would set as attributes), kept on
# the wrapper that also takes the message alone.
_PARAMETERS = "_raylake_parameters"


class RaylakeError(Exception):
    """Base class of every error raylake raises on purpose."""

    __module__ = "raylake.errors"  # where users import it: tracebacks and pickles say so

    def __init__(self, *args: Any, message: str | None = None) -> None:
        if message is not None and args:
            raise TypeError(f"{type(self).__name__} takes a message or arguments, not both")
        super().__init__(*args if message is None else (message,))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not hasattr(init, _PARAMETERS):
            cls.__init__ = _taking_message_alone(init)  # type: ignore[method-assign]

    # torch re-raises a worker's error as cls(message=text) when the class has this
    # attribute: the text then stays whole even for a class taking one string of its own
    # (TableNotFoundError's URI), which cls(text) would quote into its message.
    @property
    def message(self) -> str:
        """The message, ``str(error)``."""
        return str(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (Ray tasks, Spark executors). The default pickling
        # calls ``cls(*args)``, which breaks subclasses whose __init__ takes other arguments.
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _taking_message_alone(init: Callable[..., None]) -> Callable[..., None]:
    """A subclass's ``init`` that also takes the whole message alone: ``message=text``
    where ``init`` has no such parameter, or one string that ``init`` cannot bind."""
    signature = inspect.signature(init)
    names = tuple(
        p.name
        for p in list(signature.parameters.values())[1:]
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "message"
    )

    @functools.wraps(init)
    def __init__(self: RaylakeError, *args: Any, **kwargs: Any) -> None:
        text = _message_alone(signature, self, args, kwargs)
        if text is None:
            init(self, *args, **kwargs)
            return
        RaylakeError.__init__(self, text)
        for cls in type(self).__mro__:
            for name in getattr(cls.__dict__.get("__init__"), _PARAMETERS, ()):
                if name not in self.__dict__:
                    setattr(self, name, None)

    setattr(__init__, _PARAMETERS, names)
    return __init__


def _message_alone(
    signature: inspect.Signature, error: RaylakeError, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str | None:
    """The message, where ``args`` and ``kwargs`` are a message alone that ``signature``
    cannot bind; else None (the arguments go to the class's own __init__)."""
    if len(args) + len(kwargs) != 1 or set(kwargs) - {"message"}:
        return None
    text = args[0] if args else kwargs["message"]
    if not isinstance(text, str):
        return None
    try:
        signature.bind(error, *args, **kwargs)
    except TypeError:
        return text
    return None


def _rebuild_error(cls: type[RaylakeError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
