"""Ctrl-C while the ``raylake`` command starts: ``raylake: interrupted`` and status 130,
as once it runs (raylake/cli.py, ``main``), not a traceback from inside an import.

The command's imports (pyarrow, pandas, raylake's own) take a second or two before
``main`` can catch anything, and both the console script (``raylake.cli:main``) and
``python -m raylake`` import the package, raylake/__init__.py, before raylake.cli. So the
package imports this module first, which calls :func:`guard_startup`: it handles SIGINT
only where this process is the command, never in a program that imports raylake;
``main`` calls :func:`end_startup` to put Python's handler back, and stops on
KeyboardInterrupt itself.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED = 128 + 2  # the status a shell gives a command stopped by SIGINT
_SCRIPTS = ("raylake", "raylake.exe", "raylake-script.py")  # the console script's names


def guard_startup() -> None:
    """Stop with ``raylake: interrupted`` and status 130 on Ctrl-C, if this is the command
    and SIGINT is Python's (not a handler the program set)."""
    if _is_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)


def end_startup() -> None:
    """Python's handler back: KeyboardInterrupt lets the command undo what it started."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(signum: int, frame: FrameType | None) -> None:
    print("raylake: interrupted", file=sys.stderr)
    # SystemExit rather than os._exit: finally blocks and atexit still run, and no
    # import's `except Exception` (an optional dependency's) takes it for a failure.
    raise SystemExit(INTERRUPTED)


def _is_the_command() -> bool:
    if os.path.basename(sys.argv[0]) in _SCRIPTS:
        return True
    # While `python -m NAME` locates NAME, and imports its packages, sys.argv[0] is "-m".
    return sys.argv[0] == "-m" and _module_run(getattr(sys, "orig_argv", [])) in (
        "raylake",
        "raylake.cli",
        "raylake.__main__",
    )


def _module_run(args: list[str]) -> str:
    """NAME of ``python [options] -m NAME ...`` (also ``-mNAME``); "" for none."""
    for i, arg in enumerate(args[1:], 1):
        if arg == "-m":
            return args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith("-m"):
            return arg[2:]
    return ""


guard_startup()  # as raylake/__init__.py imports this module, before anything heavy
